"""Gate mode end to end: `gangscale run` as a process, the API emulator, moto behind the fault proxy.

Pods carry the scheduling gate `gangscale.io/capacity` (KEP-3521); the controller removes it with a
JSON patch once the capacity the plan bought is Ready, narrowing each pod's node affinity to its node
in the same patch. Nodes "register" by being created in the emulator with the providerID of the
instance moto launched, as the other controller tests do. The emulator refuses adding a gate to an
existing pod, widening a gated pod's required node affinity, and changing an ungated one's, as the
API server does.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from builders import MOST_GPU, node, pod, podgroup
from gangscale.ingest import CAPACITY_GATE

from .conftest import events, wait_for

GATE = [{"name": CAPACITY_GATE}]
KUEUE = "kueue.x-k8s.io/admission"
PG = "scheduling.k8s.io/v1alpha2"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "scheduling.md"


def namespace(emu, name: str, gate_mode: bool) -> None:
    labels = {"gangscale.io/gate-mode": "true"} if gate_mode else {}
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})


def gated_gang(emu, name: str, members: int, *, ns: str = "team", cpu: str = "6", gpu: int = 0, mem: str = "4Gi",
               priority: int | None = None, created: str = "2030-01-01T00:00:00Z", gates=GATE) -> None:
    pg = podgroup(name, ns, min_count=members, priority=priority)
    pg["metadata"]["creationTimestamp"] = created
    emu.apply(pg)
    for i in range(members):
        p = pod(f"{name}-{i}", ns, cpu=cpu, mem=mem, gpu=gpu, group=name, priority=priority,
                **({"schedulingGates": gates} if gates else {}))
        p["metadata"]["creationTimestamp"] = created
        emu.apply(p)


def gates_of(emu, ns: str, name: str) -> list[str]:
    return [g["name"] for g in emu.get("v1", "Pod", ns, name)["spec"].get("schedulingGates") or []]


def register(emu, world, group: str, *, ready: bool) -> list[str]:
    """A Node per instance of the group (the kubelet registering), Ready or not."""
    names = []
    for i, inst in enumerate(world.group(group)["Instances"]):
        n = node(f"{group}-{i}", cpu="8", mem="32Gi", ready=ready)
        n["spec"]["providerID"] = f"aws:///us-east-1a/{inst['InstanceId']}"
        emu.apply(n)
        names.append(n["metadata"]["name"])
    return names


def bind(emu, ns: str, name: str, node_name: str) -> None:
    """What kube-scheduler and the kubelet do once the pod may be scheduled."""
    p = emu.get("v1", "Pod", ns, name)
    assert not p["spec"].get("schedulingGates"), "a gated pod cannot be bound"
    p["spec"]["nodeName"] = node_name
    p["status"] = {"phase": "Running"}
    emu.apply(p)


@pytest.mark.slow
def test_a_gated_gang_is_released_only_once_its_nodes_are_ready(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    namespace(cluster, "team", gate_mode=True)
    ctl = controllers()
    gated_gang(cluster, "train", 2)
    wait_for(lambda: world.desired("cpu") == 2, what="the gated gang planned and bought for")
    time.sleep(2.5)  # bought, not registered: the gates stay
    assert gates_of(cluster, "team", "train-0") == [CAPACITY_GATE] == gates_of(cluster, "team", "train-1")
    register(cluster, world, "cpu", ready=False)
    time.sleep(2.5)  # registered but NotReady: still gated
    assert gates_of(cluster, "team", "train-0") == [CAPACITY_GATE]
    assert ctl.logged("gate held", gang=f"team/train/{PG}")
    register(cluster, world, "cpu", ready=True)
    wait_for(lambda: not gates_of(cluster, "team", "train-0") and not gates_of(cluster, "team", "train-1"),
             what="the gates lifted")
    # the Event, the log line and the metric follow the patches: wait for them (each read once raced under load)
    lifted = wait_for(lambda: events(cluster, "GateLifted"), what="the GateLifted Event")
    assert [(e["involvedObject"]["kind"], e["involvedObject"]["name"]) for e in lifted] == [("PodGroup", "train")]
    wait_for(lambda: ctl.logged("gate lifted", gang=f"team/train/{PG}", why="capacity-ready"), what="the lift logged")
    port = next(line["metrics_port"] for line in ctl.lines() if line.get("msg") == "starting")
    metric = 'gangscale_gates_lifted_total{why="capacity-ready"} 2.0'
    wait_for(lambda: metric in urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode(),
             what="the lifts counted")
    assert world.desired("cpu") == 2  # gated pods were planned once, not bought for twice
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_a_deferred_gang_stays_gated_while_the_gang_the_plan_chose_is_released(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=1)
    namespace(cluster, "team", gate_mode=True)
    ctl = controllers()
    # the older gang would win the scheduler's queue (same priority: creation time); the plan picks the urgent one
    gated_gang(cluster, "urgent", 1, priority=10, created="2030-01-01T00:00:10Z")
    gated_gang(cluster, "older", 1, priority=0, created="2030-01-01T00:00:00Z")
    wait_for(lambda: world.desired("cpu") == 1, what="one node, for the urgent gang")
    (n,) = register(cluster, world, "cpu", ready=True)
    wait_for(lambda: not gates_of(cluster, "team", "urgent-0"), what="the urgent gang released")
    time.sleep(2.5)
    assert gates_of(cluster, "team", "older-0") == [CAPACITY_GATE]  # deferred: it cannot take the node
    held = ctl.logged("gate held", gang=f"team/older/{PG}")
    assert held and held[-1]["reason"].startswith(("deferred", "infeasible"))
    bind(cluster, "team", "urgent-0", n)
    time.sleep(2.5)
    assert gates_of(cluster, "team", "older-0") == [CAPACITY_GATE]  # still no room for it
    ctl.assert_no_tracebacks()


def narrowed_to(emu, ns: str, name: str) -> list[str]:
    """The node names the pod's required node affinity allows through matchFields metadata.name, term by term."""
    spec = emu.get("v1", "Pod", ns, name)["spec"]
    terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    return [v for t in terms for f in t.get("matchFields") or [] if f["key"] == "metadata.name" for v in f["values"]]


