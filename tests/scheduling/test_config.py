"""KubeSchedulerConfiguration files: what the model reads, the defaults, and one-sentence errors."""

from __future__ import annotations

import argparse

import pytest

from gangscale.ingest import ingest
from gangscale.scheduling import (SchedulerConfigError, add_scheduler_config_argument, default_config,
                                  load_scheduler_config, scheduler_config_from_args)

GPU_PROFILE = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection: {leaderElect: false}
profiles:
- schedulerName: default-scheduler
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
      enabled: [{name: NodeResourcesFit, weight: 5}]
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}, {name: nvidia.com/gpu, weight: 5}]
"""


def test_without_a_file_the_model_uses_the_upstream_default_profile():
    # pkg/scheduler/apis/config/v1/default_plugins.go: TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1,
    # BalancedAllocation 1; defaults.go: LeastAllocated on cpu and memory, weight 1 each.
    p = default_config().default
    assert (p.strategy, p.resources) == ("LeastAllocated", (("cpu", 1), ("memory", 1)))
    assert p.weights["TaintToleration"] == 3 and p.weights["NodeResourcesFit"] == 1
    assert p.weights["NodeResourcesBalancedAllocation"] == 1


def test_a_file_sets_the_scoring_strategy_the_resource_weights_and_the_plugin_weights(tmp_path):
    f = tmp_path / "sched.yaml"
    f.write_text(GPU_PROFILE)
    p = load_scheduler_config(f).profile("default-scheduler")
    assert p.strategy == "MostAllocated" and ("nvidia.com/gpu", 5) in p.resources
    assert p.weight("NodeResourcesFit") == 5 and p.weight("NodeResourcesBalancedAllocation") == 0


def test_a_resource_weight_out_of_range_is_one_sentence_naming_the_field(tmp_path):
    f = tmp_path / "sched.yaml"
    f.write_text(GPU_PROFILE.replace("weight: 5}]\n", "weight: 500}]\n"))
    with pytest.raises(SchedulerConfigError) as exc:
        load_scheduler_config(f)
    msg = str(exc.value)
    assert "profiles[0].pluginConfig[0].args.scoringStrategy.resources[2].weight" in msg and "\n" not in msg


def test_an_unknown_scoring_strategy_names_the_type_field(tmp_path):
    f = tmp_path / "sched.yaml"
    f.write_text(GPU_PROFILE.replace("MostAllocated", "Packed"))
    with pytest.raises(SchedulerConfigError, match=r"scoringStrategy\.type"):
        load_scheduler_config(f)


def test_a_file_of_another_kind_is_refused_with_the_field(tmp_path):
    f = tmp_path / "sched.yaml"
    f.write_text("apiVersion: v1\nkind: ConfigMap\n")
    with pytest.raises(SchedulerConfigError, match="apiVersion"):
        load_scheduler_config(f)


def test_the_cli_flag_reads_the_file_or_falls_back_to_the_defaults(tmp_path):
    parser = argparse.ArgumentParser()
    add_scheduler_config_argument(parser)
    assert scheduler_config_from_args(parser.parse_args([])).source == "upstream defaults"
    f = tmp_path / "s.yaml"
    f.write_text(GPU_PROFILE)
    assert scheduler_config_from_args(parser.parse_args(["--scheduler-config", str(f)])).default.strategy == \
        "MostAllocated"


def test_ingest_reads_a_pods_scheduler_name():
    objs = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
             "spec": {"schedulerName": "bin-packing", "containers": [{"name": "c"}]}, "status": {"phase": "Pending"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q", "namespace": "a"},
             "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}}]
    names = {p.name: p.scheduler_name for g in ingest(objs).gangs for p in g.pending}
    assert names == {"p": "bin-packing", "q": "default-scheduler"}
