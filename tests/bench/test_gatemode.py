"""Gate mode in the benchmark (benchmarks/gatemode.py) on small worlds whose outcome can be worked out by hand."""

from __future__ import annotations

from benchmarks.evaluate import model_run, placed_from_plan
from benchmarks.gatemode import gate_model_run, gate_replay
from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.planner import SolveOptions, make_plan
from gangscale.realize import SchedulerModel
from gangscale.scheduling import strategy_config
from gangscale.snapshot import build_snapshot

from .helpers import group, pod, podgroup, world

OLD, NEW = "2026-03-02T08:00:00Z", "2026-03-02T09:00:00Z"


def _plan(objects: list[dict], groups: list[dict], observe: bool = False) -> dict:
    gs, _ = parse_catalog(groups)
    scheduler = SchedulerModel() if observe else None
    return make_plan(build_snapshot(ingest(objects), gs), SolveOptions(time_limit=2), scheduler).to_dict()


def _scarce_a100() -> tuple[list[dict], list[dict]]:
    """Two p4d nodes at most: the older 2-node gang `big` or the younger 1-node gangs `b` and `c`."""
    objs = [podgroup("big", 2, created=OLD)]
    objs += [pod(f"big-{i}", "88", "900Gi", gpus=8, group="big", created=OLD) for i in range(2)]
    for name in ("b", "c"):
        objs += [podgroup(name, 1, created=NEW), pod(f"{name}-0", "88", "900Gi", gpus=8, group=name, created=NEW)]
    return objs, [group("gpu-a", "p4d.24xlarge", 2, gpu=True)]


def test_gate_mode_never_lets_a_deferred_older_gang_take_the_capacity_the_plan_gave_to_younger_ones(tmp_path):
    objs, groups = _scarce_a100()
    w = world(tmp_path, objs, groups)
    plan = _plan(objs, groups)
    decisions = {g["name"]: g["decision"] for g in plan["gangs"]}
    assert decisions["big"] == "deferred" and {decisions["b"], decisions["c"]} == {"scale-up"}
    for strategy in ("LeastAllocated", "MostAllocated"):
        # no gate: the scheduler's queue puts the older deferred gang first, and it takes both nodes
        free = model_run(w, placed_from_plan(plan), strategy)
        assert free["gangs_started"] == 1
        run = gate_replay(w, plan, strategy_config(strategy))
        assert {k.name for k in run.started} == {"b", "c"}
        assert not [k for k in run.result.placement if k.startswith("default/big-")]  # still gated: on no node
        gate = gate_model_run(w, plan, strategy)
        assert (gate["promised"], gate["gangs_started"], gate["empty_nodes"]) == (2, 2, 0)


def _a10g_spread() -> tuple[list[dict], list[dict]]:
    """The issue's case: an older 1-GPU pod and a younger 4-GPU pod, one g5.xlarge and one g5.12xlarge at most."""
    objs = [podgroup("infer", 1, created=OLD), pod("infer-0", "1", "4Gi", gpus=1, group="infer", created=OLD),
            podgroup("train", 1, created=NEW), pod("train-0", "8", "32Gi", gpus=4, group="train", created=NEW)]
    return objs, [group("g5-1", "g5.xlarge", 1, gpu=True), group("g5-4", "g5.12xlarge", 1, gpu=True)]


def test_gate_mode_starts_what_least_allocated_spreading_breaks_and_at_least_what_observe_mode_starts(tmp_path):
    objs, groups = _a10g_spread()
    w = world(tmp_path, objs, groups)
    plan = _plan(objs, groups)
    assert sorted(n["nodeGroup"] for n in plan["newNodes"]) == ["g5-1", "g5-4"]
    # no gate: LeastAllocated puts the older 1-GPU pod on the emptier g5.12xlarge; the 4-GPU gang no longer fits
    free = model_run(w, placed_from_plan(plan), "LeastAllocated")
    assert (free["gangs_started"], free["empty_nodes"]) == (1, 1)
    observe_plan = _plan(objs, groups, observe=True)
    observe = model_run(w, placed_from_plan(observe_plan), "LeastAllocated")
    gate = gate_model_run(w, plan, "LeastAllocated")
    assert (gate["promised"], gate["gangs_started"], gate["empty_nodes"]) == (2, 2, 0)
    assert gate["gangs_started"] >= observe["gangs_started"]
    assert gate["gangs_started"] > free["gangs_started"]


def _cpu_spread() -> tuple[list[dict], list[dict]]:
    """target-10k's lost gangs in small: an older gang of a small pod and a younger gang of a big one, one
    m5.large and one m5.xlarge at most. No GPUs to order them by."""
    objs = [podgroup("small", 1, created=OLD), pod("small-0", "1", "1Gi", group="small", created=OLD),
            podgroup("big", 1, created=NEW), pod("big-0", "3500m", "4Gi", group="big", created=NEW)]
    return objs, [group("m5-l", "m5.large", 1), group("m5-xl", "m5.xlarge", 1)]


def test_gate_mode_narrows_each_pod_to_its_node_so_least_allocated_spreading_cannot_move_it(tmp_path):
    objs, groups = _cpu_spread()
    w = world(tmp_path, objs, groups)
    plan = _plan(objs, groups)
    assert sorted(n["nodeGroup"] for n in plan["newNodes"]) == ["m5-l", "m5-xl"]
    # released by age without narrowing, the small pod goes to the emptier m5.xlarge and the big one fits nowhere;
    # narrowed, both go where the plan put them, released in the scheduler's own order in one pass
    run = gate_replay(w, plan, strategy_config("LeastAllocated"))
    assert {k.name for k in run.started} == {"big", "small"} and not run.empty and not run.later
    assert [k.name for k in run.order] == ["small", "big"]
    where = {p: n["nodeGroup"] for n in plan["newNodes"] for p in n["pods"]}
    assert {k: v.rpartition("/")[0] for k, v in run.result.placement.items()} == where


