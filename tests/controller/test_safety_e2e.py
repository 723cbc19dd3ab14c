"""Safe by default, end to end: `gangscale run` / `gangscale webhook` as processes, the API emulator, moto.

A config that says nothing about limits gets the shipped caps and the cluster ceiling; an empty node is tainted
and read again before it goes, and a node opted out never goes; a deposed leader writes no Event; /metrics can
listen apart from the probes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone

import pytest

from builders import node, pod
from cloud.conftest import CLUSTER, REGION
from cloud.proxy import failed_activity, no_capacity

from .conftest import ROOT, STATE_NS, events, state_records, wait_for
from .test_controller_e2e import gang

API = "scheduling.k8s.io/v1alpha2"
DISRUPTION = "gangscale.io/disruption"


def _set_lease(emu, holder: str, seconds: int) -> None:
    lease = emu.get("coordination.k8s.io/v1", "Lease", STATE_NS, "gangscale-leader")
    lease["spec"].update(holderIdentity=holder, leaseDurationSeconds=seconds, renewTime=datetime.now(
        timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
    emu.apply(lease)


def _registered(emu, world, group: str) -> list[str]:
    """A Node per instance of `group` (n0, n1, ...), matched to it by providerID; the instance ids in order."""
    ids = [i["InstanceId"] for i in world.group(group)["Instances"]]
    for i, iid in enumerate(ids):
        n = node(f"n{i}", cpu="8", mem="32Gi")
        n["spec"]["providerID"] = f"aws:///us-east-1a/{iid}"
        emu.apply(n)
    return ids


def _live(world, group: str) -> set[str]:
    return {i["InstanceId"] for i in world.group(group)["Instances"]
            if i["LifecycleState"] not in ("Terminating", "Terminated")}


def _taints(emu, name: str) -> list[str]:
    return [t["key"] for t in (emu.get("v1", "Node", "", name)["spec"].get("taints") or [])]


@pytest.mark.slow
def test_with_no_limits_configured_the_cluster_ceiling_holds_a_burst_across_namespaces(cluster, world, controllers):
    """The config names only the provider, cluster, region and endpoint (and the test's timings): eight namespaces
    each ask for 30 p5 (240 H100 nodes, $13,209/h), each within the shipped per-namespace cap of 64 nodes and
    $2,000/h. The default ceiling of 512 GPUs lets two gangs through (60 nodes, 480 GPUs); the rest wait, saying
    why. Without the defaults the same config buys all 240."""
    world.asg("p5", "p5.48xlarge", max_size=300)
    ctl = controllers()
    for i in range(8):
        ns = f"team-{i}"
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        gang(cluster, "train", 30, ns=ns, cpu="8")
        for j in range(30):  # 8 GPUs a member: one p5 each
            p = cluster.get("v1", "Pod", ns, f"train-{j}")
            p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "8"
            cluster.apply(p)
    wait_for(lambda: world.desired("p5") == 60, timeout=60, what="two gangs bought")
    wait_for(lambda: any("clusterCeiling" in e["message"] for e in events(cluster, "NotTriggerScaleUp")),
             timeout=30, what="the held gangs told why")
    time.sleep(3)
    assert world.desired("p5") == 60  # 480 GPUs: within maxGPUs 512, and nothing more on later passes
    held = [e["message"] for e in events(cluster, "NotTriggerScaleUp", "PodGroup")]
    assert held and all("clusterCeiling: maxNodes 256, maxGPUs 512, maxDollarsPerHour 5000" in m for m in held)
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_a_pod_bound_while_an_empty_node_is_being_removed_keeps_the_node(cluster, world, controllers, proxy):
    """The scheduler binds a pod to the empty node after the controller's last look at it: here at the first write
    the controller makes for that node (its taint, or the termination when there is none). The node is read again
    after the taint, so the pod is seen: the node stays, untainted. Once the pod is gone the node goes."""
    world.asg("cpu", "m5.2xlarge", max_size=10, desired=2)
    ids = _registered(cluster, world, "cpu")
    cluster.apply(pod("busy", cpu="1", node="n0"))
    bound = threading.Event()

    def bind_late() -> None:
        if not bound.is_set():
            bound.set()
            cluster.apply(pod("late", cpu="1", node="n1"))

    cluster.after_write = lambda method, path: bind_late() if path == "/api/v1/nodes/n1" else None
    proxy.add("TerminateInstanceInAutoScalingGroup", lambda req, forward: (bind_late(), forward())[1])
    ctl = controllers(emptyNodeGraceSeconds=1)
    wait_for(lambda: ctl.logged("scale-down cancelled: the node is not empty", node="n1"), timeout=30,
             what="the removal cancelled")
    wait_for(lambda: DISRUPTION not in _taints(cluster, "n1"), what="the taint removed")
    time.sleep(2)
    assert _live(world, "cpu") == set(ids) and world.desired("cpu") == 2  # nothing terminated
    assert cluster.get("v1", "Pod", "default", "late") is not None
    cluster.delete("v1", "Pod", "default", "late")
    wait_for(lambda: _live(world, "cpu") == {ids[0]}, timeout=30, what="the node removed once empty")
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_nodes_opted_out_of_scale_down_stay_and_the_rest_go(cluster, world, controllers):
    """Cluster Autoscaler's scale-down-disabled annotation and gangscale's do-not-disrupt on the node keep it, and
    so does do-not-disrupt on a pod there (a DaemonSet's, which alone never keeps a node); the plain empty node
    goes."""
    world.asg("cpu", "m5.2xlarge", max_size=10, desired=4)
    ids = _registered(cluster, world, "cpu")
    for name, key in (("n0", "cluster-autoscaler.kubernetes.io/scale-down-disabled"),
                      ("n1", "gangscale.io/do-not-disrupt")):
        n = cluster.get("v1", "Node", "", name)
        n["metadata"]["annotations"] = {key: "true"}
        cluster.apply(n)
    ds = pod("agent", cpu="100m", node="n2")
    ds["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "x"}]
    ds["metadata"]["annotations"] = {"gangscale.io/do-not-disrupt": "true"}
    cluster.apply(ds)
    ctl = controllers(emptyNodeGraceSeconds=1)
    wait_for(lambda: world.desired("cpu") == 3, timeout=30, what="the plain empty node removed")
    time.sleep(3)
    assert _live(world, "cpu") == set(ids[:3]) and world.desired("cpu") == 3
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_a_leader_deposed_while_its_scale_up_is_in_flight_writes_no_event(cluster, world, controllers, proxy):
    """The lease passes to another replica while SetDesiredCapacity is on the wire; when the call returns, the old
    leader's pass reaches its TriggeredScaleUp events: none is written (the fence), and the pass ends."""
    world.asg("cpu", "m5.2xlarge", max_size=10)
    deposed = threading.Event()
    seen_writes: list[int] = []

    def depose_then_answer(req, forward):
        if not deposed.is_set():
            _set_lease(cluster, "intruder", 3600)
            seen_writes.append(len(cluster.requests))
            deposed.set()
            time.sleep(3)  # a's renewals see the intruder: its lease is gone before the answer comes back
        return forward()

    proxy.add("SetDesiredCapacity", depose_then_answer)
    ctl = controllers("a")
    wait_for(lambda: ctl.logged("leading"), what="leadership")
    gang(cluster, "train", 3)
    wait_for(lambda: ctl.logged("pass abandoned: leadership lost"), timeout=30, what="the pass abandoned")
    assert deposed.is_set() and world.desired("cpu") == 3
    after = [r for r in cluster.requests[seen_writes[0]:] if r.method in ("POST", "PATCH") and "/events" in r.path]
    assert after == []
    assert not events(cluster, "TriggeredScaleUp")
    assert ctl.logged("event not written: leadership lost", reason="TriggeredScaleUp")
    ctl.assert_no_tracebacks()


def test_metrics_can_listen_on_loopback_while_the_probes_answer_on_their_own_address(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        health_port = s.getsockname()[1]
    ctl = controllers(metricsAddress="127.0.0.1:0", healthAddress=f"127.0.0.1:{health_port}")
    started = wait_for(lambda: next((line for line in ctl.lines() if line.get("msg") == "starting"), None))
    assert started["health_port"] == health_port != started["metrics_port"]
    metrics = f"http://127.0.0.1:{started['metrics_port']}"
    health = f"http://127.0.0.1:{health_port}"
    assert b"gangscale_leader" in urllib.request.urlopen(f"{metrics}/metrics", timeout=5).read()
    assert urllib.request.urlopen(f"{health}/healthz", timeout=5).status == 200
    for url in (f"{health}/metrics", f"{metrics}/healthz"):  # each address serves its own paths only
        try:
            urllib.request.urlopen(url, timeout=5)
            raise AssertionError(f"{url} answered")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    ctl.assert_no_tracebacks()


def test_the_webhook_without_a_catalog_refuses_a_pod_no_discovered_group_can_ever_hold(world, moto_url, tmp_path):
    """An aws-asg install has no catalog: the webhook discovers the groups as the controller does and judges the
    pod at their maxSize. A pod asking for 100 GPUs is refused naming the groups; one asking for 8 is admitted."""
    from webhook.conftest import Hook

    from gangscale.webhook.certs import make_pair, write_pair

    world.asg("p5", "p5.48xlarge", max_size=4)
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ca, cert, key = make_pair(["localhost"], ip="127.0.0.1")
    (tmp_path / "ca.crt").write_bytes(ca)
    write_pair(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), cert, key)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"provider": "aws-asg", "clusterName": CLUSTER, "region": REGION,
                                  "awsEndpointUrl": moto_url}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}
    proc = subprocess.Popen([sys.executable, "-m", "gangscale", "webhook", "--config", str(config), "--cert-dir",
                             str(tmp_path), "--listen", f"127.0.0.1:{port}", "--no-discovery", "--no-group-lookup"],
                            env=env, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        hook = Hook(type("S", (), {"port": port})(), str(tmp_path / "ca.crt"))  # type: ignore[arg-type]
        tolerate = [{"operator": "Exists"}]
        def refused() -> dict | None:
            r = _review(hook, proc, pod("huge", group="pg", cpu="8", gpu=100, tolerations=tolerate))
            return r if r and not r["allowed"] else None

        huge = wait_for(refused, timeout=60, what="the webhook refusing once the groups are discovered")
        message = huge["status"]["message"]
        assert "no node group can ever hold pod default/huge" in message
        assert "p5: needs 100 nvidia.com/gpu, a node has 8" in message
        fits = _review(hook, proc, pod("fits", group="pg", cpu="8", gpu=8, tolerations=tolerate))
        assert fits and fits["allowed"], fits
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


def _review(hook, proc: subprocess.Popen, obj: dict) -> dict | None:
    """The hook's response, or None while it is not listening yet (the process must still be up)."""
    try:
        return hook.review(obj)
    except OSError:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        return None


def _failing(world, proxy, group: str) -> None:
    """Every launch in `group` fails for want of capacity (a failed scaling activity, no instance)."""
    proxy.add("DescribeScalingActivities", lambda req, fwd: failed_activity(
        group, "We currently do not have sufficient m5.2xlarge capacity. InsufficientInstanceCapacity")
        if group.encode() in req.body else None)
    proxy.add("SetDesiredCapacity", lambda req, fwd: no_capacity(world, group, fwd())
              if group.encode() in req.body else None)


def test_a_backed_off_group_is_named_as_backed_off_not_as_at_max_size_zero(cluster, world, controllers, proxy):
    """The only group fails its launch and is backed off: the gang that cannot go anywhere else is told the group
    is backed off and until when, not that it is "already at maxSize 0" (its maxSize is 10)."""
    world.asg("cheap", "m5.2xlarge", max_size=10)
    _failing(world, proxy, "cheap")
    ctl = controllers()
    gang(cluster, "train", 3)
    wait_for(lambda: ctl.logged("node group backed off", node_group="cheap"), timeout=30, what="the backoff")
    told = wait_for(lambda: [e["message"] for e in events(cluster, kind="PodGroup") if "backed off until" in
                             e["message"]], timeout=30, what="the gang told the group is backed off")
    assert "cheap: backed off until " in told[0] and "launchFailureBackoffSeconds" in told[0]
    assert not [e for e in events(cluster) if "already at maxSize" in e["message"]]
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_a_deadline_kept_across_a_rebooking_is_reported_as_the_deadline(cluster, world, controllers, proxy):
    """A gang with an 8 s deadline is booked on `cheap`, whose launch fails, and booked again on `backup` a few
    seconds later, keeping its deadline; no node ever registers. The timed-out reason names the 8 s deadline, not
    the seconds left after the re-booking."""
    world.asg("cheap", "m5.2xlarge", max_size=10)
    world.asg("backup", "m6i.4xlarge", max_size=10)
    _failing(world, proxy, "cheap")
    ctl = controllers()
    gang(cluster, "train", 3, annotations={"gangscale.io/provisioning-deadline-seconds": "8"})
    wait_for(lambda: world.desired("backup") >= 1, timeout=30, what="the re-booking on backup")
    def timed_out() -> dict | None:
        r = state_records(cluster).get(f"default/train/{API}")
        return r if r and r["state"] == "timed-out" else None

    rec = wait_for(timed_out, timeout=40, what="the deadline")
    assert rec["reason"].startswith("not all nodes arrived within 8s"), rec["reason"]
    timed_out = [e["message"] for e in events(cluster, "ScaleUpTimedOut")]
    assert timed_out and all("within 8s" in m for m in timed_out)
    ctl.assert_no_tracebacks()


def test_a_disruption_taint_left_on_a_busy_node_is_removed(cluster, world, controllers):
    """A controller that stopped between the taint and the termination left the taint on a node that is busy now:
    the next leader's scale-down takes it off (the node stays)."""
    world.asg("cpu", "m5.2xlarge", max_size=10, desired=1)
    ids = _registered(cluster, world, "cpu")
    n = cluster.get("v1", "Node", "", "n0")
    n["spec"]["taints"] = [{"key": "other", "value": "x", "effect": "NoSchedule"},
                           {"key": DISRUPTION, "value": "scale-down", "effect": "NoSchedule"}]
    cluster.apply(n)
    cluster.apply(pod("busy", cpu="1", node="n0"))
    ctl = controllers(emptyNodeGraceSeconds=1)
    wait_for(lambda: _taints(cluster, "n0") == ["other"], timeout=30, what="the stale taint removed, the other kept")
    assert _live(world, "cpu") == set(ids)
    ctl.assert_no_tracebacks()
