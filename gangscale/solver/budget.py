"""The plan's clock: one budget, the deadline each phase works to, and what each phase took.

Contract. With an explicit `--time-limit T` every phase works to `start + T` (the LP steps and the explanations
to that less the reserve for writing the plan), where `start` is when the command began reading its input
(`SolveOptions.started`), so reading, planning and rendering together end near `T` (the planner keeps at least
`PLANNER_FLOOR` x T from its own start, so the bound holds while reading takes at most the rest). With the default
`auto` budget (`SolveOptions.seconds_for`, counted from the planner's call) the greedy is never cut short, nor the
fill's first pass over the pods it left out, and the LP steps work to a hard cap (`AUTO_HARD_FACTOR` x the budget, at
least `AUTO_HARD_FLOOR` s), so no phase runs unbounded.
When the plan's own bounds leave a gang, pod or cost gap open, the auto budget grows to `AUTO_GAP_FLOOR` s (on
backlogs of at most `AUTO_GAP_MAX_PODS` pods to `AUTO_GAP_FACTOR` x itself) so that CP-SAT, warm-started from the
greedy plan, gets the time to close it (a small problem's gap closes in a fraction of a second). CP-SAT runs
whenever a gap is open and `MIN_SEARCH` s remain after the model's build and the reserves, which are sized from
what this plan's own LP bound took (`Clock.bound_reserve`), not from constants.

Every phase is recorded (`Clock.record`): its seconds and whether its deadline cut it short, for the plan's
`solver.phases`.

The clock is injected: every deadline of a plan is a reading of `now()`, which is `SolveOptions.clock` while the
plan is made (`clocked`) and `time.perf_counter` otherwise. On the wall clock OR-Tools gets wall-time limits; on an
injected clock (`on_wall()` false) GLOP and CP-SAT work to deterministic-time limits, CP-SAT with one worker
(`lp_time_limit`, `params.make_solver`), so the same snapshot and the same clock readings give the same
plan on an idle or a loaded machine: tests of the budget's logic (cut-offs, monotone in time) are deterministic,
and wall-time claims belong to the benchmarks.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

_NOW: ContextVar[Callable[[], float]] = ContextVar(
    "gangscale_plan_clock", default=time.perf_counter
)


def now() -> float:
    """The plan's clock, in seconds: the injected one while a plan is made (`clocked`), else `time.perf_counter`."""
    return _NOW.get()()


def past(deadline: float | None) -> bool:
    """`deadline` (on the plan's clock; None: none) has passed: the plan's clock reads later than it."""
    return deadline is not None and now() > deadline


def reached(deadline: float | None) -> bool:
    """`deadline` (None: none) has come: the plan's clock reads it or later (the bound's and the pattern LP's
    stopping test)."""
    return deadline is not None and now() >= deadline


def on_wall() -> bool:
    """The plan's clock is the wall clock, so OR-Tools' own time limits (wall seconds) agree with its deadlines."""
    return _NOW.get() is time.perf_counter


def lp_time_limit(solver: Any, seconds: float) -> None:
    """A GLOP solver (pywraplp) limited to `seconds`: of wall time on the wall clock, of GLOP's deterministic time
    on an injected one (the same limit stops it at the same point on an idle or a loaded machine)."""
    if on_wall():
        solver.SetTimeLimit(max(1, int(seconds * 1000)))
    else:
        solver.SetSolverSpecificParametersAsString(
            f"max_deterministic_time: {max(seconds, 1e-3):.6f}"
        )


@contextmanager
def clocked(clock: Callable[[], float] | None) -> Iterator[None]:
    """Within the block every deadline of the planner and its solvers reads `clock` (None: `time.perf_counter`)."""
    token = _NOW.set(clock or time.perf_counter)
    try:
        yield
    finally:
        _NOW.reset(token)


