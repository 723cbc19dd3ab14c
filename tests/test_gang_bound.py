"""The gang upper bound (issue 11): sound against brute force on small clusters, reported in the plan, and
OPTIMAL only once both the gang gap and the cost gap are closed."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from builders import group, node, plan_for, pod, podgroup, snapshot
from checker import check_plan
from gangscale.plan import render_markdown, render_table
from gangscale.solver.bound import gangs_upper_bound, tier_counts
from gangscale.solver.greedy import greedy
from gangscale.solver.problem import build_problem


def random_cluster(seed: int) -> tuple[list[dict], list[dict]]:
    """At most 6 pending pods and 4 bins: small enough to try every placement."""
    rnd = random.Random(seed)
    objs: list[dict] = []
    for n in range(rnd.randint(0, 2)):
        objs.append(node(f"n{n}", cpu=str(rnd.choice([2, 3, 4])), mem=f"{rnd.choice([4, 8])}Gi"))
    catalog = [group(f"g{j}", cpu=str(rnd.choice([2, 4])), mem="8Gi", price=1.0, max_size=rnd.randint(1, 2))
               for j in range(rnd.randint(0, 2))]
    pods = 0
    for j in range(rnd.randint(1, 4)):
        size = rnd.randint(1, 3)
        if pods + size > 6:
            break
        pods += size
        policy = rnd.choice(["gang", "gang", "basic"])
        objs.append(podgroup(f"pg{j}", min_count=rnd.randint(1, size), policy=policy,
                             priority=rnd.choice([0, 0, 100])))
        for i in range(size):
            objs.append(pod(f"p{j}-{i}", cpu=rnd.choice(["1", "2", "3"]), mem=rnd.choice(["1Gi", "3Gi"]),
                            group=f"pg{j}"))
    return objs, catalog


def brute_force_best(prob) -> dict[int, tuple[int, int]]:
    """Per priority level, (gangs, pods) of the lexicographically best placement, by trying every placement."""
    bins = [k.kid for k in prob.kinds for _ in range(k.max_count)]
    caps = [np.array(prob.kinds[k].cap) for k in bins]
    pods = [(c.cid, c.shape) for c in prob.classes for _ in range(c.count)]
    levels = sorted({g.priority for g in prob.gangs}, reverse=True)
    best = None
    for where in itertools.product(range(-1, len(bins)), repeat=len(pods)):
        load = [np.zeros(len(prob.resources), dtype=np.int64) for _ in bins]
        ok = True
        y = [0] * len(prob.classes)
        for (cid, shape), b in zip(pods, where):
            if b < 0:
                continue
            if bins[b] not in prob.compat[shape]:
                ok = False
                break
            load[b] += np.array(prob.shapes[shape].req)
            y[cid] += 1
        if not ok or any((l > c).any() for l, c in zip(load, caps)):
            continue
        value = []
        for lvl in levels:
            gangs = pods_ = 0
            for g in prob.gangs:
                if g.priority != lvl:
                    continue
                placed = sum(y[c] for c in g.classes)
                if g.is_gang:
                    if placed >= g.need:
                        gangs += 1
                        pods_ += placed
                else:
                    pods_ += placed
            value += [gangs, pods_]
        if best is None or value > best:
            best = value
    return {lvl: (best[2 * i], best[2 * i + 1]) for i, lvl in enumerate(levels)}


@pytest.mark.parametrize("seed", range(60))
def test_the_gang_bound_is_never_below_the_brute_force_optimum(seed):
    objs, catalog = random_cluster(seed)
    prob = build_problem(snapshot(objs, catalog))
    if not prob.gangs or sum(k.max_count for k in prob.kinds) > 4:
        pytest.skip("nothing to place, or too many bins to try every placement")
    a = greedy(prob)
    tiers = gangs_upper_bound(prob, tier_counts(prob, a.y, a.satisfied))
    best = brute_force_best(prob)
    for t in tiers:
        gangs, pods = best[t.priority]
        assert gangs <= t.gangs_bound, (t, best)
        if t.pods_bound is not None:
            assert pods <= t.pods_bound, (t, best)


def fragmented() -> tuple[list[dict], list[dict]]:
    """Two nodes of 2 free cpus and 4 GiB; a gang of a 2-cpu/1-GiB pod and two 1-cpu/3-GiB pods: the two
    3-GiB pods need both nodes and the 2-cpu pod a whole node, so the gang does not fit, while every relaxed
    count (4 cpus, 8 GiB, one pod over half a node's memory per node) would take it."""
    objs = [node(f"n{i}", cpu="2", mem="4Gi") for i in range(2)]
    objs.append(podgroup("g", min_count=3))
    objs += [pod(f"g-{i}", cpu=cpu, mem=mem, group="g") for i, (cpu, mem) in enumerate([("2", "1Gi"), ("1", "3Gi"),
                                                                                       ("1", "3Gi")])]
    return objs, []


def test_an_open_gang_gap_is_reported_and_the_plan_is_not_optimal():
    objs, catalog = fragmented()
    plan = plan_for(objs, catalog, time_limit=0.2)  # no time for CP-SAT: the LP bound stands
    assert not check_plan(objs, catalog, plan.to_dict())
    sv = plan.to_dict()["solver"]
    assert (sv["gangsStarted"], sv["gangsUpperBound"]) == (0, 1)
    assert sv["byPriority"][0]["gangsUpperBound"] == 1
    assert plan.solver.status == "FEASIBLE"
    assert "0 gangs started of at most 1 possible (gang gap 1)" in render_markdown(plan)
    assert "gang gap 1" in render_table(plan)


def test_cp_sat_closes_the_gang_gap_when_it_proves_the_placement():
    objs, catalog = fragmented()
    plan = plan_for(objs, catalog, time_limit=5.0)
    sv = plan.to_dict()["solver"]
    assert (sv["gangsStarted"], sv["gangsUpperBound"]) == (0, 0)
    assert plan.solver.status == "OPTIMAL"
    assert "gang gap closed" in render_markdown(plan)


def test_the_bound_closes_the_gap_of_a_plan_that_starts_every_gang_that_fits():
    objs = [node("n", cpu="4", mem="16Gi")] + [podgroup(f"g{j}", min_count=2) for j in range(3)]
    objs += [pod(f"g{j}-{i}", cpu="1", group=f"g{j}") for j in range(3) for i in range(3)]
    prob = build_problem(snapshot(objs, []))
    a = greedy(prob)
    (t,) = gangs_upper_bound(prob, tier_counts(prob, a.y, a.satisfied))
    assert (t.gangs, t.gangs_bound, t.pods, t.pods_bound) == (2, 2, 4, 4)


def test_a_plan_cp_sat_found_after_the_deadline_keeps_the_hints_gang_bound_at_every_level():
    # at `--time-limit 60` CP-SAT took the whole budget and returned another plan: its gang bound was computed
    # again past the deadline, so it fell back to every gang (elastic-10k: 500 instead of 456)
    import time
    from dataclasses import replace

    from gangscale.planner import _gang_tiers

    # (elastic-10k has two priority levels: both keep their bounds)
    objs = [node("n", cpu="4", mem="16Gi")] + [podgroup(f"g{j}", min_count=2, priority=100 * (j % 2))
                                               for j in range(4)]
    objs += [pod(f"g{j}-{i}", cpu="1", group=f"g{j}") for j in range(4) for i in range(3)]
    prob = build_problem(snapshot(objs, []))
    hint = greedy(prob)
    hint_tiers = gangs_upper_bound(prob, tier_counts(prob, hint.y, hint.satisfied))
    best = replace(hint)  # another plan object, as CP-SAT returns
    tiers = _gang_tiers(prob, best, hint, hint_tiers, False, time.perf_counter() - 1.0)
    assert [(t.priority, t.gangs, t.gangs_bound) for t in tiers] == [(h.priority, h.gangs, h.gangs_bound)
                                                                     for h in hint_tiers]
    assert sum(t.gangs_bound for t in tiers) == 2  # a 4-cpu node: two gangs of 2 one-cpu pods, not all four


def test_nodes_of_3_free_cpus_count_2_usable_for_2_cpu_pods_so_the_gang_bound_is_met():
    objs = [node(f"n{i}", cpu="3", mem="8Gi") for i in range(3)]
    for j, mem in enumerate(["1Gi", "2Gi", "3Gi"]):
        objs.append(podgroup(f"g{j}", min_count=2))
        objs += [pod(f"g{j}-{i}", cpu="2", mem=mem, group=f"g{j}") for i in range(2)]
    prob = build_problem(snapshot(objs, []))
    first = greedy(prob)
    tiers = gangs_upper_bound(prob, tier_counts(prob, first.y, first.satisfied))
    assert [(t.gangs, t.gangs_bound) for t in tiers] == [(1, 1)]  # pooled 9 cpus would take two gangs
