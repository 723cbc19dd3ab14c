"""The cost repair's new nodes by a pattern LP (issue 11's cost criterion): whole nodes, not an aggregate LP's
even spread, so pods the spread could not fit do not end on extra nodes; the repaired plan stays valid and never
beats the true optimum, and the cost bounds stay at or below it (brute force on small seeded clusters)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from builders import group, node, plan_when_cp_sat_gets_no_time, pod, podgroup, snapshot
from checker import check_plan
from gangscale.planner import _render
from gangscale.solver.bound import lower_bound, lp_cost_prices
from gangscale.solver.greedy import greedy
from gangscale.solver.outcome import placed_per_shape
from gangscale.solver.params import SolveOptions
from gangscale.solver.problem import MICRO, build_problem
from gangscale.solver.repack import repack


def aged(pg: dict, minute: int) -> dict:
    pg["metadata"]["creationTimestamp"] = f"2026-03-02T08:{minute:02d}:00Z"
    return pg


def three_sizes() -> tuple[list[dict], list[dict]]:
    """8-cpu nodes at $1.00; gangs of two 2-cpu, two 4-cpu and two 6-cpu pods, oldest smallest: 24 cpus, which
    three nodes hold exactly (6+2, 6+2, 4+4). Gang by gang first fit buys four; spreading the aggregate LP's
    three nodes evenly (6+4 does not fit) leaves a 4-cpu pod over, and a fourth node again."""
    catalog = [group("g", cpu="8", mem="64Gi", price=1.00)]
    objs: list[dict] = []
    for minute, (name, cpu) in enumerate([("two", "2"), ("four", "4"), ("six", "6")]):
        objs.append(aged(podgroup(name, min_count=2), minute))
        objs += [pod(f"{name}-{i}", cpu=cpu, mem="1Gi", group=name) for i in range(2)]
    return objs, catalog


def test_the_pattern_repair_packs_three_pod_sizes_onto_the_three_nodes_that_hold_them():
    objs, catalog = three_sizes()
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    first = greedy(prob)
    assert first.cost(prob) == 4 * MICRO  # the greedy buys a node too many
    lb, prices = lp_cost_prices(prob, placed_per_shape(prob, first), None)
    again = repack(prob, first, prices)
    assert again is not None and again.cost(prob) == 3 * MICRO
    assert again.y == first.y and again.satisfied == first.satisfied
    assert (again.cost(prob) - lb) / again.cost(prob) <= 0.01  # within 1% of its own bound
    assert not check_plan(objs, catalog, _render(snap, prob, again, again.cost(prob), 0).to_dict())


def test_the_planner_returns_the_three_node_plan_when_cp_sat_gets_no_time(monkeypatch):
    objs, catalog = three_sizes()
    plan = plan_when_cp_sat_gets_no_time(monkeypatch, objs, catalog)
    assert plan.cost_per_hour == pytest.approx(3.00)
    assert plan.solver.gap <= 0.01
    assert not check_plan(objs, catalog, plan.to_dict())


# ------------------------------------------------------------------ small seeded clusters against brute force


def random_cluster(seed: int) -> tuple[list[dict], list[dict]]:
    """At most 7 pending pods, 2 existing nodes and 3 node groups of 2 nodes: small enough for brute force."""
    rnd = random.Random(seed)
    objs = [node(f"n{n}", cpu=str(rnd.choice([1, 2, 3])), mem=f"{rnd.choice([2, 4, 8])}Gi")
            for n in range(rnd.randint(0, 2))]
    catalog = [group(f"g{j}", cpu=str(rnd.choice([2, 4, 8])), mem=f"{rnd.choice([4, 8, 16])}Gi",
                     price=rnd.choice([0.5, 1.0, 1.7, 3.0]), max_size=2) for j in range(rnd.randint(1, 3))]
    return objs + random_gangs(rnd, ["500m", "1", "2", "3"], ["1Gi", "2Gi", "6Gi"]), catalog


def random_gangs(rnd: random.Random, cpus: list[str], mems: list[str]) -> list[dict]:
    """1-3 gangs of 1-3 pods (7 at most), each pod's cpu and memory drawn from `cpus` and `mems`."""
    objs: list[dict] = []
    left = 7
    for j in range(rnd.randint(1, 3)):
        size = min(left, rnd.randint(1, 3))
        if size <= 0:
            break
        left -= size
        objs.append(podgroup(f"pg{j}", min_count=rnd.randint(1, size)))
        objs += [pod(f"p{j}-{i}", cpu=rnd.choice(cpus), mem=rnd.choice(mems), group=f"pg{j}") for i in range(size)]
    return objs


