"""`lifecycle.transition` as a table: every state, every report; no emulator, no cloud, no clock."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace

import pytest

from gangscale.controller.lifecycle import (
    Applied,
    ApplyScaleUp,
    BackOff,
    Booked,
    Confirmed,
    EventTarget,
    Expire,
    GangEvent,
    GangFacts,
    GangState,
    GroupFailure,
    LaunchesFailed,
    Latency,
    NodeSeen,
    Overdue,
    Record,
    Recreated,
    Release,
    Released,
    ReleaseOutcome,
    Rules,
    ScaledUp,
    StateChanged,
    Takeover,
    pod_prints,
    pods_overlap,
    transition,
)
from gangscale.model import GangKey
from gangscale.plan import GangResult, Plan, SolverInfo

NOW = 1_800_000_000.0
API = "scheduling.k8s.io/v1alpha2"
KEY = GangKey("default", "job", API)
OTHER = GangKey("default", "other", API)
RULES = Rules(enforce_mode=True, backoff_seconds=120.0, cancel_grace_seconds=60.0)
S = GangState


def rec(state: GangState, key: GangKey = KEY, **kw) -> Record:
    base = dict(generation="uid-1", reason="", since=NOW - 10, first_seen=NOW - 20, pods=("p1", "p2"))
    base.update(kw)
    return Record(key, state=state, **base)


def facts(key: GangKey = KEY, generation: str = "uid-1", pods: tuple[str, ...] = ("p1", "p2")) -> GangFacts:
    return GangFacts(key, generation, pods, frozenset({f"{key.namespace}/{key.name}-0"}), 600.0, EventTarget(key))


def plan(decision: str, key: GangKey = KEY, reason: str = "because") -> Plan:
    res = GangResult(namespace=key.namespace, name=key.name, api=key.api, policy="gang", minCount=2, pending=2,
                     placed=2 if decision in ("scale-up", "fits-existing") else 0, decision=decision, reason=reason)
    return Plan(scaleUp={}, newNodes=[], existingNodes={}, gangs=[res], costPerHour=0, lowerBoundPerHour=0,
                solver=SolverInfo(status="OPTIMAL", seconds=0, gap=0))


def events_of(events, kind=GangEvent):
    return [e for e in events if isinstance(e, kind)]


# --------------------------------------------------------------- Applied

APPLIED_TABLE = [
    # (id, old record, decision, extra Applied fields, new state, reason starts with, event reason, warning)
    ("new gang bought for", None, "scale-up", dict(intents={KEY: {"cpu": 2}}, applied=frozenset({"cpu"})),
     S.PROVISIONING, "because", "TriggeredScaleUp", False),
    ("scale-up not applied", None, "scale-up",
     dict(intents={KEY: {"cpu": 2}}, failed={"cpu": "capacity: no room"}),
     S.PLANNED, "scale-up not applied (cpu: capacity: no room)", "NotTriggerScaleUp", True),
    ("another group failed", None, "scale-up",
     dict(intents={KEY: {"cpu": 1, "gpu": 1}}, applied=frozenset({"cpu"})),
     S.PLANNED, "scale-up not applied (another group failed)", "NotTriggerScaleUp", True),
    ("already provisioning", rec(S.PROVISIONING, requested={"cpu": 2}), "scale-up", {},
     S.PROVISIONING, "capacity on its way: because", None, False),
    ("planned, enforce", rec(S.PLANNED), "scale-up", {}, S.PLANNED, "because", "TriggeredScaleUp", False),
    ("fits on nodes on their way", None, "fits-existing", dict(upcoming_pods=frozenset({"default/job-0"})),
     S.PROVISIONING, "capacity on its way", None, False),
    ("provisioning, now fits", rec(S.PROVISIONING, requested={"cpu": 2}), "fits-existing", {},
     S.PROVISIONING, "capacity on its way", None, False),
    ("fits existing nodes", rec(S.PLANNED), "fits-existing", {}, S.READY, "capacity is there", None, False),
    ("ready stays ready", rec(S.READY), "fits-existing", {}, S.READY, "capacity is there", None, False),
    ("infeasible", None, "infeasible", {}, S.INFEASIBLE, "because", "NotTriggerScaleUp", True),
    ("invalid", rec(S.PLANNED), "invalid", {}, S.INVALID, "because", "NotTriggerScaleUp", True),
    ("deferred", rec(S.DEFERRED), "deferred", {}, S.DEFERRED, "because", "NotTriggerScaleUp", False),
    ("below quorum", None, "below-quorum", {}, S.BELOW_QUORUM, "because", "NotTriggerScaleUp", False),
    ("waiting for its podgroup", rec(S.NEW), "waiting-for-podgroup", {}, S.WAITING_FOR_PODGROUP, "because",
     "NotTriggerScaleUp", False),
    ("waiting for kueue admission", None, "waiting-for-admission", {}, S.WAITING_FOR_ADMISSION, "because",
     "NotTriggerScaleUp", False),
    ("planned, then kueue evicted it", rec(S.PLANNED), "waiting-for-admission", {}, S.WAITING_FOR_ADMISSION,
     "because", "NotTriggerScaleUp", False),
    ("running record, gang pending again", rec(S.RUNNING), "fits-existing", {}, S.READY, "capacity", None, False),
    ("infeasible record, now fits", rec(S.INFEASIBLE), "fits-existing", {}, S.READY, "capacity", None, False),
    ("cancelled record, gang back", rec(S.CANCELLED), "below-quorum", {}, S.BELOW_QUORUM, "because",
     "NotTriggerScaleUp", False),
    ("timed out long ago", rec(S.TIMED_OUT, since=NOW - 1000), "fits-existing", {}, S.READY, "capacity", None,
     False),
]


@pytest.mark.parametrize("old, decision, extra, state, reason, event, warning",
                         [row[1:] for row in APPLIED_TABLE], ids=[row[0] for row in APPLIED_TABLE])
def test_every_listed_gang_takes_the_plans_decision(old, decision, extra, state, reason, event, warning):
    records = {KEY: old} if old else {}
    new, actions, events = transition(records, plan(decision), Applied((facts(),), RULES, **extra), NOW)
    assert new[KEY].state == state and new[KEY].reason.startswith(reason)
    assert actions == ()
    gang_events = events_of(events)
    assert [(e.reason, e.warning) for e in gang_events] == ([(event, warning)] if event else [])
    changed = events_of(events, StateChanged)
    assert bool(changed) == (old is None or old.state != state)
    assert new[KEY].since == (NOW if changed else old.since)


def test_an_applied_scale_up_counts_nodes_and_queue_latency():
    report = Applied((facts(),), RULES, intents={KEY: {"cpu": 2}}, applied=frozenset({"cpu"}))
    new, _, events = transition({}, plan("scale-up"), report, NOW)
    assert ScaledUp("cpu", 2) in events and Latency("requested", 0.0) in events
    assert events_of(events)[0].message == "pod group triggered scale-up: cpu +2; because"


def test_a_scale_up_not_applied_takes_back_the_booking_of_the_groups_that_failed():
    booked = rec(S.NEW, requested={"cpu": 1, "gpu": 1})
    report = Applied((facts(),), RULES, intents={KEY: {"cpu": 1, "gpu": 1}}, applied=frozenset({"cpu"}))
    new, _, _ = transition({KEY: booked}, plan("scale-up"), report, NOW)
    assert new[KEY].requested == {"cpu": 1}


def test_in_dry_run_a_planned_gang_is_reported_not_triggered():
    report = Applied((facts(),), dataclasses.replace(RULES, enforce_mode=False))
    new, _, events = transition({}, plan("scale-up"), report, NOW)
    assert new[KEY].state == S.PLANNED and new[KEY].reason == "dry-run: because"
    assert events_of(events)[0].reason == "NotTriggerScaleUp"


def test_a_gang_cooling_off_after_a_timeout_is_left_alone():
    old = rec(S.TIMED_OUT, since=NOW - 10, reason="not all nodes arrived")
    new, actions, events = transition({KEY: old}, plan("deferred"), Applied((facts(),), RULES), NOW)
    assert new[KEY] is old and actions == () and events == ()


def test_a_gang_not_in_the_plan_is_left_alone():
    old = rec(S.PLANNED)
    new, _, events = transition({KEY: old}, plan("fits-existing", key=OTHER), Applied((facts(),), RULES), NOW)
    assert new[KEY] is old and not events_of(events, StateChanged)[1:]


UNLISTED_TABLE = [
    ("bound: running", rec(S.PROVISIONING, requested={"cpu": 2}), frozenset({KEY.group}), S.RUNNING,
     "all members are bound (nodes bought for it: cpu +2)"),
    ("gone, holding nodes: cancelled", rec(S.PROVISIONING, requested={"cpu": 2}), frozenset(), S.CANCELLED,
     "the gang and its pods are gone; its unused nodes go back in 60s"),
    ("gone, nothing bought: cancelled", rec(S.PLANNED), frozenset(), S.CANCELLED, "the gang and its pods are gone"),
    ("below quorum, gone", rec(S.BELOW_QUORUM), frozenset(), S.CANCELLED, "the gang and its pods are gone"),
    ("ready, bound", rec(S.READY), frozenset({KEY.group}), S.RUNNING, "all members are bound"),
]


@pytest.mark.parametrize("old, bound, state, reason", [r[1:] for r in UNLISTED_TABLE],
                         ids=[r[0] for r in UNLISTED_TABLE])
def test_a_record_whose_gang_is_no_longer_listed_is_running_or_cancelled(old, bound, state, reason):
    new, _, events = transition({KEY: old}, plan("fits-existing", key=OTHER),
                                Applied((), RULES, bound_groups=bound), NOW)
    assert new[KEY].state == state and new[KEY].reason.startswith(reason)
    assert new[KEY].requested == old.requested  # running: its launches on their way are spares until its deadline
    assert (Latency("running", 20.0) in events) == (state == S.RUNNING)


def test_a_gang_that_starts_keeps_as_spares_only_what_it_bought_and_does_not_run_on():
    old = rec(S.PROVISIONING, requested={"cpu": 3, "gpu": 1}, nodes={"cpu": ("n1", "n2"), "gpu": ("g1",)})
    new, actions, _ = transition({KEY: old}, None, Applied((), RULES, bound_groups=frozenset({KEY.group}),
                                                           busy=frozenset({"n1", "g1"})), NOW)
    assert new[KEY].state == S.RUNNING and actions == ()
    assert new[KEY].requested == {"cpu": 2} and new[KEY].nodes == {"cpu": ("n2",)}  # n2 idle, one launch on its way
    assert "2 nodes bought for it are not used" in new[KEY].reason


@pytest.mark.parametrize("state", [S.RUNNING, S.TIMED_OUT, S.CANCELLED, S.INFEASIBLE])
def test_terminal_records_of_unlisted_gangs_stay_as_they_are(state):
    old = rec(state)
    new, _, events = transition({KEY: old}, None, Applied((), RULES), NOW)
    assert new[KEY] is old and events == ()


# ------------------------------------------------------ generations, Booked


def test_booking_writes_the_new_nodes_and_the_deadline_before_the_cloud_call():
    new, actions, _ = transition({}, None, Booked((facts(),), {KEY: {"cpu": 2}}), NOW)
    r = new[KEY]
    assert r.state == S.NEW and r.requested == {"cpu": 2} and r.requested_at == NOW and r.deadline == NOW + 600
    assert actions == (ApplyScaleUp({KEY: {"cpu": 2}}),)


def test_booking_adds_to_what_a_provisioning_gang_already_has():
    new, _, _ = transition({KEY: rec(S.PROVISIONING, requested={"cpu": 2})}, None,
                           Booked((facts(),), {KEY: {"cpu": 1, "gpu": 1}}), NOW)
    assert new[KEY].requested == {"cpu": 3, "gpu": 1} and new[KEY].state == S.PROVISIONING


def test_rebooking_after_a_launch_failure_keeps_the_deadline_of_the_nodes_already_held():
    # Found by the simulator (docs/simulate.md): a deadline moved on every rebooking let a gang whose launches
    # kept failing hold its arrived nodes idle for half an hour.
    held = rec(S.PROVISIONING, requested={"gpu": 13}, requested_at=NOW - 500, deadline=NOW + 100)
    new, _, _ = transition({KEY: held}, None, Booked((facts(),), {KEY: {"gpu": 4}}), NOW)
    assert new[KEY].requested == {"gpu": 17} and new[KEY].deadline == NOW + 100
    later, actions, _ = transition(new, None, Expire(RULES), NOW + 101)
    assert later[KEY].state == S.TIMED_OUT and Release(KEY, {"gpu": 17}, "timed-out") in actions


def test_a_gang_that_holds_nothing_gets_a_fresh_deadline_when_booked_again():
    old = rec(S.PROVISIONING, requested={}, requested_at=NOW - 500, deadline=NOW + 100)
    new, _, _ = transition({KEY: old}, None, Booked((facts(),), {KEY: {"cpu": 1}}), NOW)
    assert new[KEY].deadline == NOW + 600


def test_booking_skips_gangs_the_plan_buys_nothing_for():
    new, actions, _ = transition({}, None, Booked((facts(), facts(OTHER)), {OTHER: {"cpu": 1}}), NOW)
    assert set(new) == {OTHER} and actions == (ApplyScaleUp({OTHER: {"cpu": 1}}),)


@pytest.mark.parametrize("old_state", [S.PROVISIONING, S.READY, S.CANCELLED])
def test_a_new_generation_takes_over_the_nodes_still_on_their_way(old_state):
    old = rec(old_state, requested={"cpu": 3}, requested_at=NOW - 5, deadline=NOW + 100)
    new, _, events = transition({KEY: old}, plan("fits-existing"),
                                Applied((facts(generation="uid-2"),), RULES), NOW)
    r = new[KEY]
    assert r.generation == "uid-2" and r.requested == {"cpu": 3} and r.deadline == NOW + 100
    assert r.state == S.PROVISIONING and r.first_seen == NOW
    assert Takeover(KEY, "uid-1", "uid-2", {"cpu": 3}) in events


def test_all_pods_replaced_is_a_new_generation_that_takes_nothing_from_a_timed_out_one():
    old = rec(S.TIMED_OUT, since=NOW - 1000, requested={})
    new, _, events = transition({KEY: old}, plan("fits-existing"), Applied((facts(pods=("p9",)),), RULES), NOW)
    assert new[KEY].first_seen == NOW and not events_of(events, Takeover)


# ------------------------------------------------------------ LaunchesFailed


def test_a_failed_launch_backs_the_group_off_and_replans_the_gangs_waiting_there():
    waiting = rec(S.PROVISIONING, requested={"cheap": 2, "gpu": 1})
    elsewhere = rec(S.PROVISIONING, OTHER, requested={"gpu": 1})
    failure = GroupFailure("cheap", "capacity", "capacity: no room")
    new, actions, events = transition({KEY: waiting, OTHER: elsewhere}, None, LaunchesFailed((failure,)), NOW)
    assert new[KEY].state == S.PLANNED and new[KEY].requested == {"gpu": 1}
    assert new[OTHER] is elsewhere
    assert actions == (BackOff("cheap", "capacity", "capacity: no room"),
                       Release(KEY, {"cheap": 2}, "launch-failed", "capacity: no room"))
    assert [e.new for e in events_of(events, StateChanged)] == [S.PLANNED]


def test_a_failed_launch_gives_back_only_what_the_cloud_no_longer_has_on_its_way_oldest_request_first():
    older = rec(S.PROVISIONING, requested={"cheap": 2}, requested_at=NOW - 60)
    newer = rec(S.PROVISIONING, OTHER, requested={"cheap": 3, "gpu": 1}, requested_at=NOW - 30)
    failure = GroupFailure("cheap", "capacity", "capacity: no room", on_way=4)  # 1 of the 5 launches failed
    new, actions, _ = transition({KEY: older, OTHER: newer}, None, LaunchesFailed((failure,)), NOW)
    assert new[KEY] is older  # its 2 launches are still coming
    assert new[OTHER].state == S.PLANNED and new[OTHER].requested == {"cheap": 2, "gpu": 1}
    assert actions == (BackOff("cheap", "capacity", "capacity: no room"),
                       Release(OTHER, {"cheap": 1}, "launch-failed", "capacity: no room", unlaunched_only=True))


@pytest.mark.parametrize("state", [S.READY, S.PLANNED, S.NEW, S.BELOW_QUORUM, S.DEFERRED])
def test_a_failed_launch_only_moves_provisioning_gangs(state):
    old = rec(state, requested={"cheap": 2})
    new, actions, _ = transition({KEY: old}, None, LaunchesFailed((GroupFailure("cheap", "capacity", "x"),)), NOW)
    assert new[KEY] is old and actions == (BackOff("cheap", "capacity", "x"),)


# -------------------------------------------------------------------- Expire


EXPIRE_TABLE = [
    ("cancelled past the grace", rec(S.CANCELLED, since=NOW - 61, requested={"cpu": 2}), S.CANCELLED,
     [Release(KEY, {"cpu": 2}, "cancelled")]),
    ("cancelled within the grace", rec(S.CANCELLED, since=NOW - 59, requested={"cpu": 2}), S.CANCELLED, []),
    ("cancelled, nothing bought", rec(S.CANCELLED, since=NOW - 600), S.CANCELLED, []),
    ("provisioning past its deadline", rec(S.PROVISIONING, requested={"cpu": 2}, requested_at=NOW - 100,
                                           deadline=NOW - 1), S.TIMED_OUT,
     [BackOff("cpu", "timed-out", "timed-out: nodes for default/job/scheduling.k8s.io/v1alpha2 did not arrive"),
      Release(KEY, {"cpu": 2}, "timed-out")]),
    ("ready past its deadline", rec(S.READY, requested_at=NOW - 100, deadline=NOW - 1), S.TIMED_OUT,
     [Release(KEY, {}, "timed-out")]),
    ("provisioning before its deadline", rec(S.PROVISIONING, requested={"cpu": 2}, deadline=NOW + 1),
     S.PROVISIONING, []),
    ("no deadline", rec(S.PROVISIONING, requested={"cpu": 2}), S.PROVISIONING, []),
    # issue 17: capacity bought for a gang goes back at its deadline whatever state the gang reached
    *[(f"{s.value} holding nodes past its deadline", rec(s, requested={"cpu": 1}, requested_at=NOW - 100,
                                                         deadline=NOW - 1), S.TIMED_OUT,
       [BackOff("cpu", "timed-out", "timed-out: nodes for default/job/scheduling.k8s.io/v1alpha2 did not arrive"),
        Release(KEY, {"cpu": 1}, "timed-out")])
      for s in (S.NEW, S.PLANNED, S.BELOW_QUORUM, S.WAITING_FOR_PODGROUP, S.WAITING_FOR_ADMISSION, S.DEFERRED,
                S.INVALID, S.INFEASIBLE)],
    *[(f"{s.value} holding nothing is not expired", rec(s, deadline=NOW - 1), s, [])
      for s in (S.NEW, S.PLANNED, S.BELOW_QUORUM, S.WAITING_FOR_ADMISSION, S.DEFERRED, S.INFEASIBLE)],
    ("timed-out is not expired", rec(S.TIMED_OUT, requested={"cpu": 1}, deadline=NOW - 1), S.TIMED_OUT, []),
    # issue 10: a running gang is never timed out (its late launches: below)
    ("running is not expired", rec(S.RUNNING, requested={"cpu": 1}, deadline=NOW - 1), S.RUNNING, []),
    # issue 17: a gang that cannot use its nodes gives them back after the cancel grace, before any deadline
    *[(f"{s.value} past the cancel grace", rec(s, since=NOW - 61, requested={"cpu": 2}, deadline=NOW + 600), s,
       [Release(KEY, {"cpu": 2}, "unusable")]) for s in (S.BELOW_QUORUM, S.WAITING_FOR_PODGROUP,
                                                         S.WAITING_FOR_ADMISSION)],
    ("below quorum within the cancel grace", rec(S.BELOW_QUORUM, since=NOW - 59, requested={"cpu": 2},
                                                  deadline=NOW + 600), S.BELOW_QUORUM, []),
]


@pytest.mark.parametrize("old, state, actions", [r[1:] for r in EXPIRE_TABLE], ids=[r[0] for r in EXPIRE_TABLE])
def test_grace_and_deadlines_give_capacity_back(old, state, actions):
    new, got, _ = transition({KEY: old}, None, Expire(RULES), NOW)
    assert new[KEY].state == state and list(got) == actions
    if actions:
        assert new[KEY].requested == {}


def test_a_running_gang_past_its_deadline_gives_back_only_launches_that_exist_beyond_what_others_wait_for():
    """Issue 10: launches bought for a gang that started without them go back at its deadline; never more than the
    cloud has on their way less what waiting gangs count on and what the plan puts pods on (a count can be stale);
    an arrived node the plan puts pods on stays its own."""
    running = rec(S.RUNNING, requested={"cpu": 3}, nodes={"cpu": ("n1",)}, deadline=NOW - 1)
    waiter = rec(S.PROVISIONING, key=OTHER, requested={"cpu": 1}, deadline=NOW + 500)
    # (launches on their way, of them planned for another gang, given back, what it then holds: n1 + those planned)
    for on_way, planned, gives, holds in ((5, 0, 2, 1), (2, 0, 1, 1), (2, 1, 0, 2), (1, 0, 0, 1)):
        new, actions, _ = transition({KEY: running, OTHER: waiter}, None,
                                     Expire(RULES, planned_upcoming={"cpu": planned}, on_way={"cpu": on_way},
                                            planned_nodes=frozenset({"n1"})), NOW)
        assert list(actions) == ([Release(KEY, {"cpu": gives}, "unused")] if gives else [])
        assert new[KEY].state == S.RUNNING and new[KEY].requested == {"cpu": holds} and new[KEY].nodes == {"cpu": ("n1",)}
    # n1 no longer planned: handed to the scale-down of this pass (spare_until, read before), then an ordinary node
    later, actions, _ = transition({KEY: running}, None, Expire(RULES), NOW + 10)
    assert later[KEY].requested == {} and later[KEY].nodes == {} and actions == ()


def test_a_running_gangs_late_launches_given_back_are_said_in_its_reason_and_an_event_not_as_a_timeout():
    old = rec(S.RUNNING, reason="all members are bound")
    new, _, events = transition({KEY: old}, None, Released((ReleaseOutcome(Release(KEY, {"cpu": 2}, "unused"), 2),)), NOW)
    assert new[KEY].state == S.RUNNING and new[KEY].reason.endswith("gave back 2 launches it did not use at its deadline")
    assert [e.reason for e in events_of(events)] == ["CapacityReleased"]


# ------------------------------------------------------------------ Released


def test_the_reasons_and_events_say_what_the_cloud_actually_gave_back():
    recs = {KEY: rec(S.TIMED_OUT, requested_at=NOW - 100, deadline=NOW - 40),
            OTHER: rec(S.CANCELLED, OTHER)}
    outcomes = (ReleaseOutcome(Release(KEY, {"cpu": 3}, "timed-out"), 3),
                ReleaseOutcome(Release(OTHER, {"cpu": 1}, "cancelled"), 0))
    new, actions, events = transition(recs, None, Released(outcomes), NOW)
    assert new[KEY].reason == "not all nodes arrived within 60s; gave back 3 unused nodes"
    assert new[OTHER].reason == "the gang and its pods are gone; gave back 0 unused nodes"
    assert [(e.target.key, e.reason) for e in events_of(events)] == [
        (KEY, "ScaleUpTimedOut"), (KEY, "CapacityReleased")]  # nothing given back: no CapacityReleased
    assert actions == ()


def test_a_launch_failure_release_names_the_group_and_the_count():
    recs = {KEY: rec(S.PLANNED)}
    out = ReleaseOutcome(Release(KEY, {"cheap": 2}, "launch-failed", "capacity: no room"), 2)
    new, _, events = transition(recs, None, Released((out,)), NOW)
    assert new[KEY].reason == "launch failed in cheap (capacity: no room); gave back 2 nodes there, re-planning"
    assert events_of(events)[0].warning and events_of(events)[0].target == EventTarget(KEY, "uid-1")


# ------------------------------------------------------------ values, purity


def test_transition_changes_none_of_its_inputs_and_its_outputs_are_frozen():
    old = rec(S.PROVISIONING, requested={"cpu": 2}, deadline=NOW - 1, requested_at=NOW - 50)
    records = {KEY: old}
    new, actions, events = transition(records, None, Expire(RULES), NOW)
    assert records == {KEY: old} and old.state == S.PROVISIONING and old.requested == {"cpu": 2}
    with pytest.raises(dataclasses.FrozenInstanceError):
        new[KEY].state = S.RUNNING  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        actions[0].group = "x"  # type: ignore[misc]
    assert isinstance(actions, tuple) and isinstance(events, tuple)


def test_records_written_by_the_previous_controller_still_load_and_round_trip():
    raw = {"gang": "default/job/scheduling.k8s.io/v1alpha2", "namespace": "default", "name": "job",
           "api": "scheduling.k8s.io/v1alpha2", "generation": "uid-1", "state": "provisioning",
           "reason": "capacity on its way", "since": NOW, "first_seen": NOW, "requested": {"cpu": 3},
           "requested_at": NOW, "deadline": NOW + 600, "pods": ["a", "b"]}
    r = Record.from_json(raw)
    assert r.state is S.PROVISIONING and r.key == KEY and r.pods == pod_prints(("a", "b"))
    out = r.to_json()  # saved again: every field as it was, the pod uids as their prints
    assert {k: v for k, v in out.items() if k != "pod_prints"} == {k: v for k, v in raw.items() if k != "pods"}
    again = Record.from_json(out)
    assert again.to_json() == out and len(out["pod_prints"]) == 2 * 12
    assert pods_overlap(["b", "z"], again.pods) and not pods_overlap(["c", "z"], again.pods)


def test_a_saved_record_of_a_1024_pod_gang_lists_its_pods_in_a_third_of_the_bytes_and_still_knows_them():
    import uuid

    uids = tuple(sorted(str(uuid.UUID(int=i * 7919 + 1)) for i in range(1024)))
    r = Record(KEY, "uid-1", S.PROVISIONING, "", NOW, pods=uids)
    whole = len(json.dumps(list(uids)))
    saved = json.dumps(r.to_json())
    assert len(json.dumps(r.to_json()["pod_prints"])) * 3 < whole and len(saved) < 13 * 1024
    loaded = Record.from_json(json.loads(saved))
    assert all(pods_overlap([u], loaded.pods) for u in uids)
    others = [str(uuid.UUID(int=i * 7919 + 2)) for i in range(1024)]
    assert not pods_overlap(others, loaded.pods)  # a gang whose pods were all replaced is seen as replaced


def test_every_state_keeps_its_persisted_string():
    assert {s.value for s in GangState} == {
        "new", "waiting-for-podgroup", "waiting-for-admission", "below-quorum", "planned", "provisioning", "ready", "running", "infeasible",
        "timed-out", "cancelled", "invalid", "deferred"}
    assert str(KEY) == "default/job/scheduling.k8s.io/v1alpha2"


# ------------------------------------------------- issue 17: the write-ahead window, holding states


def test_booking_remembers_where_each_gangs_share_of_the_call_starts():
    report = Booked((facts(), facts(OTHER)), {KEY: {"cpu": 3}, OTHER: {"cpu": 2}}, desired={"cpu": 1})
    new, _, _ = transition({}, None, report, NOW)
    assert new[KEY].unconfirmed == {"cpu": (1, 3)} and new[OTHER].unconfirmed == {"cpu": (4, 2)}
    assert Record.from_json(new[OTHER].to_json()) == new[OTHER]  # survives the ConfigMap


CONFIRM_TABLE = [
    # (id, desired now, KEY's requested after, KEY's state, OTHER's requested after)
    ("both calls landed", 6, {"cpu": 3}, S.PROVISIONING, {"cpu": 2}),
    ("the call never reached the cloud", 1, {}, S.PLANNED, {}),
    ("only part landed: the first share is credited first", 3, {"cpu": 2}, S.PROVISIONING, {}),
    ("desired lowered by someone else since", 0, {}, S.PLANNED, {}),
]


@pytest.mark.parametrize("desired, mine, state, other", [r[1:] for r in CONFIRM_TABLE],
                         ids=[r[0] for r in CONFIRM_TABLE])
def test_a_restart_keeps_only_what_the_group_shows_landed(desired, mine, state, other):
    booked, _, _ = transition({}, None, Booked((facts(), facts(OTHER)), {KEY: {"cpu": 3}, OTHER: {"cpu": 2}},
                                               desired={"cpu": 1}), NOW - 5)
    new, actions, events = transition(booked, None, Confirmed({"cpu": desired}), NOW)
    assert new[KEY].requested == mine and new[KEY].state == state and new[OTHER].requested == other
    assert not new[KEY].unconfirmed and not new[OTHER].unconfirmed and actions == ()
    triggered = [e.target.key for e in events_of(events) if e.reason == "TriggeredScaleUp"]
    assert triggered == [k for k, r in ((KEY, mine), (OTHER, other)) if r]  # each event on its own gang


def test_a_restart_keeps_what_a_provisioning_gang_had_before_an_unconfirmed_booking():
    old = rec(S.PROVISIONING, requested={"cpu": 5}, unconfirmed={"cpu": (4, 2)})
    new, _, _ = transition({KEY: old}, None, Confirmed({"cpu": 4}), NOW)
    assert new[KEY].requested == {"cpu": 3} and new[KEY].state == S.PROVISIONING and not new[KEY].unconfirmed


RECOVER_TABLE = [
    # (id, instances the restart adopted, the group's desired capacity after that, requested after, state after)
    # KEY already held 2 gpu nodes (landed earlier); a fleet call for 3 more was booked at desired 4 and never confirmed
    ("its loose instances were adopted: desired rose", 3, 7, {"gpu": 5}, S.PROVISIONING),
    ("attached before the crash: nothing loose, desired rose", 0, 7, {"gpu": 5}, S.PROVISIONING),
    ("one attached before the crash, two adopted", 2, 7, {"gpu": 5}, S.PROVISIONING),
    ("nothing launched: reduced once", 0, 4, {"gpu": 2}, S.NEW),
    ("launched and terminated (gang gone): reduced once", 0, 4, {"gpu": 2}, S.NEW),
]


@pytest.mark.parametrize("adopted, desired, requested, state", [r[1:] for r in RECOVER_TABLE],
                         ids=[r[0] for r in RECOVER_TABLE])
def test_a_fleet_call_recovered_after_a_restart_is_then_confirmed_by_desired_capacity_once(
        adopted, desired, requested, state):
    from gangscale.controller.lifecycle import CallRecovered, Recovered

    old = rec(S.NEW, requested={"gpu": 5}, unconfirmed={"gpu": (4, 3)}, calls={"gpu": ("tok", 3)}, attempt=2)
    recovered, _, _ = transition({KEY: old}, None, Recovered((CallRecovered(KEY, "gpu", "tok", adopted),)), NOW)
    assert recovered[KEY].calls == old.calls  # kept for `Confirmed`, which settles the share once
    new, actions, events = transition(recovered, None, Confirmed({"gpu": desired}), NOW)
    assert new[KEY].requested == requested and not new[KEY].unconfirmed and not new[KEY].calls and actions == ()
    assert new[KEY].state == (S.PLANNED if state is S.NEW else state)
    triggered = [e for e in events_of(events) if e.reason == "TriggeredScaleUp"]
    assert len(triggered) == (1 if state is S.PROVISIONING else 0)
    assert [e for e in events if isinstance(e, ScaledUp)] == ([ScaledUp("gpu", 3)] if desired == 7 else [])


def test_an_applied_scale_up_confirms_the_booking():
    old = rec(S.NEW, requested={"cpu": 2}, unconfirmed={"cpu": (0, 2)})
    report = Applied((facts(),), RULES, intents={KEY: {"cpu": 2}}, applied=frozenset({"cpu"}))
    new, _, _ = transition({KEY: old}, plan("scale-up"), report, NOW)
    assert new[KEY].state == S.PROVISIONING and new[KEY].requested == {"cpu": 2} and not new[KEY].unconfirmed


def test_an_infeasible_gang_keeps_its_record_and_its_state_change_is_logged_once():
    records: dict = {}
    changes = []
    for i in range(5):
        records, _, events = transition(records, plan("infeasible"), Applied((facts(),), RULES), NOW + i)
        changes += events_of(events, StateChanged)
    assert [(c.old, c.new) for c in changes] == [(S.NEW, S.INFEASIBLE)]


def test_a_half_bought_infeasible_gang_keeps_what_it_holds_until_its_deadline():
    old = rec(S.PLANNED, requested={"launcher": 1}, requested_at=NOW - 30, deadline=NOW + 30)
    new, _, _ = transition({KEY: old}, plan("infeasible"), Applied((facts(),), RULES), NOW)
    assert new[KEY].state == S.INFEASIBLE and new[KEY].requested == {"launcher": 1}
    later, actions, _ = transition(new, None, Expire(RULES), NOW + 31)
    assert later[KEY].state == S.TIMED_OUT and Release(KEY, {"launcher": 1}, "timed-out") in actions


def test_an_unlisted_infeasible_gang_that_holds_nodes_is_cancelled_so_they_go_back():
    old = rec(S.INFEASIBLE, requested={"cpu": 1})
    new, _, _ = transition({KEY: old}, None, Applied((), RULES), NOW)
    assert new[KEY].state == S.CANCELLED and new[KEY].requested == {"cpu": 1}


def test_a_below_quorum_release_says_what_went_back():
    recs = {KEY: rec(S.BELOW_QUORUM, reason="1 of 3 pods")}
    out = ReleaseOutcome(Release(KEY, {"cpu": 2}, "unusable"), 2)
    new, _, events = transition(recs, None, Released((out,)), NOW)
    assert "gave back 2 unused nodes" in new[KEY].reason
    assert [e.reason for e in events_of(events)] == ["CapacityReleased"]


# ------------------------------------------- every state through every report (issue 15's table)

ALL = tuple(GangState)
HELD = dict(requested={"cpu": 2}, requested_at=NOW - 100, deadline=NOW + 100, since=NOW - 10)


def _one(state: GangState, *, to=None, requested=None, actions=(), events=()) -> tuple:
    """One cell: (new state, its requested nodes, the kinds of actions, the Event reasons); None: as before."""
    return (to or state, {"cpu": 2} if requested is None else requested, tuple(actions), tuple(events))


def _column(default: dict, **overrides: dict) -> dict[GangState, tuple]:
    """Every state's cell: `default` unless the state (by enum name) is overridden."""
    return {s: _one(s, **{**default, **overrides.get(s.name, {})}) for s in ALL}


