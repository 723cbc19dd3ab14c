"""Nodes bought for a gang stay its own once they register, until it binds or its record ends (issues 9/10).

In gate mode a gang's pods stay gated until all its capacity is Ready; before attribution, a node that
registered for it looked like an empty node to the next plan, which gave it to another gang and bought
the held gang a second one. A gang whose nodes have all arrived keeps them; one still waiting for a launch
cannot start on its Ready nodes, so a gang that starts on them now may take them (`reservations.startable_now`).
The reconciler runs in process with the simulated cloud, without buying ahead (`emptyNodeBuyAhead: 0`: these
scenarios count every purchase a gang causes); the lifecycle cases are pure `transition` calls.
"""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from benchmarks.sim.policies import MemoryStore, _json_patch
from builders import group, node, pod, podgroup
from cloud_adapters.simulated import SimulatedProvider
from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.controller.lifecycle import (
    Applied,
    Expire,
    GangState,
    LaunchesFailed,
    GroupFailure,
    NodeSeen,
    Record,
    Registered,
    Release,
    ReleaseWhy,
    Rules,
    spare_until,
    transition,
)
from gangscale.controller.gates import NARROWED_KEY, decide
from gangscale.controller.reconciler import Deps, Reconciler
from gangscale.controller.reservations import reserved_registered, reserved_upcoming
from gangscale.ingest import CAPACITY_GATE, ingest
from gangscale.model import API_PODGROUP_V1ALPHA2, GangKey
from gangscale.planner import OFF, make_plan
from gangscale.snapshot import SnapshotPolicy, build_snapshot
from gangscale.solver.params import SolveOptions

T0 = 1_800_000_000.0
A = GangKey("default", "a", API_PODGROUP_V1ALPHA2)
B = GangKey("default", "b", API_PODGROUP_V1ALPHA2)
C = GangKey("default", "c", API_PODGROUP_V1ALPHA2)
RULES = Rules(True, 300.0, 120.0)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Lifter:
    """Removes the gate from the test's own pod objects, as the API server applies the JSON patch."""

    def __init__(self, objects: list[dict]) -> None:
        self.objects = objects
        self.lifted: list[str] = []

    def remove(self, namespace: str, name: str, ops) -> str | None:
        for o in self.objects:
            if o["kind"] == "Pod" and o["metadata"]["name"] == name:
                o["spec"].pop("schedulingGates", None)
                self.lifted.append(name)
        return None


def gang(name: str, members: int, *, priority: int | None = None) -> list[dict]:
    gated = {"schedulingGates": [{"name": CAPACITY_GATE}]}
    return [podgroup(name, min_count=members, priority=priority),
            *(pod(f"{name}-{i}", cpu="6", group=name, priority=priority, **gated) for i in range(members))]


def registered(sim: SimulatedProvider, index: int, at: float) -> dict:
    """The Node of the group's `index`-th instance, as the kubelet registers it at `at`."""
    iid = sorted(i.id for i in sim.instances("cpu"))[index]
    n = node(iid, group="cpu")
    n["spec"]["providerID"] = f"sim:///zone/{iid}"
    n["metadata"]["creationTimestamp"] = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return n


def controller(clock: Clock, max_size: int, objects: list[dict], store: MemoryStore | None = None
               ) -> tuple[Reconciler, SimulatedProvider, Lifter]:
    groups, _ = parse_catalog([group("cpu", max_size=max_size)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    lifter = Lifter(objects)
    r = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, gateMode="all"), sim,
                   Deps(clock=clock, pod_gates=lifter, store=store))
    return r, sim, lifter


def test_a_ready_node_of_a_gang_still_waiting_for_a_launch_goes_to_a_gang_that_starts_on_it_now():
    """A gang that waits for a node on its way cannot start on its Ready one this pass; another gang that fits there
    starts now (as kube-scheduler binds a Ready node's first fitting pod), and the waiting gang keeps its launch."""
    clock, objects = Clock(), gang("a", 2)
    r, sim, lifter = controller(clock, 2, objects)
    r.reconcile(objects, leader=True)
    assert sim.target_size("cpu") == 2  # both of a's nodes bought
    clock.now += 100
    first = registered(sim, 0, clock.now)
    second_launch = sorted(i.id for i in sim.instances("cpu"))[1]
    objects += [first, *gang("c", 1, priority=100)]  # one of a's nodes is Ready; an urgent gang arrives
    plan = r.reconcile(objects, leader=True)
    name = first["metadata"]["name"]
    assert plan.existing_nodes[name] == ["default/c-0"] and lifter.lifted == ["c-0"]
    decisions = {r_.name: r_.decision for r_ in plan.gangs}
    assert decisions["c"] == "fits-existing" and decisions["a"] != "fits-existing"
    assert r.record(A).launches == {"cpu": (second_launch,)} and sim.target_size("cpu") == 2  # a keeps its launch


