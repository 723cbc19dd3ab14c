"""A fast, gang-aware first-fit-decreasing plan.

It seeds CP-SAT (as a hint and as extra packing patterns) and is the plan
returned when the solver finds nothing better in its time limit, so it must
be valid on its own: gangs are placed whole (at least their quorum) or rolled
back, highest priority and oldest first; existing free capacity is used
before any node is bought; a new node comes from the group with the lowest
price per pod it can carry.

Its time depends on the pending pods, not on the cluster's limits: bins are
rows added as nodes are opened (never one per possible node), a gang with a
topology constraint re-tries a domain only when that domain changed since a
gang of the same make-up was tried there, and past its deadline it stops
placing gangs and returns what it has (still a valid plan).
"""

from __future__ import annotations

import time
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
    stopped_early: bool = False  # the greedy's deadline passed before every gang was tried

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
        size = existing + max(16, min(sum(prob.gangs[g].pending for g in gangs), 1024))  # grows as bins open
        self.free = np.zeros((size, len(prob.resources)), dtype=np.int64)
        self.kind = np.full(size, -1, dtype=np.int64)
        self.free[:existing] = base.free
        self.kind[:existing] = base.kind
        self.names: list[str | None] = list(base.names)
        self.n = existing
        # per kind: bumped whenever one of its bins changes or opens (a domain's cached trial is then stale)
        self.version = np.zeros(len(prob.kinds), dtype=np.int64)
        # per shape, a bin index before which no bin can take one more pod of it (first-fit's "skip full bins")
        self.start = np.zeros(len(prob.shapes), dtype=np.int64)
        self.headroom = {k.kid: k.max_count for k in prob.kinds if k.new}
        self.contents: list[dict[int, int]] = [dict() for _ in range(existing)]  # one per open bin
        self.log: list[tuple[int, int, int]] = []  # (bin, class, count); class -1 marks an open
        self.cost = 0
        # per shape: boolean mask over kinds, and the kinds' topology domains
        self.compat_mask = base.compat_mask

    def place(self, b: int, cid: int, count: int) -> None:
        self.version[self.kind[b]] += 1
        self.free[b] -= count * self.req[self.prob.classes[cid].shape]
        self.contents[b][cid] = self.contents[b].get(cid, 0) + count
        self.log.append((b, cid, count))

    def open(self, kid: int) -> int:
        b = self.n
        if b == len(self.kind):  # double the rows: amortised O(1) per opened node
            self.free = np.concatenate([self.free, np.zeros_like(self.free)])
            self.kind = np.concatenate([self.kind, np.full(len(self.kind), -1, dtype=np.int64)])
        self.n += 1
        self.names.append(None)
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
                self.names.pop()
                self.kind[b] = -1
                self.headroom[count] += 1
                self.cost -= self.prob.kinds[count].cost
                self.contents.pop()  # the log undoes opens last-first: b is the last bin
            else:
                self.version[self.kind[b]] += 1
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
        ids = cache.get(keys)
        if ids is None:  # per kind, the id of its domain for these keys (-1: it lacks a key): one pass over kinds
            seen: dict[tuple, int] = {}
            ids = cache[keys] = (seen, np.array(
                [seen.setdefault(d, len(seen)) if None not in (d := tuple(k.labels.get(key) for key in keys)) else -1
                 for k in prob.kinds], dtype=np.int64))
        mask = cache[(keys, domain)] = ids[1] == ids[0].get(domain, -2)
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


def candidate_domains(prob: Problem, gid: int) -> list[tuple[str, ...] | None]:
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


def _signature(prob: Problem, gid: int) -> tuple:
    """What a trial placement of a gang depends on besides the state: its shapes, counts and quorum."""
    info = prob.gangs[gid]
    return info.need, tuple(sorted((prob.classes[c].shape, prob.classes[c].count) for c in info.classes))


def _fresh_key(prob: Problem, shapes: list[int], mask: np.ndarray) -> tuple:
    """Two untouched domains whose kinds look alike to these shapes give the same trial result."""
    kids = np.flatnonzero(mask)
    look = tuple((k.cap, k.cost, k.max_count, k.new, len(k.nodes)) for k in (prob.kinds[i] for i in kids.tolist()))
    return look, _base(prob).compat_mask[np.ix_(shapes, kids)].tobytes()


