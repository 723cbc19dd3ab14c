"""snapshot -> plan: run the solver and say, for every gang, what happens and why.

Guarantees: the plan never costs more than the greedy plan at equal gangs and
pods, and never places fewer (the repair and the fill only add the pods the
greedy left out, and the gang exchange trades a gang for a larger one of its
priority level); a lower bound on cost is always reported (the fluid bound at
least), and an upper bound on gangs started per priority level
(`gangsUpperBound`); and every phase -- greedy, repair, fill, exchange, patterns, CP-SAT
stages, bounds, explanations -- works to one deadline, `time_limit` seconds after the call (by default a budget that
grows with the pending pods, `SolveOptions.seconds_for`), returning the best
plan so far. When the greedy plan already meets the gang and pod bounds of every
level, the CP-SAT placement stages are skipped; when its cost also meets the
cost bound, CP-SAT is not run at all (both gaps closed: stop early).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from .daemonsets import overhead_report
from .explain import limits_reached, pod_misfit
from .model import NodeGroup
from .plan import (
    GangResult,
    NewNode,
    Plan,
    PriorityBound,
    SchedulerInfo,
    SolverGaps,
    SolverInfo,
    SolverPhase,
)
from .snapshot import ClusterSnapshot
from .solver import budget
from .solver.bound import (
    GangLP,
    TierBound,
    gang_lp,
    gangs_upper_bound,
    lower_bound,
    lp_cost_prices,
    lp_seconds,
    tier_counts,
    tight_cost_bound,
)
from .solver.budget import Clock, clocked, now
from .solver.exchange import exchanged
from .solver.greedy import (
    Assignment,
    candidate_domains,
    fill_left_out,
    greedy,
    max_placeable,
    placement_rank,
    repacked,
)
from .solver.merge import fewer_nodes
from .solver.outcome import SolveOutcome, placed_per_shape
from .solver.params import SolveOptions
from .solver.patterns import PatternSet, build_patterns
from .solver.problem import MICRO, Problem, build_problem
from .solver.repack import grown, repack, unit_prices
from .solver.skew import within_skew
from .solver.value_pack import fluid_prices, value_pack

if TYPE_CHECKING:  # the scheduler model (and its imports) loads only in observe mode
    from .realize import SchedulerModel

# `OFF` and `SchedulerModel` come from `__getattr__` below, which static analysis cannot follow
__all__ = ["OFF", "SchedulerModel", "SolveOptions", "make_plan", "solve_plan"]  # noqa: F822


def __getattr__(name: str):
    """`OFF` and `SchedulerModel` stay importable from here, loaded from `realize` on first use."""
    if name in ("OFF", "SchedulerModel"):
        from . import realize

        return getattr(realize, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# of the time limit, at most, for the node-count polish once both gaps are closed
POLISH_SHARE = 0.1
# the cost criterion: a repaired plan this close to its LP bound tries no other fill
COST_TARGET_GAP = 0.01
# seconds (plus 10 us per pending pod) kept for the bound and writing the plan
FINISH_RESERVE = budget.FINISH_SECONDS
# x the last fill round's seconds: another round runs only with this much time left
FILL_ROUND_MARGIN = 1.5
# pending pods, at most, and the gang LP's expected seconds, at least, for a greedy run unguided before the gang LP
# is built (`_unguided_first`): backlogs where one greedy run costs a small part of what the LP would
UNGUIDED_FIRST_MAX_PODS = 5000
UNGUIDED_FIRST_LP_SECONDS = 0.05
COLGEN_SHARE = 0.75  # of the time left to the repair, at most, for its pattern LP (the rest places what it left)


def _placement(a: Assignment) -> tuple[int, int]:
    return sum(a.satisfied), sum(a.y)


def _better(prob: Problem, a: Assignment, b: Assignment) -> bool:
    """`a` is ahead of `b` in the planner's aim (per priority level gangs, then pods; then cost)."""
    return placement_rank(prob, a) > placement_rank(prob, b)


def make_plan(
    snap: ClusterSnapshot, opts: SolveOptions | None = None, scheduler: SchedulerModel | None = None
) -> Plan:
    """Plan; in observe mode (`scheduler`, opt-in; default OFF) check and repair it against the scheduler model.

    The solver gets 80% of an explicit --time-limit; re-plan rounds work to the limit itself. The model's
    check of the final node set always runs, even past the limit (a promise is never left unchecked), and
    cleaning idle nodes goes on past it for a few model runs (realize.LATE_RUNS).
    """
    opts = opts or SolveOptions()
    plan = _make_plan(snap, opts, scheduler)
    plan.daemon_set_overhead = overhead_report(snap.daemons)
    return plan