AUTO_GAP_FLOOR = 1.0  # seconds: the auto budget, at least, while a gap is open (CP-SAT's slice on small problems)
# x the auto budget, while a gap is open on a backlog of at most AUTO_GAP_MAX_PODS pods
AUTO_GAP_FACTOR = 4.0
# (gpumix-3k: 2.5 s; larger backlogs keep their budget, and their time targets)
AUTO_GAP_MAX_PODS = 5000
AUTO_HARD_FLOOR = 2.0  # seconds: the auto budget's cap on the LP steps, at least
AUTO_HARD_FACTOR = 4.0  # x the auto budget: the cap on the LP steps (the greedy alone is never cut)
GUIDE_SHARE = 0.15  # of an explicit time limit, at most, for the gang LP that guides the greedy (else: unguided;
# 0.15: a backlog of 5k-10k pods, whose LP is estimated at ~0.2 s, still gets it at --time-limit 2)
# of the auto budget's cap, counted from the problem's build: the guide's LP is worth more
AUTO_GUIDE_SHARE = 0.5
# gangs than any later phase (gpumix-3k unguided: 428 gangs, guided: 430)
FINISH_SECONDS = 0.1  # seconds (plus FINISH_PER_POD per pending pod) kept for writing the plan
FINISH_PER_POD = 1e-5
PLANNER_FLOOR = 0.25  # of an explicit limit, at least, for the planner from its own start: when reading the input
# took more than the rest (a 100k-pod backlog takes seconds), the plan still tries its gangs rather than none
MIN_SEARCH = 0.1  # seconds of CP-SAT search, at least, or CP-SAT is not started
# measured: building the CP-SAT model costs ~15 us per pattern or domain variable
MODEL_SECONDS_PER_VARIABLE = 15e-6
# OR-Tools' cp_model and the pandas it imports, the first time a model is solved
CP_SAT_IMPORT_SECONDS = 0.3
# the final bound gets this many times what the plan's first LP bound took
BOUND_RESERVE_FACTOR = 2.0
BOUND_RESERVE_MIN = 0.02  # seconds, at least


@dataclass(frozen=True, slots=True)
class PhaseRecord:
    """One phase of the plan: its name, its seconds, and whether its deadline cut it short."""

    name: str
    seconds: float
    cut_short: bool


class Clock:
    """Deadlines for one plan (readings of `now()`) and the record of its phases."""

    def __init__(
        self,
        start: float,
        limit: float,
        timed: bool,
        pending_pods: int,
        finish_seconds: float = FINISH_SECONDS,
        planner_start: float | None = None,
    ) -> None:
        self.start, self.limit, self.timed = start, limit, timed
        self.finish = finish_seconds + FINISH_PER_POD * pending_pods
        # what CP-SAT, patterns and explanations work to (grows once a gap is open)
        self.deadline = start + limit
        if (
            planner_start is not None
        ):  # reading the input took more than its share: the planner keeps a floor
            self.deadline = max(self.deadline, planner_start + PLANNER_FLOOR * limit)
        self.hard = (
            self.deadline if timed else start + max(AUTO_HARD_FLOOR, AUTO_HARD_FACTOR * limit)
        )
        self.pods = pending_pods
        # what the plan's LP cost bound took, measured (sizes the final bound's reserve)
        self.lp_seconds = 0.0
        self.phases: list[PhaseRecord] = []

    @property
    def lp_by(self) -> float:
        """The deadline of every LP step (gang bound, cost repair, cost bound): an explicit limit less the finish;
        the auto budget's hard cap itself (its slack beyond the budget covers the finish)."""
        return self.hard - self.finish if self.timed else self.hard

    def guide_by(self) -> float:
        """When the gang LP guiding the greedy must be solved (else the greedy goes unguided)."""
        if self.timed:
            return now() + GUIDE_SHARE * self.limit
        return min(self.hard, now() + AUTO_GUIDE_SHARE * (self.hard - self.start))

    def open_gap(self) -> None:
        """A gap is open: the auto budget grows to `AUTO_GAP_FLOOR`, and on a backlog of at most
        `AUTO_GAP_MAX_PODS` pods to `AUTO_GAP_FACTOR` times itself (never past its hard cap)."""
        if not self.timed:
            grown = AUTO_GAP_FACTOR * self.limit if self.pods <= AUTO_GAP_MAX_PODS else self.limit
            self.deadline = min(
                max(self.deadline, self.start + max(AUTO_GAP_FLOOR, grown)), self.hard
            )

    def bound_reserve(self) -> float:
        """Seconds kept for the final plan's bound: what the plan's first LP bound took, doubled."""
        return max(BOUND_RESERVE_MIN, BOUND_RESERVE_FACTOR * self.lp_seconds)

    def search_seconds(self, model_variables: int) -> float:
        """What CP-SAT may search for: the deadline less the finish, the bound's reserve and the model's build."""
        build = MODEL_SECONDS_PER_VARIABLE * model_variables
        if "ortools.sat.python.cp_model" not in sys.modules:
            build += CP_SAT_IMPORT_SECONDS
        return self.deadline - self.finish - self.bound_reserve() - build - now()

    def left(self) -> float:
        """Seconds to the deadline less the finish (never negative)."""
        return max(0.0, self.deadline - self.finish - now())

    def record(self, name: str, since: float, cut_short: bool) -> None:
        self.phases.append(PhaseRecord(name, now() - since, bool(cut_short)))
