"""aws-eks: the cluster's kube-scheduler scoring strategy (DescribeCluster) in plans and in `gangscale check`.

moto 5.2's DescribeCluster has no `kubeSchedulerConfig`, so the fault proxy writes it into moto's answer
in the shape botocore's eks 2017-11-01 model gives it (`KubeSchedulerConfigResponse` → `nodeResourcesFit`
→ `scoringStrategy{type, resources[{name, weight}]}`); botocore parses it as it would a real EKS answer.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from cloud_adapters.aws_eks import EksProvider, scoring_of
from gangscale.cli import main

from .clusters import node, podgroup, pod, write
from .conftest import CLUSTER, REGION, fast_clients
from .proxy import json_answer, json_rewrite

GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
MOST_GPU = {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                                                   {"name": "nvidia.com/gpu", "weight": 5}]}
LEAST = {"type": "LeastAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}


def scheduler_config(proxy, strategy: dict[str, Any]) -> None:
    """Moto's DescribeCluster answer, with the cluster's scheduler configuration added."""
    def edit(doc: dict[str, Any]) -> None:
        doc["cluster"]["kubeSchedulerConfig"] = {"nodeResourcesFit": {"scoringStrategy": strategy}}

    proxy.add("DescribeCluster", json_rewrite(edit), service="eks")


def access_denied(proxy) -> None:
    proxy.add("DescribeCluster", lambda req, fwd: json_answer(
        {"message": f"User: arn:aws:sts::123456789012:assumed-role/gangscale is not authorized to perform: "
                    f"eks:DescribeCluster on resource: arn:aws:eks:{REGION}:123456789012:cluster/{CLUSTER}"},
        403, "AccessDeniedException"), service="eks")


def gpu_world(world) -> None:
    """A 1-GPU node group and a 4-GPU one, both tainted for GPUs."""
    world.eks_cluster()
    world.nodegroup("small", ["g5.xlarge"], taints=GPU_TAINT)
    world.nodegroup("big", ["g5.12xlarge"], taints=GPU_TAINT)


def gpu_pods() -> list[dict[str, Any]]:
    """An older 1-GPU gang and a younger 4-GPU one: under LeastAllocated the 1-GPU pod takes the 4-GPU node."""
    out = []
    for i, (name, cpu, mem, gpu) in enumerate((("infer", "2", "8Gi", 1), ("train", "8", "32Gi", 4))):
        created = f"2026-01-01T00:0{i}:00Z"
        group, member = podgroup(name, 1), pod(f"{name}-0", name, cpu=cpu, mem=mem, gpu=gpu)
        group["metadata"]["creationTimestamp"] = member["metadata"]["creationTimestamp"] = created
        out += [group, member]
    return out


def plan(capsys, proxy, tmp_path, *extra: str) -> tuple[int, dict[str, Any], str]:
    code = main(["plan", "--cluster", write(tmp_path / "c.json", gpu_pods()), "--provider", "aws-eks",
                 "--region", REGION, "--cluster-name", CLUSTER, "--aws-endpoint-url", proxy.url, "-o", "json",
                 "--time-limit", "5", "--scheduler-model", "observe", *extra])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() else {}, err


def scoring(proxy):
    clients = fast_clients(proxy.url)
    return EksProvider(CLUSTER, clients.options, clients).scheduler_scoring()


# ----------------------------------------------------------------------------------- the adapter


def test_the_eks_provider_reads_most_allocated_and_its_gpu_weight_from_describe_cluster(world, proxy):
    world.eks_cluster()
    scheduler_config(proxy, MOST_GPU)
    got = scoring(proxy)
    assert (got.strategy, got.resources, got.unknown) == (
        "MostAllocated", (("cpu", 1), ("memory", 1), ("nvidia.com/gpu", 5)), "")
    assert got.source == f"EKS cluster {CLUSTER} (DescribeCluster)" and proxy.count("DescribeCluster") == 1


def test_a_describe_cluster_without_the_field_is_unknown_with_the_field_named(world, proxy):
    world.eks_cluster()
    got = scoring(proxy)  # moto's own answer: no kubeSchedulerConfig
    assert got.strategy == "" and "kubeSchedulerConfig.nodeResourcesFit.scoringStrategy is absent" in got.unknown


def test_access_denied_on_describe_cluster_is_unknown_not_raised(world, proxy):
    world.eks_cluster()
    access_denied(proxy)
    got = scoring(proxy)
    assert got.strategy == "" and got.unknown.startswith(f"eks:DescribeCluster {CLUSTER} failed: permission")
    assert "AccessDeniedException" in got.unknown


@pytest.mark.parametrize("strategy, why", [
    ({"type": "RequestedToCapacityRatio"}, "scoringStrategy.type 'RequestedToCapacityRatio' is not one of "
                                           "LeastAllocated, MostAllocated"),
    ({"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 0}]},
     "scoringStrategy.resources[1].weight 0 is not an integer from 1 to 100"),
    ({"type": "MostAllocated", "resources": [{"weight": 3}]}, "scoringStrategy.resources[0].name is empty"),
    ({"type": "MostAllocated", "resources": [{"name": "cpu", "weight": True}]}, "resources[0].weight True is not"),
])
def test_a_strategy_the_eks_api_cannot_carry_is_unknown_naming_the_field(strategy, why):
    got = scoring_of({"kubeSchedulerConfig": {"nodeResourcesFit": {"scoringStrategy": strategy}}}, "prod")
    assert got.strategy == "" and why in got.unknown and got.unknown.startswith("DescribeCluster prod: ")


def test_a_strategy_without_type_or_resources_is_upstreams_least_allocated_default():
    got = scoring_of({"kubeSchedulerConfig": {"nodeResourcesFit": {"scoringStrategy": {}}}}, "prod")
    assert (got.strategy, got.resources, got.unknown) == ("LeastAllocated", (), "")


# ------------------------------------------------------------------------------------- the plan


def test_the_plan_uses_the_eks_clusters_most_allocated_gpu_weight_and_says_source_eks(world, proxy, tmp_path, capsys):
    gpu_world(world)
    scheduler_config(proxy, MOST_GPU)
    code, doc, err = plan(capsys, proxy, tmp_path)
    assert code == 0, err
    sched = doc["scheduler"]
    assert (sched["mode"], sched["source"], sched["scoringStrategy"]) == ("observe", "eks", "MostAllocated")
    assert "NodeResourcesFit MostAllocated (cpu 1, memory 1, nvidia.com/gpu 5)" in sched["profile"]
    # Under the cluster's profile the 1-GPU pod takes the 1-GPU node bought for it: one of each, checked as is.
    assert doc["scaleUp"] == {"big": 1, "small": 1} and sched["realized"] and sched["rounds"] == 1
    assert {n["nodeGroup"]: n["pods"] for n in doc["newNodes"]} == {"small": ["default/infer-0"],
                                                                    "big": ["default/train-0"]}
    assert doc["warnings"] == [] and proxy.count("DescribeCluster") == 1


def test_a_user_scheduler_file_wins_over_the_eks_clusters_strategy(world, proxy, tmp_path, capsys):
    gpu_world(world)
    scheduler_config(proxy, MOST_GPU)
    f = tmp_path / "sched.yaml"
    f.write_text("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n")
    code, doc, err = plan(capsys, proxy, tmp_path, "--scheduler-config", str(f))
    assert code == 0, err
    assert (doc["scheduler"]["source"], doc["scheduler"]["scoringStrategy"]) == ("file", "LeastAllocated")
    assert proxy.count("DescribeCluster") == 0
    assert doc["scaleUp"] == {"big": 2}  # LeastAllocated: the 1-GPU pod would take a 4-GPU node (issue 9)


def test_without_kube_scheduler_config_the_plan_assumes_upstream_defaults_and_warns(world, proxy, tmp_path, capsys):
    gpu_world(world)
    code, doc, err = plan(capsys, proxy, tmp_path)
    assert code == 0, err
    assert (doc["scheduler"]["source"], doc["scheduler"]["scoringStrategy"]) == ("default", "LeastAllocated")
    [warning] = [w for w in doc["warnings"] if "scoring strategy" in w]
    assert warning.startswith("aws-eks: the cluster's kube-scheduler scoring strategy is unknown: DescribeCluster "
                              f"{CLUSTER}: kubeSchedulerConfig.nodeResourcesFit.scoringStrategy is absent")
    assert "the plan assumes upstream defaults (LeastAllocated on cpu and memory)" in warning
    assert doc["scaleUp"] == {"big": 2}


def test_access_denied_on_describe_cluster_still_plans_on_defaults_with_a_warning(world, proxy, tmp_path, capsys):
    gpu_world(world)
    access_denied(proxy)
    code, doc, err = plan(capsys, proxy, tmp_path)
    assert code == 0 and "Traceback" not in err, err
    assert doc["scheduler"]["source"] == "default" and doc["scaleUp"] == {"big": 2}
    [warning] = [w for w in doc["warnings"] if "scoring strategy" in w]
    assert f"eks:DescribeCluster {CLUSTER} failed: permission" in warning and "AccessDeniedException" in warning


def test_with_the_scheduler_model_off_the_cluster_is_not_asked(world, proxy, tmp_path, capsys):
    gpu_world(world)
    access_denied(proxy)
    code, doc, err = plan(capsys, proxy, tmp_path, "--scheduler-model", "off")
    assert code == 0, err
    assert doc["scheduler"]["mode"] == "off" and proxy.count("DescribeCluster") == 0
    assert not any("scoring strategy" in w for w in doc["warnings"])


# ------------------------------------------------------------------------------------ the check


def check(proxy, tmp_path, capsys, objects: list[dict[str, Any]] = ()) -> tuple[int, dict[str, Any]]:
    from tests.kube.emulator import Emulator

    emu = Emulator(release="1.36").start()
    try:
        emu.apply_all(list(objects))
        code = main(["check", "--kubeconfig", emu.kubeconfig(str(tmp_path / "kc")), "-o", "json", "--provider",
                     "aws-eks", "--cluster-name", CLUSTER, "--region", REGION, "--aws-endpoint-url", proxy.url])
    finally:
        emu.stop()
    doc = json.loads(capsys.readouterr().out)
    return code, {r["name"]: r for r in doc["results"]}


def command_of(result: dict[str, Any]) -> list[str]:
    [line] = [d for d in result["detail"] if d.startswith("run: ")]
    return shlex.split(line[len("run: "):])


def test_check_recommends_most_allocated_with_a_gpu_weight_and_prints_the_call(world, proxy, tmp_path, capsys):
    gpu_world(world)
    scheduler_config(proxy, LEAST)
    code, results = check(proxy, tmp_path, capsys)
    r = results["scheduler-scoring"]
    assert r["verdict"] == "warn"
    assert r["summary"] == f"EKS cluster {CLUSTER} (DescribeCluster) scores nodes with LeastAllocated (cpu 1, memory 1)"
    assert any(d.startswith("GPUs in use: nvidia.com/gpu by node group big, node group small") for d in r["detail"])
    argv = command_of(r)
    assert argv[:9] == ["aws", "eks", "update-cluster-config", "--name", CLUSTER, "--region", REGION,
                        "--kube-scheduler-config", argv[8]]
    arg = json.loads(argv[8])
    assert arg == {"nodeResourcesFit": {"scoringStrategy": {"type": "MostAllocated", "resources": [
        {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 5}]}}}
    assert any("self-managed kube-scheduler" in d and "docs/scheduling.md#recommended-profile-for-gpu-batch-clusters"
               in d for d in r["detail"])


def test_the_printed_call_is_a_valid_update_cluster_config_request_for_botocore(world, proxy, tmp_path, capsys):
    from botocore.validate import ParamValidator

    from .conftest import shared_session

    gpu_world(world)
    scheduler_config(proxy, LEAST)
    _, results = check(proxy, tmp_path, capsys)
    argv = command_of(results["scheduler-scoring"])
    model = shared_session().client("eks", region_name=REGION).meta.service_model
    shape = model.operation_model("UpdateClusterConfig").input_shape
    params = {"name": argv[argv.index("--name") + 1],
              "kubeSchedulerConfig": json.loads(argv[argv.index("--kube-scheduler-config") + 1])}
    report = ParamValidator().validate(params, shape)
    assert not report.has_errors(), report.generate_report()
    assert "--kube-scheduler-config" in [f"--{shape_name_to_flag(n)}" for n in shape.members]


def shape_name_to_flag(member: str) -> str:
    """The AWS CLI's option name for an input member (kubeSchedulerConfig -> kube-scheduler-config)."""
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "-", member).lower()