def _make_plan(snap: ClusterSnapshot, opts: SolveOptions, scheduler: SchedulerModel | None) -> Plan:
    # None: OFF, without importing the scheduler model
    enabled = scheduler is not None and scheduler.enabled
    spread = next(
        (
            p.key
            for g in snap.solvable
            for p in g.pending
            if p.rules.spread or p.rules.domain_spread
        ),
        None,
    )
    if not enabled or spread:
        plan = solve_plan(snap, opts)
        plan.scheduler = SchedulerInfo(
            mode="off",
            note=(
                f"observe mode skipped: pod {spread} has a DoNotSchedule topology spread constraint, which the "
                "scheduler checks pod by pod against pods this plan would not promise; the solver's plan is returned"
            )
            if spread and enabled
            else "",
        )
        return plan
    from .realize import realize

    start = time.perf_counter()
    # (`solve_plan`)
    began = start if opts.started is None or opts.time_limit is None else min(opts.started, start)
    limit = opts.seconds_for(sum(len(g.pending) for g in snap.solvable))
    first = solve_plan(
        snap, replace(opts, time_limit=0.8 * limit) if opts.time_limit is not None else opts
    )
    deadline = float("inf") if opts.deterministic else max(began + limit, time.perf_counter())

    def again(residual: ClusterSnapshot, seconds: float) -> Plan:
        return solve_plan(residual, replace(opts, time_limit=seconds))

    assert scheduler is not None  # `enabled`
    plan = realize(snap, first, scheduler, again, deadline)
    plan.solver.seconds = round(time.perf_counter() - start, 3)
    return plan


def solve_plan(snap: ClusterSnapshot, opts: SolveOptions | None = None) -> Plan:
    """The solver's plan alone: gangscale's placement, as if the scheduler followed it. Every phase works to the
    plan's `Clock` (`solver.budget`) and is recorded in `solver.phases`."""
    opts = opts or SolveOptions()
    with clocked(opts.clock):
        return _solve_by_work(snap, opts) if opts.deterministic else _solve_clocked(snap, opts)


def _solve_clocked(snap: ClusterSnapshot, opts: SolveOptions) -> Plan:
    began = now()
    clock = _clock(snap, opts, began)
    prob = build_problem(snap)
    hint, lp = _guided_greedy(prob, clock)
    hint, known_lp = _repair(prob, hint, clock.lp_by, lp, clock, polish=False, grow=True)
    hint = _fill(prob, hint, clock)
    hint = _exchange(prob, hint, clock)
    t = now()
    # the gang bound of the plan the greedy, its repair and the fill made (the cost steps keep its pods); met at
    # every level: only cost is left to improve
    hint_tiers = [] if hint.stopped_early else _hint_tiers(prob, hint, clock.lp_by, lp)
    clock.record("gangBound", t, budget.reached(clock.lp_by))
    bounds = _Bounds(prob, opts, known_lp, clock.lp_by, clock.bound_reserve)
    proven = bool(hint_tiers) and _closed(hint_tiers)
    cost_closed = proven and _cost_closed(prob, hint, bounds, opts, clock)
    if not cost_closed:
        clock.open_gap()
    patterns = _patterns(prob, hint, opts, clock)
    outcome = _search(prob, patterns, hint, opts, clock, bounds, proven, cost_closed)
    best = _final(prob, outcome, hint)
    t = now()
    lb, lb_proven = bounds.final(best, clock.deadline - clock.finish - t)
    cost = best.cost(prob)
    lb = min(lb, cost)  # a bound above a feasible plan would be a bug; never report one
    if (
        outcome.cost_optimal
    ):  # CP-SAT proved no placement as good costs less: the cost is its own bound
        lb = cost
    tiers = _gang_tiers(prob, best, hint, hint_tiers, outcome.placement_optimal, clock.lp_by)
    clock.record("bound", t, budget.reached(clock.deadline - clock.finish) and not lb_proven)
    t = now()
    plan = _render(snap, prob, best, cost, lb, clock.deadline)
    clock.record("explain", t, budget.reached(clock.deadline))
    plan.solver = _solver_info(
        prob,
        patterns,
        tiers,
        cost,
        lb,
        lb_proven,
        outcome.cost_optimal,
        greedy_only=best is hint,
        seconds=now() - began,
        clock=clock,
    )
    return plan


def _clock(snap: ClusterSnapshot, opts: SolveOptions, began: float) -> Clock:
    """The plan's clock: an explicit limit counts from when the command began reading (`SolveOptions.started`);
    the auto budget is the planner's own, from `began`."""
    pods = sum(len(g.pending) for g in snap.solvable)
    timed = opts.time_limit is not None
    return Clock(
        min(opts.started, began) if timed and opts.started is not None else began,
        opts.seconds_for(pods),
        timed,
        pods,
        FINISH_RESERVE,
        planner_start=began,
    )


