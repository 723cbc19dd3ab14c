"""The rules' own wake-ups (wakes.py): each falls due at the first moment its rule acts, and never before.

Each check runs the rule itself (the lifecycle's Expire, `cooling`, `backed_off`, `due_nodes`) just
before and at the time `next_due` names, so the two cannot drift apart.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from builders import node
from hypothesis import given, settings
from hypothesis import strategies as st

from gangscale.controller import wakes
from gangscale.controller.backoff import backed_off
from gangscale.controller.config import ControllerConfig
from gangscale.controller.actions import Cordon
from gangscale.controller.decide import EmptyNodes, State, decide
from gangscale.controller.lifecycle import TICK, Expire, GangState, Overdue, Record, Rules, cooling, transition
from gangscale.controller.scaledown import due_nodes
from gangscale.ingest import ingest
from gangscale.model import GangKey, NodeGroup

NOW = 1_800_000_000.0
KEY = GangKey("default", "job", "scheduling.k8s.io/v1alpha2")
CFG = ControllerConfig(cancelGraceSeconds=60, launchFailureBackoffSeconds=120, ageingSeconds=600,
                       emptyNodeGraceSeconds=10, lateLaunchSeconds=0)  # late launches: their own test
RULES = Rules(enforce_mode=True, backoff_seconds=120.0, cancel_grace_seconds=60.0)
GROUP = NodeGroup("cpu", "m5.2xlarge", 0.384, 0, 10, 2, {"cpu": 8000})
BEFORE = 0.0005  # less than the tick: a pass this much earlier must not act yet


def rec(state: GangState, **kw) -> Record:
    base = dict(generation="uid-1", reason="", since=NOW, first_seen=NOW, pods=("p1",))
    base.update(kw)
    return Record(KEY, state=state, **base)


def due(*records: Record, backoff=None, empty_since=None, empty_until=None, after: float = NOW) -> float | None:
    state = State(CFG, {KEY if i == 0 else GangKey("default", f"job{i}", KEY.api): r for i, r in enumerate(records)},
                  backoff or {}, empty_since or {}, empty_until or {})
    return wakes.next_due(state, after)


def expired(r: Record, at: float) -> bool:
    new, _, _ = transition({KEY: r}, None, Expire(RULES), at)
    return new[KEY] != r


def test_a_provisioning_deadline_falls_due_just_after_it_and_the_expiry_acts_then_and_not_at_it():
    r = rec(GangState.PROVISIONING, since=NOW - 900, first_seen=NOW - 900, requested={"cpu": 2},
            requested_at=NOW - 900, deadline=NOW + 15)
    t = due(r)
    assert NOW + 15 < t <= NOW + 15 + TICK
    assert not expired(r, NOW + 15) and expired(r, t)


def test_the_cancel_grace_falls_due_when_it_ends_and_the_release_happens_then():
    r = rec(GangState.CANCELLED, requested={"cpu": 1})
    t = due(r)
    assert t == NOW + 60
    assert not expired(r, t - BEFORE) and expired(r, t)


def test_a_timed_out_gang_s_cooling_ends_when_its_timer_falls_due():
    r = rec(GangState.TIMED_OUT, since=NOW - 60)  # the grace's timer (NOW) has passed: cooling's is next
    t = due(r)
    assert t == NOW + 60
    assert cooling(r, "uid-1", t - BEFORE, 120.0) and not cooling(r, "uid-1", t, 120.0)


def test_a_group_s_backoff_falls_due_when_the_group_may_grow_again():
    group = GROUP
    t = due(backoff={"cpu": NOW + 300})
    assert t == NOW + 300
    assert backed_off(group, {"cpu": NOW + 300}, t - BEFORE).max_size == 2
    assert backed_off(group, {"cpu": NOW + 300}, t).max_size == 10


@pytest.mark.parametrize("until", [None, NOW + 40], ids=["grace-before-a-keep-is-decided", "the-keep-rules-time"])
def test_an_empty_node_falls_due_at_its_keep_time_and_the_scale_down_takes_it_then(until):
    n = node("n1", cpu="8", mem="32Gi")
    n["spec"]["providerID"] = "aws:///us-east-1a/i-1"
    n["metadata"]["labels"]["gangscale.io/node-group"] = "cpu"
    cluster = ingest([n])
    groups = {"cpu": GROUP}
    decided = {} if until is None else {"n1": until}
    t = due(empty_since={"n1": NOW - 4}, empty_until=decided, after=NOW - 4)
    assert t == (NOW + 6 if until is None else until)  # the grace is CFG's 10 s
    keep = decided or {"n1": NOW - 4 + CFG.empty_node_grace_seconds}
    grace = CFG.empty_node_grace_seconds
    assert due_nodes({"n1": NOW - 4}, keep, cluster, groups, t - BEFORE, grace=grace) == []
    assert [e.node for e in due_nodes({"n1": NOW - 4}, keep, cluster, groups, t, grace=grace)] == ["n1"]


def test_a_stranded_pod_falls_due_when_its_grace_ends_and_the_recovery_deletes_it_then():
    from builders import pod, podgroup

    from gangscale.controller.decide import Stranded
    from gangscale.controller.gates import NARROWED_KEY

    p = pod("job-0", group="job")
    p["metadata"].update(annotations={NARROWED_KEY: "gone"}, ownerReferences=[{"kind": "Job", "name": "job"}])
    (g,) = ingest([podgroup("job", min_count=1), p]).gangs
    (stuck,) = g.pending
    cfg = ControllerConfig(narrowedNodeGraceSeconds=120)
    state = State(cfg, stranded_since={stuck.key: NOW - 30})
    t = wakes.next_due(state, NOW)
    assert t == NOW + 90
    seen = Stranded(((stuck, "node gone is gone"),), {stuck.key: g}, True)
    assert decide(state, seen, t - BEFORE).actions == ()
    assert [type(a).__name__ for a in decide(state, seen, t).actions] == ["DeleteStrandedPod"]


def test_a_waiting_gang_s_ageing_falls_due_when_it_has_waited_the_ageing_time():
    r = rec(GangState.PLANNED, since=NOW - 500, first_seen=NOW - 500)  # its graces' timers passed before NOW
    assert due(r) == NOW + 100


def test_the_earliest_timer_after_the_last_pass_is_the_one_due_and_past_ones_are_not():
    deadline = rec(GangState.PROVISIONING, since=NOW - 200, first_seen=NOW - 200, requested={"cpu": 1},
                   requested_at=NOW - 200, deadline=NOW + 700)
    cancelled = rec(GangState.CANCELLED, since=NOW - 30, requested={"cpu": 1})
    assert due(deadline, cancelled, backoff={"gpu": NOW + 500}, empty_since={"n1": NOW - 20}) == NOW + 30
    assert due(deadline, cancelled, after=NOW + 30) == NOW + 90  # the cancelled record's cooling-length timer
    assert due(rec(GangState.RUNNING, since=NOW - 10_000, first_seen=NOW - 10_000)) is None  # nothing left to time
    assert due(backoff={"gpu": NOW}, empty_since={"n1": NOW - 10}) is None  # both fell due at the last pass


def test_an_empty_node_that_outlived_its_grace_is_left_to_the_resync():
    assert wakes.overdue_empty({"n1": NOW - 10}, {}, CFG, NOW)  # due at the last pass, still there
    assert not wakes.overdue_empty({"n1": NOW - 9}, {}, CFG, NOW)


def test_an_empty_node_is_overdue_by_the_give_back_time_its_keep_rule_decided_not_by_the_grace():
    assert not wakes.overdue_empty({"n1": NOW - 1000}, {"n1": NOW + 5}, CFG, NOW)  # kept past the grace
    assert wakes.overdue_empty({"n1": NOW - 1}, {"n1": NOW}, CFG, NOW)  # given back sooner than the grace


# an empty node: seconds it has been empty before NOW, and its decided keep past that (None: none decided yet)
EMPTY = st.tuples(st.floats(0, 5000, allow_nan=False), st.none() | st.floats(0, 5000, allow_nan=False))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(EMPTY, min_size=1, max_size=4), st.floats(0, 600, allow_nan=False))
def test_the_empty_node_wake_up_is_the_first_moment_the_scale_down_takes_a_node_for_any_state(empty, grace):
    """The wake-up (`wakes.next_due`) and the decision (`due_nodes`, and `decide` itself) read one keep time: at the
    wake-up some node is taken, and a moment before it none is, whether or not a keep time was decided."""
    cfg = ControllerConfig(emptyNodeGraceSeconds=grace, emptyNodeKeep="ski-rental")
    objs = []
    for i in range(len(empty)):
        n = node(f"n{i}", group="cpu")
        n["spec"]["providerID"] = f"aws:///us-east-1a/i-{i}"
        objs.append(n)
    cluster, groups = ingest(objs), {"cpu": NodeGroup("cpu", "m5.2xlarge", 0.384, 0, 10, 10, {"cpu": 8000})}
    since = {f"n{i}": NOW - ago for i, (ago, _) in enumerate(empty)}
    until = {f"n{i}": since[f"n{i}"] + keep for i, (_, keep) in enumerate(empty) if keep is not None}
    after = min(since.values()) - 1  # the last pass: before any node emptied
    t = wakes.next_due(State(cfg, {}, {}, since, until), after)
    assert t is not None
    just_before = math.nextafter(t, -math.inf)
    taken = {e.node for e in due_nodes(since, until, cluster, groups, t, grace=grace)}
    assert taken and due_nodes(since, until, cluster, groups, just_before, grace=grace) == []
    seen = EmptyNodes(cluster, frozenset(), groups, {})
    cordoned = {a.node.node for a in decide(State(cfg, {}, {}, since, until), seen, t).actions if isinstance(a, Cordon)}
    assert cordoned == taken
    assert decide(State(cfg, {}, {}, since, until), seen, just_before).actions == ()


def covered(r: Record, at: float) -> bool:
    new, _, _ = transition({KEY: r}, None, Overdue(replace(RULES, late_launch_seconds=240.0)), at)
    return bool(new[KEY].covered)


def test_a_provisioning_gang_s_launches_fall_due_as_late_when_the_cover_acts_and_not_before():
    default = ControllerConfig()
    r = rec(GangState.PROVISIONING, requested={"cpu": 2}, requested_at=NOW, deadline=NOW + 900)
    t = NOW + default.late_launch_seconds
    assert t in set(wakes.record_due(r, default)) and t not in set(wakes.record_due(r, CFG))  # 0: never
    assert not covered(r, t - BEFORE) and covered(r, t)
    assert t not in set(wakes.record_due(replace(r, covered={"cpu": 2}), default))  # covered once only
    arrived = replace(r, nodes={"cpu": ("n1", "n2")})  # nothing on its way: nothing turns late
    assert t not in set(wakes.record_due(arrived, default)) and not covered(arrived, t)
    short = replace(r, deadline=NOW + 479)  # a new launch at 240 s would not have 240 s left before the deadline
    assert t not in set(wakes.record_due(short, default)) and not covered(short, t)
    lone = replace(r, requested={"cpu": 1})  # a one-node purchase is never covered
    assert t not in set(wakes.record_due(lone, default)) and not covered(lone, t)
