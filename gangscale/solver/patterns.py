"""Packing patterns: what one bin of a kind can carry, as counts per shape.

The CP-SAT model chooses how many bins of each pattern to use, so identical
nodes never become separate variables (no symmetry to break) and a pattern
only needs to be *maximal*: a bin filled below a pattern's counts is still
covered by it. For small kinds every maximal pattern is enumerated and the
model is exact; past a budget the set is the single-shape patterns, the
patterns of the greedy plan and whatever the enumeration reached.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .budget import past
from .problem import Problem

Pattern = tuple[tuple[int, int], ...]  # sorted ((shape, count), ...)
# enumerations of (capacity, requests, budget) kept across plans (each at most a budget of patterns)
ENUMERATIONS_KEPT = 1024


@dataclass(slots=True)
class PatternSet:
    by_kind: list[list[Pattern]]
    complete: bool  # every kind's maximal patterns were all enumerated


def _fits(req: tuple[int, ...], free: list[int]) -> bool:
    return all(r <= f for r, f in zip(req, free, strict=False))


def _max_take(req: tuple[int, ...], free: list[int]) -> int:
    n = None
    for r, f in zip(req, free, strict=False):
        if r > 0:
            q = f // r
            n = q if n is None else min(n, q)
    return max(0, n or 0)


def enumerate_maximal(
    cap: tuple[int, ...], shapes: list[tuple[int, tuple[int, ...]]], budget: int
) -> tuple[list[Pattern], bool]:
    """All maximal patterns of `shapes` in a bin of capacity `cap`, up to `budget`.

    Returns the patterns and whether the enumeration finished. Depth-first,
    largest counts first, so a cut-off enumeration still yields full bins.
    """
    by_position, finished = _enumerate(tuple(cap), tuple(r for _, r in shapes), budget)
    sids = [sid for sid, _ in shapes]
    return [tuple((sids[i], k) for i, k in p) for p in by_position], finished


@lru_cache(maxsize=ENUMERATIONS_KEPT)
def _enumerate(
    cap: tuple[int, ...], reqs: tuple[tuple[int, ...], ...], budget: int
) -> tuple[tuple[Pattern, ...], bool]:
    """`enumerate_maximal` over shape positions (a pure function of requests and capacity, kept for the next plan:
    a controller's passes enumerate the same node groups for the same pending shapes again and again)."""
    out: list[Pattern] = []
    steps = [0]
    step_limit = budget * 200
    shapes = list(enumerate(reqs))

    def dfs(i: int, free: list[int], cur: list[tuple[int, int]]) -> bool:
        steps[0] += 1
        if len(out) >= budget or steps[0] > step_limit:
            return False
        if i == len(shapes):
            if cur and not any(_fits(r, free) for r in reqs):
                out.append(tuple(cur))
            return True
        sid, req = shapes[i]
        for k in range(_max_take(req, free), -1, -1):
            nf = [f - k * r for f, r in zip(free, req, strict=False)]
            if k:
                cur.append((sid, k))
            ok = dfs(i + 1, nf, cur)
            if k:
                cur.pop()
            if not ok:
                return False
        return True

    finished = dfs(0, list(cap), [])
    return tuple(out), finished


def build_patterns(
    prob: Problem,
    seeds: list[tuple[int, dict[int, int]]],
    budget_per_kind: int = 64,
    deadline: float | None = None,
) -> PatternSet:
    """Patterns per kind: single-shape fills, the seeds' bins, then enumeration.

    Enumeration visits node groups first, then existing nodes; past `deadline`
    (a `budget.now()` reading) the remaining kinds keep only their
    single-shape fills and seed patterns, and the set is marked incomplete.
    """
    shapes_of_kind: list[list[int]] = [[] for _ in prob.kinds]
    for s, kinds in enumerate(prob.compat):
        for k in kinds:
            shapes_of_kind[k].append(s)

    by_kind: list[dict[Pattern, None]] = [dict() for _ in prob.kinds]
    for kid, contents in seeds:
        counts: dict[int, int] = {}
        for cid, n in contents.items():
            s = prob.classes[cid].shape
            counts[s] = counts.get(s, 0) + n
        by_kind[kid][tuple(sorted(counts.items()))] = None

    complete, late = True, False
    for kind in sorted(
        prob.kinds, key=lambda k: not k.new
    ):  # node groups first: they carry the cost
        shapes = shapes_of_kind[kind.kid]
        if not shapes:
            continue
        for s in shapes:
            by_kind[kind.kid][((s, prob.fit_count[(s, kind.kid)]),)] = None
        if len(shapes) == 1:
            continue
        late = late or past(deadline)  # past it once, past it for good
        if late:
            complete = False
            continue
        ordered = sorted(
            shapes,
            key=lambda s: (
                -sum(r / c if c else 0 for r, c in zip(prob.shapes[s].req, kind.cap, strict=False))
            ),
        )
        pats, done = enumerate_maximal(
            kind.cap, [(s, prob.shapes[s].req) for s in ordered], budget_per_kind
        )
        complete &= done
        for p in pats:
            by_kind[kind.kid][tuple(sorted(p))] = None
    return PatternSet([list(d) for d in by_kind], complete)
