"""The quorum-first greedy (issue 11): every gang's minCount before any extra member, equal-priority gangs by
the scarce capacity their quorum uses, then extra members, then a cost repair; always a valid plan."""

from __future__ import annotations

import time

import pytest

from builders import GPU_TAINT, GPU_TOL, group, node, plan_when_cp_sat_gets_no_time, pod, podgroup, snapshot
from checker import check_plan
from gangscale.planner import OFF, _render, make_plan
from gangscale.solver import greedy as greedy_mod
from gangscale.solver.greedy import greedy
from gangscale.solver.params import SolveOptions
from gangscale.solver.problem import MICRO, build_problem


def aged(pg: dict, minute: int) -> dict:
    pg["metadata"]["creationTimestamp"] = f"2026-03-02T08:{minute:02d}:00Z"
    return pg


def elastic_pair() -> tuple[list[dict], list[dict]]:
    """One node with 4 free cpus; an older elastic gang of 4 (minCount 2), a newer gang of 2 (minCount 2)."""
    objs = [node("n1", cpu="4", mem="16Gi"), aged(podgroup("old", min_count=2), 0), aged(podgroup("new", min_count=2), 5)]
    objs += [pod(f"old-{i}", cpu="1", group="old") for i in range(4)]
    objs += [pod(f"new-{i}", cpu="1", group="new") for i in range(2)]
    return objs, []


def started(prob, a) -> set[str]:
    return {prob.gangs[g].gang.name for g, ok in enumerate(a.satisfied) if ok and prob.gangs[g].is_gang}


def as_plan(objs, catalog, quorum_first: bool):
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    a = greedy(prob, quorum_first=quorum_first)
    return prob, a, _render(snap, prob, a, a.cost(prob), 0)


def test_whole_gang_first_loses_a_gang_that_quorum_first_starts():
    objs, catalog = elastic_pair()
    prob, whole, whole_plan = as_plan(objs, catalog, quorum_first=False)
    assert started(prob, whole) == {"old"}  # the older gang takes all four cpus with its extra members
    prob, quorum, plan = as_plan(objs, catalog, quorum_first=True)
    assert started(prob, quorum) == {"old", "new"}
    assert sum(quorum.y) == 4
    for p in (whole_plan, plan):
        assert not check_plan(objs, catalog, p.to_dict())


def test_the_planner_starts_both_gangs_and_says_the_gang_gap_is_closed():
    objs, catalog = elastic_pair()
    plan = make_plan(snapshot(objs, catalog), SolveOptions(time_limit=2.0), OFF)  # the solver's plan
    assert not check_plan(objs, catalog, plan.to_dict())
    assert {g.name: g.placed for g in plan.gangs} == {"old": 2, "new": 2}
    assert (plan.solver.gangs_started, plan.solver.gangs_upper_bound) == (2, 2)


def test_equal_priority_gangs_go_by_scarce_capacity_before_age():
    # 4 GPUs in all; the oldest gang's quorum takes all four, two newer gangs need two each
    objs = [node("g", cpu="64", mem="256Gi", gpu=4), aged(podgroup("big", min_count=4), 0),
            aged(podgroup("s1", min_count=2), 1), aged(podgroup("s2", min_count=2), 2)]
    objs += [pod(f"big-{i}", cpu="1", gpu=1, tolerations=[GPU_TOL], group="big") for i in range(4)]
    objs += [pod(f"{g}-{i}", cpu="1", gpu=1, tolerations=[GPU_TOL], group=g) for g in ("s1", "s2") for i in range(2)]
    prob, a, plan = as_plan(objs, [], quorum_first=True)
    assert started(prob, a) == {"s1", "s2"}
    assert not check_plan(objs, [], plan.to_dict())


def test_priority_still_comes_before_scarcity():
    objs = [node("g", cpu="64", mem="256Gi", gpu=4), aged(podgroup("big", min_count=4, priority=100), 0),
            aged(podgroup("s1", min_count=2), 1), aged(podgroup("s2", min_count=2), 2)]
    objs += [pod(f"big-{i}", cpu="1", gpu=1, tolerations=[GPU_TOL], group="big") for i in range(4)]
    objs += [pod(f"{g}-{i}", cpu="1", gpu=1, tolerations=[GPU_TOL], group=g) for g in ("s1", "s2") for i in range(2)]
    prob, a, _ = as_plan(objs, [], quorum_first=True)
    assert started(prob, a) == {"big"}