def cheapest(prob, y: list[int]) -> int:
    """The least cost (micro-dollars per hour) of any placement of exactly `y` pods per class: depth first over
    pods, bins opened in order within a group (no symmetric repeats), pruned by the best found."""
    bins = [(k.kid, k.cost) for k in prob.kinds for _ in range(k.max_count)]
    caps = [np.array(prob.kinds[kid].cap, dtype=np.int64) for kid, _ in bins]
    pods = [c.shape for c in prob.classes for _ in range(y[c.cid])]
    pods.sort(key=lambda s: -int(np.array(prob.shapes[s].req).sum()))
    best = [None]

    def dfs(i: int, free: list[np.ndarray], used: list[bool], cost: int) -> None:
        if best[0] is not None and cost >= best[0]:
            return
        if i == len(pods):
            best[0] = cost
            return
        req = np.array(prob.shapes[pods[i]].req, dtype=np.int64)
        for b, (kid, price) in enumerate(bins):
            if (pods[i], kid) not in prob.fit_count or (free[b] < req).any():
                continue
            if not used[b] and b and bins[b - 1][0] == kid and not used[b - 1]:
                continue  # the same group's earlier node is still empty: this choice repeats that one
            was = used[b]
            free[b] = free[b] - req
            used[b] = True
            dfs(i + 1, free, used, cost + (price if prob.kinds[kid].new and not was else 0))
            free[b] = free[b] + req
            used[b] = was

    dfs(0, list(caps), [False] * len(bins), 0)
    return best[0]


@pytest.mark.parametrize("seed", range(40))
def test_on_small_clusters_the_bounds_stay_below_the_optimum_and_the_repair_above_it(seed):
    objs, catalog = random_cluster(seed)
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    first = greedy(prob)
    if not sum(first.y):
        return
    opt = cheapest(prob, first.y)
    assert opt is not None and opt <= first.cost(prob)
    per_shape = placed_per_shape(prob, first)
    lb, prices = lp_cost_prices(prob, per_shape, None)
    assert lb <= opt
    assert lower_bound(prob, per_shape, SolveOptions(), 2.0)[0] <= opt
    again = repack(prob, first, prices) if prices else None
    if again is not None:
        assert again.y == first.y and again.cost(prob) >= opt
        assert not check_plan(objs, catalog, _render(snap, prob, again, again.cost(prob), 0).to_dict())


@pytest.mark.parametrize("seed", range(40))
def test_the_pattern_lps_nodes_hold_their_pods_within_each_groups_headroom_and_the_demand(seed):
    from gangscale.solver.colgen import pattern_new_nodes
    from gangscale.solver.repack import _demand

    objs, catalog = random_cluster(seed)
    prob = build_problem(snapshot(objs, catalog))
    first = greedy(prob)
    demand = _demand(prob, first)
    left = dict(demand)
    nodes = pattern_new_nodes(prob, left, None)
    used: dict[int, int] = {}
    for kid, fill in nodes:
        kind = prob.kinds[kid]
        assert kind.new and fill and all(n > 0 for n in fill.values())
        load = sum(n * np.array(prob.shapes[s].req, dtype=np.int64) for (s, _), n in fill.items())
        assert (load <= np.array(kind.cap, dtype=np.int64)).all()
        assert all((s, kid) in prob.fit_count for s, _ in fill)
        used[kid] = used.get(kid, 0) + 1
    assert all(n <= prob.kinds[kid].max_count for kid, n in used.items())
    for key, n in demand.items():
        assert left[key] >= 0 and n - left[key] == sum(f.get(key, 0) for _, f in nodes)


# ------------------------------------------------------------------ capacity the pods cannot use


