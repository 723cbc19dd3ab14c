"""Cost repair by prices: the same pods per class and domain, packed again onto existing and new nodes.

Invariant: the result places exactly the plan's pods (`y`, `satisfied` and `domain` are kept), every bin
within its free capacity and compatible with its pods, every node group within its headroom; so it is as
valid a plan as the one it repairs, and the caller keeps it only when it costs less.

Why: the greedy fills existing nodes first-fit in gang order, so on a cluster of fragmented nodes the small
pods of early gangs take the fragments and the large pods of later ones go to new nodes; on the elastic-10k
backlog that leaves the plan 4% above the bound, all of it in CPU packing. Here the free existing capacity goes
first to the pods the aggregate LP prices highest (the duals of its shape rows in `bound.lp_cost_prices`:
what a pod of the shape would cost on new nodes), decreasing by price, each onto the existing nodes whose free
memory per cpu is most like its own (`_fill_existing`; first fit in node order leaves the plan 1% dearer there); the
rest goes on new nodes as a pattern LP over whole nodes buys them (`colgen`), and what its rounding leaves by
the greedy's own new-node rule, gangs with the largest pods first.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .budget import past
from .colgen import Candidate, pattern_candidates
from .greedy import (
    Assignment,
    _assignment,
    _place_gang,
    _place_in_order,
    _State,
    placement_rank,
    quorum_order,
)
from .problem import MICRO, Problem, memory_per_cpu_octaves

Key = tuple[int, tuple[str, ...] | None]  # (shape, topology domain or None)


FILLS = (
    "nearest",
    "tightest",
    "first",
)  # the existing-node fills `repack` tries, in turn (`_fill_existing`)


def repack(
    prob: Problem,
    a: Assignment,
    prices: dict[int, float],
    deadline: float | None = None,
    good: int | None = None,
    colgen_by: float | None = None,
    grow: bool = False,
) -> Assignment | None:
    """The plan's pods packed again: existing nodes take the pods of the highest `prices` (per shape, $/h per pod)
    first, each key onto the nodes of the most alike memory per cpu (`_fill_existing`); new nodes follow the
    pattern LP of what is left (`colgen.pattern_candidates`: whole nodes, rounded down, then one at a time, solved
    by `colgen_by`, default `deadline`, beside none at all: `new_nodes_for`); the pods left after that go by the
    greedy's own rule, gangs with the largest pods first. While the result costs more than `good`
    (micro-dollars per hour; None: while no result places every pod), the next of `FILLS` is tried and the
    cheapest result kept; fills that leave the same pods for new nodes share one pattern LP (memoized by that
    demand). None when none places every pod or `deadline` passes (the caller keeps `a`).

    `grow`: the plan grows instead (`grown`, with the first of `FILLS`): the pods it leaves out may join. The result
    places every pod of `a` and more, or is None."""
    if grow:
        return grown(prob, a, prices, deadline, colgen_by, FILLS[0])
    best = None
    memo: dict[tuple, list[Candidate]] = {}
    for fill in FILLS:
        again = _repack(
            prob, a, prices, deadline, fill, memo, colgen_by if colgen_by is not None else deadline
        )
        if again is not None and (best is None or again.cost(prob) < best.cost(prob)):
            best = again
        if best is not None and (good is None or best.cost(prob) <= good):
            break
    return best


def grown(
    prob: Problem,
    a: Assignment,
    prices: dict[int, float],
    deadline: float | None = None,
    colgen_by: float | None = None,
    fill: str = "kept",
) -> Assignment | None:
    """Plan `a` with more pods: its existing nodes take its pods again by `fill` ("kept": each keeps its own; one
    of `FILLS`: by `prices`, as `repack` fills them), then the pods it leaves out (extra members of the gangs it
    starts, pods of basic groups: `left_out`) where room is left; the rest of its pods and those left out go to the
    pattern LP, which covers every pod of `a` first and then as many more as the node groups' headroom allows
    (`colgen.pattern_candidates`' optional pods); the pods of `a` its nodes miss go by the greedy's own rule, and
    the greedy's passes (`greedy.fill_left_out`'s) then try what is still left out, quorums included. The result
    of most pods per priority level, then least cost; None unless one places every pod of `a` and more by
    `deadline`. A pod is never taken from `a`, so gangs and pods only grow."""
    demand = _demand(prob, a)
    extra = left_out(prob, a)
    if not demand or not extra:
        return None
    left = dict(demand)
    existing, free = _kept(prob, a, left) if fill == "kept" else _priced(prob, left, prices, fill)
    _fill_existing(prob, extra, prices, FILLS[0], free, existing)
    best = None
    for nodes, _rest in new_nodes_for(prob, left, colgen_by or deadline, {}, extra):
        st = _State(prob, list(range(len(prob.gangs))))
        queues = _queues(prob, a, grow=True)
        for b, pods in enumerate(existing):
            _hand_out(st, queues, b, pods)
        for kid, pods in nodes:
            _hand_out(st, queues, st.open(kid), pods)
        again = _place_rest(prob, a, st, deadline, grow=True)
        if again is not None and (
            best is None or placement_rank(prob, again) > placement_rank(prob, best)
        ):
            best = again
    if best is None or placement_rank(prob, best)[:-1] <= placement_rank(prob, a)[:-1]:
        return None
    return best


def _repack(
    prob: Problem,
    a: Assignment,
    prices: dict[int, float],
    deadline: float | None,
    fill: str,
    memo: dict[tuple, list[Candidate]],
    colgen_by: float | None,
) -> Assignment | None:
    """One fill of the existing nodes, then each of `new_nodes_for`'s candidates for the rest; the cheapest that
    places every pod (None: none does, or `deadline` passed)."""
    demand = _demand(prob, a)
    if not demand:
        return None
    left = dict(demand)
    existing = _fill_existing(prob, left, prices, fill)
    best = None
    for nodes, _rest in new_nodes_for(prob, left, colgen_by, memo):
        again = on_nodes(prob, a, existing, nodes, deadline)
        if again is not None and (best is None or again.cost(prob) < best.cost(prob)):
            best = again
    return best


def on_nodes(
    prob: Problem,
    a: Assignment,
    existing: list[dict[Key, int]],
    nodes: list[tuple[int, dict[Key, int]]],
    deadline: float | None,
) -> Assignment | None:
    """`a`'s pods handed out to the existing bins (`existing`, one fill per bin) and to new nodes of the given kinds,
    what is still lacking placed by the greedy's own rule (`_place_rest`); None when that cannot place it all."""
    st = _State(prob, list(range(len(prob.gangs))))
    queues = _queues(prob, a)
    for b, pods in enumerate(existing):
        _hand_out(st, queues, b, pods)
    for kid, pods in nodes:
        _hand_out(st, queues, st.open(kid), pods)
    return _place_rest(prob, a, st, deadline)


