"""The plan's budget (`gangscale.solver.budget`): a larger budget never returns a worse plan, CP-SAT runs whenever
the plan's own bounds leave a gap and the budget allows, every phase keeps to the clock, and what the plan gave up is
reported. The budget's logic is tested on an injected clock (`SolveOptions.clock`: `Ticks`, a clock that advances at
every reading, with GLOP and CP-SAT on deterministic time), so these tests give the same result on an idle or a
loaded machine; the wall time of whole `gangscale plan` runs is measured by `benchmarks/budget.py`."""

from __future__ import annotations

import time

import pytest

from benchmarks.budget import mix_spec, wide_case
from benchmarks.generate import build_objects
from builders import group, plan_for, pod, podgroup, snapshot
from checker import check_plan
from test_fuzz import checker_catalog
from gangscale.catalog import parse_catalog
from gangscale.plan import Plan, render_table
from gangscale.planner import OFF, make_plan
from gangscale.solver import colgen, cpsat, repack as repack_mod
from gangscale.solver.greedy import greedy
from gangscale.solver.params import SolveOptions
from gangscale.solver.problem import build_problem
from gangscale.solver.repack import repack

# seeded mixes of the benchmark's families (docs/benchmarks.md, "The default budget") on which the default budget
# once left gangs or pods to a longer one (small-0, scarce-1, small-3, scarce-4, g24-11), and on which the greedy
# plan, repaired, leaves a gang or pod gap open by its own bounds that the steps before CP-SAT (fill, gang exchange)
# do not close (small-0, small-2, small-8, g24-5, g24-11)
MIXES = [("small", 0), ("scarce", 1), ("small", 3), ("scarce", 4), ("24-gang", 11)]
OPEN_MIXES = [("small", 0), ("small", 2), ("small", 8), ("24-gang", 5), ("24-gang", 11)]
RELATIVE_GAP = SolveOptions().relative_gap


def _mix(family: str, seed: int) -> tuple[list[dict], list[dict], list[dict]]:
    """The mix's objects, its catalog, and the catalog as parsed (allocatable and prices from the instance-type
    table), which the checker reads."""
    objects, catalog, _ = build_objects(mix_spec(family, seed))
    groups, _warnings = parse_catalog(catalog)
    return objects, catalog, checker_catalog(groups)


def _placement(plan: Plan) -> tuple[int, int]:
    return plan.solver.gangs_started, sum(g.placed for g in plan.gangs)


class Ticks:
    """An injected planner clock: `step` seconds pass at every reading, so a phase's cut-off falls after a fixed
    number of the plan's own clock readings (and GLOP's and CP-SAT's deterministic time), whatever the load."""

    def __init__(self, step: float = 1e-3) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


@pytest.mark.parametrize("family,seed", MIXES)
def test_a_larger_budget_never_returns_fewer_gangs_fewer_pods_or_a_dearer_plan(family, seed):
    objs, catalog, checked = _mix(family, seed)
    snap = snapshot(objs, catalog)
    plans = [make_plan(snap, SolveOptions(time_limit=t, clock=Ticks()), OFF) for t in (None, 3.0, 10.0)]  # auto, larger
    for shorter, longer in zip(plans, plans[1:]):
        assert _placement(longer) >= _placement(shorter)
        if _placement(longer) == _placement(shorter):
            assert longer.cost_per_hour <= shorter.cost_per_hour * (1 + RELATIVE_GAP) + 1e-6
    for plan in plans:
        assert not check_plan(objs, checked, plan.to_dict())


