"""New nodes for a set of pods by a pattern LP: column generation over what one node of a group can carry.

Invariant: `pattern_new_nodes` returns only nodes whose pods fit them (each pattern is packed against the
group's allocatable, pseudo-resources included, with keys the group allows), never more nodes of a group than
its headroom, never more pods of a key than asked for; what it does not place stays in the caller's `left`.
It builds a plan, never a bound: its pricing is greedy, so its LP value is not proven optimal.

Why: the aggregate LP (`bound.lp_cost_prices`) uses a node group's capacity fractionally; spreading its pods
evenly over the group's nodes fits only in aggregate, and with many pod shapes over few node shapes ~750 pods
spill onto dear nodes on the elastic-10k backlog. A pattern LP's columns are whole nodes (a pattern: pods per
key on one node of a group), priced by a greedy knapsack per group from the LP's duals; rounding its node
counts down leaves a few pods (44 of 6,588 there), which the caller places by the greedy's own rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .budget import lp_time_limit, now, past, reached
from .problem import MICRO, Problem

Key = tuple[int, tuple[str, ...] | None]  # (shape, topology domain or None), as in `repack`
ROUNDS = 30  # pricing rounds at most per LP solve
STALL = 2  # rounds without the LP value moving (relatively, by STALL_GAP) end the pricing
STALL_GAP = 1e-6
SLACK_PRICE = 1e4  # $/h per pod left uncovered in the LP: far above any node's price per pod
# a pod the plan holds is left uncovered at this many times an optional pod's price
SLACK_OVER_OPTIONAL = 10.0


@dataclass(slots=True)
class _Group:
    """Node groups alike to the pods (allocatable, price, allowed items): one pricing problem, pooled headroom."""

    kids: list[int]
    cap: list[int]
    cost: int  # micro-dollars per hour per node
    items: list[int]  # indices of the items (keys or shapes) it may carry, ascending
    headroom: int
    # per item, its weights in the pricing orders (set on first pricing)
    shares: np.ndarray | None = None
    nonzero: dict = field(default_factory=dict)  # per item, its nonzero (resource, request) pairs


class _Rmp:
    """The restricted master LP (GLOP): cover rows (pods per item, at least the demand), one headroom row per
    group, priced slack per item (so it is always feasible), new-node columns added as pricing finds them."""

    def __init__(
        self,
        groups: list[_Group],
        demand: np.ndarray,
        optional: np.ndarray | None = None,
        optional_price: float = 0.0,
    ) -> None:
        """`optional`: per item, how many of its `demand` pods may stay uncovered at `optional_price` $/h each
        (pods a plan may add: cheaper to leave out than the rest, dearer than any node that takes one)."""
        from ortools.linear_solver import pywraplp

        self.pywraplp = pywraplp
        s = self.s = pywraplp.Solver.CreateSolver("GLOP")
        if (
            s is None
        ):  # pragma: no cover - OR-Tools without GLOP: the caller's greedy places everything
            raise RuntimeError("GLOP unavailable")
        inf = s.infinity()
        self.groups = groups
        self.cover = [s.Constraint(float(d), inf) for d in demand]
        self.room = [s.Constraint(0, float(g.headroom)) for g in groups]
        self.cols: list[tuple[int, np.ndarray, Any]] = []  # Any: an untyped pywraplp Variable
        self.seen: set[tuple[int, bytes]] = set()
        slack_price = max(SLACK_PRICE, SLACK_OVER_OPTIONAL * optional_price)
        for i, row in enumerate(self.cover):
            v = s.NumVar(0, inf, "")
            row.SetCoefficient(v, 1)
            s.Objective().SetCoefficient(v, slack_price)
            if optional is not None and optional[i] > 0:
                w = s.NumVar(0, float(optional[i]), "")
                row.SetCoefficient(w, 1)
                s.Objective().SetCoefficient(w, optional_price)
        s.Objective().SetMinimization()

    def add(self, gi: int, pat: np.ndarray) -> bool:
        key = (gi, pat.tobytes())
        if key in self.seen or not pat.any():
            return False
        self.seen.add(key)
        v = self.s.NumVar(0, self.s.infinity(), "")
        self.s.Objective().SetCoefficient(v, self.groups[gi].cost / MICRO)
        self.room[gi].SetCoefficient(v, 1)
        for i in np.flatnonzero(pat).tolist():
            self.cover[i].SetCoefficient(v, float(pat[i]))
        self.cols.append((gi, pat, v))
        return True

    def solve(self, deadline: float | None) -> bool:
        if deadline is not None:
            left = deadline - now()
            if left <= 0:
                return False
            lp_time_limit(self.s, left)
        return self.s.Solve() == self.pywraplp.Solver.OPTIMAL

    def duals(self) -> tuple[np.ndarray, list[float]]:
        return np.array([c.dual_value() for c in self.cover]), [r.dual_value() for r in self.room]

    def solution(self) -> list[tuple[int, np.ndarray, float]]:
        return [(gi, pat, x) for gi, pat, v in self.cols if (x := v.solution_value()) > 1e-9]


def _generate(rmp: _Rmp, req: np.ndarray, demand: np.ndarray, deadline: float | None) -> bool:
    """Column generation with greedy pricing until no group offers a better node or the LP value stalls;
    False when GLOP fails or time is up (the last solve then stands for nothing)."""
    best, still = math.inf, 0
    for _ in range(ROUNDS):
        if not rmp.solve(deadline):
            return False
        value = rmp.s.Objective().Value()
        still = still + 1 if value > best * (1 - STALL_GAP) else 0
        best = min(best, value)
        pi, mu = rmp.duals()
        found = [
            (gi, pat)
            for gi, g in enumerate(rmp.groups)
            if (pat := _price(g, req, demand, pi)) is not None
            and float(pi @ pat) - g.cost / MICRO - mu[gi] > 1e-9 * max(g.cost / MICRO, 1.0)
        ]
        if not found or still >= STALL:
            return True
        if past(deadline):
            return False
        if not sum(rmp.add(gi, pat) for gi, pat in found):
            return True
    return rmp.solve(deadline)


def _start(rmp: _Rmp, req: np.ndarray, demand: np.ndarray, deadline: float | None = None) -> bool:
    """One column per (group, item): as many of the item as one node takes (False: `deadline` came first)."""
    for gi, g in enumerate(rmp.groups):
        if reached(deadline):
            return False
        for i in g.items:
            pat = np.zeros(len(demand), dtype=np.int64)
            pat[i] = min(int(demand[i]), _most(req[i].tolist(), g.cap))
            rmp.add(gi, pat)
    return True


def _groups(prob: Problem, n_items: int, allowed) -> list[_Group]:
    """New kinds with headroom, pooled by (allocatable, price, allowed items); `allowed(item, kid)`."""
    pools: dict[tuple, _Group] = {}
    for k in prob.kinds:
        if not k.new or k.max_count <= 0:
            continue
        items = [i for i in range(n_items) if allowed(i, k.kid)]
        if items:
            g = pools.setdefault(
                (k.cap, k.cost, tuple(items)), _Group([], list(k.cap), k.cost, items, 0)
            )
            g.kids.append(k.kid)
            g.headroom += k.max_count
    return list(pools.values())


# ------------------------------------------------------------------ the plan: new nodes for the pods left


def pattern_new_nodes(
    prob: Problem, left: dict[Key, int], deadline: float | None
) -> list[tuple[int, dict[Key, int]]]:
    """(node group, pods per key) per new node for `left` (changed in place: what the nodes take is removed):
    the pattern LP's node counts rounded down (`pattern_candidates`); nothing when it did not converge in time."""
    candidates = pattern_candidates(prob, left, deadline)
    if not candidates:
        return []
    nodes, rest = candidates[0]
    left.update(rest)
    return nodes