def test_a_gang_whose_nodes_have_all_arrived_keeps_them_from_a_more_urgent_gang():
    clock, objects = Clock(), gang("a", 2)
    r, sim, lifter = controller(clock, 2, objects)
    r.reconcile(objects, leader=True)
    clock.now += 100
    both = [registered(sim, 0, clock.now), registered(sim, 1, clock.now)]
    objects += [*both, *gang("c", 1, priority=100)]  # a's nodes are Ready; an urgent gang arrives
    plan = r.reconcile(objects, leader=True)
    assert sorted(lifter.lifted) == ["a-0", "a-1"]
    decisions = {r_.name: r_.decision for r_ in plan.gangs}
    assert decisions["a"] == "fits-existing" and decisions["c"] not in ("fits-existing", "scale-up")
    assert sim.target_size("cpu") == 2


def test_a_held_gang_is_not_bought_for_twice_and_its_nodes_are_ordinary_once_it_has_bound():
    clock, objects = Clock(), gang("a", 2)
    r, sim, lifter = controller(clock, 10, objects)
    r.reconcile(objects, leader=True)
    clock.now += 100
    first = registered(sim, 0, clock.now)
    objects += [first, *gang("c", 1)]
    plan = r.reconcile(objects, leader=True)
    name = first["metadata"]["name"]
    assert name not in plan.existing_nodes or all(p.startswith("default/a-") for p in plan.existing_nodes[name])
    assert r.record(A).requested == {"cpu": 2} and r.record(C).requested == {"cpu": 1}
    assert sim.target_size("cpu") == 3  # a's two nodes and c's one: a was not bought for again
    second = registered(sim, 1, clock.now + 10)
    clock.now += 10
    objects.append(second)
    r.reconcile(objects, leader=True)
    assert sorted(lifter.lifted) == ["a-0", "a-1"]  # both of a's nodes are Ready: its gate is lifted
    assert sorted(r.record(A).nodes["cpu"]) == sorted([name, second["metadata"]["name"]])
    for o, n in zip([o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"].startswith("a-")],
                    [name, second["metadata"]["name"]]):
        o["spec"]["nodeName"] = n  # the scheduler binds a
        o["status"] = {"phase": "Running"}
    clock.now += 10
    r.reconcile(objects, leader=True)
    assert r.record(A).state == GangState.RUNNING and r.record(A).nodes == {}
    assert reserved_registered(r.state.records.values()) == {}


def test_a_restarted_controller_keeps_the_attribution_from_its_records():
    clock, objects = Clock(), gang("a", 2)
    store = MemoryStore(clock)
    r, sim, _ = controller(clock, 2, objects, store)
    r.reconcile(objects, leader=True)
    clock.now += 100
    first = registered(sim, 0, clock.now)
    objects.append(first)
    r.reconcile(objects, leader=True)
    name = first["metadata"]["name"]
    assert r.record(A).nodes == {"cpu": (name,)}
    again = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, gateMode="all"), sim, Deps(clock=clock, store=store))
    again.load_state()
    assert again.record(A).nodes == {"cpu": (name,)}
    clock.now += 10
    second = registered(sim, 1, clock.now)
    objects += [second, *gang("c", 1, priority=100)]
    plan = again.reconcile(objects, leader=True)
    assert {r_.name: r_.decision for r_ in plan.gangs}["a"] == "fits-existing"
    assert sorted(again.record(A).nodes["cpu"]) == sorted([name, second["metadata"]["name"]])
    assert not any(p.startswith("default/c-") for p in plan.existing_nodes.get(name, []))


