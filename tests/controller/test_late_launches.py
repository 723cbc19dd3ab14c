"""Late launches: a provisioning gang's launches still on their way `lateLaunchSeconds` after its booking are
bought again once, so one slow launch does not time out the whole purchase (lifecycle `_overdue`)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import group, node, pod, podgroup
from cloud_adapters.simulated import SimulatedProvider
from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.controller.lifecycle import (
    Applied,
    EventTarget,
    Expire,
    GangFacts,
    GangState,
    Overdue,
    Record,
    Rules,
    pod_prints,
    transition,
)
from gangscale.controller.reconciler import Deps, Reconciler
from gangscale.controller.reservations import late_key, reserved_upcoming
from gangscale.model import API_PODGROUP_V1ALPHA2, GangKey
from gangscale.plan import GangResult, Plan, SolverInfo

NOW = 1_800_000_000.0
KEY = GangKey("default", "job", API_PODGROUP_V1ALPHA2)
RULES = Rules(enforce_mode=True, backoff_seconds=300.0, cancel_grace_seconds=60.0, late_launch_seconds=450.0)
S = GangState


def booked(state: GangState = S.PROVISIONING, *, at: float = NOW - 450, deadline: float = NOW + 450,
           **kw) -> Record:
    """A record booked at `at` with 4 nodes in group g, one arrived."""
    base = dict(generation="uid-1", reason="", since=at, first_seen=at, requested={"g": 4}, requested_at=at,
                deadline=deadline, pods=("p1", "p2", "p3", "p4"), nodes={"g": ("n1",)})
    base.update(kw)
    return Record(KEY, state=state, **base)


def overdue(rec: Record, now: float = NOW, rules: Rules = RULES) -> Record:
    return transition({KEY: rec}, None, Overdue(rules), now)[0][KEY]


def test_launches_still_on_their_way_after_the_wait_are_covered_once_with_an_event():
    rec = booked()
    new, actions, events = transition({KEY: rec}, None, Overdue(RULES), NOW)
    assert new[KEY].covered == {"g": 3} and new[KEY].state == S.PROVISIONING and actions == ()
    (event,) = events
    assert event.reason == "CoveringLateLaunches" and "3 launches still on their way after 450s" in event.message
    again = transition(new, None, Overdue(RULES), NOW + 10)
    assert again[0][KEY] is new[KEY] and again[2] == ()  # once per purchase


def test_nothing_is_covered_before_the_wait_when_less_than_the_wait_is_left_or_when_turned_off():
    assert overdue(booked(), NOW - 1).covered == {}  # 449 s after the booking
    assert overdue(booked(deadline=NOW + 449)).covered == {}  # a new launch would not have the time a launch had
    assert overdue(booked(), rules=replace(RULES, late_launch_seconds=0)).covered == {}
    assert overdue(booked(nodes={"g": ("n1", "n2", "n3", "n4")})).covered == {}  # everything arrived


def test_a_lone_late_launch_is_not_covered_and_two_are():
    """A lone launch's cover only races it with a head start of the wait; a gang with several late waits for the
    slowest (`on_overdue.MIN_COVERED_LAUNCHES`)."""
    assert overdue(booked(requested={"g": 1}, nodes={})).covered == {}
    assert overdue(booked(requested={"g": 2})).covered == {}  # one of two arrived: one late
    assert overdue(booked(requested={"g": 3})).covered == {"g": 2}
    assert overdue(booked(requested={"g": 1, "h": 1}, nodes={})).covered == {"g": 1, "h": 1}  # over its groups


def test_only_provisioning_gangs_are_covered():
    for state in S:
        assert bool(overdue(booked(state)).covered) == (state == S.PROVISIONING), state


def on_way_for(rec: Record) -> int:
    """The upcoming nodes of group g the snapshot reserves for the gang itself (its late launches are no one's)."""
    return reserved_upcoming([rec]).get("g", ()).count(KEY)


def test_late_launches_are_reserved_for_no_gang_and_not_owned_so_the_plan_buys_them_again():
    rec = replace(booked(), covered={"g": 3})
    assert reserved_upcoming([rec]) == {"g": (late_key(KEY),) * 3}
    assert late_key(KEY) != KEY
    assert on_way_for(rec) == 0
    # covers booked: requested 7 (1 arrived, 3 late, 3 covers): the covers are the gang's own
    rec = replace(rec, requested={"g": 7})
    assert sorted(reserved_upcoming([rec])["g"], key=str) == sorted([late_key(KEY)] * 3 + [KEY] * 3, key=str)
    assert on_way_for(rec) == 3
    # two of the six on their way arrive (late ones or covers, the counts do not say): 4 on the way, 3 still late
    rec = replace(rec, nodes={"g": ("n1", "n2", "n3")})
    assert rec.late("g") == 3 and on_way_for(rec) == 1
    rec = replace(rec, nodes={"g": ("n1", "n2", "n3", "n4", "n5")})  # 2 on their way: never more late than that
    assert rec.late("g") == 2 and on_way_for(rec) == 0


def _plan(decision: str) -> Plan:
    res = GangResult(namespace=KEY.namespace, name=KEY.name, api=KEY.api, policy="gang", minCount=4, pending=4,
                     placed=0, decision=decision, reason="no room")
    return Plan(scaleUp={}, newNodes=[], existingNodes={}, gangs=[res], costPerHour=0, lowerBoundPerHour=0,
                solver=SolverInfo(status="OPTIMAL", seconds=0, gap=0))


def _facts() -> GangFacts:
    return GangFacts(KEY, "uid-1", ("p1", "p2", "p3", "p4"), frozenset({"default/job-0"}), 900.0, EventTarget(KEY))


def test_covers_that_cannot_be_bought_leave_the_gang_waiting_for_its_late_launches_and_not_covered_again():
    rec = replace(booked(), covered={"g": 3})
    new = transition({KEY: rec}, _plan("infeasible"), Applied((_facts(),), RULES), NOW)[0][KEY]
    assert new.state == S.PROVISIONING and "late launches cannot be bought again" in new.reason
    assert new.covered == {"g": 0} and new.late("g") == 0 and reserved_upcoming([new]) == {"g": (KEY,) * 3}
    assert overdue(new, NOW + 10).covered == {"g": 0}


def test_a_covered_gang_that_starts_gives_its_spares_back_in_the_next_pass_not_at_its_deadline():
    rec = replace(booked(), requested={"g": 7}, covered={"g": 3}, nodes={"g": ("n1", "n2", "n3", "n4")})
    bound = Applied((), RULES, bound_groups=frozenset({KEY.group}), busy=frozenset({"n1", "n2", "n3", "n4"}))
    new = transition({KEY: rec}, None, bound, NOW)[0][KEY]
    assert new.state == S.RUNNING and new.requested == {"g": 3} and new.covered == {} and new.deadline == NOW
    assert "go back now" in new.reason
    _, actions, _ = transition({KEY: new}, None, Expire(RULES, on_way={"g": 3}), NOW + 10)
    (release,) = actions
    assert release.why == "unused" and release.groups == {"g": 3}
    plain = replace(rec, covered={})  # spares of a gang that was not covered stay until the deadline
    assert transition({KEY: plain}, None, bound, NOW)[0][KEY].deadline == NOW + 450


def test_a_record_with_covers_round_trips_and_a_new_generation_keeps_them():
    rec = replace(booked(), covered={"g": 3})
    assert Record.from_json(rec.to_json()) == replace(rec, pods=pod_prints(rec.pods))  # pods saved as their prints
    assert "covered" not in booked().to_json()  # written only when set
    facts = GangFacts(KEY, "uid-2", ("q1",), frozenset({"default/job-0"}), 900.0, EventTarget(KEY))
    new = transition({KEY: rec}, _plan("fits-existing"), Applied((facts,), RULES), NOW)[0][KEY]
    assert new.generation == "uid-2" and new.covered == {"g": 3}


# ------------------------------------------------------------- the reconciler, with the simulated cloud


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _job(members: str = "ab") -> list[dict]:
    return [podgroup("job", min_count=len(members)), *(pod(m, cpu="6", group="job") for m in members)]


def _registered(sim: SimulatedProvider, ids: list[str]) -> list[dict]:
    out = []
    for iid in ids:
        n = node(iid, cpu="8", mem="32Gi", group="cpu")
        n["spec"]["providerID"] = f"sim:///zone-a/{iid}"
        out.append(n)
    return out


def test_slow_launches_are_bought_again_and_the_gang_does_not_time_out_waiting_for_them():
    clock = Clock()
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    r = Reconciler(ControllerConfig(mode="enforce", lateLaunchSeconds=450), sim, Deps(clock=clock))  # deadline 900 s
    assert r.reconcile(_job("abc"), leader=True).scale_up == {"cpu": 3}
    first, *slow = (i.id for i in sim.instances("cpu"))
    clock.now += 440
    r.reconcile(_registered(sim, [first]) + _job("abc"), leader=True)
    assert sim.target_size("cpu") == 3 and r.record(KEY).covered == {}  # one arrived; the others are not late yet
    clock.now += 10
    plan = r.reconcile(_registered(sim, [first]) + _job("abc"), leader=True)
    assert plan.scale_up == {"cpu": 2} and sim.target_size("cpu") == 5  # the slow ones, bought again
    rec = r.record(KEY)
    assert rec.covered == {"cpu": 2} and rec.requested == {"cpu": 5} and rec.state == S.PROVISIONING
    covers = [i.id for i in sim.instances("cpu") if i.id != first and i.id not in slow]
    clock.now += 100
    plan = r.reconcile(_registered(sim, [first, *covers]) + _job("abc"), leader=True)
    assert not plan.scale_up and sim.target_size("cpu") == 5  # the covers arrived: nothing more is bought
    bound = [podgroup("job", min_count=3), *(pod(m, cpu="6", group="job", node=n)
                                             for m, n in zip("abc", [first, *covers], strict=True))]
    clock.now += 10
    r.reconcile(_registered(sim, [first, *covers]) + bound, leader=True)
    assert r.record(KEY).state == S.RUNNING and "go back now" in r.record(KEY).reason
    clock.now += 10
    r.reconcile(_registered(sim, [first, *covers]) + bound, leader=True)
    assert {i.id for i in sim.instances("cpu")} == {first, *covers}  # the slow launches went back, long before 900 s
    assert clock.now - NOW < 900


def test_by_default_two_launches_still_on_their_way_240_seconds_after_the_booking_are_bought_again_once():
    """The default covers late launches: a gang waits for the slowest of its launches, and a second chance at each one
    that is late cuts that tail (docs/simulate.md, the hour's p95). A lone late launch is not covered."""
    clock = Clock()
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=100)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock))  # lateLaunchSeconds left to its default
    assert r.reconcile(_job("abc"), leader=True).scale_up == {"cpu": 3}
    first = next(i.id for i in sim.instances("cpu"))
    clock.now += 230
    r.reconcile(_registered(sim, [first]) + _job("abc"), leader=True)
    assert sim.target_size("cpu") == 3 and r.record(KEY).covered == {}  # not late yet
    clock.now += 10
    plan = r.reconcile(_registered(sim, [first]) + _job("abc"), leader=True)
    assert plan.scale_up == {"cpu": 2} and r.record(KEY).covered == {"cpu": 2}  # 240 s: the slow two bought again
    clock.now += 10
    assert not r.reconcile(_registered(sim, [first]) + _job("abc"), leader=True).scale_up  # once per purchase


