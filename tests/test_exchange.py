"""The gang exchange (`gangscale.solver.exchange`, the planner's `exchange` phase): a started gang taken out for a gang
left out that places more pods, at one priority level. Every level keeps its gangs, the pods of the level grow, and
the plan stays valid (the independent checker)."""

from __future__ import annotations

import pytest
from builders import group, plan_when_cp_sat_gets_no_time, pod, podgroup, snapshot
from checker import check_plan
from test_fuzz import checker_catalog

from benchmarks.budget import mix_spec
from benchmarks.generate import BacklogSpec, build_objects
from gangscale.catalog import parse_catalog
from gangscale.planner import _render, _repair
from gangscale.solver.exchange import exchanged
from gangscale.solver.greedy import Assignment, greedy, placement_rank
from gangscale.solver.problem import Problem, build_problem


def launcher_bound_gangs(priority: dict[str, int] | None = None) -> tuple[list[dict], list[dict]]:
    """One small CPU node holds two 2-cpu launchers, and every training gang needs one; two 2-pod gangs (a launcher
    and a 1-GPU worker) and a 5-pod gang (a launcher and four 8-GPU workers), each whole or nothing. The greedy
    starts the quorums that use least scarce capacity first: the two small gangs take both launcher slots, 4 pods.
    The best plan of two gangs is a small one and the large one, 7 pods: the 8-GPU nodes have room for its workers.
    """
    priority = priority or {}
    catalog = [
        group("cpu", cpu="4", mem="16Gi", price=0.20, max_size=1, labels=_on("cpu")),
        group("gpu", cpu="96", mem="1024Gi", gpu=8, price=10.0, max_size=6, labels=_on("gpu")),
    ]
    objs: list[dict] = []
    for name, workers, gpus in (("small-a", 1, 1), ("small-b", 1, 1), ("large", 4, 8)):
        objs.append(podgroup(name, min_count=1 + workers, priority=priority.get(name)))
        objs.append(pod(f"{name}-launcher", cpu="2", mem="4Gi", group=name, selector=_on("cpu")))
        objs += [
            pod(f"{name}-{i}", cpu="8", mem="64Gi", gpu=gpus, group=name, selector=_on("gpu"))
            for i in range(workers)
        ]
    return objs, catalog


def _on(group_name: str) -> dict:
    return {"pool": group_name}


def _placed(plan) -> dict[str, int]:
    return {g.name: g.placed for g in plan.gangs}


def test_the_large_gang_takes_a_small_gangs_launcher_slot_and_the_plan_places_seven_pods_not_four():
    objs, catalog = launcher_bound_gangs()
    prob = build_problem(snapshot(objs, catalog))
    first = greedy(prob)
    assert sum(first.satisfied) == 2 and sum(first.y) == 4  # the two small gangs hold both launcher slots
    more = exchanged(prob, first)
    assert more is not None and sum(more.satisfied) == 2 and sum(more.y) == 7
    names = {prob.gangs[g].gang.name for g in range(len(prob.gangs)) if more.satisfied[g]}
    assert "large" in names and len(names & {"small-a", "small-b"}) == 1
    _assert_exchanged(prob, first, more)


def test_with_no_time_for_cp_sat_the_default_plan_starts_the_large_gang_beside_a_small_one(monkeypatch):
    objs, catalog = launcher_bound_gangs()
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, objs, catalog)
    placed = _placed(plan)
    assert plan.solver.gangs_started == 2 and placed["large"] == 5 and sum(placed.values()) == 7
    assert plan.solver.gaps.gangs == 0 and plan.solver.gaps.pods == 0
    assert "exchange" in [p.name for p in plan.solver.phases]
    assert not check_plan(objs, catalog, plan.to_dict())


def test_a_gang_of_a_higher_priority_level_is_never_taken_out_for_a_larger_one_below_it():
    objs, catalog = launcher_bound_gangs({"small-a": 10, "small-b": 10})
    prob = build_problem(snapshot(objs, catalog))
    first = greedy(prob)
    assert sum(first.y) == 4
    assert exchanged(prob, first) is None


# seeded mixes of the benchmark's families, and 400-pod gpu-mix backlogs (zones, launchers and GPU workers, as
# gpumix-3k), on each of which the greedy's repaired plan leaves a gang out that an exchange starts
MIXES = [mix_spec("small", 0), mix_spec("small", 3), mix_spec("scarce", 4), mix_spec("24-gang", 8)]
GPU_MIXES = [BacklogSpec(f"gpumix-{seed}", "gpu-mix", 400, 36, 0, None, 0.8, seed) for seed in range(4)]


@pytest.mark.parametrize("spec", MIXES + GPU_MIXES, ids=lambda s: s.name)
def test_on_seeded_backlogs_an_exchange_keeps_every_levels_gangs_grows_its_pods_and_stays_valid(spec):
    objs, catalog, _ = build_objects(spec)
    groups, _warnings = parse_catalog(catalog)
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    repaired, _ = _repair(prob, greedy(prob, repack=False), None)
    more = exchanged(prob, repaired)
    assert more is not None
    _assert_exchanged(prob, repaired, more)
    rendered = _render(snap, prob, more, more.cost(prob), 0).to_dict()
    assert not check_plan(objs, checker_catalog(groups), rendered)


def _assert_exchanged(prob: Problem, before: Assignment, after: Assignment) -> None:
    """Per priority level, gangs started no fewer; the plan's aim (gangs, then pods, level by level) strictly better;
    a gang is whole (its quorum or nothing) in both."""
    levels = sorted({g.priority for g in prob.gangs}, reverse=True)
    for level in levels:
        gangs = [g for g in prob.gangs if g.priority == level and g.is_gang]
        assert sum(after.satisfied[g.gid] for g in gangs) >= sum(before.satisfied[g.gid] for g in gangs)
    assert placement_rank(prob, after)[:-1] > placement_rank(prob, before)[:-1]
    for g in prob.gangs:
        placed = sum(after.y[c] for c in g.classes)
        if g.is_gang:
            assert placed == 0 if not after.satisfied[g.gid] else placed >= g.need