@pytest.mark.parametrize("family,seed", OPEN_MIXES)
def test_at_the_default_budget_cp_sat_runs_while_the_greedy_leaves_a_gap_and_closes_it(family, seed, monkeypatch):
    calls: list[float] = []
    real = cpsat.solve_model

    def counted(*args, **kwargs):
        calls.append(args[4])  # the seconds it was given
        return real(*args, **kwargs)

    objs, catalog, checked = _mix(family, seed)
    snap = snapshot(objs, catalog)
    greedy_plan = make_plan(snap, SolveOptions(deterministic=True), OFF)  # the greedy, repaired, and its bounds
    assert any(t.gangs_started < t.gangs_upper_bound or t.pods_placed < (t.pods_upper_bound or 0)
               for t in greedy_plan.solver.by_priority)  # the gap is open
    monkeypatch.setattr(cpsat, "solve_model", counted)
    plan = make_plan(snap, SolveOptions(clock=Ticks()), OFF)
    assert calls and calls[0] > 0.1
    levels = plan.solver.by_priority  # the gang and pod bounds are met at every level
    assert all(t.gangs_started == t.gangs_upper_bound and t.pods_placed == t.pods_upper_bound for t in levels)
    assert plan.solver.gap <= RELATIVE_GAP  # and the cost is within CP-SAT's stopping gap of its bound
    assert not check_plan(objs, checked, plan.to_dict())


def test_with_both_gaps_closed_the_default_budget_returns_without_cp_sat(monkeypatch):
    from gangscale.plan import SolverGaps

    monkeypatch.setattr(cpsat, "solve_model", lambda *a, **k: pytest.fail("both gaps were closed"))
    objs = [podgroup(f"g{i}", min_count=2) for i in range(2)]
    objs += [pod(f"g{i}-{j}", cpu="2", mem="4Gi", group=f"g{i}") for i in range(2) for j in range(2)]
    plan = make_plan(snapshot(objs, [group("a", cpu="4", mem="16Gi", price=0.2)]), SolveOptions(), OFF)
    assert plan.solver.status == "OPTIMAL" and plan.solver.budget_seconds < 1.0
    assert plan.solver.gaps == SolverGaps(gangs=0, pods=0, costPerHour=0.0)


@pytest.fixture(scope="module")
def wide():
    """300 distinct pod shapes in 60 gangs over 60 node groups: its LP steps take seconds each."""
    cluster, catalog = wide_case()
    return snapshot(cluster["items"], catalog["nodeGroups"])


WIDE_STEP = 5e-3  # seconds per reading of the wide plans' clock (a few hundred readings per plan)


@pytest.fixture(scope="module")
def wide_default(wide):
    """The wide case's plan at the default budget, and how many gang LPs it built."""
    from gangscale.solver import bound

    built = []
    real = bound.GangLP.__init__

    def counted(self, *args, **kwargs):
        built.append(1)
        real(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bound.GangLP, "__init__", counted)
        plan = make_plan(wide, SolveOptions(clock=Ticks(WIDE_STEP)), OFF)
    return plan, len(built)


def test_an_explicit_time_limit_bounds_every_phase(wide):
    plan = make_plan(wide, SolveOptions(time_limit=1.0, clock=Ticks(WIDE_STEP)), OFF)
    phases = plan.solver.phases
    assert {p.name for p in phases} >= {"greedy", "gangBound", "repair", "patterns", "cpsat", "bound"}
    # a phase that starts past its deadline still reads the clock a few times (to check it, and to record itself)
    assert sum(p.seconds for p in phases) <= 1.0 + 3 * len(phases) * WIDE_STEP
    assert any(p.cut_short for p in phases)  # the LP steps need more than a second here, and say so


def test_the_default_budget_bounds_every_phase_too(wide_default):
    cap = max(2.0, 4.0 * SolveOptions().seconds_for(300))  # the auto budget's hard cap on the LP steps: 2.05 s
    plan, _ = wide_default
    assert sum(p.seconds for p in plan.solver.phases) <= cap + 3 * len(plan.solver.phases) * WIDE_STEP
    assert plan.solver.budget_seconds <= cap
    from gangscale.solver import budget

    assert (budget.AUTO_HARD_FLOOR, budget.AUTO_HARD_FACTOR) == (2.0, 4.0)
    assert plan.cost_per_hour <= plan.solver.gaps.cost_per_hour + plan.lower_bound_per_hour + 1e-6


