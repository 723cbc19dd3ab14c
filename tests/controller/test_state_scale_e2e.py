"""End to end: `gangscale run` with many concurrent large gangs, against the API emulator, which refuses a
ConfigMap over 1 MiB as the API server does (tests/kube/emulator.py `MAX_DATA_BYTES`).

With every record in one ConfigMap, 26 gangs of 1,024 pods passed the limit: the write-ahead save before each
cloud call was refused and nothing was bought for any gang. The simulated cloud keeps its state in a file, so the
test reads the groups' targets; 100 such gangs are covered by the store test at the same API
(tests/controller/test_records_store.py), this one runs the real process at a size that broke the old layout.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from builders import pod, podgroup
from kube.emulator import Emulator

from gangscale.controller.records import record_name

from .conftest import STATE_NS, ControllerProcess, state_records, wait_for

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"
GANGS = 30  # over the 26 at which one ConfigMap of records passed 1 MiB
PODS = 1024
CATALOG = {"nodeGroups": [{
    "name": "cpu", "instanceType": "m5.16xlarge", "pricePerHour": 3.072, "minSize": 0, "maxSize": 500,
    "currentSize": 0, "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "1100"},
    "labels": {"topology.kubernetes.io/zone": "us-east-1a"}}]}


def big_gang(emu: Emulator, name: str) -> None:
    emu.apply(podgroup(name, "default", min_count=PODS))
    for i in range(PODS):
        emu.apply(pod(f"{name}-{i}", "default", cpu="50m", mem="64Mi", group=name))


def target(state_file: Path) -> int:
    try:
        return int(json.loads(state_file.read_text())["groups"]["cpu"]["target"])
    except (OSError, ValueError, KeyError):
        return 0


def start(tmp: Path, cluster: Emulator, identity: str, state_file: Path) -> ControllerProcess:
    catalog = tmp / "catalog.yaml"
    catalog.write_text(yaml.safe_dump(CATALOG))
    config = {"mode": "enforce", "provider": "simulated", "nodegroups": str(catalog), "metricsAddress": "127.0.0.1:0",
              "batchWindowSeconds": 0.5, "maxBatchDelaySeconds": 3.0, "resyncSeconds": 2.0,
              "solverTimeLimitSeconds": 5.0, "leaseDurationSeconds": 10.0, "leaseRenewSeconds": 1.0,
              "emptyNodeGraceSeconds": 3600, "provisioningDeadlineSeconds": 3600,
              "defaultNamespaceCap": {"maxNodes": 1000, "maxDollarsPerHour": 10000}}
    return ControllerProcess(tmp, cluster.kubeconfig(str(tmp / "kc")), config, identity,
                             args=("--simulated-state", str(state_file)))


def recorded(cluster: Emulator) -> dict:
    """The saved records, in either layout (one ConfigMap per gang, or the single ConfigMap's records.json)."""
    recs = state_records(cluster)
    index = cluster.get("v1", "ConfigMap", STATE_NS, "gangscale-state")
    if index and "records.json" in index.get("data", {}):
        recs.update(json.loads(index["data"]["records.json"]))
    return recs


def state_writes(cluster: Emulator) -> int:
    return sum(1 for r in list(cluster.requests)
               if r.method in ("POST", "PUT", "DELETE") and f"/namespaces/{STATE_NS}/configmaps" in r.path)


def booked(cluster: Emulator, gangs: int) -> dict | None:
    recs = recorded(cluster)
    # a gang bought nodes of its own, or rides a unit of nodes it shares with other gangs (its share may be zero)
    done = {g: r for g, r in recs.items()
            if r["state"] == "provisioning" and (r["requested"].get("cpu") or r.get("shared"))}
    return done if len(done) >= gangs else None


def test_30_concurrent_1024_pod_gangs_are_all_bought_recorded_and_survive_a_restart(cluster, tmp_path):
    state_file = tmp_path / "cloud.json"
    made = time.monotonic()
    for g in range(GANGS):
        big_gang(cluster, f"train-{g:02d}")
    made = time.monotonic() - made
    first = start(tmp_path, cluster, "first", state_file)
    try:
        started = time.monotonic()
        recs = wait_for(lambda: booked(cluster, GANGS), timeout=240, what=f"all {GANGS} gangs bought and recorded")
        took = time.monotonic() - started
        need = sum(r["requested"].get("cpu", 0) for r in recs.values())
        assert need > 0  # the gangs' shares add up to the nodes bought (gangs may share a node)
        wait_for(lambda: target(state_file) == need, timeout=30, what="the group grown by exactly the records")
        written, passes = state_writes(cluster), len(first.logged("plan"))
        wait_for(lambda: len(first.logged("plan")) >= passes + 3, timeout=60, what="three more passes")
        per_pass = (state_writes(cluster) - written) / (len(first.logged("plan")) - passes)
        assert per_pass < GANGS / 2  # only the records whose reason changed are written (one ConfigMap was: always)
        big_gang(cluster, "late")  # scaling goes on once the store holds them all
        recs = wait_for(lambda: booked(cluster, GANGS + 1), timeout=120, what="the late gang bought too")
        need = sum(r["requested"].get("cpu", 0) for r in recs.values())
        wait_for(lambda: target(state_file) == need, timeout=30, what="the group grown by the late gang's nodes")
        assert not first.logged("reconcile failed")
    finally:
        first.kill()
    with cluster._cond:  # one ConfigMap per record, each far below 1 MiB
        sizes = [len(json.dumps(o)) for (ns, _), o in cluster._store["/configmaps"].items() if ns == STATE_NS]
    # the records of the gangs and the late one, the backoffs' `gangscale-state`, the published `gangscale-status`
    assert len(sizes) == GANGS + 3 and max(sizes) < 64 * 1024
    second = start(tmp_path, cluster, "second", state_file)  # loads every record: buys nothing again
    try:
        wait_for(lambda: second.logged("leading"), timeout=60, what="the second controller to lead")
        wait_for(lambda: len(second.logged("plan")) >= 3, timeout=120, what="passes after the restart")
        assert target(state_file) == need
        assert len(booked(cluster, GANGS + 1) or {}) == GANGS + 1 and not second.logged("reconcile failed")
        second.assert_no_tracebacks()
    finally:
        second.stop()
    print(f"{GANGS} x {PODS} pods: created in {made:.1f}s, all bought {took:.1f}s after the controller started")


def test_an_upgrade_from_the_single_configmap_keeps_the_in_flight_booking_and_buys_nothing_twice(
        cluster, world, controllers, proxy):
    """An older controller bought 3 nodes for a gang (desired 3, none registered yet) and recorded the booking in
    the single ConfigMap's records.json; the upgraded controller moves it to the gang's own ConfigMap, keeps its
    request, deadline and generation, and buys nothing again."""
    world.asg("cpu", "m5.2xlarge", desired=3, max_size=10)
    cluster.apply(podgroup("train", "default", min_count=3))
    for i in range(3):
        cluster.apply(pod(f"train-{i}", "default", cpu="6", mem="4Gi", group="train"))
    uid = cluster.get("scheduling.k8s.io/v1alpha2", "PodGroup", "default", "train")["metadata"]["uid"]
    pods = [cluster.get("v1", "Pod", "default", f"train-{i}")["metadata"]["uid"] for i in range(3)]
    now = time.time()
    old = {"gang": f"default/train/{API}", "namespace": "default", "name": "train", "api": API, "generation": uid,
           "state": "provisioning", "reason": "capacity on its way", "since": now - 5, "first_seen": now - 8,
           "requested": {"cpu": 3}, "requested_at": now - 5, "deadline": now + 900, "pods": pods}
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gangscale-state",
                                                                         "namespace": STATE_NS},
                   "data": {"records.json": json.dumps({old["gang"]: old}), "backoff.json": "{}"}})
    ctl = controllers()
    rec = wait_for(lambda: state_records(cluster).get(old["gang"]), what="the record in its own ConfigMap")
    assert "records.json" not in cluster.get("v1", "ConfigMap", STATE_NS, "gangscale-state")["data"]
    wait_for(lambda: len(ctl.logged("plan")) >= 3, what="passes after the upgrade")
    assert world.desired("cpu") == 3 and proxy.count("SetDesiredCapacity") == 0
    rec = state_records(cluster)[old["gang"]]
    assert (rec["state"], rec["requested"], rec["generation"]) == ("provisioning", {"cpu": 3}, uid)
    assert (rec["deadline"], rec["requested_at"]) == (old["deadline"], old["requested_at"])
    assert ctl.logged("records moved to one ConfigMap per gang", records=1)
    ctl.assert_no_tracebacks()