def test_check_counts_gpu_pods_when_no_node_group_has_gpus(world, proxy, tmp_path, capsys):
    world.eks_cluster()
    world.nodegroup("cpu", ["m5.xlarge"])
    scheduler_config(proxy, LEAST)
    _, results = check(proxy, tmp_path, capsys, [pod("infer", None, cpu="2", mem="8Gi", gpu=1)])
    r = results["scheduler-scoring"]
    assert r["verdict"] == "warn" and "GPUs in use: nvidia.com/gpu by pod default/infer" in r["detail"]


def test_check_counts_gpu_nodes_listed_without_a_kind(world, proxy, tmp_path, capsys):
    from gangscale.kube.check_scoring import gpu_users

    listed = {"metadata": {"name": "n1"}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}  # list items: no kind
    assert gpu_users([], [listed], []) == {"nvidia.com/gpu": ["node n1"]}
    world.eks_cluster()
    world.nodegroup("cpu", ["m5.xlarge"])
    scheduler_config(proxy, LEAST)
    _, results = check(proxy, tmp_path, capsys, [node("gpu-1", "aws:///us-east-1a/i-0abc", gpu=8)])
    r = results["scheduler-scoring"]
    assert r["verdict"] == "warn" and "GPUs in use: nvidia.com/gpu by node gpu-1" in r["detail"]