def test_on_300_shapes_a_larger_budget_never_returns_a_dearer_plan(wide, wide_default):
    # the LP steps need seconds here: cut short, a phase keeps what it has (the pattern LP leaves every pod to the
    # greedy's own rule), so a larger budget only adds to what the plan chooses from
    default, _ = wide_default
    longer = make_plan(wide, SolveOptions(time_limit=4.0, clock=Ticks(WIDE_STEP)), OFF)
    assert longer.solver.gangs_started == default.solver.gangs_started == 60
    assert longer.cost_per_hour <= default.cost_per_hour * (1 + RELATIVE_GAP) + 1e-6


def test_the_same_snapshot_and_clock_readings_give_the_same_plan():
    objs, catalog, _ = _mix("small", 0)  # a gap the greedy leaves open: CP-SAT runs, on deterministic time
    snap = snapshot(objs, catalog)
    first, again = (make_plan(snap, SolveOptions(clock=Ticks()), OFF).to_dict() for _ in range(2))
    assert first == again
    assert "cpsat" in [p["name"] for p in first["solver"]["phases"]] and not first["solver"]["greedyOnly"]


def test_a_plan_whose_clock_is_past_its_limit_tries_one_gang_and_defers_the_rest(monkeypatch):
    monkeypatch.setattr(cpsat, "solve_model", lambda *a, **k: pytest.fail("the limit was spent"))
    objs, catalog, checked = _mix("24-gang", 11)
    readings = iter([0.0])  # the plan starts at 0 s; every later reading is an hour on

    plan = make_plan(snapshot(objs, catalog), SolveOptions(time_limit=2.0, clock=lambda: next(readings, 3600.0)), OFF)
    assert plan.solver.gangs_started == 1 and plan.solver.greedy_only
    deferred = [g for g in plan.gangs if g.decision == "deferred"]
    assert deferred and all(g.reason == "not tried: the planner reached its --time-limit first" for g in deferred)
    assert all(p.cut_short for p in plan.solver.phases if p.name in ("greedy", "cpsat"))
    assert not check_plan(objs, checked, plan.to_dict())


def test_when_the_unguided_greedy_starts_every_gang_the_gang_lp_is_never_built(wide_default):
    plan, gang_lps = wide_default
    assert gang_lps == 0
    assert plan.solver.gangs_started == plan.solver.gangs_upper_bound == 60
    assert plan.solver.gaps.gangs == plan.solver.gaps.pods == 0


def test_on_300_shapes_the_default_plan_re_packed_by_value_costs_within_eight_percent_of_its_bound(wide_default):
    plan, _ = wide_default  # the greedy's, its pairs of nodes merged, cost 15% more (solver/value_pack.py)
    assert sum(g.placed for g in plan.gangs) == 300
    assert plan.cost_per_hour <= 1.08 * plan.lower_bound_per_hour
    cluster, catalog = wide_case()
    groups, _warnings = parse_catalog(catalog["nodeGroups"])
    assert not check_plan(cluster["items"], checker_catalog(groups), plan.to_dict())


def _no_existing_nodes():
    objs = []
    for j in range(6):
        objs.append(podgroup(f"j{j}", min_count=3))
        objs += [pod(f"j{j}-{i}", cpu=str(1 + (i + j) % 4), mem=f"{2 + j}Gi", group=f"j{j}") for i in range(3)]
    catalog = [group(f"g{i}", cpu=str(4 * (i + 1)), mem=f"{16 * (i + 1)}Gi", price=0.2 * (i + 1)) for i in range(3)]
    prob = build_problem(snapshot(objs, catalog))
    return prob, greedy(prob, repack=False)