Candidate = tuple[
    list[tuple[int, dict[Key, int]]], dict[Key, int]
]  # new nodes, and the pods they leave


def pattern_candidates(
    prob: Problem,
    left: dict[Key, int],
    deadline: float | None,
    optional: dict[Key, int] | None = None,
) -> list[Candidate]:
    """New nodes for `left` (unchanged) from the pattern LP's converged solution, rounded down, with the pods they
    leave; nothing when the LP did not converge by `deadline` (a cut-short LP's columns cover the pods in fractions
    whose rounding leaves the greedy more than it started with). `optional`: pods per key the nodes may also take
    (a plan's pods left out), each worth more than any node (`optional_price`) and less than a pod of `left`; the
    nodes then hold up to `left` plus `optional` pods of a key, and what they leave counts both."""
    optional = optional or {}
    keys = [k for k, n in left.items() if n > 0]
    keys += [k for k, n in optional.items() if n > 0 and left.get(k, 0) <= 0]
    if not keys or reached(deadline):
        return []
    req = np.array([prob.arrays.req[k[0]] for k in keys], dtype=np.int64).reshape(
        len(keys), len(prob.resources)
    )
    extra = np.array([optional.get(k, 0) for k in keys], dtype=np.int64)
    demand = np.array([max(0, left.get(k, 0)) for k in keys], dtype=np.int64) + extra
    groups = _groups(prob, len(keys), lambda i, kid: _allowed(prob, keys[i], kid))
    try:
        rmp = _Rmp(groups, demand, extra if extra.any() else None, optional_price(prob))
    except RuntimeError:  # pragma: no cover
        return []
    if not _start(rmp, req, demand, deadline) or not _generate(rmp, req, demand, deadline):
        return []
    nodes: list[tuple[int, dict[Key, int]]] = []
    headroom = {kid: prob.kinds[kid].max_count for g in groups for kid in g.kids}
    _take(groups, _round(rmp.solution()), demand, headroom, keys, nodes)
    return [(nodes, {**left, **{k: int(demand[i]) for i, k in enumerate(keys)}})]


