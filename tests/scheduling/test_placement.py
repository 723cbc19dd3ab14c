"""Topology-aware workload scheduling (KEP-5732, kube-scheduler 1.36+): a PodGroup with a topology constraint is
placed in one domain, the best-scored one among those where it reaches quorum.

Sources: kubernetes/enhancements keps/sig-scheduling/5732-topology-aware-workload-scheduling ("Scheduling
Algorithm Phases": one placement per distinct value of the label, the group cycle on that placement's nodes only,
feasible when the required pods fit, the highest-scored placement bound); kubernetes.io
docs/concepts/scheduling-eviction/topology-aware-scheduling ("TAS plugins configuration": `TopologyPlacement`
groups nodes by the key's values, `NodeResourcesFit` scores a placement MostAllocated over its nodes, and
`PodGroupPodsCount` by the pods it takes, weight 1 each).
"""

from __future__ import annotations

from dataclasses import replace

from gangscale.scheduling import simulate, strategy_config

from .helpers import gang, mkpod, node

ZONE = "topology.kubernetes.io/zone"


def _zoned(name: str, cpu: int, zone: str, **kw):
    return node(name, cpu, 64, labels={ZONE: zone}, **kw)


def _topo(g):
    return replace(g, topology_keys=(ZONE,))


def test_a_zone_constrained_gang_is_placed_in_one_zone_where_leastallocated_alone_would_spread_it():
    # Two alike empty nodes in two zones: pod by pod, LeastAllocated puts the second pod on the emptier node of the
    # other zone. With the constraint, each zone is a placement; both fit the gang, so it lands in one of them.
    nodes = [_zoned("a1", 8000, "a"), _zoned("b1", 8000, "b")]
    pods = [mkpod(f"p{i}", 3000, 4) for i in range(2)]
    plain = gang("job", pods, min_count=2)
    for seed in range(4):
        spread = simulate(nodes, [plain], seed=seed)
        assert set(spread.placement.values()) == {"a1", "b1"}
        res = simulate(nodes, [_topo(plain)], seed=seed)
        assert res.outcomes[plain.key].started
        assert len(set(res.placement.values())) == 1, seed


def test_the_placement_that_takes_more_of_the_gangs_pods_wins():
    # Elastic gang (minCount 1 of 2): zone a fits both pods, zone b one (a single pod slot left). Pod by pod,
    # LeastAllocated would send the first pod to b's far emptier node; PodGroupPodsCount prefers zone a.
    b1 = _zoned("b1", 64000, "b")
    b1.allocatable["pods"] = 1
    nodes = [_zoned("a1", 7000, "a"), b1]
    assert simulate(nodes, [gang("job", [mkpod("p0", 3000, 4)], min_count=1)]).placement == {"team-a/p0": "b1"}
    g = _topo(gang("job", [mkpod(f"p{i}", 3000, 4) for i in range(2)], min_count=1))
    for seed in range(4):
        res = simulate(nodes, [g], config=strategy_config("LeastAllocated"), seed=seed)
        assert res.placement == {"team-a/p0": "a1", "team-a/p1": "a1"}, seed


def test_a_gang_no_single_zone_can_hold_does_not_start_even_if_the_cluster_could_hold_it_across_zones():
    nodes = [_zoned("a1", 4000, "a"), _zoned("b1", 4000, "b")]
    pods = [mkpod(f"p{i}", 3000, 4) for i in range(2)]
    assert simulate(nodes, [gang("job", pods, min_count=2)]).started  # without the constraint: one pod per zone
    g = _topo(gang("job", pods, min_count=2))
    res = simulate(nodes, [g])
    assert not res.outcomes[g.key].started and res.placement == {}
    assert "no single topology.kubernetes.io/zone domain holds 2 members" in res.outcomes[g.key].reason


def test_nodes_without_the_topology_label_are_in_no_placement():
    nodes = [node("bare", 64000, 64), _zoned("a1", 8000, "a")]
    g = _topo(gang("job", [mkpod(f"p{i}", 3000, 4) for i in range(2)], min_count=2))
    res = simulate(nodes, [g])
    assert set(res.placement.values()) == {"a1"}
