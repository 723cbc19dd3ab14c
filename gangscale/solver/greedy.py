"""A fast, gang-aware first-fit-decreasing plan, quorum first.

It seeds CP-SAT (as a hint and as extra packing patterns) and is the plan
returned when the solver finds nothing better in its time limit, so it must
be valid on its own: a gang gets at least its quorum or nothing (a trial that
falls short is rolled back); existing free capacity is used before any node
is bought; a new node comes from the group with the lowest price per pod it
can carry.

The first objective is gangs started, so per priority level (highest first)
it places every gang's quorum (`minCount` less the members already bound)
before any extra member: equal-priority gangs go in order of the scarce
capacity their quorum uses (`scarcity`: a pod's share of its pool, priced by
how oversubscribed the pool is), then age. Then extra members and basic
groups, in the same order; then a cost repair re-packs the chosen pods whole
gang by whole gang and keeps that when it places them all for less.
With a `Guide` (the gang LP's answer for the top level, `bound.GangLP.guide`)
the gangs the LP starts go first, and a node group the LP fills is a last
resort for a shape it gave none of that group's nodes, with `spare_running`
its free running nodes too (a pod that fits several groups no longer takes the
nodes of one that other gangs' pods alone can use);
otherwise the cheapest price per pod still decides.
`quorum_first=False` is the older whole-gang-first order (priority, age).

Its time depends on the pending pods, not on the cluster's limits: bins are
rows added as nodes are opened (never one per possible node), a gang with a
topology constraint re-tries a domain only when that domain changed since a
gang of the same make-up was tried there, and past its deadline it stops
placing gangs and returns what it has (still a valid plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..model import GangKey
from .budget import past
from .problem import Problem


@dataclass(frozen=True, slots=True)
class Guide:
    """The gang LP's answer for the top priority level (`bound.GangLP.guide`), which the greedy follows where
    capacity is scarce: first-fit by cost alone lets a pod that could go elsewhere take the last nodes of a group
    another gang's pods can only use (flexible 8-GPU pods on p4de leave p4de-only gangs out while p5 nodes stay
    idle)."""

    started: dict[
        int, float
    ]  # per gang of that level: the share of it the LP starts (order: most first)
    allot: np.ndarray  # shapes x kinds: pods of the shape the LP puts on a node group's new nodes
    full: np.ndarray  # per kind: a node group the LP uses to its headroom (whose nodes it gives to some shapes only)


@dataclass(slots=True)
class Assignment:
    """A solution in the solver's terms, whoever produced it."""

    y: list[int]  # pods placed per class
    satisfied: list[bool]  # per gang: quorum reached (gang) / something placed (basic)
    domain: list[tuple[str, ...] | None]  # chosen topology domain per gang
    bins: list[tuple[int, dict[int, int]]]  # (kind, {class: count}) per used bin, existing first
    # existing node name per bin (None: new)
    bin_nodes: list[str | None] = field(default_factory=list)
    stopped_early: bool = False  # the greedy's deadline passed before every gang was tried
    order: list[int] = field(default_factory=list)  # the greedy's gang order ([]: not the greedy's)
    # gangs topology spread took pods from (skew.py)
    skew_cut: dict[GangKey, str] = field(default_factory=dict)

    def cost(self, prob: Problem) -> int:
        return sum(prob.kinds[k].cost for k, c in self.bins if prob.kinds[k].new and c)


def gang_order(prob: Problem) -> list[int]:
    """Who goes first when not everyone fits: priority, then age, then name."""
    return sorted(
        range(len(prob.gangs)),
        key=lambda g: (
            -prob.gangs[g].priority,
            not prob.gangs[g].is_gang,
            prob.gangs[g].gang.created,
            prob.gangs[g].gang.namespace,
            prob.gangs[g].gang.name,
        ),
    )


