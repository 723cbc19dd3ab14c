"""The repair by value per dollar (`gangscale/solver/value_pack.py`): the plan's new-node pods packed again node by
node, each the node group's node that carries the most value for its price. Same pods, gangs and domains; every node
within its allocatable and compatible with its pods; no group past its headroom (checked here from the problem's own
numbers, and by the plan checker through the planner)."""

from __future__ import annotations

from collections import Counter

import numpy as np
from builders import group, node, pod, podgroup, snapshot

from benchmarks.budget import wide_case
from gangscale.solver.greedy import Assignment, greedy
from gangscale.solver.merge import fewer_nodes
from gangscale.solver.outcome import placed_per_shape
from gangscale.solver.problem import Problem, build_problem
from gangscale.solver.value_pack import fluid_prices, value_pack


def _valid(prob: Problem, before: Assignment, after: Assignment) -> None:
    """The same pods per class, gangs and domains; each bin within its kind's capacity, its pods compatible and in
    their gang's domain; each node group within its headroom."""
    assert after.y == before.y and after.satisfied == before.satisfied and after.domain == before.domain
    placed: Counter[int] = Counter()
    for kid, contents in after.bins:
        kind = prob.kinds[kid]
        used = np.zeros(len(prob.resources), dtype=np.int64)
        for cid, n in contents.items():
            c = prob.classes[cid]
            assert (c.shape, kid) in prob.fit_count
            if prob.shapes[c.shape].topology_keys:
                assert prob.domain(c.shape, kid) == after.domain[c.gang]
            used += n * prob.arrays.req[c.shape]
            placed[cid] += n
        assert (used <= np.array(kind.cap)).all()
    assert all(placed[c.cid] == after.y[c.cid] for c in prob.classes)
    per_kind = Counter(k for k, c in after.bins if prob.kinds[k].new and c)
    assert all(n <= prob.kinds[k].max_count for k, n in per_kind.items())


def _wide() -> tuple[list[dict], list[dict]]:
    cluster, catalog = wide_case()
    return cluster["items"], catalog["nodeGroups"]


def test_three_hundred_shapes_re_packed_by_value_per_dollar_hold_the_same_pods_for_less():
    objs, catalog = _wide()
    prob = build_problem(snapshot(objs, catalog))
    a = greedy(prob, repack=False)
    packed = value_pack(prob, a, fluid_prices(prob, placed_per_shape(prob, a)), None)
    assert packed is not None
    _valid(prob, a, packed)
    # the greedy buys small nodes two pods fill; merging pairs of them (fewer_nodes) is the polish it had
    assert packed.cost(prob) < 0.97 * fewer_nodes(prob, a).cost(prob)
    assert len(packed.bins) < len(a.bins) / 2


def test_pods_on_existing_nodes_stay_where_the_plan_put_them():
    objs = [node("n1", cpu="4", mem="16Gi")]
    objs.append(podgroup("g", min_count=6))
    objs += [pod(f"g-{i}", cpu="2", mem="2Gi", group="g") for i in range(6)]
    catalog = [group("small", cpu="2", mem="8Gi", price=0.11), group("big", cpu="8", mem="32Gi", price=0.40)]
    prob = build_problem(snapshot(objs, catalog))
    a = greedy(prob, repack=False)
    on_existing = [(k, c) for k, c in a.bins if not prob.kinds[k].new]
    assert sum(n for _, c in on_existing for n in c.values()) == 2  # the node's 4 cpus hold two pods
    packed = value_pack(prob, a, fluid_prices(prob, placed_per_shape(prob, a)), None)
    assert packed is not None
    _valid(prob, a, packed)
    assert [(k, c) for k, c in packed.bins if not prob.kinds[k].new] == on_existing
    assert packed.cost(prob) == 400_000  # four 2-cpu pods on one 8-cpu node, not four small nodes ($0.44)


def test_a_gang_in_one_zone_is_re_packed_only_onto_that_zones_node_groups():
    zone = "topology.kubernetes.io/zone"
    objs = [podgroup("z", min_count=5, topology=[zone])]
    objs += [pod(f"z-{i}", cpu="2", mem="2Gi", group="z") for i in range(5)]
    catalog = [group("b-big", cpu="8", mem="32Gi", price=0.30, max_size=1, labels={zone: "b"}),  # 4 of the 5 pods
               group("a-small", cpu="2", mem="8Gi", price=0.12, labels={zone: "a"}),
               group("a-big", cpu="8", mem="32Gi", price=0.40, labels={zone: "a"})]
    prob = build_problem(snapshot(objs, catalog))
    a = greedy(prob, repack=False)
    assert a.domain == [("a",)]
    packed = value_pack(prob, a, fluid_prices(prob, placed_per_shape(prob, a)), None)
    assert packed is not None
    _valid(prob, a, packed)
    # zone b's node carries the most value per dollar, but it is not this gang's to take
    assert sorted(prob.kinds[k].group for k, _ in packed.bins) == ["a-big", "a-small"]


def test_when_pods_left_out_contend_for_a_full_node_group_the_greedys_plan_stands():
    objs = []
    for g in range(3):
        objs.append(podgroup(f"g{g}", min_count=2))
        objs += [pod(f"g{g}-{i}", cpu="3", mem="2Gi", group=f"g{g}") for i in range(2)]
    catalog = [group("only", cpu="4", mem="16Gi", price=0.2, max_size=4)]  # four nodes: two of the three gangs
    prob = build_problem(snapshot(objs, catalog))
    a = greedy(prob, repack=False)
    assert sum(a.y) == 4
    assert value_pack(prob, a, fluid_prices(prob, placed_per_shape(prob, a)), None) is None


def test_past_its_deadline_the_repair_returns_nothing():
    objs, catalog = _wide()
    prob = build_problem(snapshot(objs, catalog))
    a = greedy(prob, repack=False)
    assert value_pack(prob, a, fluid_prices(prob, placed_per_shape(prob, a)), deadline=-1.0) is None