def test_check_is_content_with_most_allocated_and_a_gpu_weight(world, proxy, tmp_path, capsys):
    gpu_world(world)
    scheduler_config(proxy, MOST_GPU)
    code, results = check(proxy, tmp_path, capsys)
    r = results["scheduler-scoring"]
    assert r["verdict"] == "ok" and "MostAllocated (cpu 1, memory 1, nvidia.com/gpu 5)" in r["summary"]
    assert not any(d.startswith("run: ") for d in r["detail"])


def test_check_without_gpus_reports_least_allocated_without_a_recommendation(world, proxy, tmp_path, capsys):
    world.eks_cluster()
    world.nodegroup("cpu", ["m5.xlarge"])
    scheduler_config(proxy, LEAST)
    _, results = check(proxy, tmp_path, capsys)
    r = results["scheduler-scoring"]
    assert r["verdict"] == "ok" and r["detail"] == ["no GPU node group, Node or pod found"]


def test_check_warns_when_describe_cluster_is_denied_and_says_which_permission(world, proxy, tmp_path, capsys):
    gpu_world(world)
    access_denied(proxy)
    code, results = check(proxy, tmp_path, capsys)
    r = results["scheduler-scoring"]
    assert r["verdict"] == "warn" and r["summary"].startswith("cannot read the cluster's kube-scheduler scoring "
                                                              f"strategy: eks:DescribeCluster {CLUSTER} failed")
    assert "allow eks:DescribeCluster on the cluster (config/iam/aws-eks.json)" in r["detail"][0]
    assert results["iam-scope"]["verdict"] == "ok"  # the rest of the check went on


