"""The fast path: the reference's scheduling cycle answered from the shapes' kept state.

For a pod without pod-to-pod rules, on a cluster where no placed pod has any, `select` brings the
pod's shape up to date (shapes.py: only the nodes placements changed are re-checked), then takes the
window of `numFeasibleNodesToFind` feasible nodes from the rotating start by bisection on the kept
feasible list, and the best nodes in it from the shape's kept best set when the window holds one of
them (else it scores the window from the kept base scores). Invariant: for every pod it returns the
node reference.py's `select` returns and leaves the engine's start index and RNG as that does;
tests/scheduling/test_fastpath.py checks both paths place every pod alike on random clusters.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from ..model import Pod
from .config import Profile
from .engine import Engine
from .scores import MAX_NODE_SCORE
from .shapes import Shape, best, new_shape, set_idx, sync, window_ties


def _shape_of(eng: Engine, pod: Pod, prof: Profile) -> Shape | None:
    """The pod's shape, synced with the cluster; None when no node fitted it and pods were only added since."""
    c = eng.c
    st = eng.pod_shape.get(id(pod))
    if st is None:
        key = (prof.scheduler_name, c.shape_id(pod))
        st = eng.shapes.get(key)
        if st is None:
            st = eng.shapes[key] = new_shape(c, pod, prof)
        else:
            sync(c, st)
        eng.pod_shape[id(pod)] = st
    elif st.failed_at == c.removals:
        return None
    else:
        sync(c, st)
    return st


def select(eng: Engine, pod: Pod, prof: Profile) -> int | None:
    """`reference.select` for a pod of a kept shape (see the module docstring)."""
    st = _shape_of(eng, pod, prof)
    if st is None:
        return None
    if st.rows is not None:
        return _select_few(eng, st)
    allowed = eng.allowed
    ia: np.ndarray | None = None
    # the feasible nodes in node order: `idx`, or `ia` in a topology placement (an array there: a placement's
    # nodes change with each domain, so no list is kept for it)
    seq: Sequence[int] | np.ndarray
    if allowed is None:
        idx = st.idx if st.idx is not None else set_idx(st)
        seq = idx
    else:
        idx, ia = [], np.flatnonzero(st.feas & allowed)
        seq = ia
    m, n = len(seq), len(st.feas)
    if m == 0:
        if allowed is None:
            st.failed_at = eng.c.removals
        return None
    start = eng.next_start % n
    k = eng.k(eng.allowed_n if allowed is not None else n, prof.percentage_of_nodes_to_score)
    if m > k:  # the window: the k feasible nodes from the start on, round the ring
        p = bisect.bisect_left(idx, start) if ia is None else int(ia.searchsorted(start))
        p = 0 if p == m else p
        last = int(seq[p + k - 1] if p + k <= m else seq[k - (m - p) - 1])
        eng.next_start = (start + (last - start) % n + 1) % n
        if k == 1:
            return last
    else:  # every feasible node is scored, the scan goes round once: the start stays where it is
        p = 0
        if m == 1:
            return int(seq[0])
    if st.prefer is None and allowed is None:
        ties_l = _best_in_window(st, idx, start, m, k, p)
        if ties_l:
            return eng.pick(ties_l)
    if ia is None:  # the window is scored: `idx` as an array
        if st.idx_a is None:
            st.idx_a = np.flatnonzero(st.feas)
        ia = st.idx_a
    return eng.pick(window_ties(st, ia, start, m, k, p))


def _best_in_window(
    st: Shape, idx: list[int], start: int, m: int, k: int, p: int
) -> list[int] | None:
    """The window's ties in scan order when the window holds a node with the best score over every feasible
    node (then its best nodes are exactly the best set's members inside it), from the shape's kept best set
    (`best`) by bisection, without scoring the window. None: it holds none (the caller scores it)."""
    tops = best(st)
    if m <= k:  # the whole ring: the best set itself, from the start on
        q = bisect.bisect_left(tops, start)
        return tops[q:] + tops[:q] if 0 < q < len(tops) else tops
    if p + k <= m:
        return tops[bisect.bisect_left(tops, idx[p]) : bisect.bisect_right(tops, idx[p + k - 1])]
    # the window wraps: idx[p:] then idx[:k - (m - p)]
    first = tops[bisect.bisect_left(tops, idx[p]) :]
    return first + tops[: bisect.bisect_right(tops, idx[k - (m - p) - 1])]


def _select_few(eng: Engine, st: Shape) -> int | None:
    """`select` for a shape at most FEW_NODES nodes pass the filters of: those nodes checked and scored one by
    one. They all fit in the window (num_feasible_to_find is at least min(n, 100)), so the scan covers every node
    and the rotating start stays where it is; the candidates are taken from it, as upstream does."""
    c = eng.c
    feas = [
        j
        for j in st.rows or ()
        if (eng.allowed is None or eng.allowed[j])
        and all(c.alloc_rows[j][i] - c.lists(j)[0][i] >= r for i, r in st.need)
    ]
    if not feas:
        if eng.allowed is None:  # a topology placement's miss says nothing of the other placements
            st.failed_at = c.removals
        return None
    start = eng.next_start % len(c.nodes)
    p = next((k for k, j in enumerate(feas) if j >= start), len(feas))
    win = feas[p:] + feas[:p]
    if len(win) == 1:
        return win[0]
    assert st.score is not None
    scores = [st.score(c.alloc_rows[j], *c.lists(j)) for j in win]
    if st.prefer is not None:  # TaintToleration, normalised over the window
        counts = [int(st.prefer[j]) for j in win]
        top = max(counts)
        if top:
            scores = [
                s + st.wtaint * (MAX_NODE_SCORE - MAX_NODE_SCORE * n // top)
                for s, n in zip(scores, counts, strict=True)
            ]
    high = max(scores)
    return eng.pick(np.array([j for j, s in zip(win, scores, strict=True) if s == high]))