def test_in_observe_mode_an_older_gang_does_not_ride_the_nodes_on_their_way_for_another_namespaces_gang():
    """The scheduler model drops the planner's reservation taint, and placed every node at once: team-a's older
    3-node gang rode one of the two nodes on their way for team-b's gang, so 2 more nodes (within team-a's cap
    of 2) were bought for it and team-b's gang was deferred over its own cap (the e2e `test_the_namespace_cap_holds`
    in observe mode). The model now keeps the reservations as the solver does."""
    clock = Clock()
    groups, _ = parse_catalog([group("cpu", max_size=20)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    cfg = ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, defaultNamespaceCap={"maxNodes": 2})
    assert cfg.scheduler_model == "observe"  # the default
    r = Reconciler(cfg, sim, Deps(clock=clock))
    objects = [podgroup("big", "team-a", min_count=3), *(pod(f"b{i}", "team-a", cpu="6", group="big") for i in range(3)),
               podgroup("small", "team-b", min_count=2), *(pod(f"s{i}", "team-b", cpu="6", group="small")
                                                           for i in range(2))]
    objects[0]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"  # big is older: the queue's first
    r.reconcile(objects, leader=True)
    assert sim.target_size("cpu") == 2
    for _ in range(2):
        clock.now += 10
        plan = r.reconcile(objects, leader=True)
        decisions = {g.name: g for g in plan.gangs}
        assert sim.target_size("cpu") == 2 and plan.scale_up == {}
        assert decisions["big"].decision == "infeasible" and "maxNodes 2" in decisions["big"].reason
        assert decisions["small"].decision == "fits-existing" and decisions["small"].model_started
        assert sorted(p for pods in plan.existing_nodes.values() for p in pods) == ["team-b/s0", "team-b/s1"]
    small = GangKey("team-b", "small", API_PODGROUP_V1ALPHA2)
    assert r.record(small).requested == {"cpu": 2} and r.record(small).state == GangState.PROVISIONING


def test_the_model_keeps_a_reserved_node_for_its_gang_and_pins_the_gang_there_only_when_it_fits_alone():
    from gangscale.controller.reservations import HELD_TAINT, held_in_the_model
    from gangscale.scheduling import nodes_from_views, simulate

    objs = [*gang("a", 1), *gang("b", 1), *gang("w", 2)]
    for o in objs:
        o["spec"].pop("schedulingGates", None)
    groups, _ = parse_catalog([group("cpu", max_size=10, current=3)])
    W = GangKey("default", "w", API_PODGROUP_V1ALPHA2)
    snap = build_snapshot(ingest(objs), groups, policy=SnapshotPolicy(reserved={"cpu": (A, W)}))
    held = held_in_the_model(snap)
    views = {v.name: v for v in held.nodes}
    assert views["cpu/upcoming-1"].labels[HELD_TAINT] == str(A)  # a fits its one node: pinned
    assert HELD_TAINT not in views["cpu/upcoming-2"].labels  # w's two pods do not fit its one node: not pinned
    assert HELD_TAINT not in views["cpu/upcoming-3"].labels and not views["cpu/upcoming-3"].taints
    assert held_in_the_model(build_snapshot(ingest(objs), groups)) == build_snapshot(ingest(objs), groups)
    # independently, what the scheduler model makes of it under every seed: a on its node; b on the free one;
    # w's pods on its own node and on the free one, never on a's
    for seed in (0, 1, 2):
        res = simulate(nodes_from_views(held.nodes), held.solvable, seed=seed)
        assert res.placement["default/a-0"] == "cpu/upcoming-1"
        assert "cpu/upcoming-1" not in {res.placement.get(k) for k in ("default/b-0", "default/w-0", "default/w-1")}
    # the solver's plan is unchanged by it (it had the reservation already)
    assert make_plan(held, SolveOptions(time_limit=5), OFF).existing_nodes == \
        make_plan(snap, SolveOptions(time_limit=5), OFF).existing_nodes


def test_a_gate_mode_pass_whose_every_gang_is_released_narrowed_plans_with_the_solver_alone_and_others_with_the_model():
    """Narrowed (KEP-3521), each released pod has one feasible node: the scheduler's queue order and scoring decide
    nothing of that plan. With the model instead, the older 1-GPU pod took the emptiest node (LeastAllocated), the
    4-GPU gang was deferred and stayed gated (test_gate_mode's two GPU gangs)."""
    from gangscale.controller.reconciler import NARROWED

    clock, objects = Clock(), gang("a", 2)
    r, sim, _ = controller(clock, 10, objects)
    plan = r.reconcile(objects, leader=True)
    assert plan.scheduler.mode == "off" and plan.scheduler.note == NARROWED and sim.target_size("cpu") == 2
    objects += [podgroup("u"), pod("u-0", cpu="6", group="u")]  # an ungated gang: the scheduler places it
    clock.now += 1
    plan = r.reconcile(objects, leader=True)
    assert plan.scheduler.mode == "observe" and {g.name: g.model_started for g in plan.gangs}["u"]
    narrowing_off = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, gateMode="all", gateNarrowing=False), sim,
                               Deps(clock=clock))
    assert narrowing_off.reconcile(gang("b", 1), leader=False).scheduler.mode == "observe"


# ---------------------------------------------------------------- lifecycle, pure


def waiting(key: GangKey, at: float, n: int = 1, **kw) -> Record:
    return Record(key, "uid", GangState.PROVISIONING, "", at,
                  requested={"cpu": n}, requested_at=at, deadline=at + 900, **kw)


