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


@dataclass(slots=True)
class _Base:
    """Per-problem arrays shared by every `_State` (built once: explanations make many states)."""

    prob: Problem
    req: np.ndarray  # shapes x resources
    free: np.ndarray  # existing nodes x resources
    kind: np.ndarray  # existing nodes -> kind
    names: list[str | None]
    compat_mask: np.ndarray  # shapes x kinds
    size: np.ndarray  # per shape: its largest share of any compatible bin (the placement order)
    new_compat: list[list[int]]  # per shape: compatible kinds that are node groups
    domain_kinds: dict = field(default_factory=dict)  # (topology keys, domain) -> kinds mask
    shape_domains: dict = field(default_factory=dict)  # shape -> topology domains of its compatible kinds


def _base(prob: Problem) -> _Base:
    if prob.greedy_base is not None:
        return prob.greedy_base
    R, nk = len(prob.resources), len(prob.kinds)
    req = np.array([s.req for s in prob.shapes], dtype=np.int64).reshape(len(prob.shapes), R)
    existing = [(k.kid, name) for k in prob.kinds if not k.new for name in k.nodes]
    caps = np.array([k.cap for k in prob.kinds], dtype=np.int64).reshape(nk, R)
    free = caps[[kid for kid, _ in existing]].reshape(len(existing), R)
    kind = np.array([kid for kid, _ in existing], dtype=np.int64)
    compat_mask = np.zeros((len(prob.shapes), nk), dtype=bool)
    for s, ks in enumerate(prob.compat):
        compat_mask[s, ks] = True
    size = np.zeros(len(prob.shapes), dtype=float)
    capf = caps.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        for s, ks in enumerate(prob.compat):
            if ks:
                c = capf[ks]
                share = np.where(c > 0, req[s].astype(float) / c, 0.0)
                size[s] = share.max()
    new_compat = [[kid for kid in ks if prob.kinds[kid].new] for ks in prob.compat]
    base = _Base(prob, req, free, kind, [name for _, name in existing], compat_mask, size, new_compat)
    prob.greedy_base = base
    return base


class _State:
    """Bins as numpy rows so "how many fit where" is one vector operation."""

    def __init__(self, prob: Problem, gangs: list[int]) -> None:
        self.prob = prob
        base = _base(prob)  # the arrays every state of this problem starts from (built once)
        self.req = base.req
        existing = len(base.names)
        total_pods = sum(prob.gangs[g].pending for g in gangs)
        extra = sum(min(k.max_count, total_pods) for k in prob.kinds if k.new)
        size = existing + extra
        self.free = np.zeros((size, len(prob.resources)), dtype=np.int64)
        self.kind = np.full(size, -1, dtype=np.int64)
        self.free[:existing] = base.free
        self.kind[:existing] = base.kind
        self.names: list[str | None] = base.names + [None] * extra
        self.n = existing
        # per shape, a bin index before which no bin can take one more pod of it (first-fit's "skip full bins")
        self.start = np.zeros(len(prob.shapes), dtype=np.int64)
        self.headroom = {k.kid: k.max_count for k in prob.kinds if k.new}
        self.contents: list[dict[int, int]] = [dict() for _ in range(existing)]  # one per open bin
        self.log: list[tuple[int, int, int]] = []  # (bin, class, count); class -1 marks an open
        self.cost = 0
        # per shape: boolean mask over kinds, and the kinds' topology domains
        self.compat_mask = base.compat_mask

    def place(self, b: int, cid: int, count: int) -> None:
        self.free[b] -= count * self.req[self.prob.classes[cid].shape]
        self.contents[b][cid] = self.contents[b].get(cid, 0) + count
        self.log.append((b, cid, count))

    def open(self, kid: int) -> int:
        b = self.n
        self.n += 1
        self.kind[b] = kid
        self.contents.append({})
        self.free[b] = self.prob.kinds[kid].cap
        self.headroom[kid] -= 1
        self.cost += self.prob.kinds[kid].cost
        self.log.append((b, -1, kid))
        return b

    def undo(self, mark: int) -> None:
        if len(self.log) > mark:  # undone bins regain room (or disappear): cursors must not skip them
            np.minimum(self.start, min(b for b, _, _ in self.log[mark:]), out=self.start)
        while len(self.log) > mark:
            b, cid, count = self.log.pop()
            if cid == -1:
                self.n -= 1
                self.kind[b] = -1
                self.headroom[count] += 1
                self.cost -= self.prob.kinds[count].cost
                self.contents.pop()  # the log undoes opens last-first: b is the last bin
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
        lo = min(int(self.start[shape]), n)
        req = self.req[shape]
        pos = req > 0
        free = self.free[lo:n, pos]
        counts = (free // req[pos]).min(axis=1) if pos.any() else np.zeros(n - lo, dtype=np.int64)
        kinds = self.kind[lo:n]
        ok = self.compat_mask[shape, kinds] & (counts > 0)
        # bins only lose room until an undo (which moves the cursor back): skip this prefix next time
        self.start[shape] = lo + (int(np.argmax(ok)) if ok.any() else n - lo)
        if domain_kinds is not None:
            ok &= domain_kinds[kinds]
        out = np.zeros(n, dtype=np.int64)
        out[lo:] = np.where(ok, counts, 0)
        return out


def _domain_kinds(prob: Problem, shape: int, domain: tuple[str, ...] | None) -> np.ndarray | None:
    if domain is None:
        return None
    cache = _base(prob).domain_kinds
    keys = prob.shapes[shape].topology_keys
    mask = cache.get((keys, domain))
    if mask is None:
        mask = cache[(keys, domain)] = np.array(
            [all(k.labels.get(key) == v for key, v in zip(keys, domain)) for k in prob.kinds], dtype=bool)
    return mask


def _place_gang(st: _State, prob: Problem, gid: int, domain: tuple[str, ...] | None) -> int:
    """Place as many of the gang's pods as fit; returns how many."""
    info = prob.gangs[gid]
    # largest pods first (by their biggest share of any compatible bin)
    base = _base(prob)
    order = sorted(info.classes, key=lambda c: -base.size[prob.classes[c].shape])
    new_compat = base.new_compat
    placed = 0
    for cid in order:
        shape = prob.classes[cid].shape
        dk = _domain_kinds(prob, shape, domain)
        left = prob.classes[cid].count
        counts = st.fits(shape, dk)
        lo = int(st.start[shape])  # `fits` left only zeros before its cursor
        for b in (np.flatnonzero(counts[lo:]) + lo).tolist():
            take = min(left, int(counts[b]))
            st.place(b, cid, take)
            left -= take
            if not left:
                break
        while left:
            best, best_key = -1, None
            for kid in new_compat[shape]:
                k = prob.kinds[kid]
                if st.headroom[kid] <= 0 or (dk is not None and not dk[kid]):
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
    cache = _base(prob).shape_domains
    for s in shapes:
        if s not in cache:
            cache[s] = {d for d in (prob.domain(s, kid) for kid in prob.compat[s]) if d is not None}
        domains |= cache[s]
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
        if st.contents[b]:  # an existing node the plan leaves empty is not a bin of it
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