@pytest.mark.slow
def test_both_gpu_gangs_are_released_at_once_each_narrowed_to_its_node_where_the_scheduler_then_puts_it(
        cluster, world, controllers):
    from gangscale.ingest import ingest
    from gangscale.scheduling import nodes_from_views, simulate, strategy_config
    from gangscale.snapshot import build_snapshot
    namespace(cluster, "team", gate_mode=True)
    cluster.apply(node("g12", cpu="48", mem="192Gi", gpu=4))
    cluster.apply(node("g1", cpu="4", mem="16Gi", gpu=1))
    ctl = controllers()
    # unnarrowed, the older 1-GPU pod would go to the emptiest node under LeastAllocated, g12, and the 4-GPU pod
    # would fit nowhere: the old release held the small gang until the big one had bound
    gated_gang(cluster, "small", 1, cpu="1", mem="1Gi", gpu=1, created="2030-01-01T00:00:00Z")
    gated_gang(cluster, "big", 1, cpu="8", mem="8Gi", gpu=4, created="2030-01-01T00:00:10Z")
    wait_for(lambda: not gates_of(cluster, "team", "big-0") and not gates_of(cluster, "team", "small-0"),
             what="both gangs released in one pass")
    assert narrowed_to(cluster, "team", "big-0") == ["g12"] and narrowed_to(cluster, "team", "small-0") == ["g1"]
    assert cluster.get("v1", "Pod", "team", "small-0")["metadata"]["annotations"]["gangscale.io/narrowed-to"] == "g1"
    assert not ctl.logged("gate held", gang=f"team/small/{PG}")
    # the pods as stored, through the scheduler model: each lands on the node it was narrowed to
    objs = [cluster.get("v1", "Node", "", n) for n in ("g12", "g1")]
    objs += [cluster.get("v1", "Pod", "team", n) for n in ("small-0", "big-0")]
    objs += [cluster.get(PG, "PodGroup", "team", n) for n in ("small", "big")]
    snap = build_snapshot(ingest(objs), [])
    res = simulate(nodes_from_views(snap.nodes, snap.bound), snap.solvable, config=strategy_config("LeastAllocated"))
    assert res.placement == {"team/small-0": "g1", "team/big-0": "g12"}
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_a_released_pod_whose_node_died_before_it_bound_is_deleted_so_its_owner_recreates_it(cluster, world,
                                                                                             controllers):
    namespace(cluster, "team", gate_mode=True)
    cluster.apply(node("n1", cpu="8", mem="32Gi"))
    ctl = controllers(narrowedNodeGraceSeconds=0)
    gated_gang(cluster, "train", 1, cpu="2")
    p = cluster.get("v1", "Pod", "team", "train-0")
    p["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "j-1",
                                         "controller": True}]
    cluster.apply(p)
    wait_for(lambda: narrowed_to(cluster, "team", "train-0") == ["n1"], what="the pod released, narrowed to n1")
    cluster.delete("v1", "Node", "", "n1")  # the node dies before the scheduler binds the pod
    wait_for(lambda: cluster.get("v1", "Pod", "team", "train-0") is None, what="the stranded pod deleted")
    wait_for(lambda: events(cluster, "NarrowedNodeGone"), what="the NarrowedNodeGone Event")
    wait_for(lambda: ctl.logged("deleted a stranded narrowed pod", pod="team/train-0"), what="the deletion logged")
    ctl.assert_no_tracebacks()


