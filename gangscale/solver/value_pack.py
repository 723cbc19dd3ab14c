"""Cost repair by value per dollar: the plan's new-node pods packed again, one node at a time, each the node that
carries the most value for its price.

Invariant: the result places exactly the plan's pods (`y`, `satisfied` and `domain` kept) and keeps every pod the
plan put on an existing node where it is; every new node holds pods that fit it (each is filled against its
group's allocatable, per-node pod rules included as resources), of keys its group allows (compatible, in the
key's topology domain), and no node group grows past its headroom. So it is as valid a plan as the one it repairs,
and the caller keeps it only when it costs less.

Why: the greedy buys node by node at the lowest price per pod, which favours small nodes two pods fill; the
pattern LP (`colgen`) rounds its columns down, and with hundreds of distinct shapes (one pod each) its columns
are fractional and rounding leaves nearly every pod to the greedy's rule. Here every pod has a value (a price in
$/h: the cost LP's dual of its shape, or what its requests cost at the cheapest fluid mix of node groups,
`fluid_prices`); each node group's candidate node is filled greedily by value per share of the node, and the node
of highest value per dollar is bought, as many times as its fill stays the same (sequential heuristics for cutting
stock with several stock sizes work this way). On 300 distinct shapes over 60 node groups the plan buys 18 nodes,
ten of them 96-core, where the greedy bought 92, mostly 8-core: $50.30/h against $54.16/h (bound $47.23/h).
"""

from __future__ import annotations

import heapq
from collections import Counter

import numpy as np

from .budget import lp_time_limit, now, past, reached
from .colgen import _allowed
from .greedy import Assignment
from .problem import MICRO, Problem
from .repack import Key, _demand, _kept, on_nodes


def value_pack(
    prob: Problem, a: Assignment, prices: dict[int, float], deadline: float | None
) -> Assignment | None:
    """`a` with its new-node pods re-packed node by node, the node of most value per dollar first (`prices`: $/h
    per pod of each shape); its pods on existing nodes stay, and what the node groups' headroom leaves goes by the
    greedy's own rule (`repack._place_rest`). None when `a` has no new node; when it leaves pods out and fills a
    node group to its headroom (pods contend for it, and the greedy's order of gangs decides who gets it); when the
    pods left do not all find room; or when `deadline` (on the plan's clock, `budget.now`) passes first."""
    used = Counter(k for k, c in a.bins if prob.kinds[k].new and c)
    short = sum(a.y) < sum(c.count for c in prob.classes)
    if not used or (short and any(n >= prob.kinds[k].max_count for k, n in used.items())):
        return None  # no new node, or pods contend for a node group's headroom: the greedy's order decides who
    left = _demand(prob, a)
    existing, _free = _kept(prob, a, left)
    nodes = _nodes_by_value(prob, {k: n for k, n in left.items() if n > 0}, prices, deadline)
    if nodes is None:
        return None
    return on_nodes(prob, a, existing, nodes, deadline)


def fluid_prices(
    prob: Problem, shapes: dict[int, int], deadline: float | None = None
) -> dict[int, float]:
    """Per shape of `shapes` (pods per shape), $/h per pod: its requests priced by the duals of the fluid LP (the
    cheapest mix of new nodes whose summed allocatable covers the pods' summed requests, each group within its
    headroom; one row per resource, so it takes milliseconds); {} when that LP has no solution by `deadline` (the
    caller prices by node instead)."""
    from ortools.linear_solver import pywraplp

    s = pywraplp.Solver.CreateSolver("GLOP")
    if s is None or reached(deadline):  # (None: OR-Tools without GLOP)
        return {}
    req = prob.arrays.req
    total = np.zeros(len(prob.resources))
    for sh, n in shapes.items():
        total += n * req[sh]
    scale = np.maximum(total, 1.0)  # each row's demand 1 (or 0): the duals of like magnitude
    rows = [s.Constraint(float(d), s.infinity()) for d in (total / scale).tolist()]
    for k in prob.kinds:
        if k.new and k.max_count > 0:
            v = s.NumVar(0.0, float(k.max_count), "")
            s.Objective().SetCoefficient(v, k.cost / MICRO)
            for r, c in enumerate(k.cap):
                rows[r].SetCoefficient(v, c / scale[r])
    s.Objective().SetMinimization()
    if deadline is not None:
        lp_time_limit(s, deadline - now())
    if s.Solve() != pywraplp.Solver.OPTIMAL:
        return {}
    weights = np.array([row.dual_value() for row in rows]) / scale
    return {sh: max(0.0, float(req[sh] @ weights)) for sh in shapes}