def test_repack_solves_one_pattern_lp_for_fills_that_leave_it_the_same_pods(monkeypatch):
    prob, a = _no_existing_nodes()
    built = []

    class Counted(colgen._Rmp):
        def __init__(self, *args):
            built.append(1)
            super().__init__(*args)

    monkeypatch.setattr(colgen, "_Rmp", Counted)
    again = repack(prob, a, {}, None, good=1)  # a target no plan meets: every fill is tried
    assert again is not None and again.y == a.y
    assert len(built) == 1  # no existing nodes: every fill leaves every pod to the pattern LP


def test_a_pattern_lp_cut_short_leaves_every_pod_to_the_greedys_rule_and_a_converged_one_adds_its_nodes(
        monkeypatch):
    prob, a = _no_existing_nodes()
    left = {(c.shape, None): a.y[c.cid] for c in prob.classes if a.y[c.cid]}
    converged = list(repack_mod.new_nodes_for(prob, left, None, {}))
    assert len(converged) == 2 and converged[0] == ([], left) and converged[1][0]
    monkeypatch.setattr(colgen._Rmp, "solve", lambda self, deadline: False)  # as if the deadline came first
    assert list(repack_mod.new_nodes_for(prob, left, time.perf_counter() + 60, {})) == [([], left)]
    again = repack(prob, a, {}, time.perf_counter() + 60)  # and the repair still places every pod
    assert again is not None and again.y == a.y


def _plan_with(gaps, cut: bool, gap: float = 0.0) -> Plan:
    from gangscale.plan import SolverInfo, SolverPhase

    info = SolverInfo(status="FEASIBLE", seconds=0.4, gap=gap, gangsStarted=11, gangsUpperBound=11 + gaps.gangs,
                      budgetSeconds=1.0, gaps=gaps,
                      phases=[SolverPhase(name="greedy", seconds=0.1), SolverPhase(name="cpsat", seconds=0.3,
                                                                                   cutShort=cut)])
    return Plan(scaleUp={}, newNodes=[], existingNodes={}, gangs=[], costPerHour=1.0, lowerBoundPerHour=1.0,
                solver=info)


def test_the_table_says_in_one_line_what_a_longer_limit_may_win():
    from gangscale.plan import SolverGaps, gap_line

    plan = _plan_with(SolverGaps(gangs=1, pods=3, costPerHour=2.5), cut=True)
    assert gap_line(plan) == "1 more gang may fit: run with --time-limit 5"
    assert "1 more gang may fit: run with --time-limit 5" in render_table(plan)
    assert gap_line(_plan_with(SolverGaps(gangs=0, pods=2), cut=True)) == "2 more pods may fit: run with --time-limit 5"
    assert "no phase was cut short" in gap_line(_plan_with(SolverGaps(gangs=2), cut=False))
    closed = _plan_with(SolverGaps(), cut=False)
    assert gap_line(closed) is None and "may fit" not in render_table(closed)


def test_a_plan_reports_its_phases_budget_and_remaining_gaps():
    objs, catalog, _ = _mix("small", 0)
    plan = plan_for(objs, catalog, time_limit=2.0, scheduler=OFF).to_dict()["solver"]
    names = [p["name"] for p in plan["phases"]]
    assert names[:2] == ["guide", "greedy"] and "cpsat" in names and names[-1] == "explain"
    assert plan["budgetSeconds"] == 2.0
    assert set(plan["gaps"]) == {"gangs", "pods", "costPerHour"}


def test_a_limit_spent_on_reading_the_input_still_leaves_the_planner_a_quarter_of_it():
    objs = [podgroup(f"g{i}", min_count=2) for i in range(3)]
    objs += [pod(f"g{i}-{j}", cpu="2", mem="4Gi", group=f"g{i}") for i in range(3) for j in range(2)]
    catalog = [group("a", cpu="4", mem="16Gi", price=0.2)]
    opts = SolveOptions(time_limit=1.0, started=time.perf_counter() - 5.0)  # reading took five times the limit
    plan = make_plan(snapshot(objs, catalog), opts, OFF)
    assert plan.solver.gangs_started == 3 and all(g.decision == "scale-up" for g in plan.gangs)
    assert not check_plan(objs, catalog, plan.to_dict())