# ------------------------------------------------------------------------------- the controller


def test_the_controller_plans_on_the_eks_strategy_and_reads_it_once_per_ttl(world, proxy):
    from gangscale.controller.config import ControllerConfig
    from gangscale.controller.reconciler import CLUSTER_SCHEDULER_TTL, Deps, Reconciler

    gpu_world(world)
    scheduler_config(proxy, MOST_GPU)
    now = [1_800_000_000.0]
    cfg = ControllerConfig.model_validate({"mode": "dry-run", "schedulerModel": "observe",
                                           "solverTimeLimitSeconds": 5})
    clients = fast_clients(proxy.url)
    r = Reconciler(cfg, EksProvider(CLUSTER, clients.options, clients), Deps(clock=lambda: now[0]))
    plan = r.reconcile(gpu_pods(), leader=True)
    assert (plan.scheduler.source, plan.scheduler.scoring_strategy) == ("eks", "MostAllocated")
    assert plan.scale_up == {"big": 1, "small": 1}
    now[0] += CLUSTER_SCHEDULER_TTL - 1
    r.reconcile(gpu_pods(), leader=True)
    assert proxy.count("DescribeCluster") == 1
    proxy.reset()
    access_denied(proxy)  # the permission was taken away: the next read falls back to the defaults, with a warning
    now[0] += 1
    plan = r.reconcile(gpu_pods(), leader=True)
    assert plan.scheduler.source == "default" and plan.scale_up == {"big": 2}
    assert any("eks:DescribeCluster" in w and "upstream defaults" in w for w in plan.warnings)
    assert proxy.count("DescribeCluster") == 1