def test_an_arrival_goes_to_the_oldest_request_that_can_own_it_and_never_to_a_newer_request_or_a_busy_node():
    records = {A: waiting(A, T0), B: waiting(B, T0 + 50)}
    seen = (NodeSeen("old", "cpu", T0 - 60, True),  # there before any request: nobody's
            NodeSeen("busy", "cpu", T0 + 10, False),  # registered and already running a pod: not an arrival
            NodeSeen("late", "cpu", T0 + 110, True, ready=False),  # registered, not Ready yet: still on its way
            NodeSeen("n2", "cpu", T0 + 120, True), NodeSeen("n1", "cpu", T0 + 100, True))
    out, actions, _ = transition(records, None, Registered(seen, frozenset({"cpu"}), 5.0), T0 + 130)
    assert (out[A].nodes, out[B].nodes, actions) == ({"cpu": ("n1",)}, {"cpu": ("n2",)}, ())
    assert reserved_upcoming(out.values()) == {} and reserved_registered(out.values()) == {"n1": A, "n2": B}
    before = Registered((NodeSeen("n1", "cpu", T0 + 20, True),), frozenset({"cpu"}), 5.0)
    early = transition({B: waiting(B, T0 + 50)}, None, before, T0 + 60)
    assert early[0][B].nodes == {}  # created before b's request: not launched for it


def test_a_gangs_registered_node_leaves_its_upcoming_reservations():
    rec = waiting(A, T0, 3, nodes={"cpu": ("n1",)})
    assert reserved_upcoming([rec]) == {"cpu": (A, A)}
    assert Record.from_json(rec.to_json()) == rec  # what the ConfigMap keeps


def test_an_attributed_node_that_is_gone_is_no_longer_held():
    records = {A: waiting(A, T0, 2, nodes={"cpu": ("n1", "n2")})}
    seen = (NodeSeen("n2", "cpu", T0 + 100, True, ready=False),)  # NotReady for a moment: still there
    out, _, _ = transition(records, None, Registered(seen, frozenset({"cpu"}), 5.0), T0 + 200)
    assert (out[A].nodes, out[A].requested) == ({"cpu": ("n2",)}, {"cpu": 1})
    undiscovered = transition(records, None, Registered((), frozenset(), 5.0), T0 + 200)[0]
    assert undiscovered[A] == records[A]  # a group the cloud did not list this pass: nothing is forgotten


def test_the_record_ending_at_its_deadline_gives_up_its_registered_nodes():
    records = {A: waiting(A, T0, 2, nodes={"cpu": ("n1",)})}
    out, actions, _ = transition(records, None, Expire(RULES), T0 + 901)
    assert out[A].state == GangState.TIMED_OUT and out[A].nodes == {} and reserved_registered(out.values()) == {}
    assert Release(A, {"cpu": 2}, ReleaseWhy.TIMED_OUT, nodes=("n1",)) in actions  # its own node goes back first


def test_a_gang_that_binds_on_its_registered_nodes_gives_them_up():
    records = {A: waiting(A, T0, 1, nodes={"cpu": ("n1",)})}
    out, _, _ = transition(records, None, Applied((), RULES, bound_groups=frozenset({("default", "a")}),
                                                  busy=frozenset({"n1"})), T0 + 300)
    assert out[A].state == GangState.RUNNING and out[A].nodes == {} and out[A].requested == {}


def test_a_gang_that_binds_elsewhere_keeps_its_empty_nodes_unreserved_until_no_plan_counts_on_them_past_its_deadline():
    """Issue 10, seeds 1-4: the nodes a gang bought and did not use when it started go back at the purchase's
    deadline (the scale-down's `spare_until`), not an empty-node grace later; no gang has them reserved."""
    records = {A: waiting(A, T0, 2, nodes={"cpu": ("n1", "n2")})}
    out, actions, _ = transition(records, None, Applied((), RULES, bound_groups=frozenset({("default", "a")}),
                                                        busy=frozenset({"n1"})), T0 + 300)
    assert out[A].state == GangState.RUNNING and out[A].nodes == {"cpu": ("n2",)} and out[A].requested == {"cpu": 1}
    assert actions == () and reserved_registered(out.values()) == {} and reserved_upcoming(out.values()) == {}
    assert spare_until(out.values()) == {"n2": T0 + 900}
    # another gang binds on it: no longer spare
    used, _, _ = transition(out, None, Registered((NodeSeen("n2", "cpu", T0 + 100, False),), frozenset({"cpu"})),
                            T0 + 400)
    assert used[A].nodes == {} and used[A].requested == {} and spare_until(used.values()) == {}
    # past the deadline: kept while a plan puts pods on it, else handed to that pass's scale-down and forgotten
    kept, _, _ = transition(out, None, Expire(RULES, planned_nodes=frozenset({"n2"})), T0 + 901)
    assert spare_until(kept.values()) == {"n2": T0 + 900}
    gone, actions, _ = transition(kept, None, Expire(RULES), T0 + 911)
    assert gone[A].requested == {} and gone[A].nodes == {} and actions == ()


def test_a_launch_failure_gives_back_only_the_launches_in_flight_not_the_nodes_that_arrived():
    records = {A: waiting(A, T0, 3, nodes={"cpu": ("n1",)})}
    out, actions, _ = transition(records, None, LaunchesFailed((GroupFailure("cpu", "capacity", "ICE"),)), T0 + 60)
    assert Release(A, {"cpu": 2}, ReleaseWhy.LAUNCH_FAILED, "ICE") in actions
    assert (out[A].requested, out[A].nodes) == ({"cpu": 1}, {"cpu": ("n1",)})


