"""The LP relaxations' dual-feasible weights (`bound._pool_dff`) computed for every pool at once are exactly those
of each pool computed alone, in the same order (the LP's rows are created in that order)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from builders import group, node, pod, snapshot
from gangscale.solver.bound import DFF_ORDERS, _lp_parts, _pool_dff, _pools, _view
from gangscale.solver.problem import build_problem


def _one_pool(view, kids: list[int]) -> dict[int, dict]:
    """The weights of one pool, as they were computed pool by pool (the reference)."""
    q = view.req
    cap = np.floor(view.usable[kids]).astype(np.int64)
    fits = view.fits[kids]
    safe = np.maximum(cap, 1)[:, None, :]
    out: dict[int, dict] = {}
    for k in DFF_ORDERS:
        whole, rest = np.divmod((k + 1) * q[None], safe)
        f = np.where(whole > 0, np.where(rest > 0, whole / k, q[None] / safe), 0.0)
        f = np.where(fits[:, :, None] & (cap[:, None, :] > 0) & (q[None] > 0), f, np.inf)
        w = np.where(np.isfinite(f.min(axis=0)), f.min(axis=0), 0.0)
        share = q / np.maximum(cap.max(axis=0), 1)
        for r in np.flatnonzero((w > share + 1e-12).any(axis=0)).tolist():
            for i in np.flatnonzero(w[:, r] > 0).tolist():
                out.setdefault(view.shapes[i], {})[(r, k)] = float(w[i, r])
    return out


def _cluster(seed: int) -> tuple[list[dict], list[dict]]:
    """Existing nodes of three label sets and varied free room (several pools), two node groups, mixed pods."""
    rnd = random.Random(seed)
    objs = [node(f"n{i}", cpu=str(rnd.choice([3, 4, 8, 16])), mem=f"{rnd.choice([4, 16, 64])}Gi",
                 gpu=rnd.choice([0, 0, 4]), labels={"zone": rnd.choice("abc")}) for i in range(12)]
    for i in range(8):  # bound pods leave odd free capacity
        objs.append(pod(f"b{i}", cpu=rnd.choice(["500m", "1", "3"]), mem="1Gi", node=f"n{rnd.randrange(12)}"))
    for i in range(10):
        objs.append(pod(f"p{i}", cpu=rnd.choice(["250m", "1", "2", "3"]), mem=rnd.choice(["1Gi", "3Gi", "12Gi"]),
                        gpu=rnd.choice([0, 0, 1, 2])))
    catalog = [group("cpu", cpu="8", mem="32Gi", max_size=5), group("gpu", cpu="48", mem="192Gi", gpu=8, max_size=2)]
    return objs, catalog


@pytest.mark.parametrize("seed", range(6))
def test_the_weights_of_every_pool_at_once_are_each_pools_own_in_the_same_order(seed):
    objs, catalog = _cluster(seed)
    prob = build_problem(snapshot(objs, catalog))
    shapes = list(range(len(prob.shapes)))
    view = _view(prob, shapes)
    pools = _pools(prob, view)
    assert len(pools) >= 3  # the reduction over pools is exercised
    got = _pool_dff(prob, view, pools)
    want = [_one_pool(view, kids) for kids in pools]
    assert [list((sh, list(w.items())) for sh, w in d.items()) for d in got] == \
        [list((sh, list(w.items())) for sh, w in d.items()) for d in want]
    assert any(got)  # some weights at all
    assert _lp_parts(prob, shapes).weights == got