def test_cost_repair_packs_a_gang_whose_quorum_and_extras_opened_two_nodes_into_one(monkeypatch):
    # quorum (2 pods) is cheapest on a small node, the 6 extras on a big one: $0.40; the whole gang fits one big
    catalog = [group("small", cpu="2", mem="8Gi", price=0.10), group("big", cpu="8", mem="32Gi", price=0.30)]
    objs = [podgroup("job", min_count=2)] + [pod(f"w{i}", cpu="1", mem="1Gi", group="job") for i in range(8)]
    prob = build_problem(snapshot(objs, catalog))
    assert greedy(prob).cost(prob) == round(0.30 * MICRO)
    monkeypatch.setattr(greedy_mod, "_repack", lambda *a: None)
    assert greedy(prob).cost(prob) == round(0.40 * MICRO)


@pytest.mark.parametrize("quorum_first", [True, False])
def test_a_greedy_plan_with_node_groups_topology_and_basic_pods_passes_the_checker(quorum_first):
    zone = "topology.kubernetes.io/zone"
    catalog = [group(f"ng-{z}", cpu="4", mem="16Gi", price=0.2, max_size=2, labels={zone: z}) for z in ("a", "b")]
    objs = [podgroup("t", min_count=3, topology=[zone]), podgroup("e", min_count=2), podgroup("b", policy="basic")]
    objs += [pod(f"t-{i}", cpu="1", group="t") for i in range(6)]
    objs += [pod(f"e-{i}", cpu="2", group="e") for i in range(5)]
    objs += [pod(f"b-{i}", cpu="1", group="b") for i in range(4)] + [pod("lone", cpu="3")]
    _, a, plan = as_plan(objs, catalog, quorum_first)
    assert not check_plan(objs, catalog, plan.to_dict())
    assert a.satisfied.count(True) >= 2


def test_greedy_and_explanations_leave_the_problem_as_build_problem_made_it():
    import dataclasses

    import numpy as np

    objs, catalog = elastic_pair()
    prob = build_problem(snapshot(objs, catalog))
    before = dataclasses.astuple(prob.arrays)
    first = greedy(prob)
    greedy_mod.max_placeable(prob, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        prob.arrays = None  # type: ignore[misc]
    with pytest.raises(ValueError):
        prob.arrays.free[0, 0] = 0  # the arrays every greedy state starts from refuse writes
    after = dataclasses.astuple(prob.arrays)
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b for a, b in zip(before, after))
    assert greedy(prob) == first


def fragments_case() -> tuple[list[dict], list[dict]]:
    """An existing node with 4 free cpus; an older gang of four 1-cpu pods and a newer one-pod gang of 4 cpus.
    Small nodes ($0.10, 2 cpus) hold the small pods; only a big one ($1.00, 8 cpus) holds the 4-cpu pod."""
    catalog = [group("small", cpu="2", mem="8Gi", price=0.10), group("big", cpu="8", mem="32Gi", price=1.00)]
    objs = [node("n1", cpu="4", mem="16Gi"), aged(podgroup("many", min_count=4), 0), aged(podgroup("one"), 5)]
    objs += [pod(f"many-{i}", cpu="1", mem="1Gi", group="many") for i in range(4)]
    objs += [pod("one-0", cpu="4", mem="4Gi", group="one")]
    return objs, catalog


def test_the_price_repack_gives_the_free_node_to_the_pod_that_is_dear_elsewhere_and_the_plan_stays_valid():
    from gangscale.solver.bound import lp_cost_prices
    from gangscale.solver.outcome import placed_per_shape
    from gangscale.solver.repack import repack

    objs, catalog = fragments_case()
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    first = greedy(prob)  # first fit in gang order: the small pods take the free node, the big pod a $1.00 node
    assert first.cost(prob) == round(1.00 * MICRO)
    _, prices = lp_cost_prices(prob, placed_per_shape(prob, first), None)
    again = repack(prob, first, prices)
    assert again is not None and again.cost(prob) == round(0.20 * MICRO)  # the 4-cpu pod on n1, two small nodes
    assert again.y == first.y and again.satisfied == first.satisfied
    assert not check_plan(objs, catalog, _render(snap, prob, again, again.cost(prob), 0).to_dict())


def test_the_planner_keeps_the_repacked_plan_when_cp_sat_gets_no_time(monkeypatch):
    objs, catalog = fragments_case()
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, objs, catalog)
    assert plan.cost_per_hour == pytest.approx(0.20)
    assert plan.lower_bound_per_hour > 0  # the LP bound, not a bound skipped for want of time
    assert not check_plan(objs, catalog, plan.to_dict())


