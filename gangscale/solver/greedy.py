"""A fast, gang-aware first-fit-decreasing plan.

It seeds CP-SAT (as a hint and as extra packing patterns) and is the plan
returned when the solver finds nothing better in its time limit, so it must
be valid on its own: gangs are placed whole (at least their quorum) or rolled
back, highest priority and oldest first; existing free capacity is used
before any node is bought; a new node comes from the group with the lowest
price per pod it can carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .problem import Problem


@dataclass(slots=True)
class Assignment:
    """A solution in the solver's terms, whoever produced it."""

    y: list[int]  # pods placed per class
    satisfied: list[bool]  # per gang: quorum reached (gang) / something placed (basic)
    domain: list[tuple[str, ...] | None]  # chosen topology domain per gang
    bins: list[tuple[int, dict[int, int]]]  # (kind, {class: count}) per used bin, existing first
    bin_nodes: list[str | None] = field(default_factory=list)  # existing node name per bin (None: new)

    def cost(self, prob: Problem) -> int:
        return sum(prob.kinds[k].cost for k, c in self.bins if prob.kinds[k].new and c)


def gang_order(prob: Problem) -> list[int]:
    """Who goes first when not everyone fits: priority, then age, then name."""
    return sorted(
        range(len(prob.gangs)),
        key=lambda g: (-prob.gangs[g].priority, not prob.gangs[g].is_gang, prob.gangs[g].gang.created,
                       prob.gangs[g].gang.namespace, prob.gangs[g].gang.name),
    )


