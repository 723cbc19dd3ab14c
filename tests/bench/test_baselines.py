"""Each baseline on tiny cases whose right answer can be worked out by hand."""

from __future__ import annotations

from benchmarks.baselines import plan_ca, plan_ca_atomic, plan_karpenter
from benchmarks.evaluate import evaluate, placed_from_plan
from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.planner import SolveOptions, make_plan
from gangscale.snapshot import build_snapshot

from .helpers import group, pod, podgroup, world, write


def _gangscale(tmp, objects, groups):
    cluster, catalog = write(tmp, objects, groups)
    w = world(tmp, objects, groups)
    gs, _ = parse_catalog(groups)
    plan = make_plan(build_snapshot(ingest(objects), gs), SolveOptions(time_limit=2))
    return w, evaluate(w, placed_from_plan(plan.to_dict()), "gangscale")


def _gpu_gang(name: str, workers: int, launcher: bool = False) -> list[dict]:
    objs = [podgroup(name, workers + launcher)]
    if launcher:
        objs.append(pod(f"{name}-launcher", "2", "4Gi", group=name))
    objs += [pod(f"{name}-w{i}", "88", "900Gi", gpus=8, group=name) for i in range(workers)]
    return objs


def test_ca_and_karpenter_strand_nodes_on_a_gang_that_cannot_complete(tmp_path):
    objs = _gpu_gang("train", 4)
    groups = [group("gpu-a", "p4d.24xlarge", 2, gpu=True)]  # room for 2 of the 4 workers
    w = world(tmp_path, objs, groups)
    ca = evaluate(w, plan_ca(w), "ca")
    assert (ca.new_nodes, ca.stranded_nodes, ca.gangs_satisfied) == (2, 2, 0)
    assert ca.stranded_cost == ca.cost > 0
    k = evaluate(w, plan_karpenter(w), "karpenter")
    assert (k.new_nodes, k.stranded_nodes, k.gangs_satisfied) == (2, 2, 0)
    atomic = evaluate(w, plan_ca_atomic(w), "ca-atomic")
    assert (atomic.new_nodes, atomic.gangs_satisfied) == (0, 0)  # the request does not fit: nothing bought
    _, gs = _gangscale(tmp_path, objs, groups)
    assert (gs.new_nodes, gs.stranded_nodes) == (0, 0)


def test_ca_atomic_skips_a_gang_that_needs_two_node_groups(tmp_path):
    objs = _gpu_gang("train", 2, launcher=True)  # a CPU launcher (no GPU toleration) + 2 GPU workers
    groups = [group("cpu-a", "m5.2xlarge", 2), group("gpu-a", "p4d.24xlarge", 2, gpu=True)]
    w = world(tmp_path, objs, groups)
    atomic = evaluate(w, plan_ca_atomic(w), "ca-atomic")
    assert (atomic.new_nodes, atomic.gangs_satisfied) == (0, 0)
    assert atomic.notes["requestsLeft"] == 1
    ca = evaluate(w, plan_ca(w), "ca")
    assert (ca.new_nodes, ca.gangs_satisfied, ca.stranded_nodes) == (3, 1, 0)
    _, gs = _gangscale(tmp_path, objs, groups)
    assert (gs.gangs_satisfied, gs.new_nodes, gs.stranded_nodes) == (1, 3, 0)


def test_karpenter_narrows_instance_types_and_launches_the_cheapest(tmp_path):
    groups = [group("small", "m5.xlarge", 10), group("large", "m5.2xlarge", 10)]
    w = world(tmp_path, [pod("a", "3", "4Gi"), pod("b", "3", "4Gi")], groups)
    placed = plan_karpenter(w)
    # a alone fits both types; with b the claim needs 6 cores: only m5.2xlarge is left, and it launches
    assert [(g, sorted(p)) for g, p in placed.new_nodes] == [("large", ["default/a", "default/b"])]
    w1 = world(tmp_path, [pod("a", "3", "4Gi")], groups)
    assert [g for g, _ in plan_karpenter(w1).new_nodes] == ["small"]  # cheapest compatible type


def test_ca_least_waste_prefers_the_group_that_wastes_less(tmp_path):
    pods = [pod(f"p{i}", "1", "1Gi") for i in range(10)]
    groups = [group("mem", "r5.2xlarge", 10), group("cpu", "c5.2xlarge", 10)]
    w = world(tmp_path, pods, groups)
    placed = plan_ca(w)
    assert {g for g, _ in placed.new_nodes} == {"cpu"}  # same CPU waste, far less memory waste
    assert sum(len(p) for _, p in placed.new_nodes) == 10 and len(placed.new_nodes) == 2


def test_baselines_use_existing_free_capacity_first(tmp_path):
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "labels": {"gangscale.io/node-group": "cpu",
                                                  "node.kubernetes.io/instance-type": "m5.2xlarge"}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "58"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}
    objs = [node, pod("a", "1", "1Gi"), pod("b", "1", "1Gi")]
    groups = [group("cpu", "m5.2xlarge", 5, current=1)]
    w = world(tmp_path, objs, groups)
    for plan in (plan_ca, plan_ca_atomic, plan_karpenter):
        placed = plan(w)
        assert placed.new_nodes == [] and sorted(placed.existing["n1"]) == ["default/a", "default/b"]


def test_evaluator_rejects_invalid_placements(tmp_path):
    groups = [group("small", "m5.xlarge", 1)]
    w = world(tmp_path, [pod("a", "3", "4Gi"), pod("b", "3", "4Gi")], groups)
    from benchmarks.world import Placed

    bad = Placed(new_nodes=[("small", ["default/a", "default/b"]), ("small", [])])
    m = evaluate(w, bad, "bad")
    text = " ".join(m.violations)
    assert "over capacity" in text and "below maxSize" in text
    assert m.stranded_nodes == 1  # the empty node bills and runs nothing