# ---------------------------------------------------------------- gates: a gang's own nodes are its capacity


def gated_gang(name: str, members: int, cpu: str) -> list[dict]:
    return [podgroup(name, min_count=members),
            *(pod(f"{name}{i}", cpu=cpu, group=name, schedulingGates=[{"name": CAPACITY_GATE}]) for i in range(members))]


def test_a_gang_the_plan_put_on_a_node_on_its_way_is_released_onto_its_own_ready_node_left_empty():
    # the solver sees no difference between an upcoming node and a Ready one bought for the gang; the gate does
    objs = [*gated_gang("a", 2, "6"), node("n1", group="cpu"), node("n2", group="cpu")]
    groups, _ = parse_catalog([group("cpu", current=3, max_size=10)])
    cluster = ingest(objs)
    (a,) = (g.key for g in cluster.gangs)
    snap = build_snapshot(cluster, groups, policy=SnapshotPolicy(reserved_nodes={"n1": a, "n2": a}))
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    plan = plan.model_copy(update={"existing_nodes": {"n1": ["default/a0"], "cpu/upcoming-1": ["default/a1"]}})
    d = decide(cluster.gangs, plan, snap, lambda g: True)
    assert [(x.gang.name, len(x.pods)) for x in d.lifts] == [("a", 2)] and not d.held


def test_a_release_is_narrowed_to_its_planned_node_so_it_cannot_take_a_node_that_arrived_for_a_held_gang():
    # b's planned node n3 is Ready; unnarrowed, the scheduler (LeastAllocated) would put b on n1, which arrived for
    # a (still waiting for its second node). Narrowed to n3, b is released at once and n1 stays a's
    objs = [*gated_gang("a", 2, "12"), *gated_gang("b", 1, "6"), *gated_gang("c", 1, "12"),
            node("n1", cpu="16", mem="64Gi", group="big"), node("n3", cpu="8")]
    groups, _ = parse_catalog([group("big", cpu="16", mem="64Gi", current=3, max_size=10)])
    cluster = ingest(objs)
    a, b, c = (g.key for g in cluster.gangs)
    snap = build_snapshot(cluster, groups, policy=SnapshotPolicy(reserved={"big": (a, c)}, reserved_nodes={"n1": a}))
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    assert plan.existing_nodes["n3"] == ["default/b0"]
    d = decide(cluster.gangs, plan, snap, lambda g: True)
    assert [(x.gang.name, x.nodes) for x in d.lifts] == [("b", ("n3",))]
    assert "waiting for its capacity" in d.held[a]


def test_a_gang_that_bound_on_another_gangs_node_does_not_keep_its_own_upcoming_node_from_it():
    """Issue 10's smoke hour: the scheduler bound llm-00011 on a p4d bought for llm-00015 (it was Ready first);
    the plan of that pass still held llm-00011's own node on its way for it, bought llm-00015 a replacement,
    and the spare idled past the deadline of its purchase."""
    clock, objects = Clock(), [podgroup("a", min_count=1), pod("a-0", cpu="6", group="a")]
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    r = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0), sim, Deps(clock=clock))
    r.reconcile(objects, leader=True)
    clock.now += 10
    objects += [podgroup("b", min_count=1), pod("b-0", cpu="6", group="b")]
    r.reconcile(objects, leader=True)
    assert r.record(A).requested == {"cpu": 1} and r.record(B).requested == {"cpu": 1} and sim.target_size("cpu") == 2
    clock.now += 100
    b_node = registered(sim, 1, clock.now)  # b's node registers first and the scheduler binds a there
    a_pod = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "a-0")
    a_pod["spec"]["nodeName"], a_pod["status"] = b_node["metadata"]["name"], {"phase": "Running"}
    objects.append(b_node)
    plan = r.reconcile(objects, leader=True)
    assert r.record(A).state == GangState.RUNNING
    assert plan.scale_up == {} and sim.target_size("cpu") == 2  # b rides a's node on its way, nothing more is bought
    assert r.record(B).requested == {"cpu": 1}


class OpsLifter(Lifter):
    """A `Lifter` that keeps each pod's JSON patch."""

    def __init__(self, objects: list[dict]) -> None:
        super().__init__(objects)
        self.ops: dict[str, list] = {}

    def remove(self, namespace: str, name: str, ops) -> str | None:
        self.ops[name] = list(ops)
        return super().remove(namespace, name, ops)