def test_a_record_changed_by_another_writer_stops_the_pass_and_the_leader_reads_the_records_again(
        cluster, world, controllers, proxy):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers(cancelGraceSeconds=0)
    cluster.apply(podgroup("train", "default", min_count=3))
    for i in range(3):
        cluster.apply(pod(f"train-{i}", "default", cpu="6", mem="4Gi", group="train"))
    wait_for(lambda: world.desired("cpu") == 3, what="scale-up")
    gang = f"default/train/{API}"
    wait_for(lambda: (state_records(cluster).get(gang) or {}).get("state") == "provisioning", what="the record")
    name = record_name("gangscale-state", gang)
    cm = cluster.get("v1", "ConfigMap", STATE_NS, name)
    rec = json.loads(cm["data"]["record.json"])
    cm["data"]["record.json"] = json.dumps({**rec, "reason": "written by another replica"})
    cluster.apply(cm)  # a new resourceVersion: the leader's next write of this record is a conflict
    for i in range(3):  # the gang goes away: its record changes (cancelled), its nodes go back
        cluster.delete("v1", "Pod", "default", f"train-{i}")
    cluster.delete("scheduling.k8s.io/v1alpha2", "PodGroup", "default", "train")
    wait_for(lambda: ctl.logged("the records changed under this leader: reading them again"), what="the conflict")
    wait_for(lambda: world.desired("cpu") == 0, timeout=30, what="the nodes given back after the reload")
    wait_for(lambda: (state_records(cluster).get(gang) or {}).get("state") == "cancelled", what="cancelled")
    ctl.assert_no_tracebacks()


def test_a_new_leader_that_cannot_read_the_records_runs_no_pass_until_it_can(cluster, world, controllers, proxy):
    """Reading the records fails twice (API 500): no pass runs meanwhile (a pass without them could buy twice),
    the read is retried, and the gang is then bought once."""
    world.asg("cpu", "m5.2xlarge", max_size=10)
    cluster.apply(podgroup("train", "default", min_count=3))
    for i in range(3):
        cluster.apply(pod(f"train-{i}", "default", cpu="6", mem="4Gi", group="train"))
    cluster.fail_next(2, 500, f"/namespaces/{STATE_NS}/configmaps")
    ctl = controllers()
    wait_for(lambda: world.desired("cpu") == 3, what="the gang bought once the records are read")
    failed = ctl.logged("cannot read the records: no pass until they are read")
    assert len(failed) == 2
    first_plan = wait_for(lambda: ctl.logged("plan"), what="the first pass's plan")[0]
    assert first_plan["time"] > failed[-1]["time"]  # no pass before the records were read
    wait_for(lambda: len(ctl.logged("plan")) >= 3, what="more passes")
    assert world.desired("cpu") == 3 and proxy.count("SetDesiredCapacity") == 1
    ctl.assert_no_tracebacks()
