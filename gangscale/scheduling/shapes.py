"""The fast path's kept state: per pod shape, every node's filter verdict and base score.

A shape is one (profile, placement, requests) class. Invariant: after `sync`, a shape's `feas` and
`base` on every node its placement's filters allow equal what the reference computes there
(`reference.feasible` without pod rules, `score_arrays.base_scores`), and `best` gives the nodes
with the top base score among the feasible ones. Placements change one node each, so `sync`
re-checks only the nodes in the cluster's change log since the shape's last use; adding a pod never
makes a node fit, so of the nodes the shape did not fit only those a pod left are looked at again.
Small catch-ups re-check node by node in Python (`_recheck`, with the shape's scalar scorer:
scorer.py); large ones recompute in numpy over the changed nodes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..model import Pod
from ..resources import CPU, MEMORY
from .cluster import Cluster
from .config import Profile
from .score_arrays import base_scores, fit_scores
from .scorer import Scorer, Terms, scorer
from .scores import MAX_NODE_SCORE, is_scalar

# nodes to re-check (changed, and feasible or allowed by the filters) past which a shape's arrays are recomputed in
# numpy over those nodes rather than node by node in Python: a feasible node costs ~1.5 us in Python, a numpy pass
# ~80 us plus ~0.15 us a node and the best nodes' recount
FULL_REFRESH = 64
_NO_SCORE = np.iinfo(np.int64).min  # below any base score: `best` sets the infeasible nodes to it
# log entries past which a shape's catch-up marks the changed nodes in numpy rather than a set
MANY_CHANGES = 400
# a shape the filters allow on this few nodes is computed node by node, never over every node
FEW_NODES = 8


@dataclass(slots=True)
class Shape:
    """One (profile, placement, requests) class: every node's feasibility and base score, current up to `cursor`.

    A placement changes one node, so pods of a shape seen before re-check only the nodes in the cluster's
    change log since then, with the shape's scalar scorer (scorer.py: the per-node form of
    `score_arrays.base_scores`, the same numbers)."""

    pod: Pod
    prof: Profile
    feas: np.ndarray  # bool per node: the filters pass
    base: np.ndarray  # int64 per node: `base_scores` (valid where feas)
    compat: np.ndarray
    # the nodes `compat` allows: the only ones whose `feas` and `base` are ever computed
    crows: np.ndarray
    need: list[tuple[int, int]]  # (resource index, request) NodeResourcesFit checks
    # (resource index, weight, source 0 cpu-nz / 1 mem-nz / 2 used, added)
    fit: list[tuple[int, int, int, int]]
    bal: list[tuple[int, int]]  # (resource index, request) BalancedAllocation averages
    wfit: int
    wbal: int
    cursor: int
    # the cluster's `removals` when no node passed the filters (monotone until a removal)
    failed_at: int = -1
    # PreferNoSchedule taints not tolerated per node, when TaintToleration weighs any
    prefer: np.ndarray | None = None
    wtaint: int = 0
    score: Scorer | None = None  # `scorer.scorer` of the shape's terms
    # at most FEW_NODES nodes pass the filters: checked one by one, no arrays kept
    rows: list[int] | None = None
    # the feasible nodes in node order, as a Python list (the window's bisections and reads are list operations, not
    # numpy calls): `_recheck` inserts and deletes the nodes whose verdict flips; None after a numpy refresh flipped any
    idx: list[int] | None = None
    # `idx` as an array (a window that is scored), dropped whenever `idx` changes
    idx_a: np.ndarray | None = None
    # `compat` and `feas` as Python lists: `_recheck` reads them node by node, and a list item is cheaper than a
    # numpy one
    compat_l: list[bool] = field(default_factory=list)
    feas_l: list[bool] = field(default_factory=list)
    # the best base score over the feasible nodes and the nodes that have it, in node order (`tops_ok`: current;
    # `_recheck` keeps them so node by node, a numpy refresh leaves them to `best` to recompute)
    top: int = 0
    tops: list[int] = field(default_factory=list)
    tops_ok: bool = False
    cols: _Cols | None = None  # `_cols(self)`: the column form a numpy refresh uses
    rcursor: int = 0  # the cluster's `rlog` up to here was seen at the last sync


def new_shape(c: Cluster, pod: Pod, prof: Profile) -> Shape:
    """The pod's shape under `prof`, its verdicts and base scores computed on every node its filters allow."""
    req = c.vec(pod)
    nzc, nzm = c.nonzero(pod)
    fit = []
    for name, weight in prof.resources:
        i = c.ri.get(name)
        if i is None or (is_scalar(name) and req[i] == 0):
            continue
        src = 0 if name == CPU else 1 if name == MEMORY else 2
        fit.append((i, weight, src, nzc if src == 0 else nzm if src == 1 else int(req[i])))
    bal = [
        (i, int(req[i]))
        for name in prof.balanced_resources
        if (i := c.ri.get(name)) is not None and not (is_scalar(name) and req[i] == 0)
    ]
    if all(r == 0 for _, r in bal):
        bal = []  # best-effort pod (or nothing to balance): the plugin scores 0
    check = "NodeResourcesFit" in prof.filters
    compat = c.compat(pod.placement, prof)
    st = Shape(
        pod,
        prof,
        np.empty(0, dtype=bool),
        np.empty(0, dtype=np.int64),
        compat,
        compat.nonzero()[0],
        [(i, int(r)) for i, r in enumerate(req.tolist()) if r > 0] if check else [],
        fit,
        bal,
        prof.weight("NodeResourcesFit"),
        prof.weight("NodeResourcesBalancedAllocation"),
        0,
    )
    st.score = scorer(Terms(prof, st.fit, st.bal, st.wfit, st.wbal))
    st.cols = _cols(c, st)
    st.compat_l = st.compat.tolist()
    if len(st.crows) <= FEW_NODES:  # e.g. a pod gate mode narrowed to its node
        st.rows = st.crows.tolist()
    w = prof.weight("TaintToleration")
    prefer = c.prefer_counts(pod.placement)
    if w and prefer.any():
        st.prefer, st.wtaint = prefer, w
    if st.rows is None:
        _refresh_all(c, st)
    return st