@pytest.mark.parametrize("narrowing", [True, False])
def test_the_release_patch_narrows_the_pod_to_its_node_unless_gate_narrowing_is_off(narrowing):
    objects = [node("n1", cpu="8"), *gang("a", 1)]
    groups, _ = parse_catalog([group("cpu", max_size=2)])
    lifter = OpsLifter(objects)
    r = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, gateMode="all", gateNarrowing=narrowing),
                   SimulatedProvider(groups, clock=Clock()), Deps(clock=Clock(), pod_gates=lifter))
    r.reconcile(objects, leader=True)
    ops = lifter.ops["a-0"]
    assert ops[0]["op"] == "test" and ops[-1] == {"op": "remove", "path": "/spec/schedulingGates/0"}
    affinity = [o for o in ops if o["path"] == "/spec/affinity"]
    if narrowing:
        assert affinity[0]["value"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}
    else:
        assert affinity == [] and len(ops) == 2


def test_a_node_bought_for_a_gang_that_started_on_other_nodes_goes_back_at_its_deadline_even_after_a_restart():
    """Issue 10, seeds 1-4 of the smoke hour: a gang bought two nodes and started 10 minutes later on the one that had
    arrived and on a node freed meanwhile; the other was still launching. Its record turned `running` and dropped
    its claim, so that node arrived as an ordinary empty node, given back only an empty-node grace (600 s) after it
    was first seen empty: past the purchase's 900 s deadline. Now the running record keeps the launch as a spare
    (saved: a restart keeps it), the arrival is attributed to it, and the scale-down gives it back at that
    deadline, unless a gang uses it."""
    clock = Clock()
    objects = [node("n0", cpu="8"), podgroup("c", min_count=1), pod("c-0", cpu="6", group="c", node="n0"),
               podgroup("a", min_count=2), pod("a-0", cpu="6", group="a"), pod("a-1", cpu="6", group="a")]
    store = MemoryStore(clock)
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    cfg = ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, lateLaunchSeconds=0)  # the slow launch, not bought again, is the spare
    r = Reconciler(cfg, sim, Deps(clock=clock, store=store))
    r.reconcile(objects, leader=True)
    assert r.record(A).requested == {"cpu": 2} and r.record(A).deadline == T0 + 900
    clock.now += 100
    first, late = registered(sim, 0, clock.now), registered(sim, 1, T0 + 700)
    objects.append(first)
    r.reconcile(objects, leader=True)
    clock.now = T0 + 600  # c finished; the scheduler puts a on n0 and on the node that arrived
    used, spare = first["metadata"]["name"], late["metadata"]["name"]
    objects = [o for o in objects if o["metadata"]["name"] not in ("c", "c-0")]
    for o, where in zip((o for o in objects if o["kind"] == "Pod"), ("n0", used)):
        o["spec"]["nodeName"], o["status"] = where, {"phase": "Running"}
    r.reconcile(objects, leader=True)
    assert r.record(A).state == GangState.RUNNING and r.record(A).requested == {"cpu": 1}
    clock.now = T0 + 700
    again = Reconciler(cfg, sim, Deps(clock=clock, store=store))  # a restart: only the saved records survive
    again.load_state()
    objects.append(late)  # the launch still on its way arrives
    again.reconcile(objects, leader=True)
    assert again.record(A).nodes == {"cpu": (spare,)} and sim.target_size("cpu") == 2
    clock.now = T0 + 901
    again.reconcile(objects, leader=True)
    live = {i.id for i in sim.instances("cpu") if i.state in ("launching", "running")}
    assert sim.target_size("cpu") == 1 and spare not in live and used in live
    clock.now += 10
    objects = [o for o in objects if o["metadata"]["name"] != spare]
    again.reconcile(objects, leader=True)
    assert again.record(A).requested == {} and sim.target_size("cpu") == 1


# ------------------------------------------- launches the cloud named: which request each arrival answers


def named(key: GangKey, at: float, ids: tuple[str, ...], **kw) -> Record:
    return waiting(key, at, len(ids), launches={"cpu": ids}, **kw)


def test_a_named_launch_arrives_for_the_gang_that_bought_it_even_when_an_older_request_still_waits():
    """Issue 10, seed 0 of the smoke hour (gate mode): a newer gang's launch registered before the older gang's last
    one, oldest-request-first gave it to the older gang, and the older launch, arriving last, was counted as the
    newer gang's spare under its later deadline: billed with no pod 420 s past its own launch + 900 s + a scan."""
    records = {A: named(A, T0, ("i-a1", "i-a2")), B: named(B, T0 + 50, ("i-b1",))}
    seen = (NodeSeen("n-b1", "cpu", T0 + 120, True, instance="i-b1"),)
    out, _, _ = transition(records, None, Registered(seen, frozenset({"cpu"}), 5.0), T0 + 130)
    assert (out[A].nodes, out[B].nodes) == ({}, {"cpu": ("n-b1",)})
    assert (out[A].launches, out[B].launches) == ({"cpu": ("i-a1", "i-a2")}, {})
    assert Record.from_json(out[A].to_json()) == out[A]  # the ConfigMap keeps the named launches: a restart too