@dataclass(slots=True)
class _Trials:
    """A gang make-up's trial results per topology domain, each valid while its domain's stamp holds."""

    domains: list[tuple[str, ...]]
    masks: np.ndarray  # domains x kinds (0/1)
    stamp: np.ndarray  # domain's version sum when tried (-1: never)
    placed: np.ndarray  # pods placed by the trial (-1: quorum not reached)
    cost: np.ndarray  # its added cost

    def best(self, now: np.ndarray) -> int | None:
        """Most pods, then cheapest, then the first domain (the order trials always used); only current trials."""
        ok = (self.stamp == now) & (self.placed >= 0)
        if not ok.any():
            return None
        cand = ok & (self.placed == self.placed[ok].max())
        cand &= self.cost == self.cost[cand].min()
        return int(np.argmax(cand))


def _trials(prob: Problem, gid: int, shapes: list[int], cache: dict) -> _Trials:
    key = (prob.shapes[shapes[0]].topology_keys, tuple(shapes))
    shared = cache.get(key)
    if shared is None:
        domains = candidate_domains(prob, gid)
        masks = np.array([_domain_kinds(prob, shapes[0], d) for d in domains], dtype=np.int64).reshape(len(domains), len(prob.kinds))
        shared = cache[key] = (domains, masks)
    domains, masks = shared
    n = len(domains)
    return _Trials(domains, masks, np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
                   np.zeros(n, dtype=np.int64))


def _try(st: _State, prob: Problem, gid: int, d: tuple[str, ...] | None) -> tuple[int, int] | None:
    """(pods placed, added cost) of placing the gang in domain `d`, then undone; None below quorum."""
    mark, cost0 = len(st.log), st.cost
    placed = _place_gang(st, prob, gid, d)
    cost = st.cost - cost0
    st.undo(mark)
    return (placed, cost) if placed >= max(prob.gangs[gid].need, 1) else None


def greedy(prob: Problem, order: list[int] | None = None, deadline: float | None = None) -> Assignment:
    """First-fit-decreasing by gang; past `deadline` (a `time.perf_counter()` value) the rest stay unplaced."""
    order = order if order is not None else gang_order(prob)
    st = _State(prob, order)
    satisfied = [False] * len(prob.gangs)
    domain: list[tuple[str, ...] | None] = [None] * len(prob.gangs)
    by_make: dict[tuple, _Trials] = {}  # gang signature -> its trials per domain
    domain_sets: dict[tuple, tuple] = {}  # (topology keys, shapes) -> (candidate domains, their kind masks)
    fresh: dict[tuple, tuple[int, int] | None] = {}  # (signature, look of an untouched domain) -> trial
    stopped = False
    for gid in order:
        if deadline is not None and time.perf_counter() > deadline:
            stopped = True
            break
        info = prob.gangs[gid]
        shapes = sorted({prob.classes[c].shape for c in info.classes})
        if not any(prob.shapes[s].topology_keys for s in shapes):
            if _try(st, prob, gid, None) is None:
                continue
            chosen = None
        else:
            sig = _signature(prob, gid)
            tr = by_make.get(sig)
            if tr is None:
                tr = by_make[sig] = _trials(prob, gid, shapes, domain_sets)
            now = tr.masks @ st.version  # a domain's stamp changes whenever one of its kinds' bins does
            versions = st.version.copy()  # trials are undone: their bumps must not make domains look changed
            for i in np.flatnonzero(now != tr.stamp).tolist():
                fkey = (sig, _fresh_key(prob, shapes, tr.masks[i] > 0)) if now[i] == 0 else None
                if fkey is not None and fkey in fresh:
                    res = fresh[fkey]
                else:
                    res = _try(st, prob, gid, tr.domains[i])
                    st.version[:] = versions
                    if fkey is not None:
                        fresh[fkey] = res
                tr.stamp[i] = now[i]
                tr.placed[i], tr.cost[i] = res if res is not None else (-1, 0)
                if deadline is not None and time.perf_counter() > deadline and tr.best(now) is not None:
                    break  # out of time: the best domain found so far
            b = tr.best(now)
            if b is None:
                continue
            chosen = tr.domains[b]
        _place_gang(st, prob, gid, chosen)
        satisfied[gid] = True
        domain[gid] = chosen

    y = [0] * len(prob.classes)
    bins, names = [], []
    for b in range(st.n):
        if st.contents[b]:  # an existing node the plan leaves empty is not a bin of it
            for cid, cnt in st.contents[b].items():
                y[cid] += cnt
            bins.append((int(st.kind[b]), dict(st.contents[b])))
            names.append(st.names[b])
    return Assignment(y, satisfied, domain, bins, names, stopped)


def max_placeable(prob: Problem, gid: int, deadline: float | None = None) -> int:
    """Most pods of one gang that fit at once with every limit to itself (for explanations; past `deadline`,
    the most found so far)."""
    best = 0
    for d in candidate_domains(prob, gid):
        best = max(best, _place_gang(_State(prob, [gid]), prob, gid, d))
        if deadline is not None and time.perf_counter() > deadline:
            break
    return best