# ------------------------------------------- a running gang's spare launches when a member is recreated


def test_a_member_recreated_gives_back_the_running_gang_s_named_spare_launches_with_a_reason():
    running = Record(KEY, "uid-1", S.RUNNING, "all members are bound", NOW - 60,
                     requested={"g": 1}, requested_at=NOW - 300, deadline=NOW + 600, pods=("p1", "p2"),
                     launches={"g": ("i-2",)})
    crash = GangFacts(KEY, "uid-1", ("p3",), frozenset({"default/job-1"}), 900.0, EventTarget(KEY))
    new, actions, _ = transition({KEY: running}, _plan("fits-existing"), Applied((crash,), RULES), NOW)
    assert new[KEY].state != S.RUNNING and new[KEY].requested == {}  # a new record, holding nothing
    (release,) = actions
    assert (release.why, release.groups, release.instances) == ("unused", {"g": 1}, ("i-2",))
    assert release.detail == "a member was recreated"
    plain = replace(running, launches={})  # an ASG's unnamed launch cannot be told from another gang's
    assert transition({KEY: plain}, _plan("fits-existing"), Applied((crash,), RULES), NOW)[1] == ()


def _running_without_its_spare(stored: bool = False) -> tuple[Clock, SimulatedProvider, Reconciler, str, str, dict]:
    """A gang of two that bought two slow nodes and started on one of them and on a node another gang freed: its
    record is running and holds its second launch (the spare). Returns the clock, the cloud, the controller (saving
    its state in memory when `stored`, as its ConfigMap would keep it), its node, the spare and the freed node."""
    from benchmarks.sim.policies import MemoryStore

    clock = Clock()
    groups, _ = parse_catalog([group("cpu", max_size=10), group("big", cpu="16", mem="64Gi", price=5.0)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=600)
    store = MemoryStore(clock) if stored else None
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock, store=store))
    r.reconcile(_job(), leader=True)
    mine, spare = (i.id for i in sim.instances("cpu"))
    other = node("other", cpu="8", mem="32Gi", group="cpu")  # freed by another gang: the scheduler binds there first
    bound = [podgroup("job", min_count=2), pod("a", cpu="6", group="job", node=mine),
             pod("b", cpu="6", group="job", node="other")]
    clock.now += 120
    r.reconcile(_registered(sim, [mine]) + [other] + bound, leader=True)
    rec = r.record(KEY)
    assert rec.state == S.RUNNING and rec.launches == {"cpu": (spare,)}  # started without its second launch
    return clock, sim, r, mine, spare, other


