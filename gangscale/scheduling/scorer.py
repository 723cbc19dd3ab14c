"""The fast path's scorer: one node's base score in Python integers.

The reference scores candidates with numpy (score_arrays.py `base_scores`); the fast path re-scores
the one or few nodes a placement changed (shapes.py `_recheck`), where one numpy call per node costs
~80 us against ~1 us for this closure, and a model run makes about one such call per pod. So the
score has two definitions, the vector one and this scalar one (one for every strategy and balance).

Invariant: for every shape and node, `scorer(terms)` returns exactly what `base_scores` returns for
that node (the same integer divisions, the same float64 steps for the balance);
tests/scheduling/test_scorer.py checks it on random clusters under every strategy, and the
differential test (test_fastpath.py) checks whole runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .config import Profile
from .scores import MAX_NODE_SCORE, broken_linear

Scorer = Callable[[list[int], list[int], list[int]], int]
"""(allocatable row, used row, non-zero requested cpu and memory) of one node -> its base score."""


@dataclass(slots=True, frozen=True)
class Terms:
    """What a shape's base score reads: `fit` (resource index, weight, source 0 cpu-nz / 1 mem-nz / 2 used,
    the pod's amount) for NodeResourcesFit, `bal` (resource index, request) for BalancedAllocation, and the two
    plugins' weights in the profile."""

    prof: Profile
    fit: list[tuple[int, int, int, int]]
    bal: list[tuple[int, int]]
    wfit: int
    wbal: int


def scorer(terms: Terms) -> Scorer:
    """The shape's scorer: one definition for every strategy, its constants bound once per shape (the closure reads
    locals where a per-call form would read the shape's attributes and branch on the strategy by name, on every
    re-checked node)."""
    fit, wfit, bal = terms.fit, terms.wfit, terms.bal
    strategy, curve = terms.prof.strategy, terms.prof.shape
    least, most = strategy == "LeastAllocated", strategy == "MostAllocated"
    wbal = terms.wbal if bal else 0
    pair = len(bal) == 2
    (i0, r0), (i1, r1) = bal if pair else ((0, 0), (0, 0))

    def score(a: list[int], u: list[int], nz: list[int]) -> int:
        total = 0
        if wfit:
            t = w = 0
            for i, weight, src, add in fit:
                cap = a[i]
                if cap <= 0:
                    continue  # resource_allocation.go: a resource the node lacks is skipped
                q = (nz[src] if src < 2 else u[i]) + add
                if least:
                    s = 0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap
                elif most:
                    s = (q if q < cap else cap) * MAX_NODE_SCORE // cap
                else:
                    s = broken_linear(curve, 100 if q >= cap else q * 100 // cap if q > 0 else 0)
                    if s <= 0:
                        continue  # requested_to_capacity_ratio.go: a zero score leaves the weight out
                t += weight * s
                w += weight
            if w:
                total = wfit * (t // w if least or most else (2 * t + w) // (2 * w))
        if wbal:
            if pair:  # the default's two resources: |f1 - f2| / 2 where the node has both
                a0, a1 = a[i0], a[i1]
                if a0 > 0 and a1 > 0:
                    f0, f1 = (u[i0] + r0) / a0, (u[i1] + r1) / a1
                    f0, f1 = (f0 if f0 < 1.0 else 1.0), (f1 if f1 < 1.0 else 1.0)
                    total += wbal * int((1 - abs(f0 - f1) / 2) * MAX_NODE_SCORE)
                else:
                    total += wbal * MAX_NODE_SCORE  # fewer than two fractions: std 0
            else:
                total += wbal * int((1 - _std(bal, a, u)) * MAX_NODE_SCORE)
        return total

    return score


def _std(bal: list[tuple[int, int]], a: list[int], u: list[int]) -> float:
    """balanced_allocation.go's spread of the requested fractions (capped at 1) over the resources the node has:
    |f1 - f2| / 2 for two, the population standard deviation for more, 0 for fewer."""
    fr = [min(1.0, (u[i] + r) / a[i]) for i, r in bal if a[i] > 0]
    if len(fr) == 2:
        return abs(max(fr) - min(fr)) / 2
    if len(fr) > 2:
        mean = sum(fr) / len(fr)
        return math.sqrt(sum((f - mean) ** 2 for f in fr) / len(fr))
    return 0.0