def _place_rest(
    prob: Problem, a: Assignment, st: _State, deadline: float | None, grow: bool = False
) -> Assignment | None:
    """The pods `st` lacks of `a`'s by the greedy's own rule, gangs with the largest pods first; with `grow`, then
    the greedy's passes over what is still left out (`st` may hold more pods than `a`)."""
    size = prob.arrays.size
    order = sorted(
        (g.gid for g in prob.gangs if any(st.y[c] < a.y[c] for c in g.classes)),
        key=lambda g: -max(size[prob.classes[c].shape] for c in prob.gangs[g].classes),
    )
    for gid in order:
        if past(deadline):
            return None
        _place_gang(st, prob, gid, a.domain[gid], None, a.y)
    if not grow:
        if st.y != list(a.y):
            return None
        return _assignment(prob, st, list(a.satisfied), list(a.domain), a.stopped_early, a.order)
    if any(n < want for n, want in zip(st.y, a.y, strict=True)):
        return None
    satisfied, domain = list(a.satisfied), list(a.domain)
    for g in prob.gangs:  # a basic group with pods is started
        satisfied[g.gid] = satisfied[g.gid] or (not g.is_gang and any(st.y[c] for c in g.classes))
    order = a.order or quorum_order(prob)
    _place_in_order(st, prob, order, satisfied, domain, deadline, tried=True)
    return _assignment(prob, st, satisfied, domain, False, order)


# pods left for new nodes, at most, for the greedy's own rule to be tried beside
GREEDY_CANDIDATE_PODS = 2000
# the pattern LP's converged nodes (it is the only candidate when the LP did not converge in time)


