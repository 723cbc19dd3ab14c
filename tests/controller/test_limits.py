"""Fairness and safety limits around the planner, in process."""

from __future__ import annotations

from datetime import datetime, timezone

from builders import group, node, plan_for, pod, podgroup, snapshot
from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.controller.limits import gang_limits, held_on_hand, over_caps
from gangscale.controller.reservations import held_in_the_model
from gangscale.ingest import ingest
from gangscale.planner import OFF, make_plan  # the tests above: the solver alone; observe mode below
from gangscale.realize import SchedulerModel
from gangscale.snapshot import SnapshotPolicy, build_snapshot
from gangscale.solver.params import SolveOptions

GPU8 = group("gpu", cpu="190", mem="1900Gi", gpu=8, price=50.0, max_size=2000)
NOW = 1_800_000_000.0


def snapshot_with(objs: list[dict], catalog: list[dict], policy: SnapshotPolicy):
    groups, _ = parse_catalog(catalog)
    return build_snapshot(ingest(objs), groups, policy=policy)


def test_a_gang_asking_for_too_many_gpus_is_refused_before_planning():
    objs = [podgroup("huge", min_count=1250)] + [pod(f"h{i}", cpu="8", gpu=8, group="huge") for i in range(1250)]
    objs += [podgroup("ok", min_count=2)] + [pod(f"o{i}", cpu="8", gpu=8, group="ok") for i in range(2)]
    refused, _ = gang_limits(snapshot(objs, [GPU8]).solvable, ControllerConfig(maxGangGPUs=512, maxGangPods=2000),
                             NOW, {})
    plan = make_plan(snapshot_with(objs, [GPU8], SnapshotPolicy(held=refused)), SolveOptions(time_limit=5), OFF)
    huge = next(g for g in plan.gangs if g.name == "huge")
    assert huge.decision == "infeasible" and "10000 GPUs" in huge.reason and "maxGangGPUs limit of 512" in huge.reason
    assert plan.scale_up == {"gpu": 2}  # the cluster is not scaled to its maximum


def test_a_gang_with_more_pods_than_max_gang_pods_is_refused():
    objs = [podgroup("wide", min_count=5)] + [pod(f"w{i}", cpu="1", group="wide") for i in range(5)]
    snap = snapshot(objs, [group("cpu")])
    refused, _ = gang_limits(snap.solvable, ControllerConfig(maxGangPods=4), NOW, {})
    assert refused[snap.gangs[0].key].reason.startswith("5 pending pods exceed")


def test_ageing_lifts_a_long_waiting_gang_above_a_stream_of_small_ones_without_changing_the_cluster():
    big = [podgroup("big", min_count=2)] + [pod(f"b{i}", cpu="6", group="big") for i in range(2)]
    small = []
    for j in range(3):
        small += [podgroup(f"s{j}", min_count=1), pod(f"s{j}-0", cpu="6", group=f"s{j}")]
    catalog = [group("cpu", max_size=3)]
    # without ageing three small gangs beat one big one (3 gangs > 1)
    plan = plan_for(big + small, catalog, scheduler=OFF)
    assert next(g for g in plan.gangs if g.name == "big").placed == 0
    snap = snapshot(big + small, catalog)
    first_seen = {g.key: (NOW - 3600 if g.name == "big" else NOW) for g in snap.gangs}
    _, lifted = gang_limits(snap.solvable, ControllerConfig(ageingSeconds=600), NOW, first_seen)
    assert all(g.priority is None for g in snap.gangs)  # the limits decide; they change no gang
    plan = make_plan(snapshot_with(big + small, catalog, SnapshotPolicy(priority=lifted)), SolveOptions(time_limit=5), OFF)
    assert next(g for g in plan.gangs if g.name == "big").placed == 2


def test_dollar_cap_holds_back_the_lowest_priority_gang_first():
    objs = [podgroup("important", "team", min_count=1, priority=100), pod("i0", "team", cpu="6", group="important"),
            podgroup("later", "team", min_count=1, priority=1), pod("l0", "team", cpu="6", group="later")]
    snap = snapshot(objs, [group("cpu", price=1.0)])
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    cfg = ControllerConfig(namespaceCaps={"team": {"maxDollarsPerHour": 1.5}})
    held = over_caps(plan, snap, cfg, {}, {})
    assert list(held) == [next(g.key for g in snap.gangs if g.name == "later")]
    assert "maxDollarsPerHour 1.5" in next(iter(held.values())).reason
    # money already on its way counts too
    assert len(over_caps(plan, snap, cfg, {"team": 1}, {"team": 1.0})) == 2
    policy = SnapshotPolicy(held=held)
    assert make_plan(snapshot_with(objs, [group("cpu", price=1.0)], policy), SolveOptions(time_limit=5), OFF).scale_up \
        == {"cpu": 1}


def _aged(pg: dict, stamp: str) -> dict:
    pg["metadata"]["creationTimestamp"] = stamp
    return pg