def lopsided() -> tuple[list[dict], list[dict]]:
    """A 1-cpu/4-GiB pod and eight 250m/256-MiB pods; existing nodes of one look: 4 free cpus with 1 GiB, 1 cpu with
    16 GiB. Pooled (5 cpus, 17 GiB) they hold all nine; node by node the first holds four small pods and the
    second the large one, its other 15 GiB without a cpu: four small pods need a new node (1 cpu, 1 GiB, $1)."""
    objs = [node("cpu-rich", cpu="4", mem="1Gi"), node("mem-rich", cpu="1", mem="16Gi")]
    objs += [pod("large", cpu="1", mem="4Gi")] + [pod(f"small{i}", cpu="250m", mem="256Mi") for i in range(8)]
    return objs, [group("g", cpu="1", mem="1Gi", price=1.0)]


def test_free_memory_on_a_node_without_cpu_does_not_lower_the_cost_bound():
    objs, catalog = lopsided()
    prob = build_problem(snapshot(objs, catalog))
    first = greedy(prob)
    assert sum(first.y) == 9 and first.cost(prob) == MICRO
    per_shape = placed_per_shape(prob, first)
    lb, _ = lp_cost_prices(prob, per_shape, None)
    # usable: the second node's memory is 4 GiB (its pods ask at most 4 GiB per cpu); 5 GiB hold 1 + 4 pods
    assert 0.99 * MICRO <= lb <= cheapest(prob, first.y) == MICRO
    assert 0.99 * MICRO <= lower_bound(prob, per_shape, SolveOptions(), 2.0)[0] <= MICRO


def lopsided_cluster(seed: int) -> tuple[list[dict], list[dict]]:
    """Up to 7 pods of unlike memory per cpu, up to 3 existing nodes with little of one resource and much of the
    other, 1-2 node groups of 2 nodes: where pooled free capacity is least usable, still small for brute force."""
    rnd = random.Random(seed)
    objs = [node(f"n{n}", cpu=rnd.choice(["500m", "1", "4", "8"]), mem=rnd.choice(["1Gi", "2Gi", "6Gi", "16Gi"]))
            for n in range(rnd.randint(1, 3))]
    catalog = [group(f"g{j}", cpu=str(rnd.choice([2, 4, 8])), mem=f"{rnd.choice([4, 8, 16])}Gi",
                     price=rnd.choice([0.5, 1.0, 1.7]), max_size=2) for j in range(rnd.randint(1, 2))]
    return objs + random_gangs(rnd, ["250m", "500m", "1", "2"], ["512Mi", "1Gi", "4Gi", "6Gi"]), catalog


@pytest.mark.parametrize("seed", range(40))
def test_with_lopsided_existing_nodes_the_cost_bounds_stay_below_the_optimum(seed):
    objs, catalog = lopsided_cluster(seed)
    prob = build_problem(snapshot(objs, catalog))
    first = greedy(prob)
    if not sum(first.y):
        return
    opt = cheapest(prob, first.y)
    per_shape = placed_per_shape(prob, first)
    assert lp_cost_prices(prob, per_shape, None)[0] <= opt
    assert lower_bound(prob, per_shape, SolveOptions(), 2.0)[0] <= opt


def test_a_new_node_counts_only_the_capacity_whole_requests_can_fill():
    # 3-cpu nodes hold one of these pods each (2 + 1.6 and 1.6 + 1.6 exceed 3): four nodes. The pods' cpus are
    # multiples of 400m, so a node offers them 2.8 cpus, not 3; at most 1 GiB per 1.6 cpus, that is 1.75 GiB of
    # its memory, in whole GiB 1: one pod per node, where the pooled cpus said 7.2 / 3 = 2.4 nodes
    objs = [pod(f"a{i}", cpu="2", mem="1Gi") for i in range(2)] + [pod(f"b{i}", cpu="1600m", mem="1Gi")
                                                                    for i in range(2)]
    prob = build_problem(snapshot(objs, [group("g", cpu="3", mem="8Gi", price=1.0)]))
    first = greedy(prob)
    assert first.cost(prob) == 4 * MICRO == cheapest(prob, first.y)
    per_shape = placed_per_shape(prob, first)
    assert 3.99 * MICRO <= lp_cost_prices(prob, per_shape, None)[0] <= 4 * MICRO