def test_the_api_server_lets_a_gated_pod_be_narrowed_and_ungated_in_one_patch_and_refuses_widening(cluster):
    from gangscale.controller.gates import release_patch
    from kube.emulator import ApiError, _json_patch  # noqa: F401  (ApiError: what the emulator raises)
    namespace(cluster, "team", gate_mode=True)
    gated_gang(cluster, "g", 1)
    p = cluster.get("v1", "Pod", "team", "g-0")
    widened = [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}}]
    cluster.apply(_json_patch(p, widened))  # gated, no affinity yet: setting one is allowed
    p = cluster.get("v1", "Pod", "team", "g-0")
    terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    for bad in ([{"op": "add", "path": f"{terms}/-", "value": {"matchFields": []}}],  # a term added: wider
                [{"op": "remove", "path": f"{terms}/0/matchExpressions/0"}]):  # a requirement dropped: wider
        with pytest.raises(ApiError, match="Invalid value"):
            cluster.apply(_json_patch(p, bad))
    cluster.apply(_json_patch(p, release_patch(p, [CAPACITY_GATE], "n1")))  # narrowed and ungated together
    p = cluster.get("v1", "Pod", "team", "g-0")
    assert narrowed_to(cluster, "team", "g-0") == ["n1"] and not p["spec"].get("schedulingGates")
    with pytest.raises(ApiError, match="Forbidden"):  # ungated: the affinity is immutable
        cluster.apply(_json_patch(p, [{"op": "remove", "path": f"{terms}/0/matchFields"}]))


