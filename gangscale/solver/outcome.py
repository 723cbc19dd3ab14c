"""What a solve returns, and the placement it is judged by (pods per shape).

Invariant: importing this module imports no OR-Tools, so the planner's greedy-only path (every plan at
10,000 pods and more with the default budget) never pays for `cp_model` and the pandas it pulls in.
"""

from __future__ import annotations

from dataclasses import dataclass

from .greedy import Assignment
from .problem import Problem


@dataclass(slots=True)
class SolveOutcome:
    assignment: Assignment
    placement_optimal: (
        bool  # gangs and pods proved maximal (every maximal pattern was in the model)
    )
    cost_optimal: bool  # the cost stage proved optimal too
    used_hint_only: bool  # the solver returned nothing better than the greedy plan
    stages: int
    seconds: float


def placed_per_shape(prob: Problem, a: Assignment) -> dict[int, int]:
    """Pods placed per shape: what a cost bound is computed for (plans placing the same pods share one)."""
    out: dict[int, int] = {}
    for c in prob.classes:
        if a.y[c.cid]:
            out[c.shape] = out.get(c.shape, 0) + a.y[c.cid]
    return out
