"""DaemonSet overhead on new nodes: what the DaemonSet controller runs on a node before any pod of the backlog.

Cases from Karpenter's suite ("should account for daemonsets", pkg/controllers/provisioning/suite_test.go) and the
DaemonSet controller's rules (pkg/controller/daemon/daemon_controller.go `NodeShouldRunDaemonPod`,
pkg/controller/daemon/util/daemonset_util.go `AddOrUpdateDaemonPodTolerations`).
"""

from __future__ import annotations

import json
from typing import Any

from builders import GPU_TAINT, gang, group, node, plan_for, pod, snapshot
from checker import check_plan

from gangscale.cli import main
from gangscale.realize import OFF, SchedulerModel
from gangscale.scheduling import arriving_node, simulate

M5 = [{"name": "m5-large", "instanceType": "m5.large", "maxSize": 10},
      {"name": "m5-xlarge", "instanceType": "m5.xlarge", "maxSize": 10}]


def daemonset(name: str, *, cpu: str = "1", mem: str = "100Mi", ns: str = "kube-system", selector: dict | None = None,
              tolerations: list | None = None, host_network: bool = False, **spec: Any) -> dict:
    tspec: dict[str, Any] = {"containers": [{"name": "agent", "resources": {"requests": {"cpu": cpu, "memory": mem}}}],
                             **spec}
    if selector:
        tspec["nodeSelector"] = selector
    if tolerations:
        tspec["tolerations"] = tolerations
    if host_network:
        tspec["hostNetwork"] = True
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": tspec}}}


