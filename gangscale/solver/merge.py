"""Fewer nodes at no more cost: the last objective, for plans no CP-SAT stage polished.

The objective is gangs, pods, hourly cost, then the number of new nodes. CP-SAT's last stage minimises the node
count; a plan that skips it (greedy only: no time left, the work-bounded mode, or a cost gap closed before the
polish could run) keeps the greedy's tie-break, which buys by price per pod and so takes two m5.4xlarge for two
pods that one m5.8xlarge of the same price holds. Here two new nodes whose pods fit together on one new node of a
kind costing no more than both are merged onto it.

Invariant: the result places the same pods per class (`y`, `satisfied`, `domain` kept), every bin within its
capacity (per-node pod rules are resources: fit.node_limits), compatible with its pods and in each pod's topology
domain, every node group within its headroom; it never costs more and has fewer new nodes, or it is `a` itself.
Cost: pairs of distinct new bins (kind, contents), at most `MAX_SIGNATURES` of them at once (the emptiest; one
that merges with none of the others leaves the window), each pair's possible hosts found once, at most
`MAX_SEARCHES` searches in all.
"""

from __future__ import annotations

import bisect
from collections import Counter

import numpy as np

from .greedy import Assignment
from .problem import Problem

MAX_SIGNATURES = 48  # distinct new bins looked at at once (the emptiest that may still merge)
MAX_SEARCHES = 1500  # host searches per plan (about 0.1 s at 10,000 pods): the polish's work bound
Signature = tuple[int, tuple[tuple[int, int], ...]]  # (kind, sorted (class, count))


def fewer_nodes(prob: Problem, a: Assignment) -> Assignment:
    """`a` with pairs of new nodes merged where one new node of no greater cost holds both (the module docstring);
    `a` itself when no pair merges."""
    new = Counter(_signature(k, c) for k, c in a.bins if prob.kinds[k].new and c)
    if sum(new.values()) < 2:
        return a
    used: Counter[int] = Counter()  # new nodes per kind
    for (k, _), n in new.items():
        used[k] += n
    pairs = _Pairs(prob)
    order = sorted(
        new, key=pairs.rank
    )  # the signatures, emptiest first (kept sorted as merges change them)
    merged = False
    while (step := pairs.best(order, new, used)) is not None:
        x, y, kind, times = step
        for s in (x, y):
            new[s] -= times
            used[s[0]] -= times
            if new[s] <= 0 and s in new:
                del new[s]
                order.pop(bisect.bisect_left(order, pairs.rank(s), key=pairs.rank))
        made = _signature(kind, dict(Counter(dict(x[1])) + Counter(dict(y[1]))))
        if made not in new:
            bisect.insort(order, made, key=pairs.rank)
        new[made] += times
        used[kind] += times
        merged = True
    if not merged:
        return a
    keep = [i for i, (k, c) in enumerate(a.bins) if not (prob.kinds[k].new and c)]
    names = list(a.bin_nodes) if len(a.bin_nodes) == len(a.bins) else [None] * len(a.bins)
    bins = [a.bins[i] for i in keep]
    bin_nodes = [names[i] for i in keep]
    for (kind, contents), n in sorted(new.items()):
        bins += [(kind, dict(contents)) for _ in range(n)]
        bin_nodes += [None] * n
    return Assignment(
        list(a.y),
        list(a.satisfied),
        list(a.domain),
        bins,
        bin_nodes,
        a.stopped_early,
        list(a.order),
    )


def _signature(kind: int, contents: dict[int, int]) -> Signature:
    return kind, tuple(sorted((c, n) for c, n in contents.items() if n))