class _State:
    """Bins as numpy rows so "how many fit where" is one vector operation."""

    def __init__(self, prob: Problem, gangs: list[int]) -> None:
        self.prob = prob
        self.req = np.array([s.req for s in prob.shapes], dtype=np.int64).reshape(len(prob.shapes), len(prob.resources))
        existing = [(k.kid, name) for k in prob.kinds if not k.new for name in k.nodes]
        total_pods = sum(prob.gangs[g].pending for g in gangs)
        extra = sum(min(k.max_count, total_pods) for k in prob.kinds if k.new)
        size = len(existing) + extra
        self.free = np.zeros((size, len(prob.resources)), dtype=np.int64)
        self.kind = np.full(size, -1, dtype=np.int64)
        self.names: list[str | None] = [None] * size
        for i, (kid, name) in enumerate(existing):
            self.free[i] = prob.kinds[kid].cap
            self.kind[i] = kid
            self.names[i] = name
        self.n = len(existing)
        self.headroom = {k.kid: k.max_count for k in prob.kinds if k.new}
        self.contents: list[dict[int, int]] = [dict() for _ in range(size)]
        self.log: list[tuple[int, int, int]] = []  # (bin, class, count); class -1 marks an open
        self.cost = 0
        # per shape: boolean mask over kinds, and the kinds' topology domains
        nk = len(prob.kinds)
        self.compat_mask = np.zeros((len(prob.shapes), nk), dtype=bool)
        for s, ks in enumerate(prob.compat):
            self.compat_mask[s, ks] = True

    def place(self, b: int, cid: int, count: int) -> None:
        self.free[b] -= count * self.req[self.prob.classes[cid].shape]
        self.contents[b][cid] = self.contents[b].get(cid, 0) + count
        self.log.append((b, cid, count))

    def open(self, kid: int) -> int:
        b = self.n
        self.n += 1
        self.kind[b] = kid
        self.free[b] = self.prob.kinds[kid].cap
        self.headroom[kid] -= 1
        self.cost += self.prob.kinds[kid].cost
        self.log.append((b, -1, kid))
        return b

    def undo(self, mark: int) -> None:
        while len(self.log) > mark:
            b, cid, count = self.log.pop()
            if cid == -1:
                self.n -= 1
                self.kind[b] = -1
                self.headroom[count] += 1
                self.cost -= self.prob.kinds[count].cost
                self.contents[b] = {}
            else:
                self.free[b] += count * self.req[self.prob.classes[cid].shape]
                left = self.contents[b][cid] - count
                if left:
                    self.contents[b][cid] = left
                else:
                    del self.contents[b][cid]

    def fits(self, shape: int, domain_kinds: np.ndarray | None) -> np.ndarray:
        """Pods of `shape` that still fit on each open bin (0 where incompatible)."""
        n = self.n
        req = self.req[shape]
        pos = req > 0
        free = self.free[:n, pos]
        counts = (free // req[pos]).min(axis=1) if pos.any() else np.zeros(n, dtype=np.int64)
        kinds = self.kind[:n]
        ok = self.compat_mask[shape, kinds]
        if domain_kinds is not None:
            ok &= domain_kinds[kinds]
        return np.where(ok, np.maximum(counts, 0), 0)


def _domain_kinds(prob: Problem, shape: int, domain: tuple[str, ...] | None) -> np.ndarray | None:
    if domain is None:
        return None
    keys = prob.shapes[shape].topology_keys
    return np.array([all(k.labels.get(key) == v for key, v in zip(keys, domain)) for k in prob.kinds], dtype=bool)


def _place_gang(st: _State, prob: Problem, gid: int, domain: tuple[str, ...] | None) -> int:
    """Place as many of the gang's pods as fit; returns how many."""
    info = prob.gangs[gid]
    # largest pods first (by their biggest share of any compatible bin)
    order = sorted(info.classes, key=lambda c: -max(
        (max(r / k if k else 0 for r, k in zip(prob.shapes[prob.classes[c].shape].req, prob.kinds[kid].cap))
         for kid in prob.compat[prob.classes[c].shape]), default=0))
    placed = 0
    for cid in order:
        shape = prob.classes[cid].shape
        dk = _domain_kinds(prob, shape, domain)
        left = prob.classes[cid].count
        counts = st.fits(shape, dk)
        for b in np.flatnonzero(counts):
            take = min(left, int(counts[b]))
            st.place(int(b), cid, take)
            left -= take
            if not left:
                break
        while left:
            best, best_key = -1, None
            for kid in prob.compat[shape]:
                k = prob.kinds[kid]
                if not k.new or st.headroom[kid] <= 0 or (dk is not None and not dk[kid]):
                    continue
                per_node = min(left, prob.fit_count[(shape, kid)])
                key = (k.cost / per_node, -per_node, kid)
                if best_key is None or key < best_key:
                    best, best_key = kid, key
            if best < 0:
                break
            b = st.open(best)
            take = min(left, prob.fit_count[(shape, best)])
            st.place(b, cid, take)
            left -= take
        placed += prob.classes[cid].count - left
    return placed


def _candidate_domains(prob: Problem, gid: int) -> list[tuple[str, ...] | None]:
    info = prob.gangs[gid]
    shapes = {prob.classes[c].shape for c in info.classes}
    if not any(prob.shapes[s].topology_keys for s in shapes):
        return [None]
    domains = set()
    for s in shapes:
        for kid in prob.compat[s]:
            d = prob.domain(s, kid)
            if d is not None:
                domains.add(d)
    return sorted(domains)


def greedy(prob: Problem, order: list[int] | None = None) -> Assignment:
    order = order if order is not None else gang_order(prob)
    st = _State(prob, order)
    satisfied = [False] * len(prob.gangs)
    domain: list[tuple[str, ...] | None] = [None] * len(prob.gangs)
    for gid in order:
        info = prob.gangs[gid]
        best = None
        for d in _candidate_domains(prob, gid):
            mark, cost0 = len(st.log), st.cost
            placed = _place_gang(st, prob, gid, d)
            ok = placed >= max(info.need, 1)
            score = (ok, placed, -(st.cost - cost0))
            st.undo(mark)
            if ok and (best is None or score > best[0]):
                best = (score, d)
        if best is None:
            continue
        _place_gang(st, prob, gid, best[1])
        satisfied[gid] = True
        domain[gid] = best[1]

    y = [0] * len(prob.classes)
    bins, names = [], []
    for b in range(st.n):
        if not st.contents[b] and st.names[b] is None:
            continue  # pragma: no cover - an opened bin always gets a pod
        if st.contents[b]:
            for cid, cnt in st.contents[b].items():
                y[cid] += cnt
            bins.append((int(st.kind[b]), dict(st.contents[b])))
            names.append(st.names[b])
    return Assignment(y, satisfied, domain, bins, names)


def max_placeable(prob: Problem, gid: int) -> int:
    """Most pods of one gang that fit at once with every limit to itself (for explanations)."""
    best = 0
    for d in _candidate_domains(prob, gid):
        best = max(best, _place_gang(_State(prob, [gid]), prob, gid, d))
    return best