def _refresh_all(c: Cluster, st: Shape) -> None:
    """The shape's feasibility and base score on every node the filters allow (elsewhere: infeasible, never read)."""
    n = len(c.nodes)
    st.feas, st.base = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    feas, base = _rows_state(c, st, st.crows)
    st.feas[st.crows], st.base[st.crows] = feas, base
    st.feas_l, st.idx, st.idx_a, st.tops_ok = st.feas.tolist(), None, None, False
    st.cursor, st.rcursor = len(c.log), len(c.rlog)


def _rows_state(c: Cluster, st: Shape, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NodeResourcesFit's filter and the base score on these nodes, in numpy (the vector form of `_recheck`)."""
    if st.cols is not None:
        return _rows_state_cols(c, st, st.cols, rows)
    req = c.vec(st.pod)
    feas: np.ndarray
    if st.need:
        cols = np.array([i for i, _ in st.need], dtype=np.intp)
        at = np.ix_(rows, cols)
        feas = ((c.alloc[at] - c.used[at]) >= req[cols]).all(axis=1)
    else:
        feas = np.ones(len(rows), dtype=bool)
    # the default (cpu, memory): the two-resource formula without NaN reductions
    if len(st.bal) == 2 and st.wbal:
        base = fit_scores(c, rows, st.pod, req, st.prof) * st.wfit if st.wfit else 0
        return feas, base + st.wbal * balanced_pair(c, st.bal, rows)
    return feas, base_scores(c, rows, st.pod, st.prof)


@dataclass(slots=True, frozen=True)
class _Cols:
    """A LeastAllocated / MostAllocated shape's filter and score inputs as column arrays (`_rows_state_cols`): the
    resource columns, requests and weights of `Shape.need` / `fit` / `bal`, so a refresh gathers each source once
    and works on (nodes x resources) arrays, a few numpy calls whatever the number of resources."""

    # per resource column: the request NodeResourcesFit checks, _ANY where it checks none
    need: np.ndarray | None
    fcols: np.ndarray  # `fit`'s resource columns
    # where `fit`'s requested amount comes from: nz columns 0-1, then `used` columns from 2 on
    qcols: np.ndarray
    adds: np.ndarray
    weights: np.ndarray
    from_used: bool  # some `fit` column reads `used` (a scalar resource): the source is nz and used side by side
    bcols: np.ndarray  # `bal`'s two columns (empty: no balance score)
    breq: np.ndarray
    least: bool


_ANY = np.iinfo(np.int64).min  # a lower bound no free amount is below: the column is not checked


def _cols(c: Cluster, st: Shape) -> _Cols | None:
    """`_Cols` for a shape `scorer` gives the bound closure (LeastAllocated / MostAllocated, 0 or 2 balanced
    resources), else None (the generic `base_scores`)."""
    if st.prof.strategy not in ("LeastAllocated", "MostAllocated") or len(st.bal) not in (0, 2):
        return None
    need = np.full(len(c.res), _ANY, dtype=np.int64)
    for i, r in st.need:
        need[i] = r
    return _Cols(
        need if st.need else None,
        np.array([f[0] for f in st.fit], dtype=np.intp),
        np.array([src if src < 2 else 2 + i for i, _, src, _ in st.fit], dtype=np.intp),
        np.array([f[3] for f in st.fit], dtype=np.int64),
        np.array([f[1] for f in st.fit], dtype=np.int64),
        any(f[2] == 2 for f in st.fit),
        np.array([i for i, _ in st.bal], dtype=np.intp),
        np.array([r for _, r in st.bal], dtype=np.int64),
        st.prof.strategy == "LeastAllocated",
    )


def _rows_state_cols(
    c: Cluster, st: Shape, k: _Cols, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`_rows_state` for a `_Cols` shape: the same integer and float operations as `fit_scores` and
    `balanced_pair` (so the same numbers), per (node, resource) element instead of per resource."""
    a = c.alloc[rows]
    u = c.used[rows]
    feas = (a - u >= k.need).all(axis=1) if k.need is not None else np.ones(len(rows), dtype=bool)
    base: np.ndarray | int = 0
    if st.wfit and len(k.fcols):
        cap = a[:, k.fcols]
        nz = c.nz[rows]
        q = (np.concatenate((nz, u), axis=1) if k.from_used else nz)[:, k.qcols] + k.adds
        have = cap > 0
        safe = np.where(have, cap, 1)
        s = (
            np.where(q > cap, 0, (safe - q) * MAX_NODE_SCORE // safe)
            if k.least
            else np.minimum(q, cap) * MAX_NODE_SCORE // safe
        )
        total = (np.where(have, s, 0) * k.weights).sum(axis=1)
        wsum = (have * k.weights).sum(axis=1)
        base = st.wfit * np.where(wsum > 0, total // np.maximum(wsum, 1), 0)
    if st.wbal and len(k.bcols):
        ab = a[:, k.bcols]
        have = ab > 0
        f = np.minimum(1.0, (u[:, k.bcols] + k.breq) / np.where(have, ab, 1))
        std = np.where(have.all(axis=1), np.abs(f[:, 0] - f[:, 1]) / 2, 0.0)
        base = base + st.wbal * ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    if isinstance(base, int):
        base = np.full(len(rows), base, dtype=np.int64)
    return feas, base


def balanced_pair(
    c: Cluster, bal: list[tuple[int, int]], rows: np.ndarray | None = None
) -> np.ndarray:
    """`_balanced_scores` over every node (or these rows) for two balanced resources: |f1 - f2| / 2 where the node
    has both."""
    (i0, r0), (i1, r1) = bal
    sel = slice(None) if rows is None else rows
    a0, a1 = c.alloc[sel, i0], c.alloc[sel, i1]
    f0 = np.minimum(1.0, (c.used[sel, i0] + r0) / np.where(a0 > 0, a0, 1))
    f1 = np.minimum(1.0, (c.used[sel, i1] + r1) / np.where(a1 > 0, a1, 1))
    std = np.where((a0 > 0) & (a1 > 0), np.abs(f0 - f1) / 2, 0.0)
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def sync(c: Cluster, st: Shape) -> None:
    """Bring the shape up to date with the nodes placements changed since its last use.

    Adding a pod never makes a node fit: a node the shape did not fit at its last sync, and no pod has left since,
    still does not (and its score is never read), so it is not looked at again; only the feasible nodes and those a
    pod left (`Cluster.rlog`) are."""
    n = len(c.log)
    if st.cursor == n or st.rows is not None:
        return
    # nodes a pod left since the last sync
    freed = set(c.rlog[st.rcursor :]) if st.rcursor < len(c.rlog) else None
    # the common case: one placement since the shape's last pod (a gang's next member)
    if n - st.cursor == 1:
        _recheck(c, st, (c.log[-1],), freed)
    elif n - st.cursor > len(c.nodes):
        if st.idx_a is None:
            st.idx_a = np.flatnonzero(st.feas)
        _refresh_rows(c, st, _with_freed(st, st.idx_a, freed))
    # the changed nodes as a mask: cheaper than a set of that many
    elif n - st.cursor > MANY_CHANGES:
        changed = np.zeros(len(c.nodes), dtype=bool)
        changed[c.log[st.cursor :]] = True
        _catch_up(c, st, _with_freed(st, np.flatnonzero(changed & st.feas), freed), freed)
    else:
        dirty = set(c.log[st.cursor :])
        if len(dirty) > FULL_REFRESH:
            rows = np.fromiter(dirty, dtype=np.intp, count=len(dirty))
            _catch_up(c, st, _with_freed(st, rows[st.feas[rows]], freed), freed)
        else:
            _recheck(c, st, dirty, freed)
    st.cursor, st.rcursor = n, len(c.rlog)


def _catch_up(c: Cluster, st: Shape, rows: np.ndarray, freed: set[int] | None) -> None:
    """Re-check these nodes: in numpy past FULL_REFRESH of them, else one by one."""
    if len(rows) > FULL_REFRESH:
        _refresh_rows(c, st, rows)
    else:
        _recheck(c, st, rows.tolist(), freed)


def _with_freed(st: Shape, rows: np.ndarray, freed: set[int] | None) -> np.ndarray:
    """`rows` (feasible nodes) and the nodes of `freed` the filters allow that the shape does not fit (yet)."""
    if not freed:
        return rows
    more = [j for j in freed if st.compat_l[j] and not st.feas_l[j]]
    return np.concatenate((rows, np.array(more, dtype=np.intp))) if more else rows


def _refresh_rows(c: Cluster, st: Shape, rows: np.ndarray) -> None:
    """The shape's arrays on these nodes (all of them the filters allow), recomputed in numpy."""
    if not len(rows):
        return
    st.tops_ok = False
    feas, st.base[rows] = _rows_state(c, st, rows)
    if not np.array_equal(st.feas[rows], feas):
        st.feas[rows] = feas
        st.idx = st.idx_a = None
        for j, ok in zip(rows.tolist(), feas.tolist(), strict=True):
            st.feas_l[j] = ok


def window_ties(st: Shape, ia: np.ndarray, start: int, m: int, k: int, p: int) -> np.ndarray:
    """The best-scored nodes of the window (`ia`: the `m` feasible nodes, the window the `k` from position `p`, round
    the ring; all of them when m <= k) in scan order from `start`, scored from the shape's kept base scores."""
    if m > k:
        win = ia[p : p + k] if p + k <= m else np.concatenate((ia[p:], ia[: k - (m - p)]))
    else:
        win = ia  # in node order; the ties are rotated to start at `start` below, as the scan meets them
    scores = st.base[win]
    # TaintToleration, normalised over the window (the same for every node without)
    if st.prefer is not None:
        counts = st.prefer[win]
        top = int(counts.max())
        if top:
            scores = scores + st.wtaint * (MAX_NODE_SCORE - MAX_NODE_SCORE * counts // top)
    ties = win[scores == scores.max()]
    if m <= k and len(ties) > 1:
        q = int(ties.searchsorted(start))
        if 0 < q < len(ties):
            ties = np.concatenate((ties[q:], ties[:q]))
    return ties


def set_idx(st: Shape) -> list[int]:
    """`Shape.idx` rebuilt from `feas` (after a numpy refresh flipped a verdict)."""
    st.idx = np.flatnonzero(st.feas).tolist()
    return st.idx


def best(st: Shape) -> list[int]:
    """The shape's best-scored feasible nodes, recomputed when a refresh dropped them (at least one node is feasible;
    the infeasible ones are set below every score, so one pass over all nodes needs no index of the feasible ones)."""
    if not st.tops_ok:
        scores = np.where(st.feas, st.base, _NO_SCORE)
        top = scores.max()
        st.top, st.tops, st.tops_ok = int(top), np.flatnonzero(scores == top).tolist(), True
    return st.tops


def _recheck(c: Cluster, st: Shape, dirty: Iterable[int], freed: set[int] | None) -> None:
    """The shape's feasibility and base score on these nodes, one by one (the scalar form of `_refresh_all`).
    Of the nodes the shape does not fit, only those in `freed` (a pod left them since the last sync) are
    re-checked (see `sync`)."""
    compat, feas, feas_l, base, need, alloc, score = (
        st.compat_l,
        st.feas,
        st.feas_l,
        st.base,
        st.need,
        c.alloc_rows,
        st.score,
    )
    assert score is not None  # every shape gets its scorer when built (`new_shape`)
    urows, nzrows = c._urows, c._nzrows  # `Cluster.lists`, read in place
    tops = st.tops if st.tops_ok else None
    top = st.top
    idx = st.idx
    for j in dirty:
        if not feas_l[j] and (freed is None or j not in freed or not compat[j]):
            continue  # does not fit, and no pod left it (or the filters refuse it): its verdict stands
        a = alloc[j]
        u = urows[j]
        ok = True
        for i, r in need:
            if a[i] - u[i] < r:
                ok = False
                break
        if ok != feas_l[j]:
            feas_l[j] = feas[j] = ok
            st.idx_a = None
            # the node joins or leaves the feasible list at its place in node order
            if idx is not None:
                if ok:
                    idx.insert(bisect.bisect_left(idx, j), j)
                else:
                    del idx[bisect.bisect_left(idx, j)]
        if ok:
            base[j] = s = score(a, u, nzrows[j])
        else:
            s = 0  # unread: only a feasible node's score joins the best set
        # the node leaves the best set, then rejoins it, or starts a new one, by its score
        if tops is not None:
            k = bisect.bisect_left(tops, j)
            if k < len(tops) and tops[k] == j:
                del tops[k]
            if ok:
                if s > top:
                    top, tops = s, [j]
                    st.top, st.tops = top, tops
                elif s == top:
                    tops.insert(k, j)  # `k`: where j is (was) in node order
    if tops is not None and not tops:
        st.tops_ok = False  # the best nodes all fell: the new best is elsewhere
