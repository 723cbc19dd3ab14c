"""Gate mode's pure decisions (gangscale/controller/gates.py): who is held, in which order gangs are released.

The scheduler's behaviour these rely on is the model's (tests/scheduling/): PrioritySort puts the
older pod first, and NodeResourcesFit LeastAllocated on cpu/memory sends a 1-GPU pod to the
emptiest node, the big GPU node (issue 9).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import group, node, pod, podgroup
from gangscale.catalog import parse_catalog
from gangscale.controller.gates import (CAPACITY_READY, GATE_MODE_KEY, NOT_HELD, decide, holds, placement_choices,
                                        release_order, remove_gate_patch)
from gangscale.ingest import CAPACITY_GATE, ingest
from gangscale.model import Gang, Pod, Placement
from gangscale.planner import OFF, make_plan
from gangscale.snapshot import build_snapshot
from gangscale.solver.params import SolveOptions

GATE = [{"name": CAPACITY_GATE}]
KUEUE = [{"name": "kueue.x-k8s.io/admission"}]


def gated_pod(name: str, *, created: str = "2030-01-01T00:00:10Z", gates=GATE, **kw) -> dict:
    p = pod(name, schedulingGates=gates, **kw)
    p["metadata"]["creationTimestamp"] = created
    return p


def pg(name: str, created: str, **kw) -> dict:
    g = podgroup(name, **kw)
    g["metadata"]["creationTimestamp"] = created
    return g


def plan_and_decide(objs: list[dict], catalog: list[dict] | None = None, held=lambda g: True):
    groups, _ = parse_catalog(catalog or [])
    cluster = ingest(objs)
    snap = build_snapshot(cluster, groups)
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)  # the controller's default: gate mode orders the release
    return plan, decide(cluster.gangs, plan, snap, held)


def lifted(decision) -> list[str]:
    return [g.gang.name for g in decision.lifts]


# ------------------------------------------------------------------------------------------ ingest

def test_a_pod_held_only_by_our_gate_is_pending_to_plan_for_and_one_held_by_kueue_is_not():
    cluster = ingest([gated_pod("ours", cpu="1"), gated_pod("kueue", cpu="1", gates=KUEUE),
                      gated_pod("both", cpu="1", gates=GATE + KUEUE)])
    pending = {p.name for g in cluster.gangs for p in g.pending}
    assert pending == {"ours"}  # the other two keep today's treatment: gated, not planned


# ------------------------------------------------------------------------------------------ opt-in

@pytest.mark.parametrize("mode, ns_label, annotation, expected", [
    ("opt-in", None, None, False),
    ("opt-in", "true", None, True),
    ("opt-in", None, "true", True),
    ("opt-in", "true", "false", False),  # the gang opts out of its namespace's choice
    ("all", None, None, True),
    ("all", "false", None, False),
    ("off", "true", "true", False),  # the switch wins
    ("opt-in", "yes", None, False),  # only "true" / "false" count
])
def test_which_gangs_gate_mode_holds(mode, ns_label, annotation, expected):
    g = Gang("team", "job", "scheduling.k8s.io/v1alpha2", annotations={GATE_MODE_KEY: annotation} if annotation else {})
    labels = {"team": {GATE_MODE_KEY: ns_label}} if ns_label else {}
    assert holds(g, mode, labels) is expected


def test_a_lone_pod_opts_in_with_its_own_annotation():
    p = gated_pod("solo")
    p["metadata"]["annotations"] = {GATE_MODE_KEY: "true"}
    (g,) = ingest([p]).gangs
    assert holds(g, "opt-in", {})


@pytest.mark.parametrize("gate_mode_label, annotation, expected", [
    (None, None, True),  # the webhook gates its pods: gate mode holds them, not lift them at once
    ("false", None, False),  # the namespace's own gate-mode label wins
    (None, "false", False),  # and the gang's annotation
])
def test_a_namespace_the_webhook_gates_is_one_gate_mode_holds_unless_it_says_false(gate_mode_label, annotation,
                                                                                     expected):
    labels = {"gangscale.io/capacity-gate": "enabled", **({GATE_MODE_KEY: gate_mode_label} if gate_mode_label else {})}
    g = Gang("team", "job", "scheduling.k8s.io/v1alpha2", annotations={GATE_MODE_KEY: annotation} if annotation else {})
    assert holds(g, "opt-in", {"team": labels}) is expected
    assert holds(g, "off", {"team": labels}) is False
    assert holds(g, "opt-in", {"team": {"gangscale.io/capacity-gate": "disabled"}}) is False


# ------------------------------------------------------------------------------------------ order

def _gang(name: str, *, gpu: int = 0, pods: int = 1, priority: int = 0, created: str = "2030-01-01T00:00:00Z") -> Gang:
    req = {"cpu": 1000, "pods": 1, **({"nvidia.com/gpu": gpu} if gpu else {})}
    members = [Pod("ns", f"{name}-{i}", "", dict(req), Placement(), priority=priority) for i in range(pods)]
    return Gang("ns", name, "v1", pending=members, created=created)


@pytest.mark.parametrize("gangs, expected", [
    ([_gang("small", gpu=1), _gang("big", gpu=4)], ["big", "small"]),  # big GPU pods first
    ([_gang("wide", gpu=1, pods=8), _gang("big", gpu=4)], ["big", "wide"]),  # per-pod size before the total
    ([_gang("a", gpu=2, pods=1), _gang("b", gpu=2, pods=3)], ["b", "a"]),  # same pod size: the larger total
    ([_gang("big", gpu=8), _gang("urgent", gpu=1, priority=10)], ["urgent", "big"]),  # priority first
    ([_gang("young", created="2030-01-02T00:00:00Z"), _gang("old", created="2030-01-01T00:00:00Z")],
     ["old", "young"]),  # otherwise queue order
    ([_gang("cpu-only"), _gang("gpu", gpu=1)], ["gpu", "cpu-only"]),
])
def test_release_order(gangs, expected):
    assert [g.name for g in release_order(gangs)] == expected


def test_the_patch_removes_our_gate_where_it_is_and_tests_it_first():
    assert remove_gate_patch(["kueue.x-k8s.io/admission", CAPACITY_GATE]) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": CAPACITY_GATE},
        {"op": "remove", "path": "/spec/schedulingGates/1"}]


# ------------------------------------------------------------------------------------------ decide

BIG = dict(cpu="48", mem="192Gi", gpu=4)
SMALL = dict(cpu="4", mem="16Gi", gpu=1)


def gpu_gangs(*, big_bound: bool = False) -> list[dict]:
    """A 4-GPU gang (younger) and a 1-GPU gang (older): the small one would take the big node."""
    objs = [node("g12", **BIG), node("g1", **SMALL),
            pg("big", "2030-01-01T00:00:20Z"), pg("small", "2030-01-01T00:00:10Z"),
            gated_pod("s0", cpu="1", mem="1Gi", gpu=1, group="small", created="2030-01-01T00:00:10Z")]
    if big_bound:
        objs.append(pod("b0", cpu="8", mem="8Gi", gpu=4, group="big", node="g12"))
    else:
        objs.append(gated_pod("b0", cpu="8", mem="8Gi", gpu=4, group="big", created="2030-01-01T00:00:20Z"))
    return objs


def test_the_big_gpu_gang_is_released_first_and_the_small_one_waits_until_it_has_bound():
    plan, d = plan_and_decide(gpu_gangs())
    assert plan.existing_nodes == {"g12": ["default/b0"], "g1": ["default/s0"]}
    assert lifted(d) == ["big"] and d.lifts[0].why == CAPACITY_READY
    assert "would keep default/big" in d.held[next(k for k in d.held if k.name == "small")]
    _, d = plan_and_decide(gpu_gangs(big_bound=True))
    assert lifted(d) == ["small"]


def test_a_small_gang_waits_while_the_big_gang_holding_its_landing_node_is_not_ready():
    objs = gpu_gangs()
    objs.append(gated_pod("b1", cpu="8", mem="8Gi", gpu=4, group="big", created="2030-01-01T00:00:20Z"))
    objs[2]["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2
    # one 4-GPU node is still on its way: the big gang's capacity is not Ready
    plan, d = plan_and_decide(objs, [group("g12x", cpu="48", mem="192Gi", gpu=4, current=1)])
    by_name = {k.name: why for k, why in d.held.items()}
    assert "waiting for its capacity: 1 of the 2 pods" in by_name["big"]
    assert "on node g12, which the plan keeps for default/big" in by_name["small"]
    assert lifted(d) == []


def test_h100_only_gangs_are_released_before_an_older_any_gpu_gang_that_would_take_an_h100_node():
    product = "nvidia.com/gpu.product"
    big = dict(cpu="192", mem="2048Gi", gpu=8)  # the H100 nodes are the emptiest: LeastAllocated prefers them
    objs = [node("h100-a", labels={product: "H100"}, **big), node("h100-b", labels={product: "H100"}, **big),
            node("a100", cpu="96", mem="1024Gi", gpu=8, labels={product: "A100"}),
            pg("any", "2030-01-01T00:00:01Z"), pg("h1", "2030-01-01T00:00:02Z"), pg("h2", "2030-01-01T00:00:03Z"),
            gated_pod("any-0", cpu="8", mem="8Gi", gpu=8, group="any", created="2030-01-01T00:00:01Z")]
    objs += [gated_pod(f"{n}-0", cpu="8", mem="8Gi", gpu=8, group=n, created=f"2030-01-01T00:00:0{i + 2}Z",
                       selector={product: "H100"}) for i, n in enumerate(("h1", "h2"))]
    plan, d = plan_and_decide(objs)
    assert plan.existing_nodes["a100"] == ["default/any-0"]
    # tried first, the any-GPU gang would land on an H100 node: one H100 gang would then still fit, so it would
    # be released, and the other H100 gang would never start; tried last, it waits until both have bound
    assert lifted(d) == ["h1", "h2"]
    assert "would keep default/h" in d.held[next(k for k in d.held if k.name == "any")]


def test_release_order_puts_the_gang_with_fewer_node_groups_first_among_equal_gpu_sizes():
    gangs = [_gang("any", gpu=8, created="2030-01-01T00:00:00Z"), _gang("h100", gpu=8, created="2030-01-02T00:00:00Z"),
             _gang("small", gpu=1)]
    choices = {"any": 3, "h100": 1, "small": 1}
    assert [g.name for g in release_order(gangs, lambda g: choices[g.name])] == ["h100", "any", "small"]


def test_gangs_that_fit_existing_capacity_are_released_at_once():
    objs = [node("n1", cpu="8"), node("n2", cpu="8"), pg("a", "2030-01-01T00:00:01Z"), pg("b", "2030-01-01T00:00:02Z"),
            gated_pod("a0", cpu="6", group="a"), gated_pod("b0", cpu="6", group="b")]
    _, d = plan_and_decide(objs)
    assert lifted(d) == ["a", "b"] and not d.held


def test_a_deferred_gang_stays_gated():
    objs = [node("n1", cpu="8"), pg("first", "2030-01-01T00:00:01Z", priority=10),
            pg("later", "2030-01-01T00:00:00Z"),  # older: the scheduler would give it the node
            gated_pod("f0", cpu="6", group="first", priority=10), gated_pod("l0", cpu="6", group="later")]
    plan, d = plan_and_decide(objs)
    assert {g.name: g.decision for g in plan.gangs}["later"] in ("deferred", "infeasible")
    assert lifted(d) == ["first"]
    assert next(why for k, why in d.held.items() if k.name == "later").startswith(("deferred", "infeasible"))


def test_a_gang_gate_mode_does_not_hold_is_released_at_once_even_without_capacity():
    objs = [pg("x", "2030-01-01T00:00:01Z"), gated_pod("x0", cpu="6", group="x")]
    _, d = plan_and_decide(objs, [group("cpu")], held=lambda g: False)
    assert lifted(d) == ["x"] and d.lifts[0].why == NOT_HELD


def test_only_the_members_the_plan_placed_leave_the_gate():
    objs = [node("n1", cpu="8"), pg("elastic", "2030-01-01T00:00:01Z", min_count=1)]
    objs += [gated_pod(f"e{i}", cpu="3", group="elastic") for i in range(3)]  # two fit, the third does not
    _, d = plan_and_decide(objs)
    assert len(d.lifts) == 1 and len(d.lifts[0].pods) == 2


# ------------------------------------------------------------------------------------------ target-10k's failure

def _least_allocated_spreading_case() -> list[dict]:
    """Two Ready nodes bought for two gangs: a 4-CPU one for `big` (younger, one 4-CPU pod) and a 2-CPU one for
    `small` (older, one 2-CPU pod). LeastAllocated sends `small`'s pod to the emptiest node, `big`'s."""
    return [node("n4", cpu="4", mem="16Gi"), node("n2", cpu="2", mem="8Gi"),
            pg("small", "2030-01-01T00:00:01Z"), pg("big", "2030-01-01T00:00:02Z"),
            gated_pod("s0", cpu="2", mem="2Gi", group="small", created="2030-01-01T00:00:01Z"),
            gated_pod("b0", cpu="4", mem="4Gi", group="big", created="2030-01-01T00:00:02Z")]


def test_release_order_puts_the_bigger_cpu_or_memory_pods_first_among_gangs_without_gpus():
    small = _gang("small", created="2030-01-01T00:00:00Z")
    big = _gang("big", created="2030-01-02T00:00:00Z")
    big = replace(big, pending=[replace(p, requests={"cpu": 4000, "pods": 1}) for p in big.pending])
    heavy = _gang("heavy", created="2030-01-03T00:00:00Z")  # 0.5 CPU, 24 GiB: memory makes it the biggest
    heavy = replace(heavy, pending=[replace(p, requests={"cpu": 500, "memory": 24 << 30, "pods": 1})
                                    for p in heavy.pending])
    assert [g.name for g in release_order([small, big, heavy])] == ["heavy", "big", "small"]


def test_gangs_released_in_release_order_all_start_under_least_allocated_where_creation_order_strands_one():
    # target-10k (issue 9): CPU gangs were released by age; each spread over the emptiest nodes, so small pods
    # released first took the room of bigger ones released later (5 of 480 promised gangs never started)
    from gangscale.scheduling import nodes_from_views, simulate, strategy_config
    cluster = ingest(_least_allocated_spreading_case())
    snap = build_snapshot(cluster, [])
    nodes = nodes_from_views(snap.nodes, snap.bound)

    def started(order: list[Gang]) -> set[str]:
        bound: list[Pod] = []
        out = set()
        for g in order:  # one gang at a time, each bound before the next gate is lifted
            res = simulate(nodes, [g], bound=bound, config=strategy_config("LeastAllocated"))
            out |= {k.name for k in res.started}
            bound += [replace(p, node_name=res.placement[p.key]) for p in g.pending if p.key in res.placement]
        return out

    by_age = sorted(cluster.gangs, key=lambda g: g.created)
    assert started(by_age) == {"small"}  # its pod took the 4-CPU node: `big` no longer fits anywhere
    assert started(release_order(cluster.gangs, placement_choices(snap))) == {"small", "big"}


def test_a_release_is_held_when_its_victim_could_only_fall_back_on_room_the_plan_gave_a_third_held_gang():
    # `a` and `c` each have one pod on a Ready node (n-a, n-c) and one on a node still on its way; `b` is Ready on
    # n1. LeastAllocated puts `b`'s pod on n-a or n-c. Checked alone, the gang whose node it took could move to
    # the other one's node; then that gang would no longer fit once its capacity is Ready: `b` must wait
    objs = [node("n-a", cpu="4", mem="16Gi"), node("n-c", cpu="4", mem="16Gi"), node("n1", cpu="1", mem="4Gi"),
            pg("a", "2030-01-01T00:00:01Z", min_count=2), pg("c", "2030-01-01T00:00:02Z", min_count=2),
            pg("b", "2030-01-01T00:00:03Z")]
    objs += [gated_pod(f"{g}{i}", cpu="4", mem="4Gi", group=g) for g in ("a", "c") for i in range(2)]
    objs.append(gated_pod("b0", cpu="1", mem="1Gi", group="b"))
    groups, _ = parse_catalog([group("cpu4", cpu="4", mem="16Gi")])
    cluster = ingest(objs)
    snap = build_snapshot(cluster, groups)
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    assert len(plan.new_nodes) == 2 and plan.existing_nodes["n1"] == ["default/b0"]
    # one of the plans the solver may return (all cost the same): each big gang half on its Ready node
    new = [plan.new_nodes[0].model_copy(update={"pods": ["default/a1"]}),
           plan.new_nodes[1].model_copy(update={"pods": ["default/c1"]})]
    plan = plan.model_copy(update={"existing_nodes": {"n-a": ["default/a0"], "n-c": ["default/c0"],
                                                      "n1": ["default/b0"]}, "new_nodes": new})
    d = decide(cluster.gangs, plan, snap, lambda g: True)
    assert lifted(d) == []
    held = {k.name: why for k, why in d.held.items()}
    assert "which the plan keeps for default/" in held["b"] and "waits until that gang has bound" in held["b"]
    assert "waiting for its capacity" in held["a"] and "waiting for its capacity" in held["c"]