def test_under_a_cap_of_two_a_gang_that_can_never_fit_is_infeasible_and_the_older_one_node_gang_is_bought_at_once():
    """Issue 17 item 6: the 16-node gang, older still, used to keep a 1-node gang deferred pass after pass."""
    from gangscale.controller.limits import plan_within_caps

    objs = [_aged(podgroup("huge", "team", min_count=16), "2025-12-01T00:00:00Z"),
            *[pod(f"h{i}", "team", cpu="6", group="huge") for i in range(16)],
            _aged(podgroup("small", "team", min_count=1), "2026-01-01T00:00:00Z"), pod("s0", "team", cpu="6", group="small")]
    catalog = [group("cpu", max_size=20)]
    cfg = ControllerConfig(namespaceCaps={"team": {"maxNodes": 2}}, ageingSeconds=10**9)
    snap, plan = plan_within_caps(lambda policy: snapshot_with(objs, catalog, policy),
                                  lambda s: make_plan(s, SolveOptions(time_limit=5), OFF), SnapshotPolicy(), cfg,
                                  ({}, {}))
    decisions = {r.name: r for r in plan.gangs}
    assert plan.scale_up == {"cpu": 1} and decisions["small"].decision == "scale-up"
    assert decisions["huge"].decision == "infeasible" and "maxNodes 2" in decisions["huge"].reason
    assert "allows at all" in decisions["huge"].reason and "would exceed" not in decisions["huge"].reason


# ---- observe mode (the controller's default): the same guarantees on the plan the scheduler model checked

def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _observed(objs: list[dict], catalog: list[dict], policy: SnapshotPolicy):
    """The plan as the controller makes it in observe mode (`Reconciler._plan`)."""
    snap = held_on_hand(held_in_the_model(snapshot_with(objs, catalog, policy)))
    return make_plan(snap, SolveOptions(time_limit=5), SchedulerModel())


def test_a_gang_held_back_still_waits_in_the_schedulers_queue_so_a_younger_gang_is_bought_a_node_not_promised_its_free_one():
    """A held gang (namespace cap, cooling-off, size limit) gets nothing bought, but its pods stay Pending in
    kube-scheduler's queue, which may still place them on free capacity (PrioritySort: the older first)."""
    from gangscale.scheduling import nodes_from_views, simulate
    from gangscale.snapshot import PreDecision

    objs = [node("n1"), _aged(podgroup("a"), "2026-01-01T00:00:00Z"), pod("a-0", cpu="6", group="a"),
            _aged(podgroup("b"), "2026-01-02T00:00:00Z"), pod("b-0", cpu="6", group="b")]
    catalog = [group("cpu")]
    a = next(g.key for g in snapshot(objs, catalog).gangs if g.name == "a")
    policy = SnapshotPolicy(held={a: PreDecision("deferred", "held for the test")})
    plan = _observed(objs, catalog, policy)
    decisions = {r.name: r for r in plan.gangs}
    assert decisions["a"].decision == "deferred" and decisions["a"].reason == "held for the test"
    # b is not promised n1, which the older a takes: it gets a node of its own, and nothing is bought for a
    assert decisions["b"].decision == "scale-up" and plan.scale_up == {"cpu": 1}
    assert [n.pods for n in plan.new_nodes] == [["default/b-0"]] and not plan.existing_nodes.get("n1")
    # independently: the scheduler, with both gangs queued and only n1 (before any new node registers), puts a there
    snap = snapshot(objs, catalog)
    for seed in (0, 1, 2):
        assert simulate(nodes_from_views(snap.nodes), snap.gangs, seed=seed).placement == {"default/a-0": "n1"}


def test_a_held_gang_that_fits_nothing_at_hand_takes_the_node_bought_for_a_younger_gang_so_that_gang_is_not_promised():
    """Nothing is free at hand: the older held gang waits in kube-scheduler's queue for the next node that
    registers, and PrioritySort (priority, then creation time: pkg/scheduler/framework/plugins/queuesort) gives it
    that node first. So a node bought for the younger gang would start the held one instead: nothing is bought,
    and the younger gang's reason names the gang ahead of it."""
    from gangscale.scheduling import nodes_from_views, planned_nodes, simulate
    from gangscale.snapshot import PreDecision

    objs = [node("n1", cpu="4"), _aged(podgroup("a"), "2026-01-01T00:00:00Z"), pod("a-0", cpu="6", group="a"),
            _aged(podgroup("b"), "2026-01-02T00:00:00Z"), pod("b-0", cpu="6", group="b")]
    catalog = [group("cpu")]
    snap = snapshot(objs, catalog)
    a = next(g.key for g in snap.gangs if g.name == "a")
    plan = _observed(objs, catalog, SnapshotPolicy(held={a: PreDecision("deferred", "held for the test")}))
    decisions = {r.name: r for r in plan.gangs}
    assert decisions["a"].decision == "deferred" and not plan.new_nodes and plan.scale_up == {}
    assert not decisions["b"].model_started and decisions["b"].decision != "scale-up"
    assert "default/a" in decisions["b"].reason
    # independently: with n1 and one new node of the group, the scheduler starts a there and leaves b pending
    for seed in (0, 1, 2):
        sim = simulate(nodes_from_views(snap.nodes) + planned_nodes(snap.groups, ["cpu"]), snap.gangs, seed=seed)
        assert sim.placement == {"default/a-0": "cpu-0"} or list(sim.placement) == ["default/a-0"]