def _patterns(prob: Problem, hint: Assignment, opts: SolveOptions, clock: Clock) -> PatternSet:
    """CP-SAT's packing patterns; the enumeration gets at most a quarter of the budget (past it, kinds keep their
    fills and the plan's own bins)."""
    t = now()
    patterns = build_patterns(
        prob,
        hint.bins,
        opts.patterns_per_kind,
        deadline=min(
            clock.start + 0.25 * (clock.deadline - clock.start), clock.deadline - clock.finish
        ),
    )
    clock.record(
        "patterns", t, not patterns.complete and budget.reached(clock.deadline - clock.finish)
    )
    return patterns


def _fill(prob: Problem, plan: Assignment, clock: Clock) -> Assignment:
    """The pods the repaired plan still leaves out, added to it: first by the greedy's passes over its free room
    (`greedy.fill_left_out`: quorums of gangs not started too; bounded by work at the auto budget, as the greedy
    is); then, while the budget leaves time for another round as long as the last took (`FILL_ROUND_MARGIN`), by
    the pattern LP over its new nodes' pods and those left out (`repack.grown`, each existing node keeping its
    pods) and the greedy's passes again. No pod of the plan moves out: gangs and pods only grow. Last, fewer nodes
    at equal cost (`merge.fewer_nodes`)."""
    start = last = now()
    by = clock.deadline - clock.finish
    cut = False
    total = sum(c.count for c in prob.classes)
    plan = fill_left_out(prob, plan, by if clock.timed else None) or plan
    while sum(plan.y) < total:
        at = now()
        if at + FILL_ROUND_MARGIN * (at - last) > by:
            cut = True  # no time for another round
            break
        prices = unit_prices(prob, placed_per_shape(prob, plan))
        more = grown(prob, plan, prices, by, by, "kept") or fill_left_out(prob, plan, by)
        if more is None:
            break
        plan, last = more, at
    plan = fewer_nodes(prob, plan)  # the last objective, for a plan no CP-SAT stage polishes
    clock.record("fill", start, cut)
    return plan


def _exchange(prob: Problem, plan: Assignment, clock: Clock) -> Assignment:
    """Gangs left out exchanged for started gangs of fewer pods at their level (`exchange.exchanged`: bounded by
    work, so at the auto budget the plan does not depend on the machine's load; an explicit limit cuts it at its
    deadline, the auto budget only at its hard cap). Gangs per level stay, pods only grow."""
    start = now()
    by = clock.deadline - clock.finish if clock.timed else clock.lp_by
    more = exchanged(prob, plan, by)
    if more is not None:
        plan = fewer_nodes(prob, more)
    clock.record("exchange", start, budget.reached(by))
    return plan


def _final(prob: Problem, outcome: SolveOutcome, hint: Assignment) -> Assignment:
    """The plan to report: CP-SAT's with fewer nodes where cost ties, never dearer than the greedy's at its
    placement, and within every zone spread's skew on its final state (solver/skew.py)."""
    best = (
        outcome.assignment if outcome.assignment is hint else fewer_nodes(prob, outcome.assignment)
    )
    if _placement(best) <= _placement(hint) and best.cost(prob) > hint.cost(
        prob
    ):  # pragma: no cover
        best = hint  # solve_model already keeps the cheaper of equal placements; never return a dearer one
    return within_skew(prob, best)


def _cost_closed(
    prob: Problem, hint: Assignment, bounds: _Bounds, opts: SolveOptions, clock: Clock
) -> bool:
    """The plan's cost meets its bound (within the relative gap): the LP's first, then a share of the time left
    for the aggregate relaxation."""
    t = now()
    lb0 = bounds.of(hint, max(0.0, min(1.0, 0.25 * clock.left())))
    clock.lp_seconds = clock.lp_seconds or now() - t  # measured here when the repair solved no LP
    clock.record("costBound", t, False)
    return hint.cost(prob) <= lb0 * (1 + opts.relative_gap)


def _search(
    prob: Problem,
    patterns: PatternSet,
    hint: Assignment,
    opts: SolveOptions,
    clock: Clock,
    bounds: _Bounds,
    proven: bool,
    cost_closed: bool,
) -> SolveOutcome:
    """CP-SAT, warm-started from `hint`, whenever a gap is open and `budget.MIN_SEARCH` seconds of search remain
    after the model's build and the reserves; with both gaps closed, at the default budget nothing (the plan
    returns at once), at an explicit one a short polish of the node count (fewer nodes break cost ties)."""
    t = now()
    n_variables = sum(len(p) for p in patterns.by_kind) + 2 * _domain_variables(
        prob
    )  # each with a constraint
    search = clock.search_seconds(n_variables)
    if cost_closed:
        search = min(search, max(0.2, POLISH_SHARE * clock.limit)) if clock.timed else 0.0
    if search < budget.MIN_SEARCH:
        clock.record("cpsat", t, not cost_closed)
        return SolveOutcome(hint, proven, False, True, 0, 0.0)
    from .solver.cpsat import (
        solve_model,
    )  # OR-Tools' cp_model (and pandas) load only when CP-SAT runs

    seconds = (
        min(search, clock.search_seconds(n_variables))
        + budget.MODEL_SECONDS_PER_VARIABLE * n_variables
    )
    outcome = solve_model(
        prob,
        patterns,
        hint,
        opts,
        seconds,
        None if cost_closed else bounds.of,
        placement_proven=proven,
    )
    optimal = outcome.placement_optimal and outcome.cost_optimal
    clock.record("cpsat", t, not optimal and not cost_closed and now() - t >= seconds)
    return outcome


