"""The solver's guarantees at the limits: never dearer than the greedy plan, a bound always, size and time that
follow what is pending (not maxSize / currentSize), and one deadline for every phase (issue 16, items 1, 3, 5)."""

from __future__ import annotations

import random
from dataclasses import replace
import time

import pytest

from builders import group, node, pod, podgroup, snapshot
from checker import check_plan
from gangscale.planner import OFF, make_plan
from gangscale.solver import greedy as greedy_mod
from gangscale.solver.bound import fluid_bound, lower_bound
from gangscale.solver.outcome import placed_per_shape
from gangscale.solver.greedy import greedy
from gangscale.solver.params import SolveOptions
from gangscale.solver.problem import build_problem

ZONE = "topology.kubernetes.io/zone"


def distinct_shapes_cluster(seed: int = 0) -> tuple[list[dict], list[dict]]:
    """Issue 16 item 1: 30 gangs x 10 pods, every pod its own cpu/memory shape, 60 groups of maxSize 100."""
    rnd = random.Random(seed)
    objs: list[dict] = []
    for g in range(30):
        objs.append(podgroup(f"g{g}", min_count=10))
        for i in range(10):
            objs.append(pod(f"g{g}-p{i}", cpu=f"{100 + 37 * (g * 10 + i)}m", mem=f"{256 + 13 * (g * 10 + i)}Mi",
                            group=f"g{g}"))
    catalog = []
    for j in range(60):
        cpu = rnd.choice([2, 4, 8, 16, 32, 48])
        catalog.append(group(f"ng{j}", cpu=str(cpu), mem=f"{cpu * rnd.choice([2, 4, 8])}Gi",
                             price=round(cpu * rnd.uniform(0.03, 0.06), 4), max_size=100))
    return objs, catalog


@pytest.mark.parametrize("time_limit", [None, 1.0, 2.0], ids=["default-budget", "1s", "2s"])
def test_distinct_shapes_plan_is_no_dearer_than_greedy_has_a_bound_and_keeps_to_the_time_limit(time_limit):
    objs, catalog = distinct_shapes_cluster()
    snap = snapshot(objs, catalog)
    greedy_plan = greedy(build_problem(snap))
    greedy_cost = greedy_plan.cost(build_problem(snap)) / 1e6
    started = time.process_time()  # CPU, not wall: a loaded CI machine stretched the wall to 5.2 s at a 2 s limit
    plan = make_plan(snap, SolveOptions(time_limit=time_limit, workers=1))
    cpu = time.process_time() - started  # one worker: a plan that overran its limit by work still shows here
    assert not check_plan(objs, catalog, plan.to_dict())
    if sum(g.placed for g in plan.gangs) == 300:  # every gang fits (unless a loaded machine cut the greedy short)
        assert plan.cost_per_hour <= greedy_cost + 1e-6  # equal gangs and pods: never dearer
    if plan.solver.greedy_only:
        assert plan.cost_per_hour <= greedy_cost + 1e-6
    assert plan.cost_per_hour > 0 and 0 < plan.lower_bound_per_hour <= plan.cost_per_hour  # a bound, always
    if time_limit is not None:  # generous: 2-6x the limit before
        assert cpu < time_limit + 2.5
    # the default budget (10 s when the issue was filed: lowerBoundPerHour 0.0, gap 1.0) has no wall bound: its LP
    # steps run in full by design (docs/plan.md, --time-limit); here ~5 s of CPU, the repair LP of 300 classes x 60 kinds


def test_fluid_bound_needs_no_solver_and_never_exceeds_the_optimum():
    # 10 pods of 3 CPUs: the optimum is 4 nodes of 8 CPUs (2 per node... 3+3 = 6 <= 8) = 5 nodes at $1
    objs = [pod(f"p{i}", cpu="3", mem="1Gi") for i in range(10)]
    snap = snapshot(objs, [group("g", cpu="8", mem="32Gi", price=1.0, max_size=100)])
    prob = build_problem(snap)
    demand = placed_per_shape(prob, greedy(prob))
    fluid = fluid_bound(prob, demand)
    assert 3_700_000 <= fluid <= 5_000_000  # 30 CPUs / 8 per node = 3.75 nodes
    # with no time for CP-SAT the fluid bound is what lower_bound reports
    assert lower_bound(prob, demand, SolveOptions(), 0.0) == (fluid, False)