def scarce_group_case() -> tuple[list[dict], list[dict]]:
    """Two 8-GPU node groups of 2 nodes: `a` ($1/h) and `b` ($2/h). The oldest gang's two pods fit either, the next
    gang's two pods only `a` (target-10k's p4de / p5 in small), and a newest one needs three `a` nodes (never
    starts: the gangs contend for `a`). First fit by price gives `a` to the oldest gang."""
    catalog = [group(f"{g}", cpu="96", mem="1024Gi", gpu=8, price=price, max_size=2, labels={"pool": g},
                     taints=[GPU_TAINT]) for g, price in (("a", 1.0), ("b", 2.0))]
    objs = [aged(podgroup("flex", min_count=2), 0), aged(podgroup("only-a", min_count=2), 5),
            aged(podgroup("three-a", min_count=3), 9)]
    objs += [pod(f"flex-{i}", cpu="90", mem="900Gi", gpu=8, group="flex") for i in range(2)]
    objs += [pod(f"{g}-{i}", cpu="90", mem="900Gi", gpu=8, group=g, selector={"pool": "a"})
             for g, n in (("only-a", 2), ("three-a", 3)) for i in range(n)]
    return objs, catalog


def test_without_the_gang_lp_first_fit_by_price_gives_the_scarce_group_to_the_gang_that_could_go_elsewhere():
    objs, catalog = scarce_group_case()
    prob, a, _ = as_plan(objs, catalog, quorum_first=True)
    assert started(prob, a) == {"flex"}


def test_the_gang_lp_guide_sends_the_flexible_gang_to_the_dearer_group_and_starts_both():
    from gangscale.solver.bound import gang_lp

    objs, catalog = scarce_group_case()
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    guide = gang_lp(prob).guide()
    assert [prob.kinds[k].group for k in guide.full.nonzero()[0]] == ["a", "b"]  # the LP fills both groups
    assert {prob.gangs[g].gang.name: round(x, 6) for g, x in guide.started.items()}["three-a"] < 1  # goes last
    a = greedy(prob, guide=guide)
    assert started(prob, a) == {"flex", "only-a"}
    assert a.cost(prob) == round(6.0 * MICRO)  # flex on two `b` nodes, only-a on two `a` nodes
    assert not check_plan(objs, catalog, _render(snap, prob, a, a.cost(prob), 0).to_dict())


@pytest.mark.parametrize("deterministic", [False, True])
def test_the_default_plan_starts_both_gangs_where_first_fit_by_price_starts_one(monkeypatch, deterministic):
    objs, catalog = scarce_group_case()
    if deterministic:
        plan = make_plan(snapshot(objs, catalog), SolveOptions(deterministic=True), OFF)
    else:
        plan = plan_when_cp_sat_gets_no_time(monkeypatch, objs, catalog)
    assert {g.name: g.placed for g in plan.gangs} == {"flex": 2, "only-a": 2, "three-a": 0}
    assert (plan.solver.gangs_started, plan.solver.gangs_upper_bound) == (2, 2)
    assert plan.scale_up == {"a": 2, "b": 2}
    assert not check_plan(objs, catalog, plan.to_dict())


def test_no_guide_when_every_gang_fits_the_relaxation_so_price_order_stands():
    from gangscale.solver.bound import gang_lp

    objs, catalog = scarce_group_case()
    objs = [o for o in objs if "three-a" not in o["metadata"]["name"]]
    assert gang_lp(build_problem(snapshot(objs, catalog))).guide() is None


def test_a_gang_the_greedy_tried_is_not_said_to_be_untried_when_the_budget_ran_out_before_its_reason():
    # The default budget never cuts the greedy short (every quorum is tried); a deadline passed while the
    # reasons are written must not tell the user "not tried ... --time-limit" for a flag they never gave.
    from gangscale.planner import _unplaced_reason

    objs, catalog = elastic_pair()
    objs += [aged(podgroup("late", min_count=4), 9)] + [pod(f"late-{i}", cpu="1", group="late") for i in range(4)]
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    gid = next(i for i, info in enumerate(prob.gangs) if info.gang.name == "late")
    decision, reason = _unplaced_reason(snap, prob, gid, deadline=0.0, out_of_time=False)
    assert decision == "deferred" and reason.startswith("tried, but not started") and "--time-limit" not in reason
    assert _unplaced_reason(snap, prob, gid, deadline=0.0, out_of_time=True)[1].startswith("not tried")


@pytest.mark.parametrize("oldest_first", [True, False])
def test_of_interchangeable_gangs_that_do_not_all_fit_the_oldest_are_planned(monkeypatch, oldest_first):
    # kube-scheduler's queue is priority, then creation time (PrioritySort): of equal gangs the LP guide is
    # indifferent between, the ones bought for must be the oldest, or the scheduler hands the nodes to others.
    import gangscale.solver.bound as bound

    if not oldest_first:  # the check can fail: without the hand-over the LP's own choice is not the oldest
        monkeypatch.setattr(bound, "_oldest_first", lambda prob, started: started)
    objs = []
    for i in range(20):
        objs += [aged(podgroup(f"g{i:02d}", min_count=1), i), pod(f"g{i:02d}-0", cpu="6", group=f"g{i:02d}")]
    catalog = [group("cpu", cpu="8", max_size=1)]
    plan = make_plan(snapshot(objs, catalog), SolveOptions(), OFF)
    assert not check_plan(objs, catalog, plan.to_dict())
    started = [g.name for g in plan.gangs if g.decision == "scale-up"]
    assert (started == ["g00"]) is oldest_first, started


