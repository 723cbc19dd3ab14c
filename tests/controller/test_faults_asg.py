"""Issue 17 on aws-asg: the real `gangscale run` under crashes, deleted pods, caps and failing launches.

Every test runs the controller as a process against the API emulator and moto behind the fault
proxy. Crashes inside the write-ahead window use the test-only hook
`GANGSCALE_TEST_CRASH_AT=<step>` (`gangscale/controller/crashpoints.py`): the process exits with
137 exactly there, like `kill -9`.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timezone

import pytest
from builders import pod, podgroup

from cloud.proxy import failed_activity, no_capacity, throttled

from .conftest import STATE_NS, events, state_records, wait_for

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"


def gang(emu, name: str, members: int, *, ns: str = "default", cpu: str = "6", annotations: dict | None = None,
         selector: dict | None = None, created: str | None = None) -> None:
    pg = podgroup(name, ns, min_count=members)
    if annotations:
        pg["metadata"]["annotations"] = annotations
    if created:
        pg["metadata"]["creationTimestamp"] = created
    emu.apply(pg)
    for i in range(members):
        member = pod(f"{name}-{i}", ns, cpu=cpu, mem="4Gi", group=name, selector=selector)
        if created:  # a gang's pods are created with it: kube-scheduler's queue orders them by their own time
            member["metadata"]["creationTimestamp"] = created
        emu.apply(member)


def desired_calls(proxy) -> list[int]:
    """Every DesiredCapacity the controller asked for, in order."""
    return [int(m.group(1)) for b in proxy.bodies.get("SetDesiredCapacity", [])
            for m in [re.search(rb"DesiredCapacity=(\d+)", b)] if m]


def crash(ctl) -> None:
    wait_for(lambda: ctl.exited() is not None, timeout=30, what="the crash hook")
    assert ctl.exited() == 137


def last_state(ctl, key: str) -> dict:
    lines = ctl.logged("gang state", gang=key)
    return lines[-1] if lines else {}


# ------------------------------------------------------------------- item 1


def set_lease(emu, holder: str, renewed: float, seconds: int) -> None:
    """Write the leader Lease as another replica would (its holder, renewTime and duration)."""
    lease = emu.get("coordination.k8s.io/v1", "Lease", STATE_NS, "gangscale-leader")
    lease["spec"].update(holderIdentity=holder, leaseDurationSeconds=seconds, renewTime=datetime.fromtimestamp(
        renewed, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    emu.apply(lease)


def test_a_leader_deposed_in_the_middle_of_a_pass_never_sends_its_scale_up(cluster, world, controllers, proxy):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    deposed = threading.Event()

    def depose_then_answer(req, forward):  # the group read right before SetDesiredCapacity
        if b"AutoScalingGroupNames.member" in req.body and not deposed.is_set():
            set_lease(cluster, "intruder", time.time(), 3600)  # another replica took the lease meanwhile
            deposed.set()
            time.sleep(3)  # longer than a's lease: its renewals now see the intruder and fail
        return forward()

    proxy.add("DescribeAutoScalingGroups", depose_then_answer)
    gang(cluster, "train", 3)
    ctl = controllers("a")
    wait_for(lambda: ctl.logged("pass abandoned: leadership lost"), timeout=30, what="the pass abandoned")
    assert deposed.is_set() and proxy.count("SetDesiredCapacity") == 0 and world.desired("cpu") == 0
    booked = state_records(cluster)[f"default/train/{API}"]  # the write-ahead record, saved before the fence
    assert booked["unconfirmed"] == {"cpu": [0, 3]}
    time.sleep(2)
    assert proxy.count("SetDesiredCapacity") == 0  # a follower now: nothing more is sent
    set_lease(cluster, "intruder", time.time() - 7200, 15)  # the intruder is gone: a leads again, settles, buys once
    wait_for(lambda: world.desired("cpu") == 3, timeout=30, what="the gang bought by the new term")
    time.sleep(2)
    assert desired_calls(proxy) == [3]
    ctl.assert_no_tracebacks()


@pytest.mark.parametrize("provider, call", [("aws-asg", "SetDesiredCapacity"), ("aws-fleet", "CreateFleet")])
def test_a_pass_blocked_in_throttling_retries_longer_than_the_lease_keeps_it_and_buys_once(cluster, world,
                                                                                          controllers, proxy,
                                                                                          provider, call):
    world.asg("cpu", "m5.2xlarge", max_size=10)

    def slow_throttle(req, forward):
        time.sleep(5)
        return throttled(req)

    proxy.add(call, slow_throttle, times=4)  # >= 20 s of retries inside one pass
    shipped = {"provider": provider, "leaseDurationSeconds": 15.0, "leaseRenewSeconds": 5.0}  # config/deploy
    a = controllers("a", **shipped)
    wait_for(lambda: a.logged("leading"), what="a to lead")
    b = controllers("b", **shipped)
    gang(cluster, "train", 3)
    started = time.monotonic()
    wait_for(lambda: world.desired("cpu") == 3, timeout=90, what="the throttled call to land")
    assert time.monotonic() - started > 15  # the pass really was blocked longer than the lease
    time.sleep(3)
    assert proxy.count(call) == 5  # a's four throttled tries and the one that went through; nobody else's
    assert max(desired_calls(proxy), default=3) == 3 and world.desired("cpu") == 3
    alive = {i for i, st in world.instance_states().items() if st in ("pending", "running")}
    assert len(alive) == 3  # one purchase (aws-fleet: one fleet, all of it attached)
    assert not b.logged("leading") and not a.logged("pass abandoned: leadership lost")
    a.assert_no_tracebacks()
    b.assert_no_tracebacks()


# ------------------------------------------------------------------- item 3


@pytest.mark.parametrize("standby", [False, True], ids=["restart", "standby-takes-over"])
@pytest.mark.parametrize("step", ["record-saved", "call-sent"])
def test_a_kill_in_the_write_ahead_window_buys_each_gang_exactly_once(cluster, world, controllers, proxy, step,
                                                                      standby):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    first = controllers("a", env={"GANGSCALE_TEST_CRASH_AT": step})
    if standby:  # the shipped setup: a second replica is already up and takes the lease when `a` dies
        wait_for(lambda: first.logged("leading"), what="a to lead")
        second = controllers("b")
    gang(cluster, "aa-train", 3)  # sorts before the second gang: attribution by name order would give it the new nodes
    crash(first)
    if not standby:
        assert world.desired("cpu") == (3 if step == "call-sent" else 0)
    gang(cluster, "zz-second", 2)  # arrives while nobody (or only the standby) is watching
    if not standby:
        second = controllers("b")
    wait_for(lambda: world.desired("cpu") == 5, timeout=30, what="both gangs bought")
    time.sleep(3)  # several resyncs: nothing more is bought
    assert world.desired("cpu") == 5 and max(desired_calls(proxy)) == 5
    recs = state_records(cluster)
    train, other = recs[f"default/aa-train/{API}"], recs[f"default/zz-second/{API}"]
    assert train["requested"] == {"cpu": 3} and other["requested"] == {"cpu": 2}
    assert train["state"] == other["state"] == "provisioning" and not train.get("unconfirmed")
    by_gang = {}
    for e in events(cluster, "TriggeredScaleUp", kind="PodGroup"):
        by_gang.setdefault(e["involvedObject"]["name"], []).append(e["message"])
    assert any("cpu +2" in m for m in by_gang["zz-second"])  # the event names the gang the nodes were for
    assert not any("cpu +2" in m for m in by_gang.get("aa-train", []))
    second.assert_no_tracebacks()


def test_a_kill_before_the_call_never_gives_back_another_gangs_nodes_at_the_deadline(cluster, world, controllers,
                                                                                      proxy):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    first = controllers("a", env={"GANGSCALE_TEST_CRASH_AT": "record-saved"})
    gang(cluster, "train", 3, annotations={"gangscale.io/provisioning-deadline-seconds": "12"})
    crash(first)
    assert state_records(cluster)[f"default/train/{API}"]["requested"] == {"cpu": 3}  # booked, never sent
    second = controllers("b")
    wait_for(lambda: world.desired("cpu") == 3, timeout=30, what="the gang bought once")
    gang(cluster, "other", 2)
    wait_for(lambda: world.desired("cpu") == 5, what="the other gang bought")
    wait_for(lambda: state_records(cluster)[f"default/train/{API}"]["state"] == "timed-out", timeout=30,
             what="the first gang's deadline")
    wait_for(lambda: world.desired("cpu") == 2, what="its own 3 nodes given back")
    time.sleep(2)
    assert world.desired("cpu") == 2  # the other gang's 2 nodes stay
    assert "gave back 3" in state_records(cluster)[f"default/train/{API}"]["reason"]
    assert state_records(cluster)[f"default/other/{API}"]["requested"] == {"cpu": 2}
    second.assert_no_tracebacks()


# ------------------------------------------------------------------- item 4


def test_a_gang_whose_pods_are_deleted_gives_its_nodes_back_after_the_grace(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers(cancelGraceSeconds=2)
    gang(cluster, "train", 3)
    wait_for(lambda: world.desired("cpu") == 3, what="scale-up")
    for i in range(3):
        cluster.delete("v1", "Pod", "default", f"train-{i}")  # the PodGroup stays
    wait_for(lambda: world.desired("cpu") == 0, timeout=20, what="the nodes of a gang without pods given back")
    wait_for(lambda: [e for e in events(cluster, "CapacityReleased") if e["involvedObject"]["name"] == "train"],
             what="the CapacityReleased event")
    assert ctl.logged("gang state", gang=f"default/train/{API}", to="below-quorum")
    ctl.assert_no_tracebacks()


def test_a_gang_that_loses_one_of_three_pods_gives_its_nodes_back_at_its_deadline(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers(cancelGraceSeconds=600)  # the grace never ends here: only the deadline can free the nodes
    gang(cluster, "train", 3, annotations={"gangscale.io/provisioning-deadline-seconds": "8"})
    wait_for(lambda: world.desired("cpu") == 3, what="scale-up")
    cluster.delete("v1", "Pod", "default", "train-2")  # 2 of 3 left: below quorum, still holding 3 nodes
    key = f"default/train/{API}"
    wait_for(lambda: ctl.logged("gang state", gang=key, to="below-quorum"), what="below quorum")
    wait_for(lambda: world.desired("cpu") == 0, timeout=30, what="the nodes given back at the deadline")
    wait_for(lambda: state_records(cluster)[key]["state"] == "timed-out", what="the timed-out record saved")
    assert "gave back 3" in state_records(cluster)[key]["reason"]
    assert [e for e in events(cluster, "CapacityReleased") if e["involvedObject"]["name"] == "train"]
    ctl.assert_no_tracebacks()


def test_nodes_held_by_a_gang_below_quorum_count_toward_the_namespace_cap(cluster, world, controllers, proxy):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers(cancelGraceSeconds=600, defaultNamespaceCap={"maxNodes": 5})
    gang(cluster, "train", 3)
    wait_for(lambda: world.desired("cpu") == 3, what="scale-up")
    cluster.delete("v1", "Pod", "default", "train-2")  # 2 of 3: below quorum, still holding 3 nodes
    wait_for(lambda: ctl.logged("gang state", gang=f"default/train/{API}", to="below-quorum"), what="below quorum")
    gang(cluster, "next", 4)
    wait_for(lambda: ctl.logged("gang state", gang=f"default/next/{API}", to="deferred"), what="next deferred")
    time.sleep(2.5)
    assert world.desired("cpu") == 3 and max(desired_calls(proxy)) == 3
    assert "maxNodes 5" in last_state(ctl, f"default/next/{API}")["reason"]
    ctl.assert_no_tracebacks()


# ---------------------------------------------------------------- items 5, 6


def test_twenty_one_node_gangs_under_a_cap_of_one_buy_one_node_and_the_rest_are_deferred(cluster, world,
                                                                                         controllers, proxy):
    world.asg("cpu", "m5.2xlarge", max_size=4)
    for i in range(20):
        gang(cluster, f"g{i:02d}", 1, created=f"2026-01-01T00:00:{i:02d}Z")
    ctl = controllers(defaultNamespaceCap={"maxNodes": 1}, ageingSeconds=10**9)
    wait_for(lambda: world.desired("cpu") >= 1, what="a scale-up")
    time.sleep(3)
    assert world.desired("cpu") == 1 and desired_calls(proxy) == [1]
    states = {i: last_state(ctl, f"default/g{i:02d}/{API}") for i in range(20)}
    assert states[0]["to"] == "provisioning"  # the oldest
    for i in range(1, 20):
        assert states[i]["to"] == "deferred" and "maxNodes 1" in states[i]["reason"], (i, states[i])
    ctl.assert_no_tracebacks()


def test_the_cap_buys_for_the_older_gang_and_one_that_can_never_fit_blocks_nobody(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=20)
    gang(cluster, "huge", 16, created="2025-12-01T00:00:00Z")  # the oldest, but 16 nodes can never fit 1
    gang(cluster, "zz-old", 1, created="2026-01-01T00:00:00Z")
    gang(cluster, "aa-young", 1, created="2026-02-01T00:00:00Z")
    ctl = controllers(defaultNamespaceCap={"maxNodes": 1}, ageingSeconds=10**9)
    wait_for(lambda: world.desired("cpu") >= 1, what="a scale-up")
    time.sleep(2.5)
    assert world.desired("cpu") == 1
    assert last_state(ctl, f"default/zz-old/{API}")["to"] == "provisioning"
    young = last_state(ctl, f"default/aa-young/{API}")
    assert young["to"] == "deferred" and "maxNodes 1" in young["reason"]
    huge = last_state(ctl, f"default/huge/{API}")
    assert huge["to"] == "infeasible" and "maxNodes 1" in huge["reason"]
    ctl.assert_no_tracebacks()


def test_under_a_cap_of_two_an_older_gang_that_can_never_fit_does_not_hold_back_a_one_node_gang(cluster, world,
                                                                                                 controllers):
    world.asg("cpu", "m5.2xlarge", max_size=20)
    gang(cluster, "huge", 16, created="2025-12-01T00:00:00Z")  # older, and 16 nodes can never fit 2
    gang(cluster, "small", 1, created="2026-01-01T00:00:00Z")
    ctl = controllers(defaultNamespaceCap={"maxNodes": 2}, ageingSeconds=10**9)
    wait_for(lambda: world.desired("cpu") == 1, what="the one-node gang bought")
    time.sleep(2.5)
    assert world.desired("cpu") == 1
    assert not ctl.logged("gang state", gang=f"default/small/{API}", to="deferred")  # never deferred, not once
    huge = last_state(ctl, f"default/huge/{API}")
    assert huge["to"] == "infeasible" and "maxNodes 2" in huge["reason"] and "would exceed" not in huge["reason"]
    ctl.assert_no_tracebacks()


# ---------------------------------------------------------------- items 7, 8


class Replicas:
    """One or two replicas of the controller, read as one log (only the leader passes; a follower logs no gang)."""

    def __init__(self, controllers, n: int, **config) -> None:
        self.procs = [controllers("a", **config)]
        if n > 1:
            wait_for(lambda: self.procs[0].logged("leading"), what="a to lead")
            self.procs.append(controllers("b", **config))

    def logged(self, msg: str, **fields) -> list[dict]:
        return [line for p in self.procs for line in p.logged(msg, **fields)]

    def assert_no_tracebacks(self) -> None:
        for p in self.procs:
            p.assert_no_tracebacks()


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_half_bought_gang_gives_back_what_it_has_at_its_deadline(cluster, world, controllers, proxy, replicas):
    world.asg("launcher", "m5.2xlarge", max_size=10)
    world.asg("workers", "m6i.4xlarge", max_size=10)
    proxy.add("DescribeScalingActivities", lambda req, fwd: failed_activity(
        "workers", "We currently do not have sufficient m6i.4xlarge capacity. InsufficientInstanceCapacity")
        if b"workers" in req.body else None)
    proxy.add("SetDesiredCapacity", lambda req, fwd: no_capacity(world, "workers", fwd())
              if b"workers" in req.body else None)
    ctl = Replicas(controllers, replicas, provisioningDeadlineSeconds=10)
    cluster.apply(podgroup("mpi", min_count=3))
    cluster.apply(pod("mpi-launcher", cpu="6", mem="4Gi", group="mpi",
                      selector={"node.kubernetes.io/instance-type": "m5.2xlarge"}))
    for i in range(2):
        cluster.apply(pod(f"mpi-w{i}", cpu="6", mem="4Gi", group="mpi",
                          selector={"node.kubernetes.io/instance-type": "m6i.4xlarge"}))
    wait_for(lambda: world.desired("launcher") == 1, what="the launcher bought")
    wait_for(lambda: ctl.logged("node group backed off", node_group="workers"), what="the workers' launch failure")
    key = f"default/mpi/{API}"
    wait_for(lambda: state_records(cluster)[key]["requested"] == {"launcher": 1},
             what="the workers given back, the record kept while it holds the launcher")
    wait_for(lambda: world.desired("launcher") == 0, timeout=30, what="the launcher given back at the deadline")
    wait_for(lambda: state_records(cluster)[key]["state"] == "timed-out", what="the timed-out record saved")
    wait_for(lambda: [e for e in events(cluster, "ScaleUpTimedOut") if e["involvedObject"]["name"] == "mpi"],
             what="the ScaleUpTimedOut event")
    changes = [(l["from"], l["to"]) for l in ctl.logged("gang state", gang=key)]
    assert len(changes) == len(set(changes)), changes  # each state change logged once
    # the nodes just given back are not "on their way"
    assert not [l for l in ctl.logged("gang state", gang=key) if "on its way" in l["reason"]]
    ctl.assert_no_tracebacks()


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_refused_scale_call_is_logged_with_its_kind_once(cluster, world, controllers, proxy, replicas):
    from cloud.proxy import query_error

    world.asg("cheap", "m5.2xlarge", max_size=10)
    world.asg("backup", "m6i.4xlarge", max_size=10)
    proxy.add("SetDesiredCapacity", lambda req, fwd: query_error(
        "InsufficientInstanceCapacity", "no m5.2xlarge capacity", 400) if b"cheap" in req.body else None)
    ctl = Replicas(controllers, replicas)
    gang(cluster, "train", 3)
    wait_for(lambda: world.desired("backup") >= 2, what="the gang bought on the backup group")
    backed = ctl.logged("node group backed off", node_group="cheap")
    assert backed and all(not l["error"].startswith("capacity: capacity:") for l in backed), backed
    ctl.assert_no_tracebacks()