def optional_price(prob: Problem) -> float:
    """$/h the pattern LP charges for an optional pod it leaves out: above any node's price, so a node that takes one
    is always worth buying while headroom lasts (pods come before cost)."""
    return 2.0 * max((k.cost / MICRO for k in prob.kinds if k.new), default=0.0) + 1.0


def _allowed(prob: Problem, key: Key, kid: int) -> bool:
    """The group may carry the key's pods: the shape fits it and it lies in the key's topology domain."""
    s, dom = key
    return (s, kid) in prob.fit_count and (dom is None or prob.domain(s, kid) == dom)


def _take(
    groups: list[_Group],
    nodes: list[tuple[int, np.ndarray, int]],
    demand: np.ndarray,
    headroom: dict[int, int],
    keys: list[Key],
    out: list[tuple[int, dict[Key, int]]],
) -> None:
    """Open `nodes` ((group, pattern, how many)) with the pods still wanted, in kinds of the group with headroom
    left: whole copies of a pattern at once while the demand covers them, then node by node."""
    for gi, pat, count in nodes:
        nz = np.flatnonzero(pat)
        for kid in groups[gi].kids:
            while count and headroom[kid] > 0:
                full = min(count, headroom[kid], int((demand[nz] // pat[nz]).min()))
                n, take = (full, pat) if full else (1, np.minimum(pat, demand))
                if not take.any():
                    count = 0
                    break
                fill = {keys[i]: int(take[i]) for i in np.flatnonzero(take).tolist()}
                out.extend((kid, dict(fill)) for _ in range(n))
                headroom[kid] -= n
                demand -= n * take
                count -= n


def _round(cols: list[tuple[int, np.ndarray, float]]) -> list[tuple[int, np.ndarray, int]]:
    """Nodes from an LP solution, as (group, pattern, count): every column's whole count, most used first."""
    return [
        (gi, pat, int(x + 1e-6))
        for gi, pat, x in sorted(cols, key=lambda c: -c[2])
        if x + 1e-6 >= 1
    ]


# ------------------------------------------------------------------ pricing


def _most(r: list[int], free: list[int]) -> int:
    return min((f // q for q, f in zip(r, free, strict=False) if q > 0), default=0)


def _price(g: _Group, req: np.ndarray, demand: np.ndarray, pi: np.ndarray) -> np.ndarray | None:
    """A node's pattern of high dual value: greedy fills in a few orders (value per largest share, per summed
    share, per share of each resource), the best kept. Greedy, so the LP it closes is not a proven bound."""
    idx = [i for i in g.items if pi[i] > 1e-12 and demand[i] > 0]
    if not idx:
        return None
    if g.shares is None:  # per group, fixed: each item's share orders and its nonzero requests
        share = req[g.items] / np.maximum(np.array(g.cap, dtype=float), 1.0)
        g.shares = np.column_stack(
            [share.max(axis=1), share.sum(axis=1)]
            + [share[:, r] + 1e-9 for r in range(share.shape[1]) if share[:, r].any()]
        )
        g.nonzero = {i: [(r, q) for r, q in enumerate(req[i].tolist()) if q > 0] for i in g.items}
    rows = np.searchsorted(g.items, idx)
    value = pi[idx][:, None] / g.shares[rows]  # items x orders
    items = [(i, g.nonzero[i], int(demand[i])) for i in idx]
    best, best_val = None, 0.0
    for w in range(value.shape[1]):
        pat = _fill(g.cap, [items[j] for j in np.argsort(-value[:, w], kind="stable").tolist()])
        val = sum(pi[i] * n for i, n in pat.items())
        if val > best_val:
            best, best_val = pat, val
    if best is None:
        return None
    out = np.zeros(len(demand), dtype=np.int64)
    out[list(best)] = list(best.values())
    return out


def _fill(cap: list[int], items: list[tuple[int, list[tuple[int, int]], int]]) -> dict[int, int]:
    """Take as many of each item (index, its nonzero requests, demand) as fit, in order (plain ints: it is hot)."""
    free = list(cap)
    pat: dict[int, int] = {}
    for i, rq, d in items:
        n = d
        for r, q in rq:
            n = min(n, free[r] // q)
        if n > 0:
            pat[i] = n
            for r, q in rq:
                free[r] -= n * q
    return pat
