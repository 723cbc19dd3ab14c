"""One seed's scheduler state across a run's scheduling cycles: the profile per pod, the rotating
start, the seeded tie-break, and the fast path's kept shapes.

Both paths of a scheduling cycle (reference.py, fastpath.py) read and write this state. Invariant:
each pod moves `next_start` and draws from `rng` exactly as upstream's cycle would (schedule_one.go
`nextStartNodeIndex`, `selectHost`), whichever path serves it, so the path never changes where any
pod goes; `ties` counts the draws that had a choice (none: every seed's run is the same).
"""

from __future__ import annotations

import random

import numpy as np

from ..model import Pod
from .cluster import Cluster
from .config import Profile, SchedulerConfig
from .shapes import Shape

MIN_FEASIBLE_NODES = 100  # schedule_one.go minFeasibleNodesToFind
MIN_FEASIBLE_PERCENT = 5  # minFeasibleNodesPercentageToFind
BASE_PERCENT = 50  # basePercentageOfNodesToScore


def num_feasible_to_find(n: int, percentage: int) -> int:
    """schedule_one.go `numFeasibleNodesToFind`: how many feasible nodes the scheduler scores."""
    if n < MIN_FEASIBLE_NODES or percentage >= 100:
        return n
    pct = percentage or max(MIN_FEASIBLE_PERCENT, BASE_PERCENT - n // 125)
    return max(MIN_FEASIBLE_NODES, n * pct // 100)


class Engine:
    """The scheduler's state across one run's scheduling cycles (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        config: SchedulerConfig,
        seed: int,
        fast: bool = True,
        stable_ties: bool = False,
    ) -> None:
        self.c = cluster
        self.stable_ties = stable_ties
        self.config = config
        self.rng = random.Random(seed)
        self.ties = 0  # choices the seed decided (a tie of several nodes or domains): none, and every seed runs alike
        self.used_profiles: dict[str, Profile] = {}
        self.next_start = 0  # schedule_one.go nextStartNodeIndex
        self.fast = fast
        self.shapes: dict[tuple, Shape] = {}
        self.pod_shape: dict[int, Shape] = {}  # id(pod) -> its shape (the gangs outlive the run)
        self._profiles: dict[str, Profile] = {}
        # a topology placement's nodes (placement.py): the only ones seen
        self.allowed: np.ndarray | None = None
        self.allowed_n = 0
        self._ks: dict[tuple[int, int], int] = {}

    def profile(self, pod: Pod) -> Profile:
        prof = self._profiles.get(pod.scheduler_name)
        if prof is None:
            prof = self._profiles[pod.scheduler_name] = (
                self.config.profile(pod.scheduler_name) or self.config.default
            )
        self.used_profiles[prof.scheduler_name] = prof
        return prof

    def k(self, n: int, percentage: int) -> int:
        """`num_feasible_to_find`, memoised per engine (asked once per pod)."""
        hit = self._ks.get((n, percentage))
        if hit is None:
            hit = self._ks[(n, percentage)] = num_feasible_to_find(n, percentage)
        return hit

    def pick(self, ties: np.ndarray | list[int]) -> int:
        """selectHost: a uniformly random node among the best (upstream samples a reservoir; one draw is the same
        distribution, and the seed fixes it). `stable_ties`: one `random()` per tie whatever its size, the same
        uniform choice, but the seed's stream of draws does not shift when a node joins or leaves a tie
        (`randrange` consumes a number of bits that depends on the size): observe mode drops the nodes a run left
        empty, and the next run then makes the same choices elsewhere instead of a new random history."""
        if len(ties) == 1:
            return int(ties[0])
        self.ties += 1
        if self.stable_ties:
            return int(ties[int(self.rng.random() * len(ties))])
        return int(ties[self.rng.randrange(len(ties))])