def daemon_pod(ds: str, node_name: str | None, *, cpu: str = "1", phase: str = "Running") -> dict:
    p = pod(f"{ds}-{node_name or 'x'}", "kube-system", cpu=cpu, mem="100Mi", node=node_name, phase=phase)
    p["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds, "uid": "u"}]
    return p


def test_a_daemonset_pod_and_the_pod_it_is_bought_for_both_fit_the_new_node(tmp_path):
    """Karpenter's "should account for daemonsets": a 1-CPU agent and a 1-CPU pod need 2 CPU, more than an
    m5.large's 1,930m allocatable, so the plan buys an m5.xlarge (read from a file, as `plan --cluster` does)."""
    objects = [daemonset("log-agent"), pod("app", cpu="1", mem="1Gi")]
    cluster, catalog, out = tmp_path / "cluster.json", tmp_path / "catalog.json", tmp_path / "plan.json"
    cluster.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    catalog.write_text(json.dumps({"nodeGroups": M5}))
    assert main(["plan", "--cluster", str(cluster), "--nodegroups", str(catalog), "-o", "json",
                 "--output-file", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["scaleUp"] == {"m5-xlarge": 1}
    assert [n["pods"] for n in plan["newNodes"]] == [["default/app"]]
    assert plan["daemonSetOverhead"]["m5-xlarge"] == {"cpu": "1", "memory": "100Mi", "pods": "1"}


def test_observe_mode_places_the_daemon_pod_first_and_still_starts_the_pod():
    plan = plan_for([daemonset("log-agent"), pod("app", cpu="1", mem="1Gi")], M5, scheduler=SchedulerModel())
    assert plan.scale_up == {"m5-xlarge": 1}
    assert gang(plan, "app").model_started is True
    assert plan.scheduler is not None and plan.scheduler.idle_nodes == 0


def test_the_scheduler_model_binds_daemon_pods_on_arriving_nodes_before_the_queue():
    """An m5.large with the agent bound has 930m left: the 1-CPU pod goes to the m5.xlarge; a node holding only
    daemon pods is still an empty node (fast and reference paths alike)."""
    snap = snapshot([daemonset("log-agent"), pod("app", cpu="1", mem="1Gi")], M5)
    groups = {g.name: g for g in snap.groups}
    large = arriving_node(groups["m5-large"], "large-1", snap.daemons["m5-large"].pods)
    xlarge = arriving_node(groups["m5-xlarge"], "xlarge-1", snap.daemons["m5-xlarge"].pods)
    assert large.allocatable["cpu"] == 1930  # the instance's own allocatable: the daemon pod is bound on it
    for fast in (True, False):
        alone = simulate([large], snap.solvable, fast=fast)
        assert not alone.started and alone.empty_nodes == ["large-1"]
        both = simulate([large, xlarge], snap.solvable, fast=fast)
        assert both.placement == {"default/app": "xlarge-1"}
        assert both.empty_nodes == ["large-1"]
        assert dict(both.node_pods) == {"xlarge-1": ["default/app"]}


def test_the_agent_pod_bound_on_an_existing_node_of_the_group_holds_its_room_there_and_on_new_nodes():
    """The agent's pod bound on the group's running m5.large leaves 930m there: the pending pod fits neither it nor
    a new m5.large beside the agent, so an m5.xlarge is bought."""
    running = node("ip-1", cpu="1930m", mem="7Gi", pods="29", group="m5-large",
                   labels={"node.kubernetes.io/instance-type": "m5.large"})
    catalog = [{**M5[0], "currentSize": 1}, M5[1]]
    objects = [running, daemon_pod("log-agent", "ip-1"), daemonset("log-agent"), pod("app", cpu="1", mem="1Gi")]
    plan = plan_for(objects, catalog, scheduler=OFF)
    assert plan.scale_up == {"m5-xlarge": 1}
    assert plan.existing_nodes == {}


def test_a_pending_daemon_pod_for_an_upcoming_node_is_not_planned_for():
    """CA's filterOutDaemonSetPodListProcessor: the DaemonSet controller makes the pod for its node; buying a node
    for it would never place it there."""
    pending = daemon_pod("log-agent", None, phase="Pending")
    pending["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["ip-9"]}]}]}}}
    plan = plan_for([daemonset("log-agent"), pending], M5, scheduler=OFF)
    assert plan.scale_up == {}
    assert plan.gangs == []


def test_daemon_pods_get_the_controllers_default_tolerations_and_keep_their_selectors():
    """A node group tainted unschedulable still runs every DaemonSet (default toleration); network-unavailable only
    the hostNetwork ones; a GPU taint only the DaemonSets that tolerate it; a nodeSelector only where it matches; a
    template that names its node none."""
    unsched = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    net = {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}
    catalog = [group("plain", cpu="8"), group("cordoned", cpu="8", taints=[unsched]),
               group("no-net", cpu="8", taints=[net]), group("gpu", cpu="8", gpu=8, taints=[GPU_TAINT],
                                                       labels={"nvidia.com/gpu.present": "true"}),
               group("labelled", cpu="8", labels={"role": "infra"})]
    objects = [daemonset("everywhere", cpu="100m"), daemonset("cni", cpu="200m", host_network=True),
               daemonset("dcgm", cpu="400m", tolerations=[{"operator": "Exists"}],
                     selector={"nvidia.com/gpu.present": "true"}),
               daemonset("plugin", cpu="800m", tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists"}]),
               daemonset("infra", cpu="1600m", selector={"role": "infra"}),
               daemonset("pinned", cpu="3", nodeName="ip-1")]
    snap = snapshot(objects, catalog)
    cpu = {name: d.load.get("cpu", 0) for name, d in snap.daemons.items()}
    assert cpu == {"plain": 1100, "cordoned": 1100, "no-net": 200, "gpu": 1200, "labelled": 2700}
    assert {g.name: g.allocatable["cpu"] for g in snap.groups} == {
        "plain": 6900, "cordoned": 6900, "no-net": 7800, "gpu": 6800, "labelled": 5300}


def test_init_containers_and_pod_overhead_count_as_they_do_for_pods():
    ds = daemonset("agent", cpu="500m", initContainers=[{"name": "setup", "resources": {"requests": {"cpu": "2"}}}],
                   overhead={"cpu": "250m"})
    snap = snapshot([ds], [group("g", cpu="8")])
    assert snap.daemons["g"].load["cpu"] == 2250  # the init peak (2) beside nothing, plus the runtime overhead


def test_a_daemonset_too_big_for_a_group_is_left_out_with_a_warning():
    snap = snapshot([daemonset("huge", cpu="16"), daemonset("small", cpu="1")], [group("g", cpu="8")])
    assert snap.daemons["g"].load["cpu"] == 1000
    assert snap.daemons["g"].unfit == ("kube-system/huge",)
    assert any("DaemonSet kube-system/huge: its pod does not fit a new node of node group g" in w
               for w in snap.warnings)


def test_the_independent_checker_counts_daemonset_overhead():
    objects = [daemonset("log-agent"), pod("app", cpu="1", mem="1Gi")]
    catalog = [group("small", cpu="1930m", mem="7Gi", price=0.096), group("big", cpu="3920m", mem="14Gi", price=0.192)]
    plan = plan_for(objects, catalog, scheduler=OFF)
    assert plan.scale_up == {"big": 1}
    as_json = plan.to_dict()
    assert check_plan(objects, catalog, as_json) == []
    as_json["scaleUp"] = {"small": 1}
    as_json["newNodes"][0]["nodeGroup"] = "small"
    as_json["newNodes"][0]["pricePerHour"] = 0.096
    assert any("small" in e for e in check_plan(objects, catalog, as_json))


def test_a_pod_needing_a_host_port_a_daemon_pod_holds_is_not_planned_beside_it():
    """Karpenter tracks daemon pods' host ports (scheduler.go `getDaemonHostPortUsage`): a node-exporter on hostPort
    9100 on every node of one group keeps a pending pod using 9100 off that group's new nodes."""
    exporter = daemonset("node-exporter", cpu="100m", selector={"role": "a"},
                         containers=[{"name": "e", "ports": [{"containerPort": 9100, "hostPort": 9100}],
                                      "resources": {"requests": {"cpu": "100m"}}}])
    app = pod("app", cpu="1", mem="1Gi", containers=[{"name": "c", "ports": [{"containerPort": 9100,
                                                                                 "hostPort": 9100}],
                                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}])
    catalog = [group("a", cpu="8", price=1.0, labels={"role": "a"}), group("b", cpu="8", price=2.0)]
    plan = plan_for([exporter, app], catalog, scheduler=OFF)
    assert plan.scale_up == {"b": 1}