def _lone_pod_takes_the_gang_node() -> tuple[list[dict], list[dict]]:
    """An ungrouped pod (no gate) and a gang: under LeastAllocated the lone pod lands on the gang's bigger node."""
    objs = [pod("lone", "1500m", "1Gi", created=OLD), podgroup("g", 1, created=NEW),
            pod("g-0", "3500m", "4Gi", group="g", created=NEW)]
    return objs, [group("m5-l", "m5.large", 2), group("m5-xl", "m5.xlarge", 2)]


def test_a_gang_whose_node_an_ungated_pod_took_is_planned_again_and_starts_on_the_next_pass(tmp_path):
    objs, groups = _lone_pod_takes_the_gang_node()
    w = world(tmp_path, objs, groups)
    plan = _plan(objs, groups)
    assert sorted(n["nodeGroup"] for n in plan["newNodes"]) == ["m5-l", "m5-xl"]
    run = gate_replay(w, plan, strategy_config("LeastAllocated"))
    assert run.result.placement["default/lone"].startswith("m5-xl/")  # the emptiest node: the gang's
    assert {k.name for k in run.started} == {"g"}
    gate = gate_model_run(w, plan, "LeastAllocated")
    assert (gate["promised"], gate["gangs_started"]) == (1, 1)
    # the gang's 3.5 CPUs fit no m5.large: the next plan buys another m5.xlarge, and the m5.large the lone pod was
    # planned on stays empty (gangscale cannot narrow a pod that has no gate; scale-down gives the node back)
    assert (gate["later_nodes"], gate["empty_nodes"]) == (1, 1)


def test_a_node_the_plan_shared_between_two_held_gangs_stays_open_to_both_in_the_next_plan():
    # busy-1k: the plan put one pod of `spark` and one of `mpi` on each of ~100 nodes; the replay reserved every
    # shared node for the last of them, so the re-plan bought `spark` 69 new nodes and left 4 of `mpi`'s empty
    from benchmarks.gatemode import _reserve
    from gangscale.snapshot import NodeView

    objs = [podgroup("spark", 2), podgroup("mpi", 2)]
    objs += [pod(f"{g}-{i}", "1", "1Gi", group=g) for g in ("spark", "mpi") for i in range(2)]
    cluster = ingest(objs)
    snap = build_snapshot(cluster, [])
    room = {"cpu": 8000, "memory": 32 << 30, "pods": 58}
    snap.nodes.extend(NodeView(n, {}, (), dict(room)) for n in ("shared", "spark-own"))
    where = {"default/spark-0": "shared", "default/mpi-0": "shared", "default/spark-1": "spark-own",
             "default/mpi-1": "shared"}
    reserved, held = _reserve(snap, cluster.gangs, where)
    owner = {v.name: v.reserved_for and v.reserved_for.name for v in reserved.nodes}
    assert owner == {"shared": None, "spark-own": "spark"}
    tolerating = {g.name for g in held if any(t.key == "gangscale.io/reserved-for" for p in g.pending
                                              for t in p.placement.tolerations)}
    assert tolerating == {"spark"}


def _lone_pod_packed_on_existing() -> tuple[list[dict], list[dict]]:
    """target-10k's five empty m5.xlarge in small: n1 has 4 of 8 CPUs left; the cheapest plan puts the gang's 4 CPUs
    there and buys an m5.xlarge for the ungrouped 3.5-CPU pod, but MostAllocated packs that pod onto n1 (7.5 of 8
    CPUs and half its memory used beat the m5.xlarge's 3.5 of 3.92 CPUs and a 15th of its memory)."""
    from builders import node

    busy = pod("busy", "4", "16Gi")
    busy["spec"]["nodeName"], busy["status"]["phase"] = "n1", "Running"
    objs = [node("n1", cpu="8", mem="32Gi"), busy, pod("lone", "3500m", "1Gi", created=OLD),
            podgroup("g", 1, created=NEW), pod("g-0", "4", "1Gi", group="g", created=NEW)]
    return objs, [group("m5-xl", "m5.xlarge", 2), group("m5-2xl", "m5.2xlarge", 2)]


def test_gate_mode_buys_nothing_for_an_ungrouped_pod_the_scheduler_packs_onto_an_existing_node(tmp_path):
    from benchmarks.gatemode import gate_plan

    objs, groups = _lone_pod_packed_on_existing()
    w = world(tmp_path, objs, groups)
    solver = _plan(objs, groups)  # what gate mode planned before: the solver's plan of every pending pod
    assert solver["existingNodes"] == {"n1": ["default/g-0"]} and solver["scaleUp"] == {"m5-xl": 1}
    before = gate_model_run(w, solver, "MostAllocated")  # the gang is planned again; the m5.xlarge stays empty
    assert (before["empty_nodes"], before["later_nodes"]) == (1, 1)
    plan = gate_plan(w, "MostAllocated", SolveOptions(time_limit=2))
    assert plan["scaleUp"] == {"m5-2xl": 1} and plan["existingNodes"] == {}
    assert {g["name"]: g["decision"] for g in plan["gangs"]}["lone"] == "fits-existing"
    gate = gate_model_run(w, plan, "MostAllocated")
    assert (gate["promised"], gate["gangs_started"], gate["empty_nodes"], gate["later_nodes"]) == (1, 1, 0, 0)
    assert gate_replay(w, plan, strategy_config("MostAllocated")).result.placement["default/lone"] == "n1"