def test_existing_nodes_hold_one_pod_over_half_their_free_cpu_each_in_the_gang_bound():
    from gangscale.solver.bound import gangs_upper_bound, tier_counts

    objs = [node(f"n{i}", cpu="3", mem="8Gi") for i in range(3)]
    for j, (cpu, mem) in enumerate([("2", "1Gi"), ("2", "2Gi"), ("1600m", "3Gi")]):
        objs.append(podgroup(f"g{j}", min_count=2))
        objs += [pod(f"g{j}-{i}", cpu=cpu, mem=mem, group=f"g{j}") for i in range(2)]
    prob = build_problem(snapshot(objs, []))
    first = greedy(prob)
    tiers = gangs_upper_bound(prob, tier_counts(prob, first.y, first.satisfied))
    assert [(t.gangs, t.gangs_bound) for t in tiers] == [(1, 1)]  # 3 x 2.8 pooled cpus would take two gangs


def test_the_repair_puts_a_memory_heavy_pod_on_the_memory_rich_node_and_leaves_the_cpu_to_a_cpu_heavy_one():
    # first fit in node order puts the 1-cpu/6-GiB pod on the first node, where it strands a cpu beside no
    # memory, and the 1.5-cpu/1-GiB pod needs a new node; matched by memory per cpu, both fit the existing nodes
    objs = [node("balanced", cpu="2", mem="6Gi"), node("mem-rich", cpu="1", mem="6Gi")]
    objs += [aged(podgroup("y", min_count=1), 0), pod("y-0", cpu="1", mem="6Gi", group="y")]
    objs += [aged(podgroup("x", min_count=1), 1), pod("x-0", cpu="1500m", mem="1Gi", group="x")]
    catalog = [group("g", cpu="4", mem="16Gi", price=1.0)]
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    first = greedy(prob)
    y_shape = prob.classes[prob.gangs[0].classes[0]].shape
    prices = {s.sid: 2.0 if s.sid == y_shape else 1.0 for s in prob.shapes}  # the 6-GiB pod goes first
    again = repack(prob, first, prices)
    assert again is not None and again.cost(prob) == 0 and again.y == first.y
    assert not check_plan(objs, catalog, _render(snap, prob, again, again.cost(prob), 0).to_dict())


def test_a_repair_above_its_target_tries_the_other_fills_and_keeps_the_cheapest():
    # nearest by memory per cpu, the 1-cpu/3-GiB pod takes the 4-GiB node the 1-cpu/4-GiB pod needs (a new node);
    # first fit in node order puts it on the 3-GiB node and both stay on existing nodes
    objs = [node("low-mem", cpu="2", mem="3Gi"), node("high-mem", cpu="1", mem="4Gi")]
    objs += [pod("y", cpu="1", mem="3Gi"), pod("x", cpu="1", mem="4Gi")]
    catalog = [group("g", cpu="4", mem="16Gi", price=1.0)]
    snap = snapshot(objs, catalog)
    prob = build_problem(snap)
    first = greedy(prob)
    y_shape = next(s.sid for s in prob.shapes if s.req[1] == 3 * 2**30)
    prices = {s.sid: 2.0 if s.sid == y_shape else 1.0 for s in prob.shapes}  # the 3-GiB pod goes first
    nearest = repack(prob, first, prices)
    assert nearest is not None and nearest.cost(prob) == MICRO  # no target: the first fill that places all
    best = repack(prob, first, prices, good=0)
    assert best is not None and best.cost(prob) == 0 and best.y == first.y
    assert not check_plan(objs, catalog, _render(snap, prob, best, best.cost(prob), 0).to_dict())


@pytest.mark.parametrize("seed", range(12))
def test_the_cost_lp_on_the_gang_lps_pools_has_its_own_bound_and_prices_whatever_the_shape_order(seed):
    from gangscale.solver.bound import gang_lp

    objs, catalog = random_cluster(seed)
    prob = build_problem(snapshot(objs, catalog))
    lp = gang_lp(prob)
    assert lp is not None
    every = {sh: 1 + sh % 3 for sh in reversed(lp.parts.view.shapes)}  # the same shapes, in another order
    placed = placed_per_shape(prob, greedy(prob))  # some shapes, or all of them
    for demand in (every, placed):
        if demand:
            assert lp_cost_prices(prob, demand, None, lp.parts) == lp_cost_prices(prob, demand, None)