def _solve_by_work(snap: ClusterSnapshot, opts: SolveOptions) -> Plan:
    """`SolveOptions.deterministic`: every phase bounded by work, none by the clock, so the plan depends on the
    snapshot alone. The greedy plan (uncut), re-packed by LP prices; the gang bound and the LP cost bound in full;
    no CP-SAT (placement or aggregate bound), whose wall-time budget is what made plans differ with the load."""
    start = now()
    prob = build_problem(snap)
    hint, lp = _guided_greedy(prob, None)
    hint_tiers = _hint_tiers(prob, hint, None, lp)
    best, known_lp = _repair(prob, hint, None, lp)
    best = within_skew(prob, best)  # the final state within every zone spread (solver/skew.py)
    patterns = build_patterns(prob, best.bins, opts.patterns_per_kind)
    lb, lb_proven = _Bounds(prob, opts, known_lp, None).final(
        best, 0.0
    )  # no time: the LP's bound, not CP-SAT's
    cost = best.cost(prob)
    lb = min(lb, cost)
    tiers = _gang_tiers(prob, best, hint, hint_tiers, False, None)
    plan = _render(snap, prob, best, cost, lb, None)
    plan.solver = _solver_info(
        prob,
        patterns,
        tiers,
        cost,
        lb,
        lb_proven,
        False,
        greedy_only=True,
        seconds=now() - start,
    )
    return plan


def _hint_tiers(
    prob: Problem, hint: Assignment, deadline: float | None, lp: GangLP | None
) -> list[TierBound]:
    """Per priority level, the plan's gangs and pods against their bounds (`gangs_upper_bound`); a plan that places
    every pending pod meets them all without an LP (no plan starts more gangs or places more pods)."""
    tiers = tier_counts(prob, hint.y, hint.satisfied)
    if sum(hint.y) == sum(c.count for c in prob.classes):
        for t in tiers:
            t.pods_bound = t.pods
        return tiers
    return gangs_upper_bound(prob, tiers, deadline, lp)


def _unguided_first(prob: Problem, deadline: float | None) -> Assignment | None:
    """When the gang LP is dear (expected to take `UNGUIDED_FIRST_LP_SECONDS` or more, on a backlog of at most
    `UNGUIDED_FIRST_MAX_PODS` pods, where the greedy is cheap), the greedy unguided first; when it starts every gang of
    the top priority level it is the plan the guide would give (`GangLP.guide` is None when the LP starts them all,
    as it does whenever a plan does), so the LP is not built. None: the guide is needed, or not worth the try (a
    cheap LP is built anyway, and on a large backlog the greedy costs as much as the LP)."""
    if (
        sum(c.count for c in prob.classes) > UNGUIDED_FIRST_MAX_PODS
        or lp_seconds(prob) < UNGUIDED_FIRST_LP_SECONDS
    ):
        return None
    top = max((g.priority for g in prob.gangs if g.is_gang), default=None)
    a = greedy(prob, deadline=deadline, guide=None, repack=False)
    if a.stopped_early or not all(
        a.satisfied[g.gid] for g in prob.gangs if g.is_gang and g.priority == top
    ):
        return None
    return a


