"""Pods gate mode narrowed to one node (KEP-3521: `matchFields metadata.name In [node]`, gangscale/controller/gates.py
`narrowed`) in the scheduler model.

Upstream: the NodeAffinity filter (pkg/scheduler/framework/plugins/nodeaffinity) matches required terms with
`nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)`, where a term's matchFields may only name
`metadata.name` and are matched against the Node's name (component-helpers nodeaffinity `nodeSelectorTerm`);
scoring only ranks the nodes that passed every filter, so a pod with one feasible node goes there whatever
NodeResourcesFit's strategy prefers.
"""

from __future__ import annotations

from dataclasses import replace

from gangscale.controller.gates import narrowed
from gangscale.model import Requirement
from gangscale.scheduling import SchedulerConfig, simulate, strategy_config
from gangscale.scheduling.simulate import pinned_names

from .helpers import gang, lone, mkpod, node


def _named(*nodes):
    """Nodes as the API server serves them: matchFields see `metadata.name` (the snapshot adds it as a label)."""
    return [replace(n, labels={**n.labels, "metadata.name": n.name}) for n in nodes]


def test_a_narrowed_pod_under_least_allocated_goes_to_its_node_though_an_emptier_node_exists():
    nodes = _named(node("big", 48000, 192, 4), node("small", 4000, 16, 1))
    p = mkpod("one-gpu", 1000, 1, 1)
    config = strategy_config("LeastAllocated")
    # unnarrowed (the old release: lift the gate and let the scheduler choose), it takes the emptiest node
    assert simulate(nodes, [lone(p)], config=config).placement == {p.key: "big"}
    pinned = replace(p, placement=narrowed(p.placement, "small"))
    for seed in (0, 1, 2):
        assert simulate(nodes, [lone(pinned)], config=config, seed=seed).placement == {p.key: "small"}


def test_a_narrowed_gang_starts_only_on_its_nodes_and_waits_when_one_has_no_room():
    nodes = _named(node("a", 8000, 32), node("b", 8000, 32), node("empty", 64000, 256))
    pods = [replace(mkpod(f"w{i}", 6000, 4), placement=narrowed(mkpod("x", 1, 1).placement, n))
            for i, n in enumerate(("a", "b"))]
    res = simulate(nodes, [gang("g", pods, min_count=2)], config=strategy_config("LeastAllocated"))
    assert res.placement == {"team-a/w0": "a", "team-a/w1": "b"}
    full = [replace(mkpod("other", 4000, 1), node_name="b", phase="Running")]
    res = simulate(nodes, [gang("g", pods, min_count=2)], bound=full, config=strategy_config("LeastAllocated"))
    assert not res.started and res.placement == {}  # w1 has one feasible node and no room on it: no other node helps


def test_narrowed_pods_land_as_in_the_per_pod_reference_under_every_seed():
    nodes = _named(*[node(f"n{i}", 4000 + 1000 * (i % 3), 16) for i in range(130)])
    pods = [replace(mkpod(f"p{i}", 1000, 2), placement=narrowed(mkpod("x", 1, 1).placement, f"n{(7 * i) % 140}"))
            for i in range(60)]  # some name no node: they fit nowhere
    free = [mkpod(f"f{i}", 500, 1) for i in range(40)]
    gangs = [lone(p) for p in pods + free]
    config = SchedulerConfig((strategy_config("MostAllocated").default,))
    for seed in (0, 1, 2):
        fast = simulate(nodes, gangs, config=config, seed=seed)
        assert fast.placement == simulate(nodes, gangs, config=config, seed=seed, fast=False).placement
        assert all(fast.placement.get(p.key) in (None, p.placement.affinity[0][-1].values[0]) for p in pods)


def test_the_nodes_a_placement_is_pinned_to():
    base = mkpod("x", 1, 1).placement
    assert pinned_names(base) is None
    assert pinned_names(narrowed(base, "n1")) == {"n1"}
    two = replace(base, affinity=((Requirement("zone", "In", ("a",)),), (Requirement("zone", "In", ("b",)),)))
    assert pinned_names(narrowed(two, "n1")) == {"n1"}  # every term names it
    assert pinned_names(replace(two, affinity=(two.affinity[0] + (Requirement("metadata.name", "In", ("n1",)),),
                                               two.affinity[1]))) is None  # one term still allows any node