@pytest.mark.slow
def test_a_namespace_that_did_not_opt_in_keeps_todays_behaviour(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    namespace(cluster, "plain", gate_mode=False)
    ctl = controllers(gateMode="opt-in")  # under the default (opt-out) an unlabelled namespace is held: below
    gated_gang(cluster, "free", 2, ns="plain", gates=None)  # no gate: planned and bought for as always
    gated_gang(cluster, "queued", 1, ns="plain", gates=[{"name": KUEUE}])  # Kueue's gate: not planned, not touched
    gated_gang(cluster, "mixed", 1, ns="plain", gates=[{"name": KUEUE}] + GATE)
    wait_for(lambda: world.desired("cpu") == 2, what="the ungated gang scaled")
    rv = {n: cluster.get("v1", "Pod", "plain", n)["metadata"]["resourceVersion"] for n in ("free-0", "queued-0", "mixed-0")}
    time.sleep(3)
    assert world.desired("cpu") == 2  # nothing bought for the Kueue-gated pods
    assert {n: cluster.get("v1", "Pod", "plain", n)["metadata"]["resourceVersion"] for n in rv} == rv  # never patched
    assert gates_of(cluster, "plain", "mixed-0") == [KUEUE, CAPACITY_GATE]
    # our gate on a pod gate mode does not hold is lifted at once, with no capacity yet: it is ours, nobody else would
    gated_gang(cluster, "stray", 1, ns="plain")
    wait_for(lambda: not gates_of(cluster, "plain", "stray-0"), what="the stray gate lifted")
    # the log line follows the patch: wait for it rather than read it once (a race under load)
    wait_for(lambda: ctl.logged("gate lifted", gang=f"plain/stray/{PG}", why="not-held"), what="the lift logged")
    assert not ctl.logged("gate lifted", gang=f"plain/free/{PG}")
    ctl.assert_no_tracebacks()


def _documented_fallback() -> str:
    """The kubectl command docs/scheduling.md gives for lifting every gate by hand."""
    text = DOCS.read_text()
    start = text.index("<!-- gate-fallback -->")
    block = text[start:].split("```sh\n", 1)[1].split("```", 1)[0]
    return block


@pytest.mark.skipif(not all(os.path.exists(f"/usr/bin/{t}") or any(
    os.path.exists(os.path.join(d, t)) for d in os.environ.get("PATH", "").split(os.pathsep)) for t in ("kubectl", "jq")),
    reason="kubectl and jq are needed to run the documented fallback")
def test_the_documented_kubectl_fallback_lifts_every_gangscale_gate_and_only_those(cluster, tmp_path):
    kubeconfig = cluster.kubeconfig(str(tmp_path / "kubeconfig"))
    cluster.token = ""  # kubectl sends no bearer token over plain http (the emulator is http on loopback)
    namespace(cluster, "team", gate_mode=True)
    namespace(cluster, "other", gate_mode=False)
    gated_gang(cluster, "a", 2)
    gated_gang(cluster, "b", 1, ns="other", gates=[{"name": KUEUE}] + GATE)  # ours second: index 1
    gated_gang(cluster, "k", 1, ns="other", gates=[{"name": KUEUE}])
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", _documented_fallback()], capture_output=True, text=True,
                         env=dict(os.environ, KUBECONFIG=kubeconfig, NO_PROXY="127.0.0.1", no_proxy="127.0.0.1"),
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert gates_of(cluster, "team", "a-0") == [] == gates_of(cluster, "team", "a-1")
    assert gates_of(cluster, "other", "b-0") == [KUEUE]
    assert gates_of(cluster, "other", "k-0") == [KUEUE]


@pytest.mark.slow
def test_gate_mode_models_the_configured_scheduler_even_when_the_plan_does_not(cluster, world, controllers, tmp_path):
    # Under MostAllocated with a GPU weight the 1-GPU pod packs onto g1 and cannot take g12 from the 4-GPU gang,
    # so nothing needs holding: both gangs are released in the same pass (schedulerModel stays off).
    sched = tmp_path / "scheduler.yaml"
    sched.write_text(MOST_GPU)
    namespace(cluster, "team", gate_mode=True)
    cluster.apply(node("g12", cpu="48", mem="192Gi", gpu=4))
    cluster.apply(node("g1", cpu="4", mem="16Gi", gpu=1))
    ctl = controllers(schedulerConfigFile=str(sched), schedulerModel="off")
    gated_gang(cluster, "small", 1, cpu="1", mem="1Gi", gpu=1, created="2030-01-01T00:00:00Z")
    gated_gang(cluster, "big", 1, cpu="8", mem="8Gi", gpu=4, created="2030-01-01T00:00:10Z")
    wait_for(lambda: not gates_of(cluster, "team", "big-0") and not gates_of(cluster, "team", "small-0"),
             what="both gangs released without waiting for a bind")
    assert not ctl.logged("gate held", gang=f"team/small/{PG}")
    ctl.assert_no_tracebacks()


@pytest.mark.slow
def test_nothing_is_bought_for_an_ungrouped_pod_the_scheduler_places_on_a_node_the_cluster_has(cluster, world,
                                                                                               controllers):
    # n1 has 4 of 8 CPUs left. The cheapest plan of both pods puts the gang there and buys an m5.xlarge for the
    # ungrouped pod; but that pod has no gate, so the scheduler puts it on n1 at once (the only Ready node) and the
    # m5.xlarge would stay empty (benchmark target-10k, MostAllocated). Gate mode plans the queue first.
    world.asg("small", "m5.xlarge", max_size=2)
    world.asg("big", "m5.2xlarge", max_size=2)
    namespace(cluster, "team", gate_mode=True)
    cluster.apply(node("n1", cpu="8", mem="32Gi"))
    busy = pod("busy", "team", cpu="4", mem="16Gi")
    busy["spec"]["nodeName"], busy["status"] = "n1", {"phase": "Running"}
    cluster.apply(busy)
    cluster.apply(pod("lone", "team", cpu="3500m", mem="1Gi"))
    gated_gang(cluster, "train", 1, cpu="4", mem="1Gi")
    ctl = controllers()
    wait_for(lambda: world.desired("big") == 1, what="an m5.2xlarge for the gang")
    time.sleep(2.5)
    assert world.desired("small") == 0
    (n,) = register(cluster, world, "big", ready=True)
    wait_for(lambda: narrowed_to(cluster, "team", "train-0") == [n], what="the gang released onto its node")
    ctl.assert_no_tracebacks()