class _State:
    """Bins as numpy rows so "how many fit where" is one vector operation."""

    def __init__(
        self,
        prob: Problem,
        gangs: list[int],
        masks: dict | None = None,
        guide: Guide | None = None,
        spare_running: bool = False,
    ) -> None:
        self.prob = prob
        # the arrays every state of this problem starts from (built once, read-only)
        base = prob.arrays
        self.req = base.req
        existing = len(base.names)
        size = existing + max(
            16, min(sum(prob.gangs[g].pending for g in gangs), 1024)
        )  # grows as bins open
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
        # the same for the bins `spared` leaves to a shape (a bin's room only shrinks and a group's allotment to
        # the shape only runs out until an undo, which moves both cursors back)
        self.start_spare = np.zeros(len(prob.shapes), dtype=np.int64)
        self.headroom = {k.kid: k.max_count for k in prob.kinds if k.new}
        self.contents: list[dict[int, int]] = [dict() for _ in range(existing)]  # one per open bin
        self.log: list[tuple[int, int, int]] = []  # (bin, class, count); class -1 marks an open
        self.cost = 0
        self.y = [0] * len(prob.classes)  # pods placed per class
        self.compat_mask = base.compat_mask  # per shape: boolean mask over kinds
        self.pos = [np.flatnonzero(r > 0) for r in base.req]  # per shape: the resources it requests
        # (topology keys, domain) -> kinds mask: this run's memo (shared by the states of one run)
        self.masks: dict = masks if masks is not None else {}
        # the guide's allotments not used yet (shapes x kinds; None: unguided) and the node groups it fills
        follow = guide if guide is not None and bool(guide.full.any()) else None
        self.left: np.ndarray | None = follow.allot.copy() if follow is not None else None
        self.full: list[bool] = (
            follow.full.tolist() if follow is not None else [False] * len(prob.kinds)
        )
        # per kind: the guide-filled node group's new kind an existing node belongs to (-1: none, or unguided)
        self.filled_group = np.full(len(prob.kinds), -1, dtype=np.int64)
        if follow is not None and spare_running:
            new_of = {k.group: k.kid for k in prob.kinds if k.new and follow.full[k.kid]}
            for k in prob.kinds:
                if not k.new and k.group in new_of:
                    self.filled_group[k.kid] = new_of[k.group]
        self.filled_kinds = np.flatnonzero(self.filled_group >= 0)  # those existing kinds

    def place(self, b: int, cid: int, count: int) -> None:
        self.version[self.kind[b]] += 1
        self.free[b] -= count * self.req[self.prob.classes[cid].shape]
        self.contents[b][cid] = self.contents[b].get(cid, 0) + count
        self.y[cid] += count
        self.log.append((b, cid, count))
        if self.left is not None:
            self.left[self.prob.classes[cid].shape, self.kind[b]] -= count

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
        if (
            len(self.log) > mark
        ):  # undone bins regain room (or disappear): cursors must not skip them
            first = min(b for b, _, _ in self.log[mark:])
            np.minimum(self.start, first, out=self.start)
            np.minimum(self.start_spare, first, out=self.start_spare)
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
                self.y[cid] -= count
                if (
                    self.left is not None
                ):  # the shape's allotment grows back: bins it spared may take it
                    shape = self.prob.classes[cid].shape
                    self.left[shape, self.kind[b]] += count
                    self.start_spare[shape] = 0
                left = self.contents[b].get(cid, 0) - count  # a `remove` (count < 0) puts pods back
                if left:
                    self.contents[b][cid] = left
                else:
                    del self.contents[b][cid]

    def remove(self, b: int, cid: int, count: int) -> None:
        """Take `count` pods of class `cid` off bin `b` (undone by `undo` as a placement is); the bin stays open
        (an emptied new node still holds its group's headroom until the state becomes an `Assignment`, which
        drops it). The bin regains room, so no shape's first-fit cursor may stay past it."""
        self.place(b, cid, -count)
        if not self.contents[b][cid]:
            del self.contents[b][cid]
        np.minimum(self.start, b, out=self.start)
        np.minimum(self.start_spare, b, out=self.start_spare)

    def place_many(self, bins: list[int], cid: int, counts: list[int]) -> None:
        """`place` for several bins at once (one vector update of their free capacity)."""
        if len(bins) == 1:
            self.place(bins[0], cid, counts[0])
            return
        idx = np.array(bins, dtype=np.int64)
        np.add.at(self.version, self.kind[idx], 1)
        self.free[idx] -= (
            np.array(counts, dtype=np.int64)[:, None] * self.req[self.prob.classes[cid].shape]
        )
        for b, count in zip(bins, counts, strict=False):
            self.contents[b][cid] = self.contents[b].get(cid, 0) + count
            self.log.append((b, cid, count))
        self.y[cid] += sum(counts)
        if self.left is not None:
            np.subtract.at(self.left[self.prob.classes[cid].shape], self.kind[idx], counts)

    def avoid(self, shape: int, kid: int) -> bool:
        """A new node of kind `kid` for a pod of `shape` is a last resort: a node group the guide fills, with none
        of its nodes left to this shape (the LP gives them to pods with fewer or dearer places to go)."""
        return self.full[kid] and self.left is not None and self.left[shape, kid] <= GUIDE_EPS

    def spared(self, shape: int, kinds: np.ndarray) -> np.ndarray:
        """Per bin kind: an existing node that `avoid` holds for other shapes (a node of a group the guide fills,
        with none of that group left to this shape): the free room of existing nodes is part of the scarce pool
        too (8-GPU pods with no product selector would take the free H100 nodes an H100-only gang needs)."""
        g = self.filled_group[kinds]
        out = g >= 0
        if out.any() and self.left is not None:
            out[out] = self.left[shape, g[out]] <= GUIDE_EPS
        return out

    def fits(
        self, shape: int, domain_kinds: np.ndarray | None, lo: int, hi: int
    ) -> tuple[int, np.ndarray]:
        """(lo', pods of `shape` that still fit on each open bin in [lo', hi), 0 where incompatible): no bin
        in [lo, lo') can take one. Scanned from the shape's cursor, a window with no room moves the cursor."""
        at_cursor = lo == int(self.start[shape])
        req = self.req[shape]
        pos = self.pos[shape]
        kinds = self.kind[lo:hi]
        ok = self.compat_mask[shape, kinds]
        counts = (
            (self.free[lo:hi][:, pos] // req[pos]).min(axis=1)
            if len(pos)
            else np.zeros(hi - lo, dtype=np.int64)
        )
        ok &= counts > 0
        first = int(np.argmax(ok)) if ok.any() else hi - lo
        if at_cursor:  # bins only lose room until an undo (which moves the cursor back): skip this prefix next time
            self.start[shape] = lo + first
        if domain_kinds is not None:
            ok &= domain_kinds[kinds]
        return lo + first, np.where(ok[first:], counts[first:], 0)


GUIDE_EPS = 1e-6  # pods: an allotment of the guide below this is used up (LP tolerance)
# open bins first fit scans at first (then twice as many at a time): a gang's pods rarely need more than the first
# window, and a window's numpy work grows with its rows (a fixed 1,024 made the greedy ~1.5x slower at 10,000 pods)
FIT_WINDOW = 256


def _first_fit(
    st: _State, shape: int, cid: int, dk: np.ndarray | None, left: int, spare: bool = False
) -> int:
    """Put up to `left` pods of class `cid` on open bins, first fit, a window of bins at a time, each twice the
    last (the same bins as one scan of all of them, without computing the room of bins after the last one used,
    and few windows where many bins have no room for it); returns what is left. `spare`: leave out the existing
    nodes the guide holds for other shapes (`_State.spared`)."""
    lo = min(int(st.start[shape]), st.n)
    if spare:
        lo = max(lo, min(int(st.start_spare[shape]), st.n))
    window = FIT_WINDOW
    while left and lo < st.n:
        hi = min(st.n, lo + window)
        window *= 2
        at_cursor = spare and dk is None and lo == int(st.start_spare[shape])
        at, counts = st.fits(shape, dk, lo, hi)
        if spare:
            counts = np.where(st.spared(shape, st.kind[at:hi]), 0, counts)
            if (
                at_cursor
            ):  # no bin before the first with room left to this shape can take it until an undo
                usable = np.flatnonzero(counts)
                st.start_spare[shape] = at + int(usable[0]) if len(usable) else hi
        nz = np.flatnonzero(counts)
        if len(nz):  # the bins (in order) whose room covers `left`, the last one partly
            room = counts[nz]
            k = int(np.searchsorted(np.cumsum(room), left)) + 1
            takes = room[:k].tolist()
            takes[-1] -= max(0, sum(takes) - left)
            st.place_many((nz[:k] + at).tolist(), cid, takes)
            left -= sum(takes)
        lo = hi
    return left


def _domain_kinds(
    prob: Problem, shape: int, domain: tuple[str, ...] | None, memo: dict
) -> np.ndarray | None:
    """The kinds in `domain` for the shape's topology keys (None: no domain), memoised in the caller's `memo`."""
    if domain is None:
        return None
    keys = prob.shapes[shape].topology_keys
    mask = memo.get((keys, domain))
    if mask is None:
        seen, ids = prob.arrays.domain_ids[keys]
        mask = memo[(keys, domain)] = ids == seen.get(domain, -2)
    return mask


def _place_gang(
    st: _State,
    prob: Problem,
    gid: int,
    domain: tuple[str, ...] | None,
    limit: int | None = None,
    target: list[int] | None = None,
) -> int:
    """Place more of the gang's pods -- up to `limit` more, each class up to `target` (default: all of it)
    counting what it already has -- as far as they fit; returns how many were added."""
    info = prob.gangs[gid]
    # largest pods first (by their biggest share of any compatible bin)
    base = prob.arrays
    order = sorted(info.classes, key=lambda c: -base.size[prob.classes[c].shape])
    placed = 0
    for cid in order:
        shape = prob.classes[cid].shape
        want = (target[cid] if target is not None else prob.classes[cid].count) - st.y[cid]
        if limit is not None:
            want = min(want, limit - placed)
        if want <= 0:
            continue
        dk = _domain_kinds(prob, shape, domain, st.masks)
        # existing nodes the guide holds for other shapes come after the new nodes it leaves to this one
        spare = len(st.filled_kinds) > 0 and bool(st.spared(shape, st.filled_kinds).any())
        left = _first_fit(st, shape, cid, dk, want, spare)
        if spare:
            left = _open_new(st, prob, shape, cid, dk, left, last_resort=False)
            left = _first_fit(st, shape, cid, dk, left)
        left = _open_new(st, prob, shape, cid, dk, left, last_resort=True)
        placed += want - left
    return placed


def _open_new(
    st: _State,
    prob: Problem,
    shape: int,
    cid: int,
    dk: np.ndarray | None,
    left: int,
    last_resort: bool,
) -> int:
    """Put up to `left` pods of class `cid` on new nodes, the lowest price per pod first and the guide's held
    groups (`_State.avoid`) last, or not at all unless `last_resort`; returns what is left."""
    while left:
        best, best_key = -1, None
        for kid in prob.arrays.new_compat[shape]:
            k = prob.kinds[kid]
            if st.headroom[kid] <= 0 or (dk is not None and not dk[kid]):
                continue
            held = st.avoid(shape, kid)
            if held and not last_resort:
                continue
            per_node = min(left, prob.fit_count[(shape, kid)])
            key = (held, k.cost / per_node, -per_node, kid)
            if best_key is None or key < best_key:
                best, best_key = kid, key
        if best < 0:
            break
        b = st.open(best)
        take = min(left, prob.fit_count[(shape, best)])
        st.place(b, cid, take)
        left -= take
    return left


def candidate_domains(prob: Problem, gid: int) -> list[tuple[str, ...] | None]:
    return prob.gang_domains(gid)


def _signature(prob: Problem, gid: int) -> tuple:
    """What a trial placement of a gang depends on besides the state: its shapes, counts and quorum."""
    info = prob.gangs[gid]
    return info.need, tuple(
        sorted((prob.classes[c].shape, prob.classes[c].count) for c in info.classes)
    )


def _fresh_key(prob: Problem, shapes: list[int], mask: np.ndarray) -> tuple:
    """Two untouched domains whose kinds look alike to these shapes give the same trial result."""
    kids = np.flatnonzero(mask)
    look = tuple(
        (k.cap, k.cost, k.max_count, k.new, len(k.nodes))
        for k in (prob.kinds[i] for i in kids.tolist())
    )
    return look, prob.arrays.compat_mask[np.ix_(np.asarray(shapes, dtype=np.intp), kids)].tobytes()


@dataclass(slots=True)
class _Trials:
    """A gang make-up's trial results per topology domain, each valid while its domain's stamp holds."""

    domains: list[tuple[str, ...] | None]
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


def _trials(prob: Problem, gid: int, shapes: list[int], cache: dict, memo: dict) -> _Trials:
    key = (prob.shapes[shapes[0]].topology_keys, tuple(shapes))
    shared = cache.get(key)
    if shared is None:
        domains = candidate_domains(prob, gid)
        masks = np.array(
            [_domain_kinds(prob, shapes[0], d, memo) for d in domains], dtype=np.int64
        ).reshape(len(domains), len(prob.kinds))
        shared = cache[key] = (domains, masks)
    domains, masks = shared
    n = len(domains)
    return _Trials(
        domains,
        masks,
        np.full(n, -1, dtype=np.int64),
        np.full(n, -1, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
    )


def _try(
    st: _State, prob: Problem, gid: int, d: tuple[str, ...] | None, limit: int | None = None
) -> tuple[int, int] | None:
    """(pods placed, added cost) of placing the gang (up to `limit` pods) in domain `d`, then undone; None below
    quorum."""
    mark, cost0 = len(st.log), st.cost
    placed = (
        _place_gang(st, prob, gid, d, limit) if limit is not None else _place_gang(st, prob, gid, d)
    )
    cost = st.cost - cost0
    st.undo(mark)
    return (placed, cost) if placed >= max(prob.gangs[gid].need, 1) else None


def scarcity(prob: Problem) -> np.ndarray:
    """Per shape, the scarce capacity one pod uses: sum over resources of its share of its pool's supply,
    times how oversubscribed that pool is by everything pending (a cheap stand-in for an LP dual price).

    A shape's pool is the capacity of its compatible kinds (free capacity of existing nodes plus node-group
    headroom); a kind's load spreads each shape's demand over its pool in proportion to capacity.
    """
    base = prob.arrays
    R = len(prob.resources)
    if not prob.shapes or not prob.kinds:
        return np.zeros(len(prob.shapes))
    caps = np.array([k.cap for k in prob.kinds], dtype=float).reshape(len(prob.kinds), R)
    K = caps * np.array([k.max_count for k in prob.kinds], dtype=float)[:, None]  # kinds x R
    M = base.compat_mask.astype(float)  # shapes x kinds
    pods = np.zeros(len(prob.shapes))
    for c in prob.classes:
        pods[c.shape] += c.count
    req = base.req.astype(float)
    S = M @ K  # shapes x R: each shape's pool
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(S > 0, pods[:, None] * req / S, 0.0)  # shapes x R: demand over pool
        U = M.T @ per  # kinds x R: utilisation of each kind
        price = np.where(
            S > 0, (M @ (K * U)) / S, 0.0
        )  # shapes x R: utilisation of the shape's pool
        w = np.where(S > 0, price * req / S, 0.0).sum(axis=1)
    return np.nan_to_num(w)


def quorum_order(prob: Problem, guide: Guide | None = None) -> list[int]:
    """Priority first; inside a level, gangs before basic groups, the gangs the guide's LP starts (most of them
    first: it rounds the LP), the quorum using least scarce capacity first, then age and name."""
    share = guide.started if guide is not None else {}
    w = scarcity(prob)
    size = prob.arrays.size

    def weight(g: int) -> float:
        info = prob.gangs[g]
        left, total = info.need, 0.0
        for cid in sorted(
            info.classes, key=lambda c: -size[prob.classes[c].shape]
        ):  # the order they are placed
            take = min(left, prob.classes[cid].count)
            total += take * float(w[prob.classes[cid].shape])
            left -= take
        return total

    return sorted(
        range(len(prob.gangs)),
        key=lambda g: (
            -prob.gangs[g].priority,
            not prob.gangs[g].is_gang,
            -round(share.get(g, 1.0), 6),
            weight(g) if prob.gangs[g].is_gang else 0.0,
            prob.gangs[g].gang.created,
            prob.gangs[g].gang.namespace,
            prob.gangs[g].gang.name,
        ),
    )


@dataclass(slots=True)
class _Chooser:
    """Picks a gang's topology domain by trial placements, re-trying a domain only when it changed."""

    # (gang signature, limit mode) -> its trials per domain
    by_make: dict = field(default_factory=dict)
    # (topology keys, shapes) -> (candidate domains, kind masks)
    domain_sets: dict = field(default_factory=dict)
    fresh: dict = field(default_factory=dict)  # (signature, look of an untouched domain) -> trial

    def place(
        self, st: _State, prob: Problem, gid: int, limit: int | None, deadline: float | None
    ) -> tuple[bool, tuple[str, ...] | None]:
        """Place the gang (up to `limit` pods) in its best domain; (quorum reached, domain)."""
        info = prob.gangs[gid]
        shapes = sorted({prob.classes[c].shape for c in info.classes})
        if not any(
            prob.shapes[s].topology_keys for s in shapes
        ):  # one place to try: keep it if it reaches quorum
            mark = len(st.log)
            placed = (
                _place_gang(st, prob, gid, None, limit)
                if limit is not None
                else _place_gang(st, prob, gid, None)
            )
            if placed < max(info.need, 1):
                st.undo(mark)
                return False, None
            return True, None
        sig = (_signature(prob, gid), limit is None)
        tr = self.by_make.get(sig)
        if tr is None:
            tr = self.by_make[sig] = _trials(prob, gid, shapes, self.domain_sets, st.masks)
        # a domain's stamp changes whenever one of its kinds' bins does
        stamps = tr.masks @ st.version
        # trials are undone: their bumps must not make domains look changed
        versions = st.version.copy()
        for i in np.flatnonzero(stamps != tr.stamp).tolist():
            fkey = (sig, _fresh_key(prob, shapes, tr.masks[i] > 0)) if stamps[i] == 0 else None
            if fkey is not None and fkey in self.fresh:
                res = self.fresh[fkey]
            else:
                res = _try(st, prob, gid, tr.domains[i], limit)
                st.version[:] = versions
                if fkey is not None:
                    self.fresh[fkey] = res
            tr.stamp[i] = stamps[i]
            tr.placed[i], tr.cost[i] = res if res is not None else (-1, 0)
            if past(deadline) and tr.best(stamps) is not None:
                break  # out of time: the best domain found so far
        b = tr.best(stamps)
        if b is None:
            return False, None
        chosen = tr.domains[b]
        if limit is not None:
            _place_gang(st, prob, gid, chosen, limit)
        else:
            _place_gang(st, prob, gid, chosen)
        return True, chosen


def _levels(prob: Problem, order: list[int]) -> list[list[int]]:
    """`order` cut into runs of equal priority (order is by priority first)."""
    out: list[list[int]] = []
    for g in order:
        if out and prob.gangs[out[-1][0]].priority == prob.gangs[g].priority:
            out[-1].append(g)
        else:
            out.append([g])
    return out


def _repack(
    prob: Problem, order: list[int], y: list[int], domain: list, satisfied: list[bool], masks: dict
) -> _State | None:
    """The same pods per class and domains, placed whole gang by whole gang; None unless every pod finds room."""
    st = _State(prob, order, masks)
    for gid in order:
        if satisfied[gid]:
            _place_gang(st, prob, gid, domain[gid], None, y)
    return st if st.y == y else None


def greedy(
    prob: Problem,
    order: list[int] | None = None,
    deadline: float | None = None,
    quorum_first: bool = True,
    guide: Guide | None = None,
    repack: bool = True,
    spare_running: bool = False,
) -> Assignment:
    """Quorum-first (or whole-gang-first) first-fit-decreasing; past `deadline` (a `budget.now()` reading)
    the rest stay unplaced, but the first gang is always tried (a plan is never empty only for a slow clock).
    With the gang LP's `guide`, its gangs go first and the node groups it fills go to the shapes it gives them.
    `repack=False` leaves out the whole-gang cost repair (`repacked`), for a caller that repairs by LP prices
    first and needs it only when that misses. `spare_running`: the guide's filled groups keep their running
    nodes' free room too (`_State.spared`)."""
    order = (
        order
        if order is not None
        else (quorum_order(prob, guide) if quorum_first else gang_order(prob))
    )
    st = _State(prob, order, guide=guide, spare_running=spare_running)
    satisfied = [False] * len(prob.gangs)
    domain: list[tuple[str, ...] | None] = [None] * len(prob.gangs)
    stopped = _place_in_order(st, prob, order, satisfied, domain, deadline, quorum_first)
    if quorum_first and repack and not (stopped or past(deadline)):
        # cost repair: the same pods packed whole gang by whole gang
        again = _repack(prob, order, st.y, domain, satisfied, st.masks)
        if again is not None and again.cost < st.cost:
            st = again
    return _assignment(prob, st, satisfied, domain, stopped, order)


def _place_in_order(
    st: _State,
    prob: Problem,
    order: list[int],
    satisfied: list[bool],
    domain: list[tuple[str, ...] | None],
    deadline: float | None,
    quorum_first: bool = True,
    tried: bool = False,
) -> bool:
    """The greedy's passes over `order`, level by level, on `st` (`satisfied` and `domain` updated in place):
    quorum-first, every gang's quorum that is not reached yet, then extra members of the gangs started and the
    basic groups; whole-gang-first, everything in order. A gang already satisfied only gains members. Returns
    True when `deadline` stopped it before every gang was tried (only extra members cut at the last level is not
    stopping); the first gang is tried whatever the clock says unless `tried`."""
    chooser = _Chooser()
    levels = _levels(prob, order)
    for li, level in enumerate(levels):
        if quorum_first:
            for gid in level:  # every gang's quorum before any extra member
                if not prob.gangs[gid].is_gang or satisfied[gid]:
                    continue
                if tried and past(deadline):
                    return True
                satisfied[gid], domain[gid] = chooser.place(
                    st, prob, gid, prob.gangs[gid].need, deadline
                )
                tried = True
        for i, gid in enumerate(
            level
        ):  # then extra members and basic groups (whole-gang-first: all)
            if tried and past(deadline):
                # only extra members are cut when every gang left here had its quorum tried and no level follows
                return (
                    li + 1 < len(levels)
                    or not quorum_first
                    or any(not prob.gangs[g].is_gang for g in level[i:])
                )
            if satisfied[gid]:
                if any(st.y[c] < prob.classes[c].count for c in prob.gangs[gid].classes):
                    _place_gang(st, prob, gid, domain[gid])
            elif not (quorum_first and prob.gangs[gid].is_gang):
                satisfied[gid], domain[gid] = chooser.place(st, prob, gid, None, deadline)
            tried = True
    return False


def fill_left_out(prob: Problem, a: Assignment, deadline: float | None = None) -> Assignment | None:
    """The pods plan `a` leaves out, placed on the free room of its nodes and the node groups' headroom it leaves,
    by the greedy's own passes in `a`'s order (the quorum of every gang not started, then extra members and basic
    groups, level by level). `a`'s pods stay where they are, so every level's gangs and pods only grow: a plan
    re-packed for cost (`repack`) frees room and headroom the greedy could not see when it placed them. None when
    nothing more fits, `a` was cut short, or one of its existing bins names no node of the problem. Past `deadline`
    it stops placing and keeps what it added."""
    if a.stopped_early or sum(a.y) == sum(c.count for c in prob.classes):
        return None
    st = _state_of(prob, a)
    if st is None:
        return None
    satisfied, domain = list(a.satisfied), list(a.domain)
    order = a.order or quorum_order(prob)
    before = sum(st.y)
    _place_in_order(st, prob, order, satisfied, domain, deadline, tried=True)
    if sum(st.y) == before:
        return None
    return _assignment(prob, st, satisfied, domain, False, order)


def placement_rank(prob: Problem, a: Assignment) -> tuple[int, ...]:
    """The planner's aim as a tuple, larger better: per priority level, highest first, gangs started and pods
    placed; then the cost, negated."""
    levels: dict[int, list[int]] = {}
    for g in prob.gangs:
        counts = levels.setdefault(g.priority, [0, 0])
        counts[0] += g.is_gang and a.satisfied[g.gid]
        counts[1] += sum(a.y[c] for c in g.classes)
    return (*(n for lvl in sorted(levels, reverse=True) for n in levels[lvl]), -a.cost(prob))


def _state_of(prob: Problem, a: Assignment) -> _State | None:
    """A greedy state holding plan `a`'s bins and pods, loaded in one vector update (None: an existing bin of `a`
    names no node of `prob`)."""
    st = _State(prob, list(range(len(prob.gangs))))
    row = {name: i for i, name in enumerate(prob.arrays.names)}
    names = a.bin_nodes if len(a.bin_nodes) == len(a.bins) else [None] * len(a.bins)
    rows, shapes, counts = [], [], []
    for (kid, contents), name in zip(a.bins, names, strict=True):
        if prob.kinds[kid].new:
            b = st.open(kid)
        elif name in row:
            b = row[name]
        else:
            return None
        for cid, n in contents.items():
            if n:
                st.contents[b][cid] = st.contents[b].get(cid, 0) + n
                st.y[cid] += n
                rows.append(b)
                shapes.append(prob.classes[cid].shape)
                counts.append(n)
    if rows:
        load = np.array(counts, dtype=np.int64)[:, None] * st.req[np.array(shapes, dtype=np.int64)]
        np.subtract.at(st.free, np.array(rows, dtype=np.int64), load)
    st.log.clear()  # `a`'s own placements are never undone: trials undo only what follows
    return st


def repacked(prob: Problem, a: Assignment) -> Assignment | None:
    """The greedy's whole-gang cost repair of its plan `a` (made with `repack=False`): the same pods per class and
    domains packed whole gang by whole gang in its order; None unless that places every pod for less."""
    st = _repack(prob, a.order, a.y, a.domain, a.satisfied, {})
    return (
        _assignment(prob, st, a.satisfied, a.domain, a.stopped_early, a.order)
        if st is not None and st.cost < a.cost(prob)
        else None
    )


def _assignment(
    prob: Problem, st: _State, satisfied: list[bool], domain: list, stopped: bool, order: list[int]
) -> Assignment:
    bins, names = [], []
    for b in range(st.n):
        if st.contents[b]:  # an existing node the plan leaves empty is not a bin of it
            bins.append((int(st.kind[b]), dict(st.contents[b])))
            names.append(st.names[b])
    return Assignment(list(st.y), satisfied, domain, bins, names, stopped, order)


def max_placeable(prob: Problem, gid: int, deadline: float | None = None) -> int:
    """Most pods of one gang that fit at once with every limit to itself (for explanations; past `deadline`,
    the most found so far)."""
    best, masks = 0, dict[tuple, np.ndarray]()
    for d in candidate_domains(prob, gid):
        best = max(best, _place_gang(_State(prob, [gid], masks), prob, gid, d))
        if past(deadline):
            break
    return best
