"""What the scheduler model keeps per cluster and reuses across seed runs (`Cluster`): the bound pods' state, summed
once and copied into every seed run, and each filter's verdict per class of nodes alike on what it reads. A
reused state that went stale, or two nodes wrongly counted alike, would change a placement: these tests see it."""

from __future__ import annotations

from dataclasses import replace

from gangscale.model import LabelSelector, PodRules, PodTerm, Taint
from gangscale.scheduling import simulate, simulate_seeds

from .helpers import gang, lone, mkpod, node

SEEDS = (0, 1, 2, 0, 3)


def _bound_cluster():
    """Six equal nodes, two of them half full of bound pods (one with anti-affinity against the gang's pods, one with
    a spread rule), and a gang plus lone pods that fill most of the rest: every seed run changes the free room."""
    nodes = [node(f"n{i}", 8000, 32, kind="existing", labels={"pool": "x"}) for i in range(6)]
    anti = PodRules(anti_affinity=(PodTerm(LabelSelector((("app", "train"),)), None),))
    spread = PodRules(spread=((PodTerm(LabelSelector((("app", "web"),)), None), 1),))
    bound = [replace(mkpod("b-anti", 4000, 8), node_name="n0", rules=anti),
             replace(mkpod("b-web", 4000, 8), node_name="n1", labels={"app": "web"}, rules=spread),
             replace(mkpod("b-plain", 2000, 4), node_name="n2")]
    members = [replace(mkpod(f"t{i}", 4000, 8), labels={"app": "train"}) for i in range(4)]
    gangs = [gang("train", members, min_count=4)] + [lone(mkpod(f"l{i}", 3000, 6, created=f"2025-01-0{i + 2}T00:00:00Z"))
                                                     for i in range(5)]
    return nodes, gangs, bound


def test_every_seed_run_after_the_first_starts_from_the_bound_pods_alone_as_on_a_fresh_cluster():
    nodes, gangs, bound = _bound_cluster()
    runs = simulate_seeds(nodes, gangs, SEEDS, bound=bound)
    alone = [simulate(nodes, gangs, bound=bound, seed=s) for s in SEEDS]
    for got, want in zip(runs, alone):
        assert (got.placement, got.outcomes, got.node_pods, got.empty_nodes) == \
            (want.placement, want.outcomes, want.node_pods, want.empty_nodes)
    assert runs[0].placement == runs[3].placement  # seed 0 again, after three runs on the same cluster
    assert all("team-a/t0" in r.placement and r.placement["team-a/t0"] != "n0" for r in runs)  # anti-affinity held
    assert all(r.node_pods["n1"][0] == "team-a/b-web" for r in runs)  # the bound pods first, once


def test_each_seed_runs_node_pods_are_its_bound_pods_then_the_pods_it_placed_and_no_other_runs():
    nodes, gangs, bound = _bound_cluster()
    runs = simulate_seeds(nodes, gangs, SEEDS, bound=bound)
    for r in runs:  # independent: rebuilt from the bound pods and the run's placement (in placing order)
        want: dict[str, list[str]] = {}
        for p in bound:
            want.setdefault(p.node_name, []).append(p.key)
        for key, name in r.placement.items():
            want.setdefault(name, []).append(key)
        assert dict(r.node_pods) == want and len(r.node_pods) == len(want) and list(r.node_pods) == \
            [n.name for n in nodes if n.name in want]
        idle = [n.name for n in nodes if n.name not in want]
        assert all(r.node_pods.get(n) is None and n not in r.node_pods for n in idle)
        assert r.node_pods.get("no-such-node") is None
    assert len({tuple(map(tuple, r.node_pods.values())) for r in runs}) > 1  # the seeds placed differently


def test_nodes_alike_on_labels_but_not_on_taints_or_cordon_are_each_filtered_on_their_own():
    tainted = node("tainted", 8000, 32, labels={"pool": "x"}, taints=(Taint("dedicated", "db", "NoSchedule"),))
    cordoned = replace(node("cordoned", 8000, 32, labels={"pool": "x"}), unschedulable=True)
    free = node("free", 8000, 32, labels={"pool": "x"})
    p = lone(mkpod("sel", 1000, 1, selector=(("pool", "x"),)))
    for nodes in ([tainted, cordoned, free], [free, tainted, cordoned], [cordoned, free, tainted]):
        for seed in range(4):
            assert simulate(nodes, [p], seed=seed).placement == {"team-a/sel": "free"}


def test_a_prefer_no_schedule_taint_counts_only_on_the_node_that_has_it():
    soft = node("soft", 8000, 32, labels={"pool": "x"}, taints=(Taint("spot", "true", "PreferNoSchedule"),))
    plain = node("plain", 8000, 32, labels={"pool": "x"})
    p = lone(mkpod("sel", 1000, 1, selector=(("pool", "x"),)))
    for nodes in ([soft, plain], [plain, soft]):
        for seed in range(4):
            assert simulate(nodes, [p], seed=seed).placement == {"team-a/sel": "plain"}