def test_a_billion_max_size_builds_bins_only_for_the_pending_pods():
    objs = [podgroup("pg", min_count=4)] + [pod(f"p{i}", cpu="1", group="pg") for i in range(4)]
    catalog = [group("a", max_size=1_000_000_000, price=1.0), group("b", max_size=1_000_000_000, price=2.0)]
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    assert [k.max_count for k in prob.kinds] == [4, 4]  # not 1e9 possible nodes each
    plan = make_plan(snap, SolveOptions(time_limit=2.0))
    assert not check_plan(objs, catalog, plan.to_dict())
    assert plan.scale_up == {"a": 1}


def test_sixty_groups_of_max_size_1e5_are_capped_at_the_pods_that_fit_them():
    objs = [podgroup("pg", min_count=20)] + [pod(f"p{i}", cpu=f"{500 + 10 * i}m", mem="1Gi", group="pg")
                                             for i in range(20)]
    objs += [pod("gpu-only", cpu="1", gpu=1)]  # fits none of the groups: counts for none of them
    catalog = [group(f"ng{j}", cpu=str(2 + j % 6), price=0.1 + j / 100, max_size=100_000) for j in range(60)]
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    assert max(k.max_count for k in prob.kinds) == 20
    plan = make_plan(snap, SolveOptions(time_limit=3.0))
    assert not check_plan(objs, catalog, plan.to_dict())
    assert sum(g.placed for g in plan.gangs) == 20


def test_a_million_upcoming_nodes_build_at_most_one_view_per_pending_pod():
    objs = [pod(f"p{i}", cpu="1") for i in range(3)]
    catalog = [group("big", current=1_000_000, max_size=1_000_000)]
    snap = snapshot(objs, catalog)
    assert len(snap.nodes) == 3
    plan = make_plan(snap, SolveOptions(time_limit=2.0))
    assert plan.scale_up == {} and sum(len(p) for p in plan.existing_nodes.values()) == 3
    assert all(name.startswith("big/upcoming-") for name in plan.existing_nodes)


def zone_gangs(gangs: int = 1000, zones: int = 500) -> tuple[list[dict], list[dict]]:
    """Issue 16 item 5: two-pod gangs bound to one zone, over single-zone groups."""
    objs: list[dict] = []
    for g in range(gangs):
        objs.append(podgroup(f"g{g}", min_count=2, topology=[ZONE]))
        objs += [pod(f"g{g}-{i}", cpu="1", mem="1Gi", group=f"g{g}") for i in range(2)]
    catalog = [group(f"ng{j}", cpu="4", mem="16Gi", price=0.2 + j * 0.001, max_size=3, labels={ZONE: f"z{j}"})
               for j in range(zones)]
    return objs, catalog


def test_zone_bound_gangs_retry_a_domain_only_when_it_changed(monkeypatch):
    objs, catalog = zone_gangs()
    snap = snapshot(objs, catalog)
    calls = [0]
    place = greedy_mod._place_gang

    def counting(*args):
        calls[0] += 1
        return place(*args)

    monkeypatch.setattr(greedy_mod, "_place_gang", counting)
    plan = make_plan(snap, SolveOptions(time_limit=10.0), OFF)  # the solver's trials (observe mode re-plans more)
    assert calls[0] < 5_000  # one trial per (gang make-up, changed domain): 180,600 before
    assert not check_plan(objs, catalog, plan.to_dict())
    assert sum(1 for g in plan.gangs if g.placed) == 1000


@pytest.mark.slow
def test_zone_bound_gangs_keep_to_a_one_second_limit_with_the_best_plan_so_far():
    objs, catalog = zone_gangs(gangs=3000)
    snap = snapshot(objs, catalog)
    started = time.perf_counter()
    plan = make_plan(snap, SolveOptions(time_limit=1.0), OFF)  # the solver's limit; the model's cost: docs/scheduling.md
    wall = time.perf_counter() - started
    assert wall < 4  # 51 s before (for 1,000 gangs); the margin is for a loaded 2-core machine (3.2 s seen at load 12)
    assert not check_plan(objs, catalog, plan.to_dict())
    placed = [g for g in plan.gangs if g.placed]
    assert placed and plan.lower_bound_per_hour > 0
    untried = [g for g in plan.gangs if not g.placed]
    assert all(g.decision == "deferred" and "--time-limit" in g.reason for g in untried)


