"""The solver's setup does each piece of work once per plan and gives what it gave before (issue 10's week):
the cost LP solved to 0 (no new node needed) is not solved again for the final bound; the LP's capacity
coefficients computed once per LP are those each pool computed; bin kinds built without per-node merges when no
per-node rule applies are the kinds built with them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from builders import group, node, pod, podgroup, snapshot
from gangscale.api import SolveOptions
from gangscale.planner import solve_plan
from gangscale.solver import bound
from gangscale.solver.problem import build_problem


def _fits_existing() -> tuple[list[dict], list[dict]]:
    """A gang whose pods fit the existing nodes: no new node, so the cost LP's optimum is 0."""
    objs = [node(f"n{i}", cpu="8", mem="32Gi") for i in range(3)]
    objs.append(podgroup("g", min_count=3))
    objs += [pod(f"g-{i}", cpu="2", mem="4Gi", group="g") for i in range(3)]
    return objs, [group("cpu", cpu="8", mem="32Gi", max_size=5)]


def _count_cost_lps(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = bound.lp_cost_prices

    def counted(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(out[0])
        return out

    monkeypatch.setattr(bound, "lp_cost_prices", counted)
    import gangscale.planner as planner

    monkeypatch.setattr(planner, "lp_cost_prices", counted)
    return calls


def test_a_plan_needing_no_new_node_solves_its_cost_lp_once_and_reports_the_same_bound(monkeypatch):
    objs, catalog = _fits_existing()
    snap = snapshot(objs, catalog)
    want = solve_plan(snap, SolveOptions(deterministic=True, workers=1))
    calls = _count_cost_lps(monkeypatch)
    plan = solve_plan(snap, SolveOptions(deterministic=True, workers=1))
    assert calls == [0]  # the repair's LP; the final bound takes its 0 (it solved it again before)
    assert not plan.scale_up
    got = plan.solver.model_copy(update={"seconds": 0.0})
    assert got == want.solver.model_copy(update={"seconds": 0.0})
    assert plan.solver.gap == 0.0


def _mixed(seed: int, *, anti: bool) -> tuple[list[dict], list[dict]]:
    rnd = random.Random(seed)
    objs = [node(f"n{i}", cpu=str(rnd.choice([3, 4, 8, 16])), mem=f"{rnd.choice([4, 16, 64])}Gi",
                 gpu=rnd.choice([0, 0, 4]), labels={"zone": rnd.choice("abc")}) for i in range(12)]
    for i in range(10):  # bound pods: some nodes full (skipped), others with odd room
        objs.append(pod(f"b{i}", cpu=rnd.choice(["500m", "1", "3", "16"]), mem="1Gi", node=f"n{rnd.randrange(12)}"))
    for i in range(10):
        p = pod(f"p{i}", cpu=rnd.choice(["250m", "1", "2", "3"]), mem=rnd.choice(["1Gi", "3Gi", "12Gi"]),
                gpu=rnd.choice([0, 0, 1, 2]))
        p["metadata"]["labels"] = {"app": "x"}
        if anti:
            p["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
        objs.append(p)
    catalog = [group("cpu", cpu="8", mem="32Gi", max_size=5), group("gpu", cpu="48", mem="192Gi", gpu=8, max_size=2)]
    return objs, catalog


def _kinds_by_merges(snap, shapes, vec, limits):
    """The bin kinds' existing nodes as they were built: every node's free room merged with its per-node limits."""
    min_req = np.min(np.array([s.req for s in shapes]), axis=0) if shapes else None
    out = []
    for n in snap.nodes:
        free = vec({**{k: max(0, v) for k, v in n.free.items()}, **limits.free_on(n.name)})
        if min_req is not None and not all(f >= m for f, m in zip(free, min_req)):
            continue
        out.append((n.name, free))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("anti", [False, True])
def test_bin_kinds_hold_the_nodes_and_free_room_the_per_node_merges_gave(seed, anti):
    objs, catalog = _mixed(seed, anti=anti)
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    from gangscale.fit import node_limits
    from gangscale.resources import vectorizer

    limits = node_limits((p for g in snap.solvable for p in g.pending), snap.bound)
    assert bool(limits.limits) == anti
    vec = vectorizer(prob.resources)
    want = _kinds_by_merges(snap, list(prob.shapes), vec, limits)
    got = [(name, k.cap) for k in prob.kinds if not k.new for name in k.nodes]
    assert sorted(got) == sorted(want) and want


@pytest.mark.parametrize("seed", range(4))
def test_the_lps_capacity_coefficients_once_per_lp_are_each_pools_own(seed):
    objs, catalog = _mixed(seed, anti=False)
    prob = build_problem(snapshot(objs, catalog))
    cover = {sh: None for sh in range(len(prob.shapes))}
    caps = np.array([k.cap for k in prob.kinds], dtype=float).reshape(len(prob.kinds), len(prob.resources))
    scale = np.maximum(caps.max(axis=0), 1.0)
    got = bound._scaled_requests(prob, cover, scale)
    want = [[(r, q / float(scale[r])) for r, q in enumerate(prob.shapes[sh].req) if q] for sh in cover]
    assert got == want
    assert all(got)


def test_a_node_overcommitted_by_bound_pods_is_a_kind_with_no_negative_room():
    """A node over-committed by bound pods (free < 0 in a resource) reads as 0 there, as the per-node clamp did."""
    objs = [node("n0", cpu="4", mem="8Gi"), pod("b0", cpu="6", mem="1Gi", node="n0"),
            pod("p0", cpu="0", mem="1Gi")]
    prob = build_problem(snapshot(objs, [group("cpu", cpu="8", mem="32Gi", max_size=1)]))
    existing = [k for k in prob.kinds if not k.new]
    assert existing and all(min(k.cap) >= 0 for k in existing)


def _reference_enumeration(cap, shapes, budget):
    """`enumerate_maximal` as it was written before its memo: depth-first over (shape id, request)."""
    out, steps = [], [0]

    def fits(req, free):
        return all(r <= f for r, f in zip(req, free))

    def take(req, free):
        n = None
        for r, f in zip(req, free):
            if r > 0:
                n = f // r if n is None else min(n, f // r)
        return max(0, n or 0)

    reqs = [r for _, r in shapes]

    def dfs(i, free, cur):
        steps[0] += 1
        if len(out) >= budget or steps[0] > budget * 200:
            return False
        if i == len(shapes):
            if cur and not any(fits(r, free) for r in reqs):
                out.append(tuple(cur))
            return True
        sid, req = shapes[i]
        for k in range(take(req, free), -1, -1):
            if k:
                cur.append((sid, k))
            ok = dfs(i + 1, [f - k * r for f, r in zip(free, req)], cur)
            if k:
                cur.pop()
            if not ok:
                return False
        return True

    return out, dfs(0, list(cap), [])


@pytest.mark.parametrize("seed", range(20))
def test_the_kept_pattern_enumerations_are_the_enumerations_of_their_capacity_requests_and_budget(seed):
    """Every input of an enumeration is in its memo's key: the same requests in another bin, under another budget
    or in another order each give their own patterns; other shape ids get the same patterns under their ids."""
    from gangscale.solver.patterns import enumerate_maximal

    rnd = random.Random(seed)
    cap = (rnd.choice([4000, 8000, 16000]), rnd.choice([8, 32, 64]) << 30, 110)
    shapes = [(i, (rnd.choice([250, 1000, 3000]), rnd.choice([1, 3, 12]) << 30, 1)) for i in range(rnd.randint(2, 5))]
    for budget in (rnd.choice([2, 3]), 64):
        for c in (cap, (cap[0] // 2, cap[1], cap[2])):
            for order in (shapes, shapes[::-1]):
                assert enumerate_maximal(c, order, budget) == _reference_enumeration(c, order, budget)
                renamed = [(sid + 100, req) for sid, req in order]
                assert enumerate_maximal(c, renamed, budget) == _reference_enumeration(c, renamed, budget)