class _Fills:
    """Per node group (kind): the keys it may carry, in order of value per share of one node, and its greedy fill
    of what is left; a fill is stale once a key it holds lost pods since it was made."""

    def __init__(self, prob: Problem, left: dict[Key, int], prices: dict[int, float]) -> None:
        self.prob, self.left = prob, left
        self.value = {key: prices.get(key[0], 0.0) for key in left}
        self.order: dict[int, list[tuple[Key, list[tuple[int, int]]]]] = {}
        req = prob.arrays.req
        for k in prob.kinds:
            if not k.new or k.max_count <= 0:
                continue
            cap = np.maximum(np.array(k.cap, dtype=float), 1.0)
            keys = [key for key in left if _allowed(prob, key, k.kid)]
            share = {key: float((req[key[0]] / cap).max()) for key in keys}
            keys.sort(key=lambda key: -self.value[key] / max(share[key], 1e-12))
            self.order[k.kid] = [
                (key, [(r, q) for r, q in enumerate(req[key[0]].tolist()) if q > 0]) for key in keys
            ]
        self.touched: dict[Key, int] = {}  # key -> the round it last lost pods
        self.made: dict[int, int] = {}  # kind -> the round its fill was made

    def fill(self, kid: int, rnd: int) -> tuple[dict[Key, int], float]:
        """The kind's node filled greedily (plain ints: it is the hot loop), and its value in $/h."""
        free = list(self.prob.kinds[kid].cap)
        pat: dict[Key, int] = {}
        value = 0.0
        for key, rq in self.order[kid]:
            n = self.left[key]
            for r, q in rq:
                n = min(n, free[r] // q)
            if n > 0:
                pat[key] = n
                value += n * self.value[key]
                for r, q in rq:
                    free[r] -= n * q
        self.made[kid] = rnd
        return pat, value

    def stale(self, kid: int, pat: dict[Key, int]) -> bool:
        return any(self.touched.get(key, -1) >= self.made[kid] for key in pat)


def _nodes_by_value(
    prob: Problem, left: dict[Key, int], prices: dict[int, float], deadline: float | None
) -> list[tuple[int, dict[Key, int]]] | None:
    """(kind, pods per key) per new node for `left`: repeatedly the kind whose filled node has the most value per
    dollar (ties: more pods per dollar), as many copies as leave its fill unchanged. Fills only lose value as pods
    go, so a fill made before is re-made only when it reaches the top (lazy greedy). What no node group's headroom
    left takes stays in `left`. None past `deadline`."""
    fills = _Fills(prob, left, prices)
    headroom = {kid: prob.kinds[kid].max_count for kid in fills.order}
    heap: list[tuple[float, float, int, dict[Key, int]]] = []
    for kid in fills.order:
        _push(prob, heap, kid, *fills.fill(kid, 0))
    nodes: list[tuple[int, dict[Key, int]]] = []
    rnd = 0
    while heap and any(left.values()):
        if past(deadline):
            return None
        _, _, kid, pat = heapq.heappop(heap)
        rnd += 1
        if fills.stale(kid, pat):
            _push(prob, heap, kid, *fills.fill(kid, rnd))
            continue
        # the same fill while every key it holds has as many left: it took all it could of them
        copies = min(headroom[kid], *(left[key] // n for key, n in pat.items()))
        nodes.extend((kid, dict(pat)) for _ in range(copies))
        headroom[kid] -= copies
        for key, n in pat.items():
            left[key] -= n * copies
            fills.touched[key] = rnd
        if headroom[kid] > 0:
            _push(prob, heap, kid, *fills.fill(kid, rnd))
    return nodes


def _push(
    prob: Problem,
    heap: list[tuple[float, float, int, dict[Key, int]]],
    kid: int,
    pat: dict[Key, int],
    value: float,
) -> None:
    """A kind's fill onto the heap, highest value per dollar first (a fill of nothing never comes back)."""
    if pat:
        cost = max(prob.kinds[kid].cost, 1) / MICRO
        heapq.heappush(heap, (-value / cost, -sum(pat.values()) / cost, kid, pat))