def _failed_launch() -> LaunchesFailed:
    return LaunchesFailed((GroupFailure("cpu", "capacity", "capacity: no room"),))


def _recovered(adopted: int):
    from gangscale.controller.lifecycle import CallRecovered, Recovered

    return Recovered((CallRecovered(KEY, "cpu", "tok", adopted),))


def _registered(*nodes):
    from gangscale.controller.lifecycle import Registered

    return Registered(tuple(nodes), frozenset({"cpu"}))


PROV = dict(to=S.PROVISIONING)
TRIGGERED = dict(to=S.PROVISIONING, events=("TriggeredScaleUp",))
EXPIRED = dict(to=S.TIMED_OUT, requested={}, actions=("BackOff", "Release:timed-out"))
# (id, plan, report, what the record carries besides HELD, every state's cell)
MATRIX = [
    # a restart finds a booking whose call's outcome was never recorded (only NEW..DEFERRED are reachable: a
    # booking makes a new record for a running, timed-out or cancelled gang; the rest pin the rule anyway)
    ("confirmed: the booking landed", None, Confirmed({"cpu": 2}), dict(unconfirmed={"cpu": (0, 2)}),
     _column(TRIGGERED)),
    ("confirmed: the booking never reached the cloud", None, Confirmed({"cpu": 0}), dict(unconfirmed={"cpu": (0, 2)}),
     _column(dict(requested={}), NEW=dict(to=S.PLANNED))),
    ("launches failed in a group it holds", None, _failed_launch(), {},
     _column(dict(actions=("BackOff",)),
             PROVISIONING=dict(to=S.PLANNED, requested={}, actions=("BackOff", "Release:launch-failed")))),
    ("booked one more node", None, Booked((facts(),), {KEY: {"cpu": 1}}), {},
     _column(dict(requested={"cpu": 3}, actions=("ApplyScaleUp",)),
             **{s.name: dict(to=S.PROVISIONING) for s in (S.TIMED_OUT, S.CANCELLED)},  # a new generation takes over
             RUNNING=dict(to=S.NEW, requested={"cpu": 1}))),  # not a running gang's spares: a new record, booked now
    ("applied: the plan's scale-up landed", plan("scale-up"),
     Applied((facts(),), RULES, intents={KEY: {"cpu": 1}}, applied=frozenset({"cpu"})), {},
     _column(TRIGGERED, TIMED_OUT={"to": S.TIMED_OUT, "events": ()},  # cooling off: left alone
             RUNNING=dict(TRIGGERED, requested={}))),  # a new record: a running gang's spares are not taken over
    ("applied: fits existing nodes", plan("fits-existing"), Applied((facts(),), RULES), {},
     _column(dict(to=S.READY), PROVISIONING=PROV, RUNNING=dict(to=S.READY, requested={}), CANCELLED=PROV,
             TIMED_OUT={"to": S.TIMED_OUT})),
    ("applied: infeasible", plan("infeasible"), Applied((facts(),), RULES), {},
     _column(dict(to=S.INFEASIBLE, events=("NotTriggerScaleUp",)), TIMED_OUT={"to": S.TIMED_OUT, "events": ()},
             RUNNING=dict(to=S.INFEASIBLE, requested={}, events=("NotTriggerScaleUp",)))),
    ("applied: no longer listed, a member bound", None, Applied((), RULES, bound_groups=frozenset({KEY.group})), {},
     # its launches on their way are spares now, kept until its deadline (a running gang's stay as they are)
     _column(dict(to=S.RUNNING), CANCELLED={"to": S.CANCELLED})),
    ("applied: no longer listed, pods gone", None, Applied((), RULES), {},
     _column(dict(to=S.CANCELLED), RUNNING={"to": S.RUNNING})),
    ("expire: past the deadline", None, Expire(RULES), dict(deadline=NOW - 1),
     _column(EXPIRED, RUNNING={"to": S.RUNNING, "requested": {}, "actions": ()},  # no launch left on its way
             TIMED_OUT={"to": S.TIMED_OUT, "requested": None, "actions": ()},
             CANCELLED={"to": S.CANCELLED, "requested": None, "actions": ()})),  # within the cancel grace
    ("released after a timeout", None, Released((ReleaseOutcome(Release(KEY, {"cpu": 2}, "timed-out"), 2),)), {},
     _column(dict(events=("ScaleUpTimedOut", "CapacityReleased")))),
    # a record from before `unconfirmed` (legacy): the restart's count settles it here
    ("recovered: the call's instances were adopted", None, _recovered(2), dict(calls={"cpu": ("tok", 2)}),
     _column(PROV, **{s.name: {"to": s} for s in (S.READY, S.RUNNING, S.INFEASIBLE, S.TIMED_OUT, S.CANCELLED)})),
    ("recovered: nothing was launched", None, _recovered(0), dict(calls={"cpu": ("tok", 2)}),
     _column(dict(requested={}))),
    # attribution of registered nodes (what each record then holds: tests/controller/test_attribution.py)
    ("registered: an idle node of its group arrived", None, _registered(NodeSeen("n1", "cpu", NOW - 50, True)), {},
     _column({})),
    ("registered: a node that had arrived for it is gone", None, _registered(), dict(nodes={"cpu": ("n1",)}),
     _column(dict(requested={"cpu": 1}))),
    # 100 s after its booking, 100 s before its deadline (test_late_launches.py has the rest)
    ("overdue: its launches are late", None, Overdue(replace(RULES, late_launch_seconds=100.0)), {},
     _column({}, PROVISIONING=dict(events=("CoveringLateLaunches",)))),
    # a member of its running gang recreated: the running record's named spare launch goes back before the plan
    ("recreated: a member is pending again", None, Recreated((facts(pods=("p3",)),)), dict(launches={"cpu": ("i-1",)}),
     _column({}, RUNNING=dict(to=S.NEW, requested={}, actions=("Release:unused",)))),
]