def test_a_failed_launch_takes_away_exactly_the_launch_that_failed_not_the_newest_gangs():
    """Counted oldest request first, the one failure among three launches took the newer gang's launch (which had
    capacity) and left the older gang counting the failed one as on its way."""
    records = {A: named(A, T0, ("i-a1", "i-a2")), B: named(B, T0 + 50, ("i-b1",))}
    failure = GroupFailure("cpu", "capacity", "ICE", on_way=2, on_way_ids=frozenset({"i-a2", "i-b1"}))
    out, actions, _ = transition(records, None, LaunchesFailed((failure,)), T0 + 60)
    assert [(a.key, a.groups) for a in actions if isinstance(a, Release)] == [(A, {"cpu": 1})]
    assert (out[A].requested, out[A].launches) == ({"cpu": 1}, {"cpu": ("i-a2",)})
    assert out[B] == records[B]


class NarrowingLifter(Lifter):
    """Applies gate mode's release patch to the test's pod objects (the gate removed, the pod narrowed to its node and
    annotated with it), as the API server applies the JSON patch."""

    def remove(self, namespace: str, name: str, ops) -> str | None:
        for o in self.objects:
            if o["kind"] == "Pod" and o["metadata"]["name"] == name:
                _json_patch(o, [op for op in ops if op["op"] != "test"])
                o["spec"].pop("schedulingGates", None)
                self.lifted.append(name)
        return None


def test_a_gang_that_timed_out_gives_back_its_own_launches_but_not_its_node_another_gang_was_released_to():
    """b starts on a's Ready node while a waits for a launch that never registers; at a's deadline a gives back what
    it holds, but not the node b's pod was released to before the scheduler bound it there."""
    clock = Clock()
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    objects = gang("a", 2)
    lifter = NarrowingLifter(objects)
    r = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0, gateMode="all"), sim, Deps(clock=clock, pod_gates=lifter))
    r.reconcile(objects, leader=True)
    clock.now += 100
    own = registered(sim, 0, clock.now)
    objects.append(own)
    r.reconcile(objects, leader=True)
    assert r.record(A).nodes == {"cpu": (own["metadata"]["name"],)}
    # a's second instance runs in the cloud but its Node never registers: a waits for it past its deadline
    clock.now = T0 + 850
    objects += gang("b", 1)
    r.reconcile(objects, leader=True)
    b0 = next(o for o in objects if o["kind"] == "Pod" and o["metadata"]["name"] == "b-0")
    assert lifter.lifted == ["b-0"] and b0["metadata"]["annotations"][NARROWED_KEY] == own["metadata"]["name"]
    clock.now = T0 + 901  # b's pod is released to a's node, not bound yet
    r.reconcile(objects, leader=True)
    live = {i.id for i in sim.instances("cpu") if i.state in ("launching", "running")}
    assert r.record(A).state == GangState.TIMED_OUT
    assert live == {own["metadata"]["name"]}


def _started_with_a_spare(clock: Clock) -> tuple[Reconciler, SimulatedProvider, list[dict], str]:
    """Gang a (two 6-core pods) bought two nodes; c finished on n0 at 200 s, so a started on n0 and the first node,
    and its second node (the spare) arrives at 300 s. Returns the reconciler, the cloud, the objects and the spare."""
    objects = [node("n0", cpu="8"), podgroup("c", min_count=1), pod("c-0", cpu="6", group="c", node="n0"),
               podgroup("a", min_count=2), pod("a-0", cpu="6", group="a"), pod("a-1", cpu="6", group="a")]
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    r = Reconciler(ControllerConfig(mode="enforce", emptyNodeBuyAhead=0), sim, Deps(clock=clock))
    r.reconcile(objects, leader=True)
    clock.now += 100
    first, late = registered(sim, 0, clock.now), registered(sim, 1, T0 + 300)
    objects.append(first)
    r.reconcile(objects, leader=True)
    clock.now = T0 + 200  # c finished; the scheduler puts a on n0 and on the node that arrived
    objects = [o for o in objects if o["metadata"]["name"] not in ("c", "c-0")]
    for o, where in zip((o for o in objects if o["kind"] == "Pod"), ("n0", first["metadata"]["name"])):
        o["spec"]["nodeName"], o["status"] = where, {"phase": "Running"}
    r.reconcile(objects, leader=True)
    clock.now = T0 + 300
    objects.append(late)  # a's spare arrives
    r.reconcile(objects, leader=True)
    spare = late["metadata"]["name"]
    return r, sim, objects, spare


