"""aws-fleet under faults, with the real `gangscale run` process(es), the API emulator and moto behind the proxy.

Two replicas must never both buy for a gang while its fleet's instances are
still pending; a crash between CreateFleet and AttachInstances must never
leave instances outside every group; an instance no record claims is an
orphan and goes after the grace period.
"""

from __future__ import annotations

import signal
import time
import urllib.request

import pytest

from builders import pod, podgroup

from cloud.proxy import PendingInstances
from gangscale.controller.crashpoints import ENV as CRASH_ENV, EXIT_CODE

from .conftest import STATE_NS, events, state_records, wait_for

pytestmark = pytest.mark.slow

FLEET = {"provider": "aws-fleet"}
KEY = "default/train/scheduling.k8s.io/v1alpha2"


def gang(emu, name: str, members: int) -> None:
    emu.apply(podgroup(name, "default", min_count=members))
    for i in range(members):
        emu.apply(pod(f"{name}-{i}", "default", cpu="6", mem="4Gi", group=name))


def delete_gang(emu, name: str, members: int) -> None:
    for i in range(members):
        emu.delete("v1", "Pod", "default", f"{name}-{i}")
    emu.delete("scheduling.k8s.io/v1alpha2", "PodGroup", "default", name)


def loose(world, group: str) -> set[str]:
    """Instances alive (pending/running) in EC2 but not members of the group."""
    members = {i["InstanceId"] for i in world.group(group)["Instances"]}
    return {i for i, s in world.instance_states().items() if s in ("pending", "running")} - members


def alive(world) -> set[str]:
    return {i for i, s in world.instance_states().items() if s in ("pending", "running")}


def test_two_replicas_on_aws_fleet_buy_once_while_the_instances_stay_pending(cluster, world, controllers, proxy):
    world.asg("gpu", "m5.2xlarge", max_size=10)
    pending = PendingInstances(25.0)
    proxy.add("DescribeInstances", pending, service="ec2")
    shipped = {**FLEET, "leaseDurationSeconds": 15.0, "leaseRenewSeconds": 5.0}  # config/deploy defaults
    a = controllers("a", **shipped)
    wait_for(lambda: a.logged("leading"), what="a to lead")
    b = controllers("b", **shipped)
    time.sleep(2)  # b is up and a follower
    gang(cluster, "train", 3)
    wait_for(lambda: proxy.count("CreateFleet") >= 1, timeout=30, what="the fleet")
    wait_for(lambda: world.desired("gpu") == 3, timeout=60, what="the fleet's instances attached")
    time.sleep(4)
    assert pending.rewritten > 0  # the instances really were pending for a while
    assert proxy.count("CreateFleet") == 1
    assert world.desired("gpu") == 3
    assert loose(world, "gpu") == set() and len(alive(world)) == 3
    assert not b.logged("leading")  # a renewed its lease while it waited
    a.assert_no_tracebacks()
    b.assert_no_tracebacks()


def test_a_leader_deposed_while_its_fleet_is_pending_never_attaches_and_the_next_term_adopts_the_instances(
        cluster, world, controllers, proxy):
    from .test_faults_asg import set_lease

    world.asg("gpu", "m5.2xlarge", max_size=10)
    proxy.add("DescribeInstances", PendingInstances(4.0), service="ec2")

    def depose_after(req, forward):
        resp = forward()  # the fleet is launched...
        set_lease(cluster, "intruder", time.time(), 3600)  # ...and another replica takes the lease meanwhile
        return resp

    proxy.add("CreateFleet", depose_after, times=1)
    a = controllers("a", **FLEET)
    gang(cluster, "train", 3)
    wait_for(lambda: a.logged("pass abandoned: leadership lost"), timeout=30, what="the pass abandoned")
    time.sleep(2)
    launched = loose(world, "gpu")
    assert proxy.count("AttachInstances") == 0 and world.desired("gpu") == 0 and len(launched) == 3
    set_lease(cluster, "intruder", time.time() - 7200, 15)  # the intruder is gone: a leads again
    wait_for(lambda: world.desired("gpu") == 3 and not loose(world, "gpu"), timeout=30, what="the instances adopted")
    time.sleep(2)
    assert proxy.count("CreateFleet") == 1 and alive(world) == launched  # no second fleet
    assert a.logged("unconfirmed scale-up settled", adopted=3)
    a.assert_no_tracebacks()


