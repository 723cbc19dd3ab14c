"""Solver options and the CP-SAT parameters every model in gangscale shares.

Importing this module imports no OR-Tools: the CLI reads `SolveOptions` defaults to build its parser.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ortools.sat.python import cp_model


AUTO_BASE_SECONDS = 0.5
AUTO_SECONDS_PER_POD = 4e-5


@dataclass(slots=True)
class SolveOptions:
    # seconds for the whole plan (every phase); None: `auto_seconds`
    time_limit: float | None = None
    workers: int = 0  # 0: one per core
    relative_gap: float = 1e-3  # stop once the plan is this close to a proven bound
    patterns_per_kind: int = 64
    seed: int = 0
    # phases bounded by work, not by the clock: the greedy is never cut, the LP steps run in full, CP-SAT is not
    # run (the greedy plan, re-packed by LP prices, stands: greedyOnly) and the lower bound is the LP's. The same
    # snapshot gives the same plan on an idle or a loaded machine (the simulator; `time_limit` is then ignored)
    deterministic: bool = False
    # a reading of `clock` when an explicit `time_limit` started (the CLI: before reading its input, so that
    # reading, planning and writing the plan together keep to it); None, or the auto budget: when the planner is called
    started: float | None = None
    # the planner's clock (seconds, never going back): every phase's deadline reads it (`budget.clocked`). None: the
    # wall clock (`time.perf_counter`), OR-Tools limited in wall time; given, GLOP and CP-SAT work to deterministic-time
    # limits (`budget.lp_time_limit`, `make_solver`), so a plan depends on the snapshot and the clock's readings alone
    clock: Callable[[], float] | None = None

    def seconds_for(self, pending_pods: int) -> float:
        """The plan's budget: `time_limit`, or by default one that fits a control loop and grows with the backlog
        (0.5 s + 40 us per pending pod: 0.9 s at 10,000 pods, 4.5 s at 100,000), never tuned per cluster. With
        the default the greedy plan is never cut short: every gang's quorum is tried (see planner)."""
        if self.time_limit is not None:
            return self.time_limit
        return AUTO_BASE_SECONDS + AUTO_SECONDS_PER_POD * pending_pods

    def num_workers(self) -> int:
        return self.workers or max(1, os.cpu_count() or 1)


def make_solver(opts: SolveOptions, seconds: float) -> cp_model.CpSolver:
    from ortools.sat.python import (
        cp_model,
    )  # here, so that `SolveOptions` (the CLI's defaults) costs no OR-Tools import

    from .budget import on_wall

    solver = cp_model.CpSolver()
    p = solver.parameters
    wall = on_wall()
    if wall:
        p.max_time_in_seconds = max(0.05, seconds)
    else:  # an injected clock (`budget.clocked`): deterministic time, and one worker (workers race on the wall clock;
        # the interleaved search that would make several deterministic is experimental and aborts on the cost stage)
        p.max_deterministic_time = max(0.05, seconds)
    p.num_workers = opts.num_workers() if wall else 1
    p.relative_gap_limit = opts.relative_gap
    p.random_seed = opts.seed
    if p.num_workers < 8:
        # CP-SAT's default portfolio for few workers has no LP-based worker, and
        # without one it cannot prove packing bounds (the bundled example runs
        # into its 10 s limit with 2 default workers, and takes 0.06 s with these).
        p.subsolvers.extend(
            ["default_lp", "max_lp", "quick_restart", "reduced_costs", "pseudo_costs", "core"][
                : p.num_workers
            ]
        )
    return solver