def _kinds(actions) -> tuple[str, ...]:
    return tuple(type(a).__name__ + (f":{a.why.value}" if isinstance(a, Release) else "") for a in actions)


@pytest.mark.parametrize("row, state", [(r, s) for r in range(len(MATRIX)) for s in ALL],
                         ids=[f"{r[0]} | {s.value}" for r in MATRIX for s in ALL])
def test_every_state_through_every_report_gives_the_tabled_state_nodes_actions_and_events(row, state):
    _, plan_, report, extra, cells = MATRIX[row]
    old = rec(state, **{**HELD, **extra})
    new, actions, events = transition({KEY: old}, plan_, report, NOW)
    got = new[KEY]
    assert (got.state, dict(got.requested), _kinds(actions), tuple(e.reason for e in events_of(events))) == cells[state]
    logged = events_of(events, StateChanged) + events_of(events, Takeover)  # a new generation is logged as a takeover
    fresh = old.state == S.RUNNING and got.state == S.NEW  # a new record beside a running gang's spares: nothing taken
    assert (got.state != old.state) == bool(logged) or fresh


def test_the_table_covers_every_report_type_and_every_state():
    from gangscale.controller.lifecycle import Report

    covered = {type(r[2]) for r in MATRIX}
    assert covered == set(Report.__args__)  # a new report type needs its column here
    assert all(set(r[4]) == set(GangState) for r in MATRIX)


@pytest.mark.parametrize("row", range(len(MATRIX)), ids=[r[0] for r in MATRIX])
def test_a_report_about_a_gang_without_a_record_creates_one_only_when_the_gang_is_listed(row):
    _, plan_, report, _, _ = MATRIX[row]
    new, _, _ = transition({}, plan_, report, NOW)
    listed = isinstance(report, (Booked, Applied)) and report.gangs
    assert (KEY in new) == bool(listed)


def test_a_recovered_call_with_another_token_changes_nothing():
    old = rec(S.NEW, calls={"cpu": ("mine", 2)}, requested={"cpu": 2})
    new, actions, events = transition({KEY: old}, None, _recovered(0), NOW)  # the outcome names "tok"
    assert new[KEY] is old and actions == () and events == ()