def test_a_kill_right_after_CreateFleet_adopts_its_instances_and_buys_nothing_twice(cluster, world, controllers,
                                                                                    proxy):
    world.asg("gpu", "m5.2xlarge", max_size=10)
    first = controllers("a", **FLEET)

    def kill_after(req, forward):
        resp = forward()  # the fleet is launched in EC2...
        first.kill(signal.SIGKILL)  # ...and the controller dies before it reads the answer
        return resp

    proxy.add("CreateFleet", kill_after, times=1)
    gang(cluster, "train", 3)
    wait_for(lambda: first.proc.poll() is not None, timeout=30, what="the kill after CreateFleet")
    launched = loose(world, "gpu")
    assert len(launched) == 3 and world.desired("gpu") == 0  # three instances outside any group
    call = state_records(cluster)[KEY].get("calls", {}).get("gpu")  # the write-ahead client token
    second = controllers("b", **FLEET)
    wait_for(lambda: world.desired("gpu") == 3, timeout=30, what="the orphans adopted")
    time.sleep(3)
    assert proxy.count("CreateFleet") == 1  # no second fleet
    assert call is not None and call[0].startswith("gangscale-") and call[1] == 3
    assert {i["InstanceId"] for i in world.group("gpu")["Instances"]} == launched
    assert loose(world, "gpu") == set() and alive(world) == launched
    rec = state_records(cluster)[KEY]
    assert rec["state"] == "provisioning" and rec["requested"] == {"gpu": 3} and not rec.get("calls")
    assert second.logged("unconfirmed scale-up settled", adopted=3)
    second.assert_no_tracebacks()


def test_instances_of_a_crashed_call_are_terminated_when_their_gang_was_deleted_meanwhile(
        cluster, world, controllers, proxy, monkeypatch):
    world.asg("gpu", "m5.2xlarge", max_size=10)
    monkeypatch.setenv(CRASH_ENV, "after-CreateFleet")
    first = controllers("a", **FLEET)
    monkeypatch.delenv(CRASH_ENV)
    gang(cluster, "train", 3)
    wait_for(lambda: first.proc.poll() is not None, timeout=30, what="the crash point")
    assert first.proc.returncode == EXIT_CODE
    launched = loose(world, "gpu")
    assert len(launched) == 3
    delete_gang(cluster, "train", 3)  # while no controller runs
    second = controllers("b", **FLEET)
    wait_for(lambda: alive(world) == set(), timeout=30, what="the instances terminated")
    time.sleep(2)
    assert world.desired("gpu") == 0 and proxy.count("CreateFleet") == 1 and proxy.count("AttachInstances") == 0
    assert second.logged("unconfirmed scale-up settled", adopted=0)
    second.assert_no_tracebacks()


def test_an_instance_no_record_claims_is_terminated_after_the_grace_period_with_an_event_and_a_metric(
        cluster, world, controllers, proxy):
    world.asg("gpu", "m5.2xlarge", max_size=10)
    ec2 = world.client("ec2")
    tags = [{"Key": "gangscale.io/cluster", "Value": "gang-test"}, {"Key": "gangscale.io/node-group", "Value": "gpu"}]
    orphan = ec2.run_instances(ImageId=world.ami, InstanceType="m5.2xlarge", MinCount=1, MaxCount=1,
                               TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])["Instances"][0]
    stranger = ec2.run_instances(ImageId=world.ami, InstanceType="m5.2xlarge", MinCount=1, MaxCount=1)["Instances"][0]
    ctl = controllers("a", **FLEET, orphanGraceSeconds=2.0)
    wait_for(lambda: world.instance_states()[orphan["InstanceId"]] in ("shutting-down", "terminated"), timeout=30,
             what="the orphan terminated")
    assert world.instance_states()[stranger["InstanceId"]] == "running"  # not ours: never touched
    [line] = ctl.logged("terminated orphan instances")
    assert line["instances"] == [orphan["InstanceId"]]
    port = wait_for(lambda: ctl.logged("starting"), what="start")[0]["metrics_port"]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'gangscale_orphan_instances_terminated_total{node_group="gpu"} 1.0' in text
    [event] = wait_for(lambda: events(cluster, "OrphanInstancesTerminated"), what="the orphan's Event")
    assert event["type"] == "Warning" and orphan["InstanceId"] in event["message"] and "gpu" in event["message"]
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "ConfigMap", "namespace": STATE_NS,
                                       "name": "gangscale-state"}
    assert stranger["InstanceId"] not in event["message"]
    ctl.assert_no_tracebacks()


