"""Fewer nodes at no more cost: the last objective, for plans no CP-SAT stage polished.

The objective is gangs, pods, hourly cost, then the number of new nodes. CP-SAT's last stage minimises the node
count; a plan that skips it (greedy only: no time left, the work-bounded mode, or a cost gap closed before the
polish could run) keeps the greedy's tie-break, which buys by price per pod and so takes two m5.4xlarge for two
pods that one m5.8xlarge of the same price holds. Here two new nodes whose pods fit together on one new node of a
kind costing no more than both are merged onto it.

Invariant: the result places the same pods per class (`y`, `satisfied`, `domain` kept), every bin within its
capacity (per-node pod rules are resources: fit.node_limits), compatible with its pods and in each pod's topology
domain, every node group within its headroom; it never costs more and has fewer new nodes, or it is `a` itself.
Cost: pairs of distinct new bins (kind, contents), at most `MAX_SIGNATURES` of them, each pair once per round.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from .greedy import Assignment
from .problem import Problem

MAX_SIGNATURES = 64  # distinct new bins looked at (the emptiest first): pairs grow as its square
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
    merged = False
    while True:
        step = _best_merge(prob, new, used)
        if step is None:
            break
        x, y, kind, times = step
        for s in (x, y):
            new[s] -= times
            used[s[0]] -= times
        new = +new
        combined = _signature(kind, dict(Counter(dict(x[1])) + Counter(dict(y[1]))))
        new[combined] += times
        used[kind] += times
        merged = True
    if not merged:
        return a
    bins = [(k, c) for k, c in a.bins if not (prob.kinds[k].new and c)]
    names = [n for (k, c), n in zip(a.bins, a.bin_nodes or [None] * len(a.bins)) if not (prob.kinds[k].new and c)]
    for (kind, contents), n in sorted(new.items()):
        bins += [(kind, dict(contents)) for _ in range(n)]
        names += [None] * n
    return Assignment(list(a.y), list(a.satisfied), list(a.domain), bins, names, a.stopped_early, list(a.order))


def _signature(kind: int, contents: dict[int, int]) -> Signature:
    return kind, tuple(sorted((c, n) for c, n in contents.items() if n))


def _best_merge(prob: Problem, new: Counter, used: Counter) -> tuple[Signature, Signature, int, int] | None:
    """The first pair of new-bin signatures (emptiest first) whose pods fit one bin of the cheapest kind costing no
    more than the pair, and how many such pairs to merge at once; None when no pair merges."""
    sigs = sorted(new, key=lambda s: _fill(prob, s))[:MAX_SIGNATURES]
    for i, x in enumerate(sigs):
        for y in sigs[i:]:
            pairs = new[x] // 2 if x == y else min(new[x], new[y])
            if pairs < 1:
                continue
            kind = _host(prob, x, y, used)
            if kind is None:
                continue
            # each merge frees one bin of x's kind and one of y's, and takes one of `kind`
            back = (x[0] == kind) + (y[0] == kind)
            times = pairs if back else min(pairs, prob.kinds[kind].max_count - used[kind])
            if times >= 1:
                return x, y, kind, times
    return None


def _fill(prob: Problem, s: Signature) -> float:
    """The bin's largest share of any resource it offers (emptiest bins are the likeliest to merge)."""
    load = _load(prob, s[1])
    cap = np.asarray(prob.kinds[s[0]].cap, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(cap > 0, load / cap, 0.0)
    return float(share.max()) if len(share) else 0.0


def _load(prob: Problem, contents: tuple[tuple[int, int], ...]) -> np.ndarray:
    req = prob.arrays.req
    out = np.zeros(len(prob.resources), dtype=np.int64)
    for c, n in contents:
        out += req[prob.classes[c].shape] * n
    return out


def _host(prob: Problem, x: Signature, y: Signature, used: Counter) -> int | None:
    """The cheapest new kind (fewest by id on ties) costing no more than kinds x and y together, compatible with
    every pod of both, in each pod's topology domain, with room for both loads and headroom for one more node
    once the pair is gone."""
    budget = prob.kinds[x[0]].cost + prob.kinds[y[0]].cost
    contents = x[1] + y[1]
    load = _load(prob, x[1]) + _load(prob, y[1])
    shapes = {prob.classes[c].shape for c, _ in contents}
    kinds = set(prob.arrays.new_compat[next(iter(shapes))])
    for s in shapes:
        kinds &= set(prob.arrays.new_compat[s])
    best = None
    for k in sorted(kinds):
        kind = prob.kinds[k]
        if kind.cost > budget or (best is not None and kind.cost >= prob.kinds[best].cost):
            continue
        if used[k] - (x[0] == k) - (y[0] == k) + 1 > kind.max_count:
            continue
        if not all(prob.domain(prob.classes[c].shape, k) == prob.domain(prob.classes[c].shape, src)
                   for src, part in ((x[0], x[1]), (y[0], y[1])) for c, _ in part):
            continue
        if np.all(load <= np.asarray(kind.cap, dtype=np.int64)):
            best = k
    return best
