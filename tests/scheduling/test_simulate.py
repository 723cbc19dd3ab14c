"""The issue's scenarios and the gang semantics of each API, on hand-checkable clusters.

Sources: kube-scheduler schedule_one.go (filter, score, selectHost), queuesort/priority_sort.go,
KEP-4671 (1.35 GangScheduling: PreEnqueue quorum, Permit wait, rollback; 1.36 PodGroup cycle),
scheduler-plugins pkg/coscheduling (Permit with minMember, group-aware Less).
"""

from __future__ import annotations

from dataclasses import replace

from gangscale.model import API_COSCHEDULING, API_WORKLOAD
from gangscale.scheduling import parse_scheduler_config, simulate, strategy_config

from .helpers import GPU, gang, lone, mkpod, node

OLD, NEW = "2025-01-01T00:00:00Z", "2025-01-02T00:00:00Z"


def _g5_cluster():
    """An empty g5.xlarge (1 A10G) bought for team-a's 1-GPU pod and a g5.12xlarge (4 A10G) for a 4-GPU gang."""
    nodes = [node("g5-xl", 3920, 15, 1, group="g5.xlarge"), node("g5-12xl", 47810, 180, 4, group="g5.12xlarge")]
    small = lone(mkpod("infer", 2000, 8, 1, created=OLD))
    big = gang("train", [mkpod("train-0", 8000, 32, 4, ns="team-b", created=NEW)], min_count=1, ns="team-b", created=NEW)
    return nodes, [small, big]


def test_under_least_allocated_a_1_gpu_pod_lands_on_the_4_gpu_node_and_the_gang_does_not_start():
    nodes, gangs = _g5_cluster()
    res = simulate(nodes, gangs, config=strategy_config("LeastAllocated"), seed=1)
    assert res.placement["team-a/infer"] == "g5-12xl"  # cpu/memory LeastAllocated prefers the emptier big node
    assert not res.outcomes[gangs[1].key].started
    assert res.empty_nodes == ["g5-xl"]
    reason = res.outcomes[gangs[1].key].reason
    assert "team-a's 1-GPU pods" in reason and "g5.12xlarge" in reason and "MostAllocated with a GPU weight" in reason


def test_most_allocated_with_a_gpu_weight_puts_each_pod_on_the_node_bought_for_it():
    nodes, gangs = _g5_cluster()
    res = simulate(nodes, gangs, config=strategy_config("MostAllocated", (("cpu", 1), ("memory", 1), (GPU, 5))))
    assert res.placement == {"team-a/infer": "g5-xl", "team-b/train-0": "g5-12xl"}
    assert res.started == {g.key for g in gangs} and res.empty_nodes == []


def test_an_older_gang_the_plan_deferred_takes_the_capacity_first():
    # PrioritySort: equal priority -> the earlier timestamp leaves the queue first.
    nodes = [node("n1", 8000, 32)]
    older = gang("deferred", [mkpod(f"d{i}", 4000, 8, created=OLD) for i in range(2)], min_count=2, created=OLD)
    younger = gang("planned", [mkpod(f"p{i}", 4000, 8, created=NEW) for i in range(2)], min_count=2, created=NEW)
    res = simulate(nodes, [younger, older])
    assert res.started == {older.key}
    assert "older gang team-a/deferred" in res.outcomes[younger.key].reason


def test_higher_priority_goes_before_an_older_gang():
    nodes = [node("n1", 4000, 16)]
    old = lone(mkpod("old", 4000, 8, created=OLD))
    urgent = lone(mkpod("urgent", 4000, 8, created=NEW, priority=100))
    res = simulate(nodes, [old, urgent])
    assert res.placement == {"team-a/urgent": "n1"}
    assert "higher-priority" in res.outcomes[old.key].reason


def test_an_elastic_gang_takes_every_member_that_fits_not_only_min_count():
    # KEP-4671 (1.36 PodGroup cycle): all members that fit are bound once minCount fit.
    nodes = [node("n1", 4000, 16), node("n2", 4000, 16), node("n3", 4000, 16)]
    elastic = gang("elastic", [mkpod(f"e{i}", 4000, 8) for i in range(5)], min_count=2)
    res = simulate(nodes, [elastic])
    assert res.outcomes[elastic.key].started and res.outcomes[elastic.key].placed == 3


def test_a_group_below_quorum_binds_nothing_and_holds_no_capacity():
    nodes = [node("n1", 4000, 16)]
    big = gang("big", [mkpod(f"b{i}", 4000, 8, created=OLD) for i in range(2)], min_count=2, created=OLD)
    small = lone(mkpod("small", 4000, 8, created=NEW))
    res = simulate(nodes, [big, small])
    assert res.placement == {"team-a/small": "n1"}
    assert "only 0 of 2" in res.outcomes[big.key].reason