# ------------------------------------------------------------ pure parts (no emulator, no cloud)

def _record(**kw):
    from gangscale.controller.lifecycle import GangState, Record
    from gangscale.model import GangKey

    base = dict(key=GangKey("default", "train", "scheduling.k8s.io/v1alpha2"), generation="uid-1",
                state=GangState.NEW, reason="", since=0.0, requested={"gpu": 3}, attempt=1)
    base.update(kw)
    return Record(**base)


def test_a_client_token_is_the_same_for_the_same_record_and_attempt_and_differs_for_the_next_attempt():
    from gangscale.controller.lifecycle import client_token

    rec = _record()
    assert client_token([rec], "gpu", {"gpu": 3}) == client_token([rec], "gpu", {"gpu": 3})
    assert client_token([rec], "gpu", {"gpu": 3}) != client_token([_record(attempt=2)], "gpu", {"gpu": 3})
    assert len(client_token([rec], "gpu", {"gpu": 3})) <= 64  # EC2's ClientToken limit


def test_a_restart_adopting_a_calls_instances_makes_the_gang_provisioning_and_one_finding_none_unbooks_it():
    from gangscale.controller.lifecycle import CallRecovered, GangState, Recovered, transition

    rec = _record(calls={"gpu": ("tok", 3)})
    recs, _, _ = transition({rec.key: rec}, None, Recovered((CallRecovered(rec.key, "gpu", "tok", 3),)), 10.0)
    assert recs[rec.key].state is GangState.PROVISIONING and recs[rec.key].requested == {"gpu": 3}
    assert not recs[rec.key].calls
    recs, _, _ = transition({rec.key: rec}, None, Recovered((CallRecovered(rec.key, "gpu", "tok", 0),)), 10.0)
    assert recs[rec.key].state is GangState.NEW and recs[rec.key].requested == {} and not recs[rec.key].calls
    assert round_trips(recs[rec.key]) and round_trips(rec)


def round_trips(rec) -> bool:
    from gangscale.controller.lifecycle import Record

    return Record.from_json(rec.to_json()) == rec


def test_the_janitor_spares_instances_a_record_claims_and_young_ones():
    from cloud_adapters.base import LooseInstance
    from gangscale.controller.janitor import orphans_due

    loose = [LooseInstance("i-claimed", "gpu", "tok", 0.0), LooseInstance("i-young", "gpu", "", 95.0),
             LooseInstance("i-old", "gpu", "other", 10.0)]
    assert [i.id for i in orphans_due(loose, {"tok"}, 100.0, 60.0)] == ["i-old"]


def test_a_kill_after_AttachInstances_keeps_the_nodes_on_the_gangs_record_so_they_go_back_when_it_is_deleted(
        cluster, world, controllers, proxy, monkeypatch):
    world.asg("gpu", "m5.2xlarge", max_size=10)
    monkeypatch.setenv(CRASH_ENV, "after-AttachInstances")
    first = controllers("a", **FLEET)
    monkeypatch.delenv(CRASH_ENV)
    gang(cluster, "train", 3)
    wait_for(lambda: first.proc.poll() is not None, timeout=30, what="the crash point")
    assert first.proc.returncode == EXIT_CODE and world.desired("gpu") == 3 and loose(world, "gpu") == set()
    second = controllers("b", **FLEET, cancelGraceSeconds=1)
    wait_for(lambda: state_records(cluster).get(KEY, {}).get("state") == "provisioning"
             and not state_records(cluster)[KEY].get("calls"), timeout=30, what="the call settled")
    rec = state_records(cluster)[KEY]
    assert rec["requested"] == {"gpu": 3} and rec["state"] == "provisioning", rec  # the group shows it landed
    delete_gang(cluster, "train", 3)
    wait_for(lambda: world.desired("gpu") == 0, timeout=30, what="the deleted gang's nodes given back")
    assert proxy.count("CreateFleet") == 1
    second.assert_no_tracebacks()
