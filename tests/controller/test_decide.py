"""`decide.decide` as a table: each rule's observation gives its actions, state and wake-up; no emulator, no cloud,
no clock (a clock read during a decision fails the test)."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import pytest
from builders import node, pod, podgroup

from cloud_adapters.base import LooseInstance
from gangscale.controller.actions import (
    Adopt,
    Cordon,
    DeleteStrandedPod,
    EmitEvent,
    LiftGate,
    PublishStatus,
    ReleaseCapacity,
    ScaleDown,
    ScaleUp,
    TerminateLoose,
    Uncordon,
    WriteConditions,
    save_first,
)
from gangscale.controller.actuator import ScaleDownResult
from gangscale.controller.config import ControllerConfig
from gangscale.controller.decide import (
    Checked,
    ConditionsSeen,
    Cordoned,
    EmptyNodes,
    GatesOpen,
    Lifted,
    Orphans,
    OrphansEnded,
    Reported,
    ScaledDown,
    State,
    StatusPublished,
    StatusSeen,
    Stranded,
    Unconfirmed,
    decide,
)
from gangscale.controller.execute import CordonOutcome, Done, LiftOutcome, ScaleDownOutcome
from gangscale.controller.gates import CAPACITY_GATE, CAPACITY_READY, NARROWED_KEY, GateDecision, Lift
from gangscale.controller.janitor import PendingCall
from gangscale.controller.lifecycle import (
    TICK,
    Booked,
    EventTarget,
    Expire,
    GangFacts,
    GangState,
    Record,
    Release,
    Released,
    ReleaseOutcome,
    ReleaseWhy,
    Rules,
)
from gangscale.controller.published import REFRESH_SECONDS, Shown
from gangscale.controller.scaledown import EmptyNode
from gangscale.ingest import ingest
from gangscale.model import GangKey, NodeGroup

NOW = 1_800_000_000.0
API = "scheduling.k8s.io/v1alpha2"
KEY = GangKey("default", "job", API)
CFG = ControllerConfig(
    mode="enforce",
    cancelGraceSeconds=60,
    launchFailureBackoffSeconds=120,
    ageingSeconds=600,
    emptyNodeGraceSeconds=10,
    orphanGraceSeconds=300,
    narrowedNodeGraceSeconds=120,
)
RULES = Rules(enforce_mode=True, backoff_seconds=120.0, cancel_grace_seconds=60.0)
GROUP = NodeGroup("cpu", "m5.2xlarge", 0.384, 0, 10, 2, {"cpu": 8000})
S = GangState


def rec(state: GangState, **kw) -> Record:
    base = dict(generation="uid-1", reason="", since=NOW - 10, first_seen=NOW - 20, pods=("p1",))
    base.update(kw)
    return Record(KEY, state=state, **base)


def facts() -> GangFacts:
    return GangFacts(KEY, "uid-1", ("p1",), frozenset({"default/job-0"}), 600.0, EventTarget(KEY))


def state(*records: Record, **kw) -> State:
    return State(CFG, {r.key: r for r in records}, **kw)


def cluster(*pods: dict):
    n = node("n1", group="cpu")
    n["spec"]["providerID"] = "aws:///us-east-1a/i-1"
    return ingest([n, podgroup("job", min_count=1), *pods])


def empty(since: float = NOW - 10) -> EmptyNode:
    return EmptyNode("n1", GROUP, "i-1", since)


def narrowed_pod(owner: bool) -> dict:
    p = pod("job-0", group="job")
    p["metadata"].update(uid="u0", annotations={NARROWED_KEY: "gone"})
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "job", "uid": "j", "apiVersion": "batch/v1"}]
    return p


def stranded(owner: bool, since: float, can_delete: bool = True) -> tuple[State, Stranded]:
    c = ingest([podgroup("job", min_count=1), narrowed_pod(owner)])
    (g,) = c.gangs
    (p,) = g.pending
    return state(stranded_since={p.key: since}), Stranded(((p, "is gone"),), {p.key: g}, can_delete)


def gate_lift() -> tuple[State, GatesOpen]:
    gated = pod("job-0", group="job", schedulingGates=[{"name": CAPACITY_GATE}])
    c = ingest([podgroup("job", min_count=1), gated])
    (g,) = c.gangs
    lift = Lift(g, g.pending, CAPACITY_READY, "its capacity is Ready", ("n1",))
    raw = {("default", "job-0"): gated}
    return state(), GatesOpen(GateDecision((lift,), {}), raw, True)


def lifted() -> tuple[State, Lifted]:
    _, seen = gate_lift()
    (action,) = decide(state(), seen, NOW).actions
    assert isinstance(action, LiftGate)
    return state(), Lifted(LiftOutcome(action, ("default/job-0",), {}))


STATUS = {"gangs.json": "[]", "nodegroups.json": "[]", "pass.json": '{"leader": "a"}'}


def release(why: ReleaseWhy) -> Release:
    return Release(KEY, {"cpu": 1}, why)


def kinds(actions) -> list[str]:
    """Each action as its kind, with what tells two of a kind apart."""
    out = []
    for a in actions:
        if isinstance(a, ReleaseCapacity):
            out.append(f"ReleaseCapacity {a.release.why.value} {dict(a.release.groups)}")
        elif isinstance(a, EmitEvent):
            out.append(f"EmitEvent {a.reason}")
        elif isinstance(a, (Cordon, ScaleDown)):
            nodes = [a.node] if isinstance(a, Cordon) else list(a.nodes)
            out.append(f"{type(a).__name__} {' '.join(e.node for e in nodes)}")
        elif isinstance(a, Uncordon):
            out.append(f"Uncordon {a.node}: {a.why}")
        elif isinstance(a, ScaleUp):
            out.append("ScaleUp")
        else:
            out.append(type(a).__name__)
    return out


CASES = [
    pytest.param(
        state(),
        Reported(Booked((facts(),), {KEY: {"cpu": 2}}, ((frozenset({KEY}), {"cpu": 2}),), {"cpu": 0})),
        ["ScaleUp"],
        id="a_pending_gang_s_plan_gives_a_scale_up_whose_records_are_saved_first",
    ),
    pytest.param(
        state(rec(S.PROVISIONING, requested={"cpu": 2}, requested_at=NOW - 900, deadline=NOW - 1)),
        Reported(Expire(RULES)),
        ["ReleaseCapacity timed-out {'cpu': 2}"],
        id="a_gang_past_its_deadline_gives_a_release_and_backs_its_group_off",
    ),
    pytest.param(
        state(rec(S.CANCELLED, since=NOW - 60, requested={"cpu": 1})),
        Reported(Expire(RULES)),
        ["ReleaseCapacity cancelled {'cpu': 1}"],
        id="a_cancelled_gang_past_its_grace_gives_back_what_it_holds",
    ),
    pytest.param(
        state(rec(S.CANCELLED, since=NOW - 59, requested={"cpu": 1})),
        Reported(Expire(RULES)),
        [],
        id="a_cancelled_gang_within_its_grace_keeps_what_it_holds",
    ),
    pytest.param(
        state(rec(S.TIMED_OUT, requested={})),
        Reported(Released((ReleaseOutcome(release(ReleaseWhy.TIMED_OUT), 2),))),
        ["EmitEvent ScaleUpTimedOut", "EmitEvent CapacityReleased"],
        id="what_the_cloud_gave_back_comes_round_as_released_and_is_said_as_an_event",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 10}),
        EmptyNodes(cluster(), frozenset(), {"cpu": GROUP}, {}),
        ["Cordon n1"],
        id="an_empty_node_past_its_keep_time_is_tainted_and_read_again",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 4}),
        EmptyNodes(cluster(), frozenset(), {"cpu": GROUP}, {}),
        [],
        id="an_empty_node_within_its_keep_time_stays",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 10}),
        EmptyNodes(cluster(), frozenset({"n1"}), {"cpu": GROUP}, {}),
        [],
        id="a_busy_node_is_never_a_candidate",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 1}),
        EmptyNodes(cluster(), frozenset(), {"cpu": GROUP}, {"n1": NOW}),
        ["Cordon n1"],
        id="a_node_a_running_gang_did_not_use_goes_at_its_purchase_s_deadline_within_the_keep_time",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 10}),
        Checked((empty(),)),
        ["ScaleDown n1"],
        id="a_tainted_node_still_empty_is_scaled_down",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 10}),
        Cordoned(CordonOutcome(Cordon(empty()), None, ("default/web",))),
        ["Uncordon n1: a pod landed"],
        id="a_node_a_pod_landed_on_once_tainted_gets_its_taint_off",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 10}),
        Cordoned(CordonOutcome(Cordon(empty()), "forbidden")),
        [],
        id="a_node_whose_taint_could_not_be_set_has_no_taint_to_take_off",
    ),
    pytest.param(
        state(empty_since={"n1": NOW - 10}),
        ScaledDown(
            ScaleDownOutcome(ScaleDown((empty(),)), (ScaleDownResult(empty(), False),)),
            cluster(),
            frozenset({"cpu"}),
        ),
        ["Uncordon n1: not scaled down"],
        id="a_node_tainted_for_removal_that_was_not_removed_gets_its_taint_off",
    ),
    pytest.param(
        *gate_lift(), ["LiftGate"], id="a_gang_whose_capacity_is_ready_gets_its_gate_lifted"
    ),
    pytest.param(*lifted(), ["EmitEvent GateLifted"], id="a_lifted_gate_is_said_as_an_event"),
    pytest.param(
        state(),
        Orphans((LooseInstance("i-9", "cpu", "", NOW - 300),), frozenset()),
        ["TerminateLoose"],
        id="an_orphan_instance_past_its_grace_is_terminated",
    ),
    pytest.param(
        state(),
        Orphans((LooseInstance("i-9", "cpu", "tok", NOW - 900),), frozenset({"tok"})),
        [],
        id="an_instance_of_an_unconfirmed_call_is_no_orphan",
    ),
    pytest.param(
        state(),
        OrphansEnded(Done(TerminateLoose((LooseInstance("i-9", "cpu", "", NOW - 300),)))),
        ["EmitEvent OrphanInstancesTerminated"],
        id="terminated_orphans_are_said_as_a_warning_on_the_state_configmap",
    ),
    pytest.param(
        state(),
        OrphansEnded(Done(TerminateLoose((LooseInstance("i-9", "cpu", "", NOW - 300),)), "throttled")),
        [],
        id="orphans_whose_termination_failed_are_not_said_terminated",
    ),
    pytest.param(
        state(),
        Unconfirmed(
            {"tok": [PendingCall(KEY, "cpu", 1, True)]}, (LooseInstance("i-9", "cpu", "tok", NOW),)
        ),
        ["Adopt"],
        id="an_unconfirmed_call_s_instances_are_settled",
    ),
    pytest.param(
        *stranded(True, NOW - 120),
        ["DeleteStrandedPod"],
        id="a_stranded_pod_with_an_owner_past_the_grace_is_deleted",
    ),
    pytest.param(
        *stranded(False, NOW - 120),
        ["EmitEvent NarrowedNodeGone"],
        id="a_stranded_pod_without_an_owner_is_only_reported",
    ),
    pytest.param(
        *stranded(True, NOW - 119), [], id="a_stranded_pod_within_the_grace_is_left"
    ),
    pytest.param(
        *stranded(True, NOW - 120, can_delete=False), [], id="a_stranded_pod_in_dry_run_is_left"
    ),
    pytest.param(state(), StatusSeen(STATUS), ["PublishStatus"], id="a_status_never_written_is_published"),
    pytest.param(
        state(published=Shown({**STATUS, "gangs.json": '[{"name": "job"}]'}, NOW - 1)),
        StatusSeen(STATUS),
        ["PublishStatus"],
        id="a_status_that_changed_is_published_at_once",
    ),
    pytest.param(
        state(published=Shown(STATUS, NOW - REFRESH_SECONDS + 1)),
        StatusSeen(STATUS),
        [],
        id="an_unchanged_status_written_within_the_refresh_period_is_left",
    ),
    pytest.param(
        state(published=Shown(STATUS, NOW - REFRESH_SECONDS)),
        StatusSeen(STATUS),
        ["PublishStatus"],
        id="an_unchanged_status_is_published_again_once_the_refresh_period_has_passed",
    ),
]


@pytest.fixture
def no_clock(monkeypatch):
    """Any clock read fails: a decision depends on `now` alone."""

    def refuse(*_a, **_k):
        raise AssertionError("decide read the clock")

    for name in ("time", "monotonic", "perf_counter"):
        monkeypatch.setattr(time, name, refuse)


@pytest.mark.parametrize("before, seen, expected", CASES)
def test_each_observation_gives_the_actions_its_rule_states(before, seen, expected, no_clock):
    d = decide(before, seen, NOW)
    assert kinds(d.actions) == expected
    assert decide(before, seen, NOW) == d  # the same inputs, the same decision


def test_a_scale_up_is_the_write_ahead_kind_and_books_its_call_before_it_runs():
    d = decide(state(), CASES[0].values[1], NOW)
    (up,) = d.actions
    assert isinstance(up, ScaleUp) and save_first(up)
    r = d.state.records[KEY]
    assert r.requested == {"cpu": 2} and r.calls["cpu"][1] == 2 and dict(up.tokens[0]) == {"cpu": r.calls["cpu"][0]}
    assert d.wake_at == NOW + 60  # its cancel grace is the first of its rules to fall due


def test_a_gang_past_its_deadline_is_timed_out_its_group_backed_off_and_its_nodes_spared_for_no_one():
    before, seen = CASES[1].values[0], CASES[1].values[1]
    d = decide(before, seen, NOW)
    assert d.state.records[KEY].state == S.TIMED_OUT
    assert d.state.backoff == {"cpu": NOW + 120} and [b.group for b in d.extended] == ["cpu"]
    (give_back,) = d.actions
    assert isinstance(give_back, ReleaseCapacity) and give_back.keep == frozenset()
    assert not save_first(give_back)  # only the scale-up is write-ahead


def test_a_deadline_is_strict_the_rule_acts_a_tick_after_it_and_wakes_the_loop_then():
    r = rec(S.PROVISIONING, since=NOW - 900, requested={"cpu": 2}, requested_at=NOW - 900, deadline=NOW + 15)
    at_it = decide(state(r), Reported(Expire(RULES)), NOW + 15)
    assert at_it.actions == () and NOW + 15 < at_it.wake_at <= NOW + 15 + TICK
    assert kinds(decide(state(r), Reported(Expire(RULES)), at_it.wake_at).actions) == [
        "ReleaseCapacity timed-out {'cpu': 2}"
    ]


def test_an_empty_node_within_its_keep_time_wakes_the_loop_when_it_falls_due():
    d = decide(state(empty_since={"n1": NOW - 4}), CASES[6].values[1], NOW)
    assert d.state.empty_since == {"n1": NOW - 4} and d.wake_at == NOW + 6
    assert kinds(decide(d.state, CASES[6].values[1], d.wake_at).actions) == ["Cordon n1"]


def test_a_node_not_empty_once_tainted_starts_its_keep_time_over_and_a_removed_one_is_forgotten():
    assert decide(state(empty_since={"n1": NOW - 10}), CASES[10].values[1], NOW).state.empty_since == {}
    gone = ScaledDown(
        ScaleDownOutcome(ScaleDown((empty(),)), (ScaleDownResult(empty(), True),)), cluster(), frozenset({"cpu"})
    )
    d = decide(state(empty_since={"n1": NOW - 10}), gone, NOW)
    assert d.actions == () and d.state.empty_since == {} and d.state.scaled_down == frozenset({"n1"})


def test_a_running_gang_s_late_launches_never_take_a_registered_node_and_others_keep_their_waiting_nodes():
    late = rec(S.RUNNING, requested={"cpu": 1}, deadline=NOW - 1, requested_at=NOW - 900)
    waiting = replace(
        rec(S.PROVISIONING, requested={"cpu": 1}, deadline=NOW + 900, requested_at=NOW - 10),
        key=GangKey("default", "other", API), nodes={"cpu": ("n2",)},
    )
    d = decide(
        state(late, waiting), Reported(Expire(RULES, on_way={"cpu": 2}), None, frozenset({"n1", "n2"})), NOW
    )
    (unused,) = [a for a in d.actions if isinstance(a, ReleaseCapacity)]
    assert unused.release.why == ReleaseWhy.UNUSED and unused.keep == frozenset({"n1", "n2"})
    timed_out = decide(state(rec(S.PROVISIONING, requested={"cpu": 1}, deadline=NOW - 1), waiting),
                       Reported(Expire(RULES)), NOW)
    (give_back,) = [a for a in timed_out.actions if isinstance(a, ReleaseCapacity)]
    assert give_back.keep == frozenset({"n2"})  # the node that arrived for the waiting gang


def test_a_stranded_pod_is_timed_from_when_it_was_first_seen_and_forgotten_once_it_is_not():
    before, seen = stranded(True, NOW - 120)
    (key,) = before.stranded_since
    fresh = decide(state(), seen, NOW)
    assert fresh.actions == () and fresh.state.stranded_since == {key: NOW}
    assert decide(before, replace(seen, found=()), NOW).state.stranded_since == {}


def test_a_stranded_pod_wakes_the_loop_by_the_end_of_its_grace_and_the_pass_then_deletes_it():
    before, seen = stranded(True, NOW - 100)
    ends = NOW - 100 + CFG.narrowed_node_grace_seconds  # the first moment the rule acts on it
    d = decide(before, seen, NOW)
    assert d.actions == () and d.wake_at is not None and d.wake_at <= ends
    assert kinds(decide(d.state, seen, d.wake_at).actions) == ["DeleteStrandedPod"]
    assert decide(d.state, seen, math.nextafter(ends, -math.inf)).actions == ()
    assert decide(state(), seen, NOW).wake_at == NOW + CFG.narrowed_node_grace_seconds  # first seen now


def test_a_published_status_is_what_the_next_pass_compares_with_and_a_failed_write_is_tried_again():
    (publish,) = decide(state(), StatusSeen(STATUS), NOW).actions
    assert publish == PublishStatus(STATUS, NOW)
    failed = decide(state(), StatusPublished(Done(publish, "cannot write ConfigMap")), NOW)
    assert failed.state.published == Shown() and decide(failed.state, StatusSeen(STATUS), NOW + 1).actions != ()
    written = decide(state(), StatusPublished(Done(publish)), NOW).state
    assert written.published == Shown(STATUS, NOW)
    assert decide(written, StatusSeen(STATUS), NOW + 1).actions == ()
    assert decide(written, StatusSeen(STATUS), NOW + 1).wake_at is None  # the refresh waits for a pass: no wake-up


def test_a_podgroup_whose_condition_changed_gets_one_condition_write():
    pg = podgroup("job", min_count=1)
    pg["metadata"]["uid"] = "uid-1"
    d = decide(state(rec(S.PROVISIONING, requested={"cpu": 1})), ConditionsSeen([pg]), NOW)
    (write,) = d.actions
    assert isinstance(write, WriteConditions) and [w.gang for w in write.writes] == [str(KEY)]
    pg["status"] = {"conditions": [dict(write.writes[0].condition)]}
    assert decide(state(rec(S.PROVISIONING, requested={"cpu": 1})), ConditionsSeen([pg]), NOW).actions == ()


def test_a_gate_lift_narrows_each_pod_to_its_planned_node_in_the_same_patch():
    before, seen = gate_lift()
    (lift,) = decide(before, seen, NOW).actions
    assert isinstance(lift, LiftGate) and lift.nodes == ("n1",)
    (patch,) = lift.patches
    assert any("n1" in str(op.get("value")) for op in patch.ops)
    (plain,) = decide(before, replace(seen, narrowing=False), NOW).actions
    assert isinstance(plain, LiftGate) and plain.nodes == ()
    assert not any("n1" in str(op.get("value")) for op in plain.patches[0].ops)


def test_the_unconfirmed_call_s_adopt_names_its_instances_and_whether_a_record_still_wants_them():
    seen = Unconfirmed(
        {"tok": [PendingCall(KEY, "cpu", 1, False)]},
        (LooseInstance("i-9", "cpu", "tok", NOW), LooseInstance("i-8", "cpu", "other", NOW)),
    )
    (adopt,) = decide(state(), seen, NOW).actions
    assert adopt == Adopt("cpu", "tok", ("i-9",), False)


def test_an_orphan_s_terminate_names_exactly_the_due_instances():
    seen = Orphans(
        (LooseInstance("i-1", "cpu", "", NOW - 300), LooseInstance("i-2", "cpu", "", NOW - 299)), frozenset()
    )
    (end,) = decide(state(), seen, NOW).actions
    assert isinstance(end, TerminateLoose) and [i.id for i in end.instances] == ["i-1"]


def test_a_stranded_pod_s_delete_carries_the_pod_and_its_gang_s_event_target():
    before, seen = stranded(True, NOW - 120)
    (delete,) = decide(before, seen, NOW).actions
    assert isinstance(delete, DeleteStrandedPod) and delete.pod.uid == "u0" and delete.target.key == KEY