def _guided_greedy(prob: Problem, clock: Clock | None) -> tuple[Assignment, GangLP | None]:
    """The greedy plan guided by the gang LP's top level (`greedy.Guide`), and that LP, whose solves the gang bound
    reuses (None: not built in the guide's time, `Clock.guide_by`; the greedy then goes unguided). The share counts
    from here, after the problem's build: counted from the plan's start, a slow build on a loaded machine would leave
    the greedy unguided, and an unguided greedy can start fewer gangs. With the default budget the greedy is never cut
    short and the LP is always built (the gang bound needs it); only its guide works to a deadline. `clock` None: no
    clock at all."""
    t = now()
    lp_by = clock.guide_by() if clock is not None else None
    timed = clock is not None and clock.timed
    deadline = clock.deadline if clock is not None and timed else None
    first = _unguided_first(prob, deadline)
    if first is not None:
        if clock is not None:
            clock.record("guide", now(), False)
            clock.record("greedy", t, False)
        return first, None
    lp = (
        gang_lp(prob, lp_by if timed else None)
        if lp_by is None or not timed or now() + lp_seconds(prob) <= lp_by
        else None
    )
    if lp is not None:
        lp.deadline = lp_by
    fits = lp_by is None or timed or now() + lp_seconds(prob) <= lp_by
    guide = lp.guide() if lp is not None and fits else None
    if clock is not None:
        clock.record(
            "guide", t, lp is None or not fits or (guide is None and budget.reached(lp_by))
        )
    t = now()
    a = greedy(prob, deadline=deadline, guide=guide, repack=False)
    if (
        guide is not None
        and not a.stopped_early
        and not (clock is not None and budget.reached(deadline))
    ):
        # the guide's groups keeping their running nodes too (flexible 8-GPU pods can take the free H100 nodes an
        # H100-only gang needs) starts more gangs on some backlogs and fewer on others: keep the better
        b = greedy(prob, deadline=deadline, guide=guide, repack=False, spare_running=True)
        if not b.stopped_early and (_placement(b), -b.cost(prob)) > (_placement(a), -a.cost(prob)):
            a = b
    if clock is not None:
        clock.record("greedy", t, a.stopped_early)
    return a, lp


def _repair(
    prob: Problem,
    hint: Assignment,
    deadline: float | None,
    gang: GangLP | None = None,
    clock: Clock | None = None,
    polish: bool = True,
    grow: bool = False,
) -> tuple[Assignment, dict[tuple, int]]:
    """The greedy plan re-packed by LP prices (`repack`) when that costs less; the LP's cost bound for its
    placement comes back too (keyed like `_Bounds`' cache), so it is not solved twice. `gang`: the gang LP, whose
    pools the cost LP reuses when it covers the same shapes. An LP cut short by `deadline` still prices the pods
    (its feasible duals, else `unit_prices`), and a pattern LP cut short keeps its last solution (`colgen`).
    `polish`: fewer nodes at equal cost (`merge.fewer_nodes`), for a caller that changes the plan no further.
    `grow`: the re-packed plan may also take the pods the greedy left out (`repack.grown`), when any fit."""
    t = now()
    if hint.stopped_early or budget.past(deadline):
        if clock is not None:
            clock.record("repair", t, not hint.stopped_early)
        return (fewer_nodes(prob, hint) if polish else hint), {}
    per_shape = placed_per_shape(prob, hint)
    lp, prices = 0, dict[int, float]()
    if any(
        not k.new for k in prob.kinds
    ):  # prices order the pods onto existing nodes; without any, only the bound
        lp, prices = lp_cost_prices(
            prob, per_shape, deadline, gang.parts if gang is not None else None
        )
        if (
            clock is not None
        ):  # needs the LP (`_Bounds`, after the new nodes are bought by the pattern LP)
            clock.lp_seconds = now() - t
    # an LP solved to optimality (its prices are there) is kept at 0 too: no new node needed is a bound as well,
    # and `_Bounds` would solve the same LP again for it
    known = {tuple(sorted(per_shape.items())): lp} if lp or prices else {}
    best = _cheapest_repair(prob, hint, per_shape, prices, lp, deadline, grow)
    if clock is not None:
        clock.record("repair", t, budget.reached(deadline))
    # the last objective, for a plan no CP-SAT stage polishes
    return (fewer_nodes(prob, best) if polish else best), known


def _cheapest_repair(
    prob: Problem,
    hint: Assignment,
    per_shape: dict[int, int],
    prices: dict[int, float],
    lp: int,
    deadline: float | None,
    grow: bool,
) -> Assignment:
    """The best of `hint` and its repairs: node by node by value per dollar (`value_pack`, priced by the cost LP,
    else by the fluid LP), by the pattern LP (`repack`; `grow`: with the pods the plan leaves out), and the greedy's
    own whole-gang repair when those miss the cost target (`COST_TARGET_GAP` from the LP's bound)."""
    good = int(lp / (1 - COST_TARGET_GAP)) if lp else None
    priced = prices or unit_prices(prob, per_shape)
    packed = value_pack(
        prob, hint, prices or fluid_prices(prob, per_shape, deadline) or priced, deadline
    )
    base = packed if packed is not None and _better(prob, packed, hint) else hint
    colgen_by = None if deadline is None else now() + COLGEN_SHARE * (deadline - now())
    # growing: the same fill by prices, and the pods the plan leaves out join it where the pattern LP finds room
    again = repack(prob, hint, priced, deadline, colgen_by=colgen_by, grow=True) if grow else None
    again = again or repack(prob, hint, priced, deadline, good, colgen_by)
    best = again if again is not None and _better(prob, again, base) else base
    # the greedy's own whole-gang repair only when the LP's missed the cost target (it never beat it on the suite)
    if (good is None or best.cost(prob) > good) and not budget.past(deadline):
        whole = repacked(prob, hint)
        if whole is not None and _better(prob, whole, best):
            best = whole
    return best