def new_nodes_for(
    prob: Problem,
    left: dict[Key, int],
    deadline: float | None,
    memo: dict[tuple, list[Candidate]],
    optional: dict[Key, int] | None = None,
) -> Iterator[Candidate]:
    """The new nodes to try for the pods `left` after the existing nodes, in turn: none at all (every pod then
    goes by the greedy's own rule, gangs with the largest pods first: on 300 distinct shapes over 60 groups 1%
    cheaper than the pattern LP's rounding; tried first, while it is cheap, so a cut-short LP never costs it), then
    the pattern LP's converged nodes (`colgen.pattern_candidates`: none when it did not converge by `deadline`, so a
    longer budget only adds a candidate). The LP is memoized by the demand: the same pods left for new nodes (every
    fill, when there are no existing nodes) are solved once. `optional`: pods the nodes may also take
    (`grown`)."""
    key: tuple = tuple(sorted((k, n) for k, n in left.items() if n > 0))
    if optional:
        key += (None, *sorted((k, n) for k, n in optional.items() if n > 0))
    small = sum(n for k, n in left.items() if n > 0) <= GREEDY_CANDIDATE_PODS
    if small:
        yield [], dict(left)
    if key not in memo:
        memo[key] = pattern_candidates(prob, left, deadline, optional)
    yield from memo[key]
    if not small and not memo[key]:
        yield [], dict(left)


def unit_prices(prob: Problem, placed_per_shape: dict[int, int]) -> dict[int, float]:
    """Per shape, $/h per pod on the node group that carries it cheapest (price over pods per node): the prices
    `repack` orders pods by when the cost LP gave none in its time."""
    out: dict[int, float] = {}
    for s in placed_per_shape:
        per_pod = [
            prob.kinds[k].cost / prob.fit_count[(s, k)]
            for k in prob.compat[s]
            if prob.kinds[k].new and prob.fit_count.get((s, k), 0) > 0
        ]
        out[s] = min(per_pod) / MICRO if per_pod else 0.0
    return out


def _queues(prob: Problem, a: Assignment, grow: bool = False) -> dict[Key, list[list[int]]]:
    """Per key, its classes' placed pods ([class, pods not yet handed out]) in class order; with `grow`, then the
    pods `left_out` of each (so a bin's pods of a key are the plan's own first)."""
    queues: dict[Key, list[list[int]]] = {}
    for c in prob.classes:
        if a.y[c.cid]:
            queues.setdefault(_key(prob, a, c.cid), []).append([c.cid, a.y[c.cid]])
    if grow:
        for cid, n in _left_out_classes(prob, a):
            queues.setdefault(_key(prob, a, cid), []).append([cid, n])
    return queues


def _key(prob: Problem, a: Assignment, cid: int) -> Key:
    c = prob.classes[cid]
    return c.shape, a.domain[c.gang] if prob.shapes[c.shape].topology_keys else None


def _left_out_classes(prob: Problem, a: Assignment) -> list[tuple[int, int]]:
    """(class, pods) the plan leaves out that may join it alone: extra members of a gang it starts, and pods of a
    basic group (of one with a topology constraint only once the plan chose its domain)."""
    out = []
    for g in prob.gangs:
        if g.is_gang and not a.satisfied[g.gid]:
            continue  # a quorum is all or nothing: the greedy's passes try it
        if not g.is_gang and not a.satisfied[g.gid] and a.domain[g.gid] is None:
            if any(prob.shapes[prob.classes[c].shape].topology_keys for c in g.classes):
                continue
        out += [(c, prob.classes[c].count - a.y[c]) for c in g.classes]
    return [(c, n) for c, n in out if n > 0]


def left_out(prob: Problem, a: Assignment) -> dict[Key, int]:
    """Pods per key the plan leaves out that may join it alone (`_left_out_classes`)."""
    out: dict[Key, int] = {}
    for cid, n in _left_out_classes(prob, a):
        key = _key(prob, a, cid)
        out[key] = out.get(key, 0) + n
    return out


def _priced(
    prob: Problem, left: dict[Key, int], prices: dict[int, float], fill: str
) -> tuple[list[dict[Key, int]], np.ndarray]:
    """`_fill_existing`'s pods per existing node (`left` loses them), and every existing node's room after them."""
    base = prob.arrays
    free = base.free.copy()
    return _fill_existing(prob, left, prices, fill, free), free


