"""The fast path's per-node scorers: one node's base score in Python integers.

`_recheck` (shapes.py) re-scores the few nodes a placement changed, one at a time; a numpy call per
node costs more than the whole Python computation, so these are the scalar form of
`score_arrays.base_scores` (NodeResourcesFit and BalancedAllocation, weighted). Invariant: for every
node and shape, each scorer returns exactly `base_scores` for that node (the same integer divisions
and the same float64 steps for the balance); tests/scheduling/test_scorer.py checks every scorer
against it on random nodes, and the differential test (test_fastpath.py) checks whole runs.
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


def scorer(st: Terms) -> Scorer:
    """`_score_one` for this shape; LeastAllocated / MostAllocated with two balanced resources (the default
    profile's form) gets a closure with the constants bound, the same arithmetic without the generic loops."""
    if st.prof.strategy not in ("LeastAllocated", "MostAllocated") or len(st.bal) not in (0, 2):
        return lambda a, u, nz: _score_one(st, a, u, nz)
    fit, wfit, least = st.fit, st.wfit, st.prof.strategy == "LeastAllocated"
    wbal = st.wbal if st.bal else 0
    (i0, r0), (i1, r1) = st.bal or ((0, 0), (0, 0))
    if wfit and least and len(fit) == 2 and fit[0][2] == 0 and fit[1][2] == 1:
        return _least_pair(fit, wfit, wbal, i0, r0, i1, r1)

    def score(a: list[int], u: list[int], nz: list[int]) -> int:
        total = 0
        if wfit:
            t = w = 0
            for i, weight, src, add in fit:
                cap = a[i]
                if cap > 0:
                    q = (nz[src] if src < 2 else u[i]) + add
                    t += weight * (
                        (0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap)
                        if least
                        else (q if q < cap else cap) * MAX_NODE_SCORE // cap
                    )
                    w += weight
            if w:
                total = wfit * (t // w)
        if wbal:
            a0, a1 = a[i0], a[i1]
            if a0 > 0 and a1 > 0:
                f0, f1 = (u[i0] + r0) / a0, (u[i1] + r1) / a1
                total += wbal * int(
                    (1 - abs((f0 if f0 < 1.0 else 1.0) - (f1 if f1 < 1.0 else 1.0)) / 2)
                    * MAX_NODE_SCORE
                )
            else:
                total += wbal * MAX_NODE_SCORE  # fewer than two fractions: std 0
        return total

    return score


def _least_pair(
    fit: list[tuple[int, int, int, int]], wfit: int, wbal: int, i0: int, r0: int, i1: int, r1: int
) -> Scorer:
    """`scorer`'s closure for LeastAllocated on cpu and memory (the default profile): the fit loop written out for
    its two resources (the non-zero requested cpu and memory columns), the same operations in the same order."""
    (fc, wc, _, addc), (fm, wm, _, addm) = fit

    def score(a: list[int], u: list[int], nz: list[int]) -> int:
        t = w = total = 0
        cap = a[fc]
        if cap > 0:
            q = nz[0] + addc
            t = wc * (0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap)
            w = wc
        cap = a[fm]
        if cap > 0:
            q = nz[1] + addm
            t += wm * (0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap)
            w += wm
        if w:
            total = wfit * (t // w)
        if wbal:
            a0, a1 = a[i0], a[i1]
            if a0 > 0 and a1 > 0:
                f0, f1 = (u[i0] + r0) / a0, (u[i1] + r1) / a1
                total += wbal * int(
                    (1 - abs((f0 if f0 < 1.0 else 1.0) - (f1 if f1 < 1.0 else 1.0)) / 2)
                    * MAX_NODE_SCORE
                )
            else:
                total += wbal * MAX_NODE_SCORE  # fewer than two fractions: std 0
        return total

    return score


def _score_one(st: Terms, a: list[int], u: list[int], nz: list[int]) -> int:
    """`base_scores` for one node, in Python integers (and the same float steps for the balance)."""
    total = 0
    if st.wfit:
        total += st.wfit * _fit_one(st, a, u, nz)
    if st.wbal and st.bal:
        fr = [min(1.0, (u[i] + r) / a[i]) for i, r in st.bal if a[i] > 0]
        if len(fr) == 2:
            std = abs(max(fr) - min(fr)) / 2
        elif len(fr) > 2:
            mean = sum(fr) / len(fr)
            std = math.sqrt(sum((f - mean) ** 2 for f in fr) / len(fr))
        else:
            std = 0.0
        total += st.wbal * int((1 - std) * MAX_NODE_SCORE)
    return total


def _fit_one(st: Terms, a: list[int], u: list[int], nz: list[int]) -> int:
    strategy = st.prof.strategy
    total = wsum = 0
    for i, weight, src, add in st.fit:
        cap = a[i]
        if cap <= 0:
            continue
        q = (nz[src] if src < 2 else u[i]) + add
        if strategy == "LeastAllocated":
            s = 0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap
        elif strategy == "MostAllocated":
            s = min(q, cap) * MAX_NODE_SCORE // cap
        else:
            s = broken_linear(
                st.prof.shape, 100 if q >= cap else min(q, cap) * 100 // cap if q > 0 else 0
            )
            if s <= 0:
                continue
        total += s * weight
        wsum += weight
    if not wsum:
        return 0
    if strategy == "RequestedToCapacityRatio":
        return (2 * total + wsum) // (2 * wsum)
    return total // wsum
