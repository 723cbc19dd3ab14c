"""The planner's public entry points for code outside the package (benchmarks, scripts).

Invariant: callers outside `gangscale` use these and never `gangscale.solver.*`, so the
solver's internals (problem aggregation, micro-dollars, the bound's signature) can change
without breaking them. Money comes back in dollars per hour.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .planner import make_plan
from .snapshot import ClusterSnapshot
from .solver.bound import lower_bound
from .solver.params import SolveOptions
from .solver.problem import MICRO, build_problem

__all__ = ["PlacementBound", "SolveOptions", "make_plan"]


class PlacementBound:
    """Proven lower bounds on the hourly cost of placing a chosen set of a snapshot's pending pods."""

    def __init__(self, snap: ClusterSnapshot, seconds: float) -> None:
        self._prob = build_problem(snap)
        self._shape_of = {p.key: c.shape for c in self._prob.classes for p in c.pods}
        self._seconds = seconds

    def of(self, pod_keys: Iterable[str]) -> tuple[float, bool]:
        """($/h bound for placing these pods ("namespace/name"), the bound was proven optimal)."""
        per_shape = Counter(self._shape_of[k] for k in pod_keys)
        lb, proven = lower_bound(
            self._prob, dict(per_shape), SolveOptions(time_limit=self._seconds), self._seconds
        )
        return lb / MICRO, proven
