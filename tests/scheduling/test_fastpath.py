"""The incremental fast path of `simulate` gives exactly what the per-pod reference gives.

`simulate(..., fast=False)` filters and scores every node for every pod (the code the hand-worked
tests in test_simulate.py / test_scores.py check against upstream); the default fast path keeps
per-shape feasibility and scores and re-checks only the nodes a placement changed. On random
clusters (GPU and CPU groups, taints incl. PreferNoSchedule, cordoned and bound-on existing nodes,
DaemonSet pods bound first on arriving nodes, every gang API, selectors, a few anti-affinity pods and zone-spread
gangs (minDomains, both inclusion policies, bound matching pods), >100 nodes so percentageOfNodesToScore's window
and the rotating start matter) and under LeastAllocated, MostAllocated and RequestedToCapacityRatio,
every seed's placement, outcomes, reasons, empty nodes and profiles must be identical. The same holds on the
benchmark generator's backlogs (benchmarks/generate.py, the quick suite under other seeds) with new nodes of every
node group. test_scorer.py checks the fast path's scalar scorer node by node.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from benchmarks.generate import build_objects
from benchmarks.suite import QUICK
from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.model import (API_COSCHEDULING, API_NONE, API_PODGROUP_V1ALPHA2, API_VOLCANO, API_WORKLOAD,
                             DomainSpread, Gang, LabelSelector, PodRules, PodTerm, Taint)
from gangscale.scheduling import (SchedulerConfig, SimResult, nodes_from_views, planned_nodes, simulate, simulate_iter,
                                  simulate_seeds, strategy_config)
from gangscale.scheduling.config import Profile
from gangscale.scheduling.queue import QUEUE_SORTS
from gangscale.scheduling.cluster import Cluster
from gangscale.scheduling.shapes import best, new_shape, sync
from gangscale.snapshot import build_snapshot

from .helpers import GPU, gang, lone, mkpod, node

APIS = (API_PODGROUP_V1ALPHA2, API_WORKLOAD, API_COSCHEDULING, API_VOLCANO)
GROUPS = (  # (name, cpu m, memory Gi, GPUs, zone)
    ("c5.xl", 3920, 6, 0, "a"), ("m5.2xl", 7910, 28, 0, "b"), ("g5.xl", 3920, 14, 1, "a"),
    ("g5.12xl", 47810, 180, 4, "b"), ("p4d", 95690, 1100, 8, "c"),
)
SHAPES = ((500, 1, 0), (1000, 2, 0), (2000, 8, 0), (3000, 4, 1), (8000, 32, 4), (0, 0, 0), (250, 0, 0))
DAEMONS = tuple(replace(mkpod(name, cpu, mem, ns="kube-system"), owner_kinds=("DaemonSet",), phase="Running")
                for name, cpu, mem in (("kube-proxy", 100, 0), ("aws-node", 250, 0), ("log-agent", 1000, 1)))


def _profile(kind: int, pct: int) -> Profile:
    if kind == 0:
        return Profile(percentage_of_nodes_to_score=pct)
    if kind == 1:
        return Profile(strategy="MostAllocated", resources=(("cpu", 1), ("memory", 1), (GPU, 5)),
                       percentage_of_nodes_to_score=pct)
    if kind == 2:
        return Profile(strategy="RequestedToCapacityRatio", resources=(("cpu", 2), ("memory", 1), (GPU, 3)),
                       shape=((0, 100), (50, 30), (100, 0)), balanced_resources=("cpu", "memory", GPU),
                       percentage_of_nodes_to_score=pct)
    return Profile(strategy="MostAllocated", weights={"NodeResourcesFit": 2, "TaintToleration": 3},
                   percentage_of_nodes_to_score=pct)


@st.composite
def clusters(draw):
    nodes = []
    for i in range(draw(st.integers(100, 170))):
        name, cpu, mem, gpus, zone = GROUPS[draw(st.integers(0, len(GROUPS) - 1))]
        taints = ((Taint(GPU, "true", "NoSchedule"),) if gpus else ()) + (
            (Taint("spot", "true", "PreferNoSchedule"),) if draw(st.integers(0, 4)) == 0 else ())
        kind = ("existing", "upcoming", "new")[draw(st.integers(0, 2))]
        n = node(f"n{i}", cpu, mem, gpus, group=name, kind=kind, labels={"zone": zone}, taints=taints)
        if kind == "existing" and draw(st.integers(0, 9)) == 0:
            n.unschedulable = True
        if kind != "existing" and draw(st.integers(0, 2)) == 0:
            n.daemon_pods = DAEMONS[:draw(st.integers(1, len(DAEMONS)))]
        nodes.append(n)
    bound = []
    for i in range(draw(st.integers(0, 30))):
        j = draw(st.integers(0, len(nodes) - 1))
        cpu, mem, gpu = SHAPES[draw(st.integers(0, 2))]
        ns = "team-a" if i % 3 == 0 else "sys"  # some match the zone spreads of gangs g0..g2
        bound.append(replace(mkpod(f"run-{i}", cpu, mem, ns=ns), node_name=nodes[j].name, phase="Running",
                             labels={"app": f"g{i % 3}"}))
    gangs: list[Gang] = []
    for gi in range(draw(st.integers(1, 14))):
        cpu, mem, gpu = SHAPES[draw(st.integers(0, len(SHAPES) - 1))]
        size = draw(st.integers(1, 9))
        zone = draw(st.sampled_from(((), (("zone", "a"),), (("zone", "b"),))))
        created = draw(st.sampled_from(("", *(f"2025-01-0{d}T00:00:00Z" for d in (1, 2, 3)))))  # "": unstamped
        prio = draw(st.sampled_from((0, 0, 0, 100)))
        term = PodTerm(LabelSelector((("app", f"g{gi}"),)), None)
        rule = draw(st.integers(0, 11))
        rules = PodRules(anti_affinity=(term,)) if rule == 0 else PodRules(domain_spread=(DomainSpread(
            replace(term, namespaces=frozenset({"team-a"})), "zone", draw(st.integers(1, 2)),
            draw(st.integers(1, 4)), draw(st.booleans()), draw(st.booleans())),)) if rule == 1 else PodRules()
        pods = [replace(mkpod(f"g{gi}-{k}", cpu, mem, gpu, selector=zone, created=created, priority=prio),
                        labels={"app": f"g{gi}"}, rules=rules) for k in range(size)]
        api = draw(st.sampled_from(APIS + (API_NONE,)))
        if api == API_NONE:
            gangs.extend(Gang(p.namespace, p.name, API_NONE, "basic", 1, None, pending=(p,), created=created)
                         for p in pods)
        else:
            min_count = draw(st.integers(1, size)) if draw(st.booleans()) else None
            group_created = draw(st.sampled_from((created, "2025-01-02T00:00:00Z")))  # the PodGroup may be younger
            gangs.append(gang(f"g{gi}", pods, min_count=min_count, api=api, created=group_created))
    prof = replace(_profile(draw(st.integers(0, 3)), draw(st.sampled_from((0, 0, 5, 30, 100)))),
                   queue_sort=draw(st.sampled_from(QUEUE_SORTS)))
    return nodes, gangs, bound, SchedulerConfig((prof,))


def _same(a: SimResult, b: SimResult) -> None:
    assert a.placement == b.placement
    assert a.outcomes == b.outcomes
    assert a.empty_nodes == b.empty_nodes
    assert a.node_pods == b.node_pods
    assert a.profiles == b.profiles


@settings(max_examples=40, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow])  # no shrinking: the failing cluster is printed as drawn
@given(clusters())
def test_the_fast_path_places_every_pod_where_the_per_pod_reference_does_under_every_seed(case):
    nodes, gangs, bound, config = case
    fast = simulate_seeds(nodes, gangs, (0, 1, 2), bound=bound, config=config)
    for seed, got in zip((0, 1, 2), fast):
        _same(got, simulate(nodes, gangs, bound=bound, config=config, seed=seed, fast=False))


def _benchmark_cluster(name: str, seed: int):
    """A quick-suite backlog (benchmarks/generate.py) under another seed, with 1-10 new nodes of every node group
    (DaemonSet pods bound first on them, as a plan's nodes get them): nodes, gangs, bound pods."""
    spec = replace(next(c.spec for c in QUICK if c.spec.name == name), seed=seed)
    objects, catalog, _ = build_objects(spec)
    snap = build_snapshot(ingest(objects), parse_catalog(catalog)[0])
    rng = random.Random(f"{name}/{seed}")
    names = [g.name for g in snap.groups for _ in range(rng.randint(1, 10))]
    daemons = {n: d.pods for n, d in snap.daemons.items()}
    nodes = nodes_from_views(snap.nodes, snap.bound) + planned_nodes(snap.groups, names, daemons)
    return nodes, snap.solvable, snap.bound


@pytest.mark.parametrize("name", [c.spec.name for c in QUICK])
def test_the_fast_path_places_a_generated_backlog_where_the_reference_does_under_both_strategies(name):
    # The benchmark's own generator (GPU and CPU families, every gang API, elastic gangs, busy existing nodes with
    # bound pods and DaemonSets), seeds 1 and 2 of each quick backlog: every seed's run of the fast path must
    # bind the same pods to the same nodes, with the same outcomes and reasons, as the per-pod reference.
    for backlog_seed in (1, 2):
        nodes, gangs, bound = _benchmark_cluster(name, backlog_seed)
        for strategy in ("LeastAllocated", "MostAllocated"):
            config = strategy_config(strategy)
            fast = simulate_seeds(nodes, gangs, (0, 1, 2), bound=bound, config=config)
            for seed, got in zip((0, 1, 2), fast, strict=True):
                want = simulate(nodes, gangs, bound=bound, config=config, seed=seed, fast=False)
                _same(got, want)


def test_a_gang_of_identical_pods_over_many_tied_nodes_lands_as_in_the_reference():
    # 150 identical empty nodes: every pod ties over the whole window, so the window, the rotating start and
    # the seeded pick all decide; both paths must agree pod by pod.
    nodes = [node(f"n{i}", 4000, 16, group="m5") for i in range(150)]
    gangs = [gang(f"g{i}", [mkpod(f"g{i}-{k}", 1000, 2) for k in range(6)], min_count=6) for i in range(20)]
    for seed in range(3):
        _same(simulate(nodes, gangs, seed=seed), simulate(nodes, gangs, seed=seed, fast=False))
        _same(simulate(nodes, gangs, seed=seed, stable_ties=True),
              simulate(nodes, gangs, seed=seed, fast=False, stable_ties=True))



def test_a_gang_over_a_whole_scan_of_tied_nodes_never_reuses_the_node_its_last_member_took():
    # 40 nodes (< 100: every feasible node is scored, the start never moves), all tied: the fast path keeps the
    # shape's best nodes and takes out the node each member lands on (its score fell). A best node kept stale
    # would put the next member on the node just filled, where the reference spreads it (LeastAllocated).
    nodes = [node(f"n{i}", 8000, 32, group="m5") for i in range(40)]
    gangs = [gang(f"g{i}", [mkpod(f"g{i}-{k}", 1000, 2) for k in range(12)], min_count=12) for i in range(6)]
    for seed in range(3):
        for stable in (False, True):
            fast = simulate(nodes, gangs, seed=seed, stable_ties=stable)
            _same(fast, simulate(nodes, gangs, seed=seed, fast=False, stable_ties=stable))
            assert max(len(p) for p in fast.node_pods.values()) == 2  # 72 pods spread two to a node


def test_a_node_whose_score_rises_with_a_placement_takes_the_next_member_in_both_paths():
    # BalancedAllocation weighted 2: a node half full of memory scores higher once a cpu-only member lands on it
    # (cpu 25% -> 50% against memory 50%: balance 87 -> 100, LeastAllocated 61 -> 49). The fast path's kept best
    # nodes must become that node alone, as the reference's full scan does (source: balanced_allocation.go,
    # least_allocated.go; the plugin weights of the profile).
    prof = Profile(weights={"NodeResourcesFit": 1, "NodeResourcesBalancedAllocation": 2, "TaintToleration": 3})
    config = SchedulerConfig((prof,))
    nodes = [node(f"n{i}", 4000, 16, group="m5") for i in range(10)]
    bound = [replace(mkpod(f"db-{i}", 0, 8, ns="sys"), node_name=n.name, phase="Running") for i, n in enumerate(nodes)]
    gangs = [gang("g", [mkpod(f"g-{k}", 1000, 0) for k in range(3)], min_count=3)]
    for seed in range(3):
        fast = simulate(nodes, gangs, bound=bound, config=config, seed=seed, stable_ties=True)
        _same(fast, simulate(nodes, gangs, bound=bound, config=config, seed=seed, fast=False, stable_ties=True))
        # the second member follows the first (cpu 50% = memory 50%); the third leaves (cpu 75%: balance falls)
        assert fast.placement["team-a/g-0"] == fast.placement["team-a/g-1"] != fast.placement["team-a/g-2"]


def test_a_memo_kept_across_shrinking_node_sets_gives_what_a_fresh_build_gives():
    # Observe mode drops nodes and runs the model again with one memo: the cluster is cut from the first one
    # (bound pods, their anti-affinity and the filter verdicts remapped to the kept nodes), not built again. Each
    # cut must place, explain and leave empty exactly what a fresh build over the same nodes does. The db pod
    # may only go where no bound db pod's anti-affinity refuses it (InterPodAffinity's symmetry): n6, the fullest.
    nodes = [node(f"n{i}", 4000, 16, group="m5", kind="existing" if i < 8 else "new",
                  labels={"zone": "ab"[i % 2], **({"role": "db"} if i in (0, 2, 4, 6) else {})}) for i in range(30)]
    anti = PodRules(anti_affinity=(PodTerm(LabelSelector((("app", "db"),)), None),))
    bound = [replace(mkpod(f"db-{i}", 3000, 4, ns="sys"), node_name=f"n{i}", phase="Running", labels={"app": "db"},
                     rules=anti) for i in (0, 2, 4)]
    bound.append(replace(mkpod("filler", 3500, 4, ns="sys"), node_name="n6", phase="Running"))
    gangs = [gang(f"g{i}", [mkpod(f"g{i}-{k}", 1500, 3, selector=(("zone", "ab"[i % 2]),)) for k in range(5)],
                  min_count=4) for i in range(6)]
    gangs.append(gang("db", [replace(mkpod("db-new", 400, 1, selector=(("role", "db"),)), labels={"app": "db"})]))
    memo: dict = {}
    built = None
    for drop in ((), (1, 12), (3, 20, 21, 22), (5, 7)):
        nodes = [n for n in nodes if int(n.name[1:]) not in drop]
        got = list(simulate_iter(nodes, gangs, (0, 1), bound=bound, memo=memo))
        want = simulate_seeds(nodes, gangs, (0, 1), bound=bound)
        for a, b in zip(got, want):
            _same(a, b)
            assert a.placement["team-a/db-new"] == "n6"
        built = built or memo["cluster"][1]
        assert memo["cluster"][1] is built  # cut from the first cluster, never built again
    reordered = list(reversed(nodes))  # not a subsequence: built anew
    for a, b in zip(simulate_iter(reordered, gangs, (0,), bound=bound, memo=memo),
                    simulate_seeds(reordered, gangs, (0,), bound=bound)):
        _same(a, b)
    assert memo["cluster"][1] is not built


def test_a_shape_back_after_many_placements_elsewhere_scores_the_changed_nodes_again():
    # 400 nodes; gang a1 (shape A), then 200 lone pods of another shape spread over 200 nodes, then gang a2
    # (shape A again): more than FULL_REFRESH nodes changed since A's last pod, so A's verdicts, scores and
    # best nodes are recomputed in numpy over those nodes. Kept best nodes from before would send a2 to a
    # node a lone pod has since filled, where the reference (every node scored) does not.
    nodes = [node(f"n{i}", 4000, 16, group="m5") for i in range(400)]
    gangs = [gang("a1", [mkpod(f"a1-{k}", 1000, 2, created="2025-01-01T00:00:00Z") for k in range(5)], min_count=5)]
    gangs += [lone(mkpod(f"b-{i}", 500, 1, created="2025-01-02T00:00:00Z")) for i in range(200)]
    gangs.append(gang("a2", [mkpod(f"a2-{k}", 1000, 2, created="2025-01-03T00:00:00Z") for k in range(5)], min_count=5,
                      created="2025-01-03T00:00:00Z"))
    for seed in range(3):
        fast = simulate(nodes, gangs, seed=seed, stable_ties=True)
        _same(fast, simulate(nodes, gangs, seed=seed, fast=False, stable_ties=True))
        assert all(len(fast.node_pods[fast.placement[f"team-a/a2-{k}"]]) == 1 for k in range(5))  # empty nodes


@pytest.mark.parametrize(("freed", "filled", "churn"), [
    (1, 0, 0),  # one removal since the shape's last pod: the one-node re-check
    (10, 10, 0),  # a few changed nodes: re-checked one by one
    (10, 80, 0),  # more than FULL_REFRESH changed, but only the freed ones to look at: one by one again
    (80, 10, 0),  # more than FULL_REFRESH to look at: numpy over those nodes
    (10, 80, 160),  # more than MANY_CHANGES log entries (a mask of changed nodes), few to look at: one by one
    (80, 10, 160),  # the same, many to look at: numpy
    (80, 10, 250),  # more changes than nodes: numpy over the feasible and the freed nodes
])
def test_a_shape_sees_nodes_fit_again_once_pods_leave_them_whichever_way_it_catches_up(freed, filled, churn):
    # Shape A (2 cores) last looked when 3-core pods filled nodes 0..79 and 200..279: it did not fit there. Then
    # `freed` of those pods leave (nodes 0..), tiny pods land on `filled` full nodes (200..: still no room for A) and
    # `churn` tiny pods come and go elsewhere. A's sync skips the nodes it did not fit unless a pod left them; the
    # freed ones must fit again, whichever branch of `sync` runs. Independent check: the shape built afresh.
    nodes = [node(f"n{i}", 4000, 16) for i in range(500)]
    a, b, t = mkpod("a", 2000, 2), mkpod("b", 3000, 2), mkpod("t", 10, 0)
    c = Cluster(nodes, (a, b, t), ())
    prof = Profile()
    shape = new_shape(c, a, prof)
    big = [replace(b, name=f"b-{j}") for j in range(160)]
    full = list(range(80)) + list(range(200, 280))
    for p, j in zip(big, full):
        c.place(j, p)
    sync(c, shape)
    assert not shape.feas[0] and not shape.feas[200] and shape.feas[100]
    for i in range(churn):
        c.place(100 + i % 50, t)
        c.remove(100 + i % 50, t)
    for j in range(freed):
        c.remove(j, big[j])
    for j in range(200, 200 + filled):
        c.place(j, replace(t, name=f"t-{j}"))
    sync(c, shape)
    again = new_shape(c, a, prof)
    assert shape.feas.tolist() == again.feas.tolist() == shape.feas_l
    assert shape.feas[:freed].all() and not shape.feas[freed:80].any()
    assert shape.base[shape.feas].tolist() == again.base[again.feas].tolist()
    assert best(shape) == best(again)


def _counting_runs(monkeypatch) -> list[int]:
    """Count the seed runs `simulate_iter` really makes (`_run` calls)."""
    import importlib

    module = importlib.import_module("gangscale.scheduling.simulate")
    runs: list[int] = []
    real = module._run

    def counted(*args):
        runs.append(1)
        return real(*args)

    monkeypatch.setattr(module, "_run", counted)
    return runs


def test_a_run_that_meets_no_tie_is_every_seeds_run_and_the_other_seeds_are_not_run(monkeypatch):
    # Each gang selects a zone with one node in it (the fourth gang's zone has none), so no pod ever has two best
    # nodes: the seed, which only breaks ties, decides nothing, and seeds 1 and 2 take seed 0's result (each its
    # own containers). The reference runs each seed alone, where nothing is skipped.
    nodes = [node(f"n{z}", 8000, 32, group="m5", labels={"zone": z}) for z in "abc"]
    gangs = [gang(f"g{z}", [mkpod(f"g{z}-{k}", 1000, 2, selector=(("zone", z),)) for k in range(3)], min_count=3)
             for z in "abcd"]
    want = [simulate(nodes, gangs, seed=s, fast=False, stable_ties=True) for s in (0, 1, 2)]
    runs = _counting_runs(monkeypatch)
    got = list(simulate_iter(nodes, gangs, (0, 1, 2), stable_ties=True))
    assert len(runs) == 1
    for a, b in zip(got, want):
        _same(a, b)
    assert got[1].placement is not got[0].placement and got[1].outcomes is not got[0].outcomes
    assert len(got[2].placement) == 9 and not got[2].outcomes[gangs[3].key].started


def test_a_run_that_broke_a_tie_leaves_every_other_seed_to_run(monkeypatch):
    # Identical empty nodes: the first member ties over all of them, so each seed runs (and may choose otherwise).
    nodes = [node(f"n{i}", 4000, 16, group="m5") for i in range(6)]
    gangs = [gang("g", [mkpod(f"g-{k}", 1000, 2) for k in range(3)], min_count=3)]
    runs = _counting_runs(monkeypatch)
    got = simulate_seeds(nodes, gangs, (0, 1, 2), stable_ties=True)
    assert len(runs) == 3
    for s, a in zip((0, 1, 2), got):
        _same(a, simulate(nodes, gangs, seed=s, fast=False, stable_ties=True))


def test_a_gang_choosing_between_two_alike_topology_domains_leaves_every_other_seed_to_run(monkeypatch):
    # One node per zone, so no pod ties over nodes; but the gang (a 1.36 PodGroup with a zone constraint) scores the
    # same in both zones, and which one it lands in is the seed's choice (KEP-5732's placement cycle keeps one of
    # the best-scored domains: placement.py).
    nodes = [node(f"n{z}", 8000, 32, group="m5", labels={"zone": z}) for z in "ab"]
    gangs = [replace(gang("g", [mkpod(f"g-{k}", 1000, 2) for k in range(3)], min_count=3), topology_keys=("zone",))]
    runs = _counting_runs(monkeypatch)
    got = simulate_seeds(nodes, gangs, tuple(range(8)), stable_ties=True)
    assert len(runs) == 8
    assert len({a.placement["team-a/g-0"] for a in got}) == 2  # both zones chosen by some seed
    for s, a in zip(range(8), got):
        _same(a, simulate(nodes, gangs, seed=s, fast=False, stable_ties=True))