class _Bounds:
    """Cost bounds per placement (pods per shape), each computed once; with `lp_by` (every clocked plan) the LP
    relaxation runs to that deadline first, so the reported gap is not the fluid bound's for want of a share of
    the time; None (`deterministic`) runs the LP the caller already solved only. While a placement's cost gap is
    open, its LP is tightened once by size classes (`tight_cost_bound`), within the time the bound may take (at
    least `reserve()` seconds; no limit without it)."""

    def __init__(
        self,
        prob: Problem,
        opts: SolveOptions,
        known_lp: dict[tuple, int],
        lp_by: float | None,
        reserve: Callable[[], float] | None = None,
    ) -> None:
        self.prob, self.opts, self.known, self.lp_by = prob, opts, known_lp, lp_by
        self.reserve = reserve
        self.cache: dict[tuple, tuple[int, bool]] = {}
        self.tightened: set[tuple] = set()

    def _key(self, a: Assignment) -> tuple:
        return tuple(sorted(placed_per_shape(self.prob, a).items()))

    def of(self, a: Assignment, seconds: float) -> int:
        key = self._key(a)
        if key not in self.cache:
            self._lp(key, a.cost(self.prob), seconds)
            self.cache[key] = lower_bound(
                self.prob, dict(key), self.opts, seconds, self.known.get(key, 0)
            )
        return self.cache[key][0]

    def _lp(self, key: tuple, cost: int, seconds: float) -> None:
        """The placement's LP bound into `known`: solved to `lp_by` when not known yet, then tightened once while
        it is below `cost` by more than the relative gap (a closed gap needs nothing more)."""
        if key in self.tightened or (self.lp_by is None and key not in self.known):
            return
        self.tightened.add(key)
        below = math.ceil(cost / (1 + self.opts.relative_gap))
        extra = None if self.reserve is None else max(seconds, self.reserve())
        if key not in self.known:
            self.known[key] = tight_cost_bound(
                self.prob, dict(key), self.lp_by, below=below, extra=extra
            )
        elif self.known[key] < below:  # the LP again, then its tightening, within the extra time
            by = self.lp_by if extra is None else time.perf_counter() + extra
            if self.lp_by is not None and by is not None:
                by = min(by, self.lp_by)
            again = tight_cost_bound(self.prob, dict(key), by, below=below)
            self.known[key] = max(self.known[key], again)

    def final(self, best: Assignment, seconds: float) -> tuple[int, bool]:
        """The bound for the final plan's placement; an earlier, shorter try that proved less is tried again."""
        key = self._key(best)
        if key in self.cache and not self.cache[key][1]:
            self.cache[key] = max(
                self.cache[key],
                lower_bound(self.prob, dict(key), self.opts, seconds, self.known.get(key, 0)),
            )
        self.of(best, seconds)
        return self.cache[key]


def _solver_info(
    prob: Problem,
    patterns: PatternSet,
    tiers: list[TierBound],
    cost: int,
    lb: int,
    lb_proven: bool,
    cost_optimal: bool,
    *,
    greedy_only: bool,
    seconds: float,
    clock: Clock | None = None,
) -> SolverInfo:
    """The plan's `solver` section: OPTIMAL only when both the gang and the cost gaps are closed; with a `clock`,
    the budget the plan worked to and its phases (a plan bounded by work alone has none)."""
    pod_gap = sum(t.pods_bound - t.pods for t in tiers if t.pods_bound is not None)
    return SolverInfo(
        status="OPTIMAL" if _closed(tiers) and (cost_optimal or lb >= cost) else "FEASIBLE",
        seconds=round(seconds, 3),
        gap=round((cost - lb) / cost, 6) if cost else 0.0,
        lowerBoundProven=lb_proven,
        patternsComplete=patterns.complete,
        greedyOnly=greedy_only,
        podClasses=len(prob.classes),
        binKinds=len(prob.kinds),
        patterns=sum(len(p) for p in patterns.by_kind),
        gangsStarted=sum(t.gangs for t in tiers),
        gangsUpperBound=sum(t.gangs_bound for t in tiers),
        byPriority=[
            PriorityBound(
                priority=t.priority,
                gangsStarted=t.gangs,
                gangsUpperBound=t.gangs_bound,
                podsPlaced=t.pods,
                podsUpperBound=t.pods_bound,
            )
            for t in tiers
        ],
        budgetSeconds=round(clock.deadline - clock.start, 3) if clock is not None else 0.0,
        phases=[
            SolverPhase(name=p.name, seconds=round(p.seconds, 3), cutShort=p.cut_short)
            for p in clock.phases
        ]
        if clock is not None
        else [],
        gaps=SolverGaps(
            gangs=sum(t.gangs_bound - t.gangs for t in tiers),
            pods=pod_gap,
            costPerHour=round(max(0, cost - (cost if cost_optimal else lb)) / MICRO, 6),
        ),
    )