def test_a_budget_gone_before_the_greedy_starts_still_plans_the_first_gang():
    # CI, 30 Nov: on a loaded machine a one-second budget was spent before the greedy began, and 3,000 gangs got
    # an empty plan; a budget of a microsecond stands for that machine
    objs, catalog = zone_gangs(gangs=300, zones=50)
    plan = make_plan(snapshot(objs, catalog), SolveOptions(time_limit=1e-6), OFF)
    assert not check_plan(objs, catalog, plan.to_dict())
    placed = [g for g in plan.gangs if g.placed]
    assert len(placed) >= 1 and all(g.decision == "deferred" for g in plan.gangs if not g.placed)


def test_greedy_past_its_deadline_still_tries_the_first_gang():
    objs = [podgroup(f"g{i}", min_count=1) for i in range(3)] + [pod(f"p{i}", group=f"g{i}") for i in range(3)]
    snap = snapshot(objs, [group("g")])
    prob = build_problem(snap)
    cut = greedy(prob, deadline=time.perf_counter() - 1)  # a machine so loaded the budget is gone before it starts
    assert cut.stopped_early and sum(cut.satisfied) == 1 and len(cut.bins) == 1
    assert greedy(prob).satisfied == [True, True, True]


def test_at_the_default_budget_the_gang_bound_is_computed_even_when_the_machine_is_too_slow_for_its_estimate(monkeypatch):
    from gangscale.solver import bound

    # three gangs of 4 one-cpu pods, 8 free cpus, nothing to buy: at most 2 start, and the bound says so
    objs = [node("n1", cpu="8", mem="32Gi")] + [podgroup(f"g{i}", min_count=4) for i in range(3)]
    objs += [pod(f"g{i}-{j}", cpu="1", mem="1Gi", group=f"g{i}") for i in range(3) for j in range(4)]
    monkeypatch.setattr(bound, "LP_BUILD_SECONDS", 10.0)  # as on a loaded machine: the LP looks too slow to build
    plan = make_plan(snapshot(objs, []), SolveOptions(), OFF)
    assert (plan.solver.gangs_started, plan.solver.gangs_upper_bound) == (2, 2)


def test_first_fit_by_windows_of_bins_places_exactly_as_one_scan_of_all_bins(monkeypatch):
    objs, catalog = distinct_shapes_cluster()
    objs += [node(f"n{i}", cpu=f"{1 + i % 7}", mem=f"{2 + i % 5}Gi") for i in range(40)]  # fragments first
    prob = build_problem(snapshot(objs, catalog))
    whole = greedy(prob)
    monkeypatch.setattr(greedy_mod, "FIT_WINDOW", 3)  # a window far smaller than the open bins
    assert len(whole.bins) > 3 * 10
    assert greedy(prob) == whole


def _slow_clock(monkeypatch) -> None:
    """Every read of the clock takes a second: a machine so loaded that any wall-time budget runs out at once."""
    now = [time.perf_counter()]

    def tick() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(time, "perf_counter", tick)


def _decisions(plan) -> dict:
    doc = plan.to_dict()
    doc["solver"].pop("seconds", None)
    (doc.get("scheduler") or {}).pop("seconds", None)
    return doc


@pytest.mark.parametrize("observe", [False, True], ids=["solver", "observe-mode"])
def test_a_deterministic_budget_plans_the_same_when_every_clock_read_takes_a_second(monkeypatch, observe):
    from gangscale.realize import SchedulerModel

    objs, catalog = distinct_shapes_cluster()
    objs = [o for o in objs if o["metadata"]["name"].split("-")[0] in {f"g{g}" for g in range(6)}]
    snap = snapshot(objs, catalog[:12])
    opts = SolveOptions(time_limit=2.0, workers=1, deterministic=True)
    model = SchedulerModel() if observe else OFF
    calm = make_plan(snap, opts, model)
    _slow_clock(monkeypatch)
    loaded = make_plan(snap, opts, model)
    assert _decisions(loaded) == _decisions(calm)
    assert calm.solver.greedy_only and calm.solver.gangs_started == 6
    assert 0 < calm.lower_bound_per_hour <= calm.cost_per_hour
    assert not check_plan(objs, catalog[:12], calm.to_dict())
    # the wall-time budget of the same plan is cut short by the slow clock (what made the simulator's runs differ)
    assert _decisions(make_plan(snap, replace(opts, deterministic=False), model)) != _decisions(calm)
