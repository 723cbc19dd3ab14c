"""The modelled score plugins over a set of candidate nodes, as numpy arrays.

The vector form of scores.py's per-node formulas (NodeResourcesFit under LeastAllocated,
MostAllocated and RequestedToCapacityRatio, NodeResourcesBalancedAllocation, TaintToleration;
sources there): the same integer divisions, and for the balance the same float64 steps, so a node
scores here what upstream scores it. Invariant: scores read the cluster's arrays and change nothing;
the reference path scores with `score_nodes`, the fast path's numpy refreshes with `base_scores`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..model import Placement, Pod
from ..resources import CPU, MEMORY
from .cluster import Cluster
from .config import Profile
from .scores import MAX_NODE_SCORE, is_scalar


def fit_scores(
    c: Cluster, cand: np.ndarray, pod: Pod, req: np.ndarray, prof: Profile
) -> np.ndarray:
    total = np.zeros(len(cand), dtype=np.int64)
    wsum = np.zeros(len(cand), dtype=np.int64)
    nzc, nzm = c.nonzero(pod)
    for name, weight in prof.resources:
        i = c.ri.get(name)
        if i is None or (is_scalar(name) and req[i] == 0):
            continue  # the node has none of it / a scalar resource the pod does not request
        a = c.alloc[cand, i]
        if name == CPU:
            q = c.nz[cand, 0] + nzc
        elif name == MEMORY:
            q = c.nz[cand, 1] + nzm
        else:
            q = c.used[cand, i] + req[i]
        have = a > 0
        safe = np.where(have, a, 1)
        if prof.strategy == "LeastAllocated":
            s = np.where(q > a, 0, (safe - q) * MAX_NODE_SCORE // safe)
        elif prof.strategy == "MostAllocated":
            s = np.minimum(q, a) * MAX_NODE_SCORE // safe
        else:
            util = np.where(q >= a, 100, np.where(q > 0, np.minimum(q, a) * 100 // safe, 0))
            s = _broken_linear(prof.shape, util)
            have = have & (s > 0)
        total += np.where(have, s * weight, 0)
        wsum += np.where(have, weight, 0)
    one = np.maximum(wsum, 1)
    if prof.strategy == "RequestedToCapacityRatio":
        return np.where(wsum > 0, (2 * total + one) // (2 * one), 0)
    return np.where(wsum > 0, total // one, 0)


def _broken_linear(shape: Sequence[tuple[int, int]], u: np.ndarray) -> np.ndarray:
    out = np.full(u.shape, shape[-1][1], dtype=np.int64)
    for i in range(len(shape) - 1, -1, -1):
        px, py = shape[i]
        if i == 0:
            val = np.full(u.shape, py, dtype=np.int64)
        else:
            qx, qy = shape[i - 1]
            num = (py - qy) * (u - qx)
            val = qy + np.sign(num) * (np.abs(num) // (px - qx))
        out = np.where(u <= px, val, out)
    return out


def _balanced_scores(c: Cluster, cand: np.ndarray, req: np.ndarray, prof: Profile) -> np.ndarray:
    cols = []
    for name in prof.balanced_resources:
        i = c.ri.get(name)
        if i is None or (is_scalar(name) and req[i] == 0):
            continue
        cols.append(i)
    if not cols or all(req[i] == 0 for i in cols):
        return np.zeros(len(cand), dtype=np.int64)  # best-effort pod: the plugin skips it
    at = np.ix_(cand, np.asarray(cols, dtype=np.intp))
    a = c.alloc[at]
    q = c.used[at] + req[cols]
    have = a > 0
    f = np.where(have, np.minimum(1.0, q / np.where(have, a, 1)), np.nan)
    n = have.sum(axis=1)
    with np.errstate(invalid="ignore", all="ignore"):
        two = np.abs(np.nanmax(f, axis=1) - np.nanmin(f, axis=1)) / 2
        mean = np.nansum(f, axis=1) / np.maximum(n, 1)
        many = np.sqrt(np.nansum((f - mean[:, None]) ** 2, axis=1) / np.maximum(n, 1))
    std = np.where(n == 2, two, np.where(n > 2, many, 0.0))
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def _taint_scores(c: Cluster, cand: np.ndarray, pl: Placement) -> np.ndarray:
    counts = c.prefer_counts(pl)[cand]
    top = int(counts.max()) if len(counts) else 0
    if top == 0:
        return np.full(len(cand), MAX_NODE_SCORE, dtype=np.int64)
    return MAX_NODE_SCORE - MAX_NODE_SCORE * counts // top


def base_scores(c: Cluster, cand: np.ndarray, pod: Pod, prof: Profile) -> np.ndarray:
    """NodeResourcesFit and BalancedAllocation, weighted: each node's own score (the taint score, normalised over the
    candidates, is not in it)."""
    req = c.vec(pod)
    total = np.zeros(len(cand), dtype=np.int64)
    if prof.weight("NodeResourcesFit"):
        total += prof.weight("NodeResourcesFit") * fit_scores(c, cand, pod, req, prof)
    if prof.weight("NodeResourcesBalancedAllocation"):
        total += prof.weight("NodeResourcesBalancedAllocation") * _balanced_scores(
            c, cand, req, prof
        )
    return total


def score_nodes(c: Cluster, cand: np.ndarray, pod: Pod, prof: Profile) -> np.ndarray:
    """Weighted sum of the modelled score plugins over the candidate nodes."""
    total = base_scores(c, cand, pod, prof)
    if prof.weight("TaintToleration"):
        total += prof.weight("TaintToleration") * _taint_scores(c, cand, pod.placement)
    return total