def _closed(tiers: list[TierBound]) -> bool:
    """Every level's gangs and pods meet their bounds: no plan is lexicographically better in placement."""
    return all(
        t.gangs == t.gangs_bound and t.pods_bound is not None and t.pods == t.pods_bound
        for t in tiers
    )


def _gang_tiers(
    prob: Problem,
    best: Assignment,
    hint: Assignment,
    hint_tiers: list[TierBound],
    placement_optimal: bool,
    deadline: float | None,
) -> list[TierBound]:
    """Per priority level, the plan's gangs and pods against their bounds (CP-SAT's proof, else the LP's)."""
    tiers = tier_counts(prob, best.y, best.satisfied)
    if placement_optimal:  # proven by CP-SAT over complete patterns, or by the LP bounds themselves
        for t in tiers:
            t.gangs_bound, t.pods_bound = t.gangs, t.pods
        return tiers
    if best is hint and hint_tiers:
        return hint_tiers
    tiers = gangs_upper_bound(prob, tiers, deadline)
    # Each level's gang bound from the hint bounds the lexicographically best plan itself (the LP holds only levels
    # proven to match it: `gangs_upper_bound`'s soundness note), whatever plan is reported, so it stands for `best`
    # too: past the deadline (CP-SAT took the budget) the LP cannot run again and would fall back to every gang.
    by_level = {h.priority: h.gangs_bound for h in hint_tiers}
    for t in tiers:
        if t.priority in by_level:
            t.gangs_bound = max(t.gangs, min(t.gangs_bound, by_level[t.priority]))
    return tiers


def _domain_variables(prob: Problem) -> int:
    """Variables the model adds for topology domains: one choice per (gang, domain), one count per (class, domain)."""
    total = 0
    for g in prob.gangs:
        shapes = {prob.classes[c].shape for c in g.classes}
        if any(prob.shapes[s].topology_keys for s in shapes):
            total += len(candidate_domains(prob, g.gid)) * (1 + len(g.classes))
    return total


def _render(
    snap: ClusterSnapshot,
    prob: Problem,
    a: Assignment,
    cost: int,
    lb: int,
    deadline: float | None = None,
) -> Plan:
    within = within_skew(prob, a)  # whoever made `a`, the plan keeps every zone spread's skew
    if within is not a:
        a, cost, lb = within, within.cost(prob), min(lb, within.cost(prob))
    placed_by_gang = [0] * len(prob.gangs)
    new_by_gang: list[Counter[str]] = [Counter() for _ in prob.gangs]
    existing_by_gang = [0] * len(prob.gangs)
    new_nodes: list[NewNode] = []
    existing: dict[str, list[str]] = {}
    cursor: Counter[int] = Counter()  # pods of a class are handed out in order, bin by bin
    itypes = _instance_types(snap)
    for (kid, contents), node_name in zip(a.bins, a.bin_nodes, strict=False):
        kind = prob.kinds[kid]
        pods: list[str] = []
        for cid, n in sorted(contents.items()):
            c = prob.classes[cid]
            start = cursor[cid]
            cursor[cid] += n
            pods.extend(p.key for p in c.pods[start : start + n])
            placed_by_gang[c.gang] += n
            if kind.new:
                new_by_gang[c.gang][kind.group or ""] += 1
            else:
                existing_by_gang[c.gang] += n
        if kind.new:
            new_nodes.append(
                NewNode(
                    nodeGroup=kind.group or "",
                    pods=pods,
                    instanceType=itypes.get(kind.group, ""),
                    pricePerHour=kind.price,
                )
            )
        else:
            existing.setdefault(node_name or "", []).extend(pods)
    scale_up = dict(sorted(Counter(n.node_group for n in new_nodes).items()))

    results = _results(
        snap, prob, a, placed_by_gang, existing_by_gang, new_by_gang, scale_up, deadline
    )
    return Plan(
        scaleUp=scale_up,
        newNodes=sorted(new_nodes, key=lambda n: n.node_group),
        existingNodes=dict(sorted(existing.items())),
        gangs=results,
        costPerHour=round(cost / MICRO, 6),
        lowerBoundPerHour=round(lb / MICRO, 6),
        solver=SolverInfo(status="FEASIBLE", seconds=0.0, gap=0.0),
        warnings=snap.warnings,
    )