def _kept(
    prob: Problem, a: Assignment, left: dict[Key, int]
) -> tuple[list[dict[Key, int]], np.ndarray]:
    """Per existing node, the plan's own pods on it (`left` loses them), and every existing node's room after them."""
    base = prob.arrays
    row = {name: i for i, name in enumerate(base.names)}
    fills: list[dict[Key, int]] = [{} for _ in base.names]
    free = base.free.copy()
    names = a.bin_nodes if len(a.bin_nodes) == len(a.bins) else [None] * len(a.bins)
    for (kid, contents), name in zip(a.bins, names, strict=True):
        if prob.kinds[kid].new or name not in row:
            continue
        b = row[name]
        for cid, n in contents.items():
            key = _key(prob, a, cid)
            fills[b][key] = fills[b].get(key, 0) + n
            free[b] -= n * base.req[prob.classes[cid].shape]
            left[key] -= n
    return fills, free


def _hand_out(st: _State, queues: dict[Key, list[list[int]]], b: int, fill: dict[Key, int]) -> None:
    """Put a bin's pods per key in it, taken from the key's classes in order."""
    for key, n in fill.items():
        q = queues[key]
        while n:
            take = min(n, q[0][1])
            st.place(b, q[0][0], take)
            q[0][1] -= take
            n -= take
            if not q[0][1]:
                q.pop(0)


def _demand(prob: Problem, a: Assignment) -> dict[Key, int]:
    """Placed pods per (shape, domain): the domain only for shapes with topology keys."""
    out: dict[Key, int] = {}
    for c in prob.classes:
        if a.y[c.cid]:
            key = (c.shape, a.domain[c.gang] if prob.shapes[c.shape].topology_keys else None)
            out[key] = out.get(key, 0) + a.y[c.cid]
    return out


RATIO_STEP = 0.1  # octaves of memory per cpu within which "tightest" counts existing nodes as alike


def _fill_existing(
    prob: Problem,
    left: dict[Key, int],
    prices: dict[int, float],
    fill: str = FILLS[0],
    free: np.ndarray | None = None,
    fills: list[dict[Key, int]] | None = None,
) -> list[dict[Key, int]]:
    """Per existing node, the pods it takes: keys by price (then size) descending, each over the nodes (one vector
    operation per key); `left` loses what is placed. The nodes a key visits first: "nearest", those whose free
    memory per free cpu is nearest its own; "tightest", the same in steps of `RATIO_STEP` octaves, among them
    those that hold fewest of its pods; "first", node order. Matched so, memory-heavy pods take the memory-rich
    leftovers and cpu-heavy ones the cpu-rich, and less free capacity is stranded beside a used-up resource (on
    the elastic-10k backlog $8/h less than first fit in node order)."""
    base = prob.arrays
    free = base.free.copy() if free is None else free
    fills = [{} for _ in base.names] if fills is None else fills
    order = sorted(left, key=lambda k: (-prices.get(k[0], 0.0), -base.size[k[0]], k[0]))
    for key in order:
        s, dom = key
        r = base.req[s]
        pos = r > 0
        if not pos.any() or not len(free):
            continue
        ok = base.compat_mask[s, base.kind]
        if dom is not None:
            seen, ids = base.domain_ids[prob.shapes[s].topology_keys]
            ok = ok & (ids[base.kind] == seen.get(dom, -2))
        counts = np.where(ok, (free[:, pos] // r[pos]).min(axis=1), 0)
        nodes = np.flatnonzero(counts)
        if fill != "first" and len(nodes) > 1:
            far = _ratio_distance(prob, r, free[nodes])
            nodes = nodes[
                np.argsort(far, kind="stable")
                if fill == "nearest"
                else np.lexsort((counts[nodes], np.floor(far / RATIO_STEP)))
            ]
        for b in nodes.tolist():
            n = min(int(counts[b]), left[key])
            if not n:
                break
            fills[b][key] = fills[b].get(key, 0) + n
            free[b] -= n * r
            left[key] -= n
            if not left[key]:
                break
    return fills


def _ratio_distance(prob: Problem, req: np.ndarray, free: np.ndarray) -> np.ndarray:
    """Per row of `free`, how far its memory per cpu lies from `req`'s, in octaves (all 0 without both resources)."""
    own = memory_per_cpu_octaves(prob.resources, req)
    if own is None:
        return np.zeros(len(free))
    return np.abs(memory_per_cpu_octaves(prob.resources, free) - own)