def test_in_observe_mode_a_cap_counts_the_nodes_the_observed_plan_buys_including_a_gang_the_queue_reaches_first():
    """The solver alone buys for the three small gangs; the scheduler's queue reaches the older big gang first, so
    the observed plan promises it (newNodes[].pods is the model's placement) and the cap of 2 keeps it alone."""
    from gangscale.controller.limits import plan_within_caps

    objs = [_aged(podgroup("big", "team", min_count=2), "2026-01-01T00:00:00Z"),
            *[pod(f"b{i}", "team", cpu="6", group="big") for i in range(2)]]
    for j in range(3):
        objs += [_aged(podgroup(f"s{j}", "team"), "2026-01-02T00:00:00Z"), pod(f"s{j}-0", "team", cpu="6", group=f"s{j}")]
    catalog = [group("cpu", max_size=3)]
    cfg = ControllerConfig(namespaceCaps={"team": {"maxNodes": 2}}, ageingSeconds=10**9)
    snap, plan = plan_within_caps(lambda policy: snapshot_with(objs, catalog, policy),
                                  lambda s: make_plan(s, SolveOptions(time_limit=5), SchedulerModel()),
                                  SnapshotPolicy(), cfg, ({}, {}))
    decisions = {r.name: r for r in plan.gangs}
    assert plan.scheduler.mode == "observe" and len(plan.new_nodes) <= 2
    assert decisions["big"].decision == "scale-up" and decisions["big"].model_started
    assert all(decisions[f"s{j}"].decision == "deferred" for j in range(3))
    assert all(p.startswith("team/b") for n in plan.new_nodes for p in n.pods)
    assert not over_caps(plan, snap, cfg, {}, {})


def test_in_observe_mode_an_aged_gang_is_planned_first_and_the_scheduler_starts_it_first_among_its_priority():
    """Ageing lifts the gang in the solver (and the cap order); kube-scheduler's queue knows nothing of it
    (PrioritySort: priority, then creation time), but the aged gang, pending longest, is also the oldest of its
    priority there: the observed plan starts it and gives the stream what is left, no node idle."""
    big = [_aged(podgroup("big", min_count=2), _stamp(NOW - 3600)), *(pod(f"b{i}", cpu="6", group="big")
                                                                    for i in range(2))]
    small = []
    for j in range(3):
        small += [_aged(podgroup(f"s{j}"), _stamp(NOW - 60)), pod(f"s{j}-0", cpu="6", group=f"s{j}")]
    catalog = [group("cpu", max_size=3)]
    snap = snapshot(big + small, catalog)
    _, lifted = gang_limits(snap.solvable, ControllerConfig(ageingSeconds=600), NOW, {})
    assert [k.name for k in lifted] == ["big"]
    plan = _observed(big + small, catalog, SnapshotPolicy(priority=lifted))
    decisions = {r.name: r for r in plan.gangs}
    assert decisions["big"].placed == 2 and decisions["big"].model_started
    assert "re-planned" not in decisions["big"].reason and "queue reaches it first" not in decisions["big"].reason
    assert sum(decisions[f"s{j}"].model_started for j in range(3)) == 1
    assert plan.scale_up == {"cpu": 3} and plan.scheduler.idle_nodes == 0 and all(n.pods for n in plan.new_nodes)
    # the model queues by the scheduler's priority: ageing changed the solver's, never the pods'
    lifted_big = next(g for g in snapshot_with(big + small, catalog, SnapshotPolicy(priority=lifted)).gangs
                      if g.name == "big")
    assert lifted_big.effective_priority == 1 and lifted_big.scheduler_priority == 0


def test_the_cap_keeps_the_gang_kube_schedulers_queue_reaches_first_not_the_one_whose_podgroup_is_older():
    """PrioritySort queues a gang at its first member's creation (scheduling/queue.py); were the cap to keep the
    gang whose PodGroup object is older, the model would give its capacity to the queue's first, and neither
    gang would be bought a node."""
    def member(name: str, grp: str, stamp: str) -> dict:
        p = pod(name, "team", cpu="6", group=grp)
        p["metadata"]["creationTimestamp"] = stamp
        return p

    objs = [_aged(podgroup("object-older", "team", min_count=1), "2025-01-01T00:00:00Z"),
            member("o0", "object-older", "2026-03-01T00:00:00Z"),
            _aged(podgroup("queued-first", "team", min_count=1), "2026-01-01T00:00:00Z"),
            member("q0", "queued-first", "2026-02-01T00:00:00Z")]
    snap = snapshot(objs, [group("cpu", max_size=20)])
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    held = over_caps(plan, snap, ControllerConfig(namespaceCaps={"team": {"maxNodes": 1}}), {}, {})
    assert [k.name for k in held] == ["object-older"]