def _results(
    snap: ClusterSnapshot,
    prob: Problem,
    a: Assignment,
    placed_by_gang: list[int],
    existing_by_gang: list[int],
    new_by_gang: list[Counter[str]],
    scale_up: dict[str, int],
    deadline: float | None,
) -> list[GangResult]:
    """Every gang's decision and reason, in name order; a reason names the zone spread that left pods out."""
    notes = {**prob.spread.held, **a.skew_cut} if prob.spread is not None else {}
    results: list[GangResult] = []
    index = {g.gang.key: g for g in prob.gangs}
    for gang in sorted(snap.gangs, key=lambda g: (g.namespace, g.name, g.api)):
        common = dict(
            namespace=gang.namespace,
            name=gang.name,
            api=gang.api,
            policy=gang.policy,
            minCount=gang.min_count,
            pending=len(gang.pending),
            bound=gang.bound,
            priority=gang.effective_priority,
        )
        key = gang.key
        pre = snap.decided.get(key)
        if pre is not None:
            results.append(GangResult(**common, placed=0, decision=pre.decision, reason=pre.reason))
            continue
        info = index[key]
        placed = placed_by_gang[info.gid]
        domain = a.domain[info.gid]
        topo = dict(zip(gang.topology_keys, domain, strict=False)) if domain and placed else None
        if placed:
            decision, reason = _placed_reason(
                info, placed, existing_by_gang, new_by_gang, topo, snap.groups, scale_up
            )
        else:
            decision, reason = _unplaced_reason(
                snap, prob, info.gid, deadline, a.stopped_early, scale_up
            )
        if key in notes:  # topology spread left pods out: say which constraint
            reason = f"{reason}; {notes[key]}" if placed else notes[key]
        results.append(
            GangResult(
                **common, placed=placed, decision=decision, reason=reason, topologyDomain=topo
            )
        )
    return results


def _instance_types(snap: ClusterSnapshot) -> dict[str | None, str]:
    """Node group -> instance type, of the first group of that name (looked up per new node: ~2,000 at 10k pods)."""
    return {g.name: g.instance_type for g in reversed(snap.groups)}


def _placed_reason(
    info,
    placed: int,
    existing_by_gang: list[int],
    new_by_gang: list[Counter[str]],
    topo,
    groups: list[NodeGroup],
    added: dict[str, int],
) -> tuple[str, str]:
    on_existing, new_nodes = existing_by_gang[info.gid], new_by_gang[info.gid]
    parts = [f"{placed} of {info.pending} pending pods placed"]
    if info.gang.policy == "gang":
        parts[0] += f" (minCount {info.gang.min_count}, {info.gang.bound} already bound)"
    where = []
    if on_existing:
        where.append(f"{on_existing} on existing or upcoming nodes")
    if new_nodes:
        where.append("new nodes: " + ", ".join(f"+{n} {g}" for g, n in sorted(new_nodes.items())))
    parts.append("; ".join(where))
    if topo:
        parts.append("all in " + ", ".join(f"{k}={v}" for k, v in topo.items()))
    if placed < info.pending:
        limits = limits_reached(info.gang.pending, groups, added, info.gang.topology_keys)
        parts.append(
            f"{info.pending - placed} stay pending: "
            + (
                f"{limits}, and no other room is left for them"
                if limits
                else "node-group limits or priority leave no room for them"
            )
        )
    return ("scale-up" if new_nodes else "fits-existing"), "; ".join(parts)


def _unplaced_reason(
    snap: ClusterSnapshot,
    prob: Problem,
    gid: int,
    deadline: float | None,
    out_of_time: bool,
    added: dict[str, int] | None = None,
) -> tuple[str, str]:
    info = prob.gangs[gid]
    for cid in info.classes:
        c = prob.classes[cid]
        if not prob.compat[c.shape]:
            return "infeasible", pod_misfit(c.pods[0], snap.groups, info.gang.topology_keys)
    if (
        out_of_time
    ):  # only an explicit --time-limit cuts the greedy short (SolveOptions.seconds_for)
        return "deferred", "not tried: the planner reached its --time-limit first"
    if budget.past(deadline):  # tried, but no time left to explain it
        return "deferred", (
            "tried, but not started in this plan: the capacity and node-group limits its quorum needs went to other "
            "gangs; whether it fits alone was not checked (the plan's time budget was spent)"
        )
    alone_placed = max_placeable(prob, gid, deadline)  # each gang is explained once
    want = max(info.need, 1)
    if alone_placed >= want:
        limits = limits_reached(
            info.gang.pending, snap.groups, added or {}, info.gang.topology_keys
        )
        held = f"{limits}, for" if limits else "the capacity and node-group limits it needs go to"
        return "deferred", (
            f"fits alone ({alone_placed} of {info.pending} pods), but {held} higher-priority gangs, or "
            "equal-priority ones whose quorum uses less of the scarce capacity, in this plan"
        )
    topo = (
        f" within one {'/'.join(info.gang.topology_keys)} domain" if info.gang.topology_keys else ""
    )
    return "infeasible", (
        f"even with every node group grown to maxSize at most {alone_placed} of the {want} members it needs "
        f"can be placed at once{topo}; nothing is bought for a partial gang"
    )