def _recreated(mine: str, cpu: str = "6") -> list[dict]:
    """Member b failed and was recreated (asking `cpu`), pending; a still runs on `mine`."""
    return [podgroup("job", min_count=2), pod("a", cpu="6", group="job", node=mine), pod("b-2", cpu=cpu, group="job")]


def test_a_recreated_member_does_not_leave_its_gang_s_spare_launch_to_arrive_for_nobody():
    clock, sim, r, mine, spare, other = _running_without_its_spare()
    clock.now += 10
    r.reconcile(_registered(sim, [mine]) + [other] + _recreated(mine), leader=True)
    assert spare not in {i.id for i in sim.instances("cpu")}  # given back, not left to arrive for nobody
    assert sim.target_size("cpu") == 1


class _Crash(Exception):
    """The process ends here (a test's stand-in for `crash_point`'s `os._exit`)."""


# right after the cloud took the spare back (nothing saved yet), and at the purchase's write-ahead save
@pytest.mark.parametrize("step", ["spare-deleted", "record-saved"])
def test_a_crash_in_a_recreated_member_s_pass_leaves_no_spare_launch_unowned_and_buys_once(monkeypatch, step):
    from gangscale.controller import loop

    clock, sim, r, mine, spare, _ = _running_without_its_spare(stored=True)
    # the node b ran on is gone and b-2 asks more than a cpu node has: this pass buys a big node, and the spare
    # launch (cpu) cannot serve it, so the plan does not wait for it
    crashed = _registered(sim, [mine]) + _recreated(mine, cpu="12")

    def crash_point(name: str) -> None:
        if name == step:
            raise _Crash(name)

    def delete_instances(group: str, ids: list[str]) -> None:
        SimulatedProvider.delete_instances(sim, group, ids)
        crash_point("spare-deleted")

    with monkeypatch.context() as m:
        m.setattr(loop, "crash_point", crash_point)  # the loop saves before the write-ahead call
        m.setattr(sim, "delete_instances", delete_instances)
        clock.now += 10
        with pytest.raises(_Crash):
            r.reconcile(crashed, leader=True)
    again = Reconciler(r.cfg, sim, Deps(clock=clock, store=r.store))  # the restart reads what the crash left saved
    clock.now += 10
    again.reconcile(crashed, leader=True)
    assert {i.id for i in sim.instances("cpu")} == {mine}  # the spare went back before the plan, so before the crash
    assert sim.target_size("cpu") == 1  # (held by no record, it would have arrived for nobody)
    assert len(sim.instances("big")) == 1 and sim.target_size("big") == 1  # b-2's node, bought once
    assert again.record(KEY).requested == {"big": 1}