def held_existing_node_case() -> tuple[list[dict], list[dict]]:
    """`scarce_group_case` with one of `a`'s two nodes already running and free (busy-5k: free H100 nodes):
    `a` can still grow by one. Both `a` nodes must go to only-a; the flexible gang has `b`."""
    objs, catalog = scarce_group_case()
    catalog[0]["currentSize"] = 1
    objs.append(node("a-0", cpu="96", mem="1024Gi", gpu=8, group="a", labels={"pool": "a"}, taints=[GPU_TAINT]))
    return objs, catalog


def test_the_guide_keeps_the_flexible_gang_off_a_free_existing_node_of_the_group_it_holds_for_another():
    # The LP gives both of `a`'s nodes (the free running one and its one new node) to only-a; first fit put a
    # flex pod on the running `a` node anyway (existing room came before any rule of the guide), so only-a got
    # one `a` node of two and did not start.
    from gangscale.solver.bound import gang_lp

    objs, catalog = held_existing_node_case()
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    guide = gang_lp(prob).guide()
    assert started(prob, greedy(prob, guide=guide)) == {"flex"}
    a = greedy(prob, guide=guide, spare_running=True)
    assert started(prob, a) == {"flex", "only-a"}
    assert not check_plan(objs, catalog, _render(snap, prob, a, a.cost(prob), 0).to_dict())


def test_the_default_plan_starts_both_gangs_when_the_scarce_group_has_a_free_running_node(monkeypatch):
    objs, catalog = held_existing_node_case()
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, objs, catalog)
    assert {g.name: g.placed for g in plan.gangs} == {"flex": 2, "only-a": 2, "three-a": 0}
    assert plan.scale_up == {"a": 1, "b": 2}
    assert not check_plan(objs, catalog, plan.to_dict())


def _plan_at_2_s_with_the_lp_estimated_at_a_quarter_second(monkeypatch):
    """`held_existing_node_case` planned at --time-limit 2 with the gang LP estimated at 0.25 s, CP-SAT left no time
    (it fails the test if called): whether the greedy was guided decides the plan. Returns (objects, catalog, plan)."""
    from gangscale import planner
    from gangscale.solver import cpsat

    monkeypatch.setattr(planner, "lp_seconds", lambda prob: 0.25)
    monkeypatch.setattr(cpsat, "solve_model", lambda *a, **k: pytest.fail("no time was left for CP-SAT"))
    monkeypatch.setattr(planner, "FINISH_RESERVE", 50.0)
    objs, catalog = held_existing_node_case()
    return objs, catalog, make_plan(snapshot(objs, catalog), SolveOptions(time_limit=2.0), OFF)


def test_at_time_limit_2_a_gang_lp_estimated_at_a_quarter_second_still_guides_the_greedy(monkeypatch):
    # busy-5k's gang LP is estimated at 0.24 s (it takes 0.1 s): a tenth of --time-limit 2 left its greedy
    # unguided, and the flexible 8-GPU pods took the free H100 nodes again (52 gangs where 53 fit).
    objs, catalog, plan = _plan_at_2_s_with_the_lp_estimated_at_a_quarter_second(monkeypatch)
    assert {g.name: g.placed for g in plan.gangs} == {"flex": 2, "only-a": 2, "three-a": 0}
    assert not check_plan(objs, catalog, plan.to_dict())


def test_a_slow_problem_build_does_not_take_the_guides_share_of_the_time_limit(monkeypatch):
    # busy-5k at --time-limit 2 on a loaded machine: the guide's 0.3 s was counted from the plan's start, so a
    # slow build left too little of it and the greedy went unguided (52 gangs where 53 fit, one run in three).
    from gangscale import planner

    build = planner.build_problem

    def slow_build(snap):
        prob = build(snap)
        time.sleep(0.2)  # the share left from the start (0.3 s) no longer covers the LP's 0.25 s estimate
        return prob

    monkeypatch.setattr(planner, "build_problem", slow_build)
    _, _, plan = _plan_at_2_s_with_the_lp_estimated_at_a_quarter_second(monkeypatch)
    assert {g.name: g.placed for g in plan.gangs} == {"flex": 2, "only-a": 2, "three-a": 0}