def test_a_spare_node_past_its_deadline_goes_back_even_when_another_gangs_plan_would_put_pods_on_it():
    """Issue 10, seeds 2-4: a gang started without a node it bought; a later gang's plan counted on that spare, so it
    stayed past the deadline of its purchase and billed with no pod until that gang started (or the plan moved on).
    Past the deadline the spare is reserved for its own gang (no other plan counts on it) and goes back; the later
    gang is bought its own node, under its own deadline."""
    clock = Clock()
    r, sim, objects, spare = _started_with_a_spare(clock)
    assert r.record(A).nodes == {"cpu": (spare,)}
    clock.now = T0 + 850  # d needs two nodes: its plan puts one pod on the spare and buys one more
    objects += [podgroup("d", min_count=2), pod("d-0", cpu="6", group="d"), pod("d-1", cpu="6", group="d")]
    plan = r.reconcile(objects, leader=True)
    assert plan.existing_nodes.get(spare) and sim.target_size("cpu") == 3
    clock.now = T0 + 901  # a's deadline has passed; d's new node is still on its way
    plan = r.reconcile(objects, leader=True)
    live = {i.id for i in sim.instances("cpu") if i.state in ("launching", "running")}
    assert spare not in live and not plan.existing_nodes.get(spare)
    assert r.record(GangKey("default", "d", API_PODGROUP_V1ALPHA2)).requested == {"cpu": 2}


def test_a_named_launch_that_registers_in_the_pass_a_launch_failure_is_read_is_the_gangs_arrival_not_a_failure():
    """Issue 10, the week's first day (gate mode): the pass reads launch failures before it attributes arrivals, and
    the cloud's launches on their way leave out an instance whose Node registered. So while a failure in the group
    was reported, every named launch that registered was counted as failed too: off its gang's account, an ordinary
    node that another gang's plan kept empty past its launch + 900 s + a scan (`p4d-1a-000244`, `-000245`), or that
    went back only after its gang timed out (`p5-1a-001051`)."""
    clock = Clock()
    objects = gang("a", 2)
    r, sim, _ = controller(clock, 10, objects)
    r.reconcile(objects, leader=True)
    assert r.record(A).requested == {"cpu": 2} and len(r.record(A).launches["cpu"]) == 2
    assert sim.fail_launches_in_flight("cpu", 1) == 1
    clock.now += 100  # one launch failed, the other is running and its Node registers before the next pass
    arrived = registered(sim, 0, clock.now)
    objects.append(arrived)
    r.reconcile(objects, leader=True)
    rec = r.record(A)
    assert rec.nodes == {"cpu": (arrived["metadata"]["name"],)}  # the gang's own: reserved for it, back at its deadline
    assert arrived["metadata"]["name"] not in [i for ids in rec.launches.values() for i in ids]
    assert reserved_registered(r.state.records.values()) == {arrived["metadata"]["name"]: A}


def test_a_named_launch_whose_node_registered_is_kept_even_when_the_cloud_cannot_say_what_is_on_its_way():
    """Without the cloud's launches on their way every named launch in flight goes back, but not one whose Node has
    registered: it arrived."""
    records = {A: named(A, T0, ("i-a1", "i-a2"))}
    failure = GroupFailure("cpu", "capacity", "ICE", registered_ids=frozenset({"i-a1"}))
    out, actions, _ = transition(records, None, LaunchesFailed((failure,)), T0 + 60)
    assert [(a.key, a.groups) for a in actions if isinstance(a, Release)] == [(A, {"cpu": 1})]
    assert (out[A].requested, out[A].launches) == ({"cpu": 1}, {"cpu": ("i-a1",)})


def test_a_spare_node_that_a_plan_counts_on_in_the_pass_at_its_deadline_is_not_given_back_in_that_pass():
    """Issue 10, hour seed 1 (observe mode): at exactly a running gang's deadline the plan still counted on its spare
    p5 for a waiting gang (deadlines expire strictly after), but the scale-down gave the spare back in that same pass
    (it took spares as due at the deadline), so the next pass bought the waiting gang another p5; it timed out on it
    and bought four again. The scale-down now uses the deadlines' own boundary: a spare goes back in the first pass
    past its deadline, and no pass both plans on it and gives it back."""
    clock = Clock()
    r, sim, objects, spare = _started_with_a_spare(clock)
    clock.now = T0 + 850  # d needs two nodes: its plan puts one pod on the spare and buys one more
    objects += [podgroup("d", min_count=2), pod("d-0", cpu="6", group="d"), pod("d-1", cpu="6", group="d")]
    r.reconcile(objects, leader=True)
    clock.now = T0 + 900  # exactly a's deadline: the plan still counts on the spare, so it stays
    plan = r.reconcile(objects, leader=True)
    live = {i.id for i in sim.instances("cpu") if i.state in ("launching", "running")}
    assert plan.existing_nodes.get(spare) and spare in live and sim.target_size("cpu") == 3
    clock.now = T0 + 910  # past it: reserved for a, given back (the test above)
    r.reconcile(objects, leader=True)
    live = {i.id for i in sim.instances("cpu") if i.state in ("launching", "running")}
    assert spare not in live