class _Pairs:
    """Loads and fills per signature, and per pair of signatures the kinds that could host both (cost, compatibility,
    domains, capacity: all but headroom), each computed once."""

    def __init__(self, prob: Problem) -> None:
        self.prob = prob
        new = [k for k in prob.kinds if k.new]
        self.caps = {k.kid: np.asarray(k.cap, dtype=np.int64) for k in new}
        self.kids = np.array(
            [k.kid for k in new], dtype=np.int64
        )  # new kinds, cheapest first (then by id)
        if new:
            self.kids = self.kids[
                np.lexsort((self.kids, np.array([k.cost for k in new], dtype=np.int64)))
            ]
        self.cap_rows = (
            np.stack([self.caps[int(k)] for k in self.kids])
            if new
            else np.zeros((0, 0), dtype=np.int64)
        )
        self.costs = np.array([prob.kinds[int(k)].cost for k in self.kids], dtype=np.int64)
        self.top = self.cap_rows.max(axis=0) if new else None  # no host holds more
        self.loads: dict[Signature, np.ndarray] = {}
        self.fills: dict[Signature, float] = {}
        self.hosts: dict[tuple[Signature, Signature], list[int]] = {}
        self.domains: dict[Signature, frozenset[tuple[int, tuple[str, ...] | None]]] = {}
        self.dead: set[Signature] = set()  # signatures that merged with none of a window's others
        self.searches = 0

    def load(self, s: Signature) -> np.ndarray:
        hit = self.loads.get(s)
        if hit is None:
            req = self.prob.arrays.req
            hit = np.zeros(len(self.prob.resources), dtype=np.int64)
            for c, n in s[1]:
                hit += req[self.prob.classes[c].shape] * n
            self.loads[s] = hit
        return hit

    def fill(self, s: Signature) -> float:
        """The bin's largest share of any resource its kind offers (emptiest bins are the likeliest to merge)."""
        hit = self.fills.get(s)
        if hit is None:
            cap = self.caps[s[0]].astype(float)
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(cap > 0, self.load(s) / cap, 0.0)
            hit = self.fills[s] = float(share.max()) if len(share) else 0.0
        return hit

    def rank(self, s: Signature) -> tuple[float, Signature]:
        return self.fill(s), s

    def best(
        self, order: list[Signature], new: Counter, used: Counter
    ) -> tuple[Signature, Signature, int, int] | None:
        """The first pair of `order` (the signatures in `new`, emptiest first) with a host that has headroom for it,
        the host, and how many such pairs to merge at once; None when no pair merges."""
        while True:
            sigs = [s for s in order if s not in self.dead][:MAX_SIGNATURES]
            lonely = set(sigs)
            for i, x in enumerate(sigs):
                for y in sigs[i:]:
                    pairs = new[x] // 2 if x == y else min(new[x], new[y])
                    hosts = self._hosts(x, y)
                    if hosts is None:
                        return None  # out of searches
                    if hosts and pairs >= 1:
                        lonely -= {x, y}
                    for kind in hosts if pairs >= 1 else ():
                        # each merge frees one bin of x's kind and one of y's, and takes one of `kind`
                        back = (x[0] == kind) + (y[0] == kind)
                        times = (
                            pairs
                            if back
                            else min(pairs, self.prob.kinds[kind].max_count - used[kind])
                        )
                        if times >= 1:
                            return x, y, kind, times
            if not lonely or len(sigs) < MAX_SIGNATURES:
                return None
            self.dead |= lonely  # nothing in the window takes them: look further

    def _hosts(self, x: Signature, y: Signature) -> list[int] | None:
        """The pair's possible hosts (cached); None once `MAX_SEARCHES` searches are spent."""
        key = (x, y)
        hit = self.hosts.get(key)
        if hit is None:
            if self.searches >= MAX_SEARCHES:
                return None
            self.searches += 1
            hit = self.hosts[key] = self._find_hosts(x, y)
        return hit

    def _find_hosts(self, x: Signature, y: Signature) -> list[int]:
        """New kinds, cheapest first, costing no more than x's and y's together, compatible with every pod of both,
        in each pod's topology domain, with room for both loads."""
        prob = self.prob
        load = self.load(x) + self.load(y)
        if self.top is None or not np.all(load <= self.top):
            return []
        budget = prob.kinds[x[0]].cost + prob.kinds[y[0]].cost
        ok = (self.costs <= budget) & (load <= self.cap_rows).all(axis=1)
        for s in {prob.classes[c].shape for c, _ in x[1] + y[1]}:
            ok &= prob.arrays.compat_mask[s][self.kids]
        held = self._domains(x) | self._domains(y)
        return [k for k in self.kids[ok].tolist() if all(prob.domain(s, k) == d for s, d in held)]

    def _domains(self, s: Signature) -> frozenset[tuple[int, tuple[str, ...] | None]]:
        """(shape, topology domain) of the signature's pods that have a topology constraint: a host must keep them."""
        hit = self.domains.get(s)
        if hit is None:
            prob = self.prob
            shapes = {prob.classes[c].shape for c, _ in s[1]}
            hit = self.domains[s] = frozenset(
                (sh, prob.domain(sh, s[0])) for sh in shapes if prob.shapes[sh].topology_keys
            )
        return hit