def test_a_1_35_gang_holds_its_assumed_pods_at_permit_until_rolled_back():
    # GangScheduling (1.35): b0 is assumed on n1 and waits at Permit; `small`, queued between b0 and b1,
    # finds n1 taken during that pass. After the timeout rollback it is placed in the next pass.
    nodes = [node("n1", 4000, 16)]
    b0 = mkpod("b0", 4000, 8, created="2025-01-01T00:00:00Z")
    b1 = mkpod("b1", 4000, 8, created="2025-01-01T00:00:02Z")
    small = lone(mkpod("small", 4000, 8, created="2025-01-01T00:00:01Z"))
    w = gang("w", [b0, b1], min_count=2, api=API_WORKLOAD)
    one_pass = simulate(nodes, [w, small], max_passes=1)
    assert one_pass.placement == {}  # held at Permit, then rolled back: nothing bound in that pass
    res = simulate(nodes, [w, small])
    assert res.placement == {"team-a/small": "n1"} and not res.outcomes[w.key].started


def test_coscheduling_keeps_a_groups_pods_together_in_the_queue():
    # coscheduling Less (when the profile enables its QueueSort): priority, then the PodGroup's creation time, so
    # the group is not split by `small`.
    cosched = parse_scheduler_config({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"plugins": {"queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "*"}]}}}]})
    nodes = [node("n1", 4000, 16), node("n2", 4000, 16)]
    b0 = mkpod("b0", 4000, 8, created="2025-01-01T00:00:00Z")
    b1 = mkpod("b1", 4000, 8, created="2025-01-01T00:00:02Z")
    small = lone(mkpod("small", 4000, 8, created="2025-01-01T00:00:01Z"))
    cs = gang("cs", [b0, b1], min_count=2, api=API_COSCHEDULING, created="2025-01-01T00:00:00Z")
    res = simulate(nodes, [cs, small], config=cosched)
    assert res.started == {cs.key}
    w = gang("w", [mkpod("c0", 4000, 8, created="2025-01-01T00:00:00Z"),
                   mkpod("c1", 4000, 8, created="2025-01-01T00:00:02Z")], min_count=2, api=API_WORKLOAD)
    small2 = lone(mkpod("small2", 4000, 8, created="2025-01-01T00:00:01Z"))
    res2 = simulate(nodes, [w, small2], max_passes=1)
    assert w.key not in res2.started  # PrioritySort interleaves: small2 takes n2 between c0 and c1


def test_ties_are_broken_by_the_seed_and_the_same_seed_gives_the_same_placement():
    nodes = [node(f"n{i}", 4000, 16) for i in range(4)]
    pods = [lone(mkpod("p", 1000, 1))]
    picks = {simulate(nodes, pods, seed=s).placement["team-a/p"] for s in range(40)}
    assert len(picks) > 1
    assert simulate(nodes, pods, seed=7).placement == simulate(nodes, pods, seed=7).placement


def test_a_pods_scheduler_name_picks_its_profile():
    cfg = parse_scheduler_config({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "profiles": [{"schedulerName": "default-scheduler"},
                     {"schedulerName": "bin-packing", "pluginConfig": [{"name": "NodeResourcesFit", "args": {
                         "scoringStrategy": {"type": "MostAllocated", "resources": [
                             {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                             {"name": GPU, "weight": 5}]}}}]}]})
    nodes, gangs = _g5_cluster()
    gangs = [replace(g, pending=tuple(replace(p, scheduler_name="bin-packing") for p in g.pending)) for g in gangs]
    res = simulate(nodes, gangs, config=cfg)
    assert res.placement["team-a/infer"] == "g5-xl"
    assert any(d.startswith("bin-packing: NodeResourcesFit MostAllocated") for d in res.profiles)


def test_nodes_that_fail_a_filter_are_never_chosen():
    nodes = [node("cpu", 64000, 256, labels={"pool": "cpu"}), node("gpu", 8000, 32, 1, labels={"pool": "gpu"})]
    p = lone(mkpod("sel", 1000, 1, selector=(("pool", "gpu"),)))  # no GPU toleration: the GPU taint filters it
    res = simulate(nodes, [p])
    assert res.placement == {} and "filters" in res.outcomes[p.key].reason


def test_a_gang_lifted_by_ageing_still_queues_at_its_own_priority_behind_an_older_lone_pod():
    # Ageing is gangscale's planning priority; kube-scheduler's PrioritySort sees the pods' own priority
    # (queuesort/priority_sort.go: corev1helpers.PodPriority, then the queue timestamp).
    nodes = [node("n1", 4000, 16)]
    old = lone(mkpod("old", 4000, 8, created=OLD))
    aged = replace(gang("aged", [mkpod("a0", 4000, 8, created=NEW)], min_count=1, created=NEW), priority=1,
                   queue_priority=0)
    res = simulate(nodes, [aged, old])
    assert res.placement == {"team-a/old": "n1"}
    assert not res.outcomes[aged.key].started
