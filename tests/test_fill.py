"""The fill phase (`planner._fill`): the pods a repaired plan leaves out join it, by the pattern LP over its new
nodes' pods and those left out (`repack.grown`) or by the greedy's own passes (`greedy.fill_left_out`). No pod of
the plan moves out, so every priority level's gangs and pods only grow, and the result stays valid (the checker)."""

from __future__ import annotations

import pytest
from builders import group, plan_when_cp_sat_gets_no_time, pod, podgroup, snapshot
from checker import check_plan
from test_fuzz import checker_catalog

from benchmarks.budget import mix_spec
from benchmarks.generate import BacklogSpec, build_objects
from gangscale.catalog import parse_catalog
from gangscale.planner import _render, _repair
from gangscale.solver.greedy import Assignment, fill_left_out, greedy, placement_rank
from gangscale.solver.outcome import placed_per_shape
from gangscale.solver.problem import Problem, build_problem
from gangscale.solver.repack import grown, left_out, unit_prices


def three_elastic_gangs() -> tuple[list[dict], list[dict]]:
    """Three node-capped 8-cpu nodes; three gangs of quorum 1 with two pods each, of 2, 4 and 6 cpus: 24 cpus,
    which the three nodes hold exactly (6+2, 6+2, 4+4). Quorums first, smallest first, then extra members puts
    2+4 and 6 on two nodes, the extras 2 and 4 on them and a third: the second 6-cpu pod finds no room."""
    catalog = [group("g", cpu="8", mem="64Gi", price=1.00, max_size=3)]
    objs: list[dict] = []
    for name, cpu in (("two", "2"), ("four", "4"), ("six", "6")):
        objs.append(podgroup(name, min_count=1))
        objs += [pod(f"{name}-{i}", cpu=cpu, mem="1Gi", group=name) for i in range(2)]
    return objs, catalog


def test_the_second_six_cpu_pod_joins_the_plan_that_the_greedy_left_it_out_of():
    objs, catalog = three_elastic_gangs()
    prob = build_problem(snapshot(objs, catalog))
    first = greedy(prob)
    assert sum(first.y) == 5  # the greedy leaves one 6-cpu pod out
    more = grown(prob, first, unit_prices(prob, placed_per_shape(prob, first)))
    assert more is not None and sum(more.y) == 6 and more.cost(prob) == 3_000_000
    _assert_grows(prob, first, more)


def test_with_no_time_for_cp_sat_the_default_plan_places_all_six_pods_on_the_three_nodes(monkeypatch):
    objs, catalog = three_elastic_gangs()
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, objs, catalog)
    assert sum(g.placed for g in plan.gangs) == 6 and plan.cost_per_hour == pytest.approx(3.00)
    assert plan.solver.gaps.pods == 0 and plan.solver.gaps.gangs == 0
    assert "fill" in [p.name for p in plan.solver.phases]
    assert not check_plan(objs, catalog, plan.to_dict())


def _assert_grows(prob: Problem, before: Assignment, after: Assignment) -> None:
    """No class loses a pod, no gang stops, and the plan's aim is at least as good at every level."""
    assert all(n >= m for n, m in zip(after.y, before.y, strict=True))
    assert all(s or not t for s, t in zip(after.satisfied, before.satisfied, strict=True))
    assert placement_rank(prob, after)[:-1] >= placement_rank(prob, before)[:-1]


@pytest.mark.parametrize("family,seed", [("small", 1), ("scarce", 2), ("24-gang", 3), ("small", 5), ("scarce", 7)])
def test_on_seeded_mixes_the_fill_keeps_every_pod_of_the_repaired_plan_and_stays_valid(family, seed):
    objs, catalog, _ = build_objects(mix_spec(family, seed))
    groups, _warnings = parse_catalog(catalog)
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    repaired, _ = _repair(prob, greedy(prob, repack=False), None)
    prices = unit_prices(prob, placed_per_shape(prob, repaired))
    for more in (grown(prob, repaired, prices), fill_left_out(prob, repaired)):
        if more is None:
            continue
        _assert_grows(prob, repaired, more)
        rendered = _render(snap, prob, more, more.cost(prob), 0).to_dict()
        assert not check_plan(objs, checker_catalog(groups), rendered)


def test_a_gang_that_has_not_reached_its_quorum_is_never_grown_member_by_member():
    objs, catalog = three_elastic_gangs()
    objs[0] = podgroup("two", min_count=2)  # quorum 2: its pods join all together or not at all
    prob = build_problem(snapshot(objs, catalog))
    started = [g.gang.name != "two" for g in prob.gangs]  # the others started, with nothing placed yet
    plan = Assignment([0] * len(prob.classes), started, [None] * len(prob.gangs), [], [])
    shapes = {
        name: {prob.classes[c].shape for c in g.classes} for g in prob.gangs for name in [g.gang.name]
    }
    optional = {s for s, _domain in left_out(prob, plan)}
    assert optional == shapes["four"] | shapes["six"]  # the started gangs' members may join one by one


@pytest.mark.parametrize("seed", range(4))
def test_the_cursor_over_bins_the_guide_holds_back_never_changes_the_greedys_plan(seed, monkeypatch):
    from gangscale.solver import greedy as greedy_mod
    from gangscale.solver.bound import gang_lp

    # 80 running nodes of the guide's groups among 800 pods: the greedy that keeps them for the guide differs
    objs, catalog, _ = build_objects(BacklogSpec(f"held-{seed}", "mixed", 800, 20, 80, 40, 0.9, seed))
    prob = build_problem(snapshot(objs, catalog))
    lp = gang_lp(prob)
    guide = lp.guide() if lp is not None else None
    assert guide is not None
    fast = greedy(prob, guide=guide, repack=False, spare_running=True)
    assert (fast.y, fast.bins) != (lambda a: (a.y, a.bins))(greedy(prob, guide=guide, repack=False))
    first_fit = greedy_mod._first_fit

    def without_cursor(st, *args, **kwargs):  # every scan from the shape's own cursor, as with no spare cursor
        st.start_spare[:] = 0
        return first_fit(st, *args, **kwargs)

    monkeypatch.setattr(greedy_mod, "_first_fit", without_cursor)
    slow = greedy(prob, guide=guide, repack=False, spare_running=True)
    assert (fast.y, fast.bins, fast.satisfied, fast.domain) == (slow.y, slow.bins, slow.satisfied, slow.domain)
