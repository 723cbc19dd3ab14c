"""DaemonSets read from a live (emulated) cluster: `plan`, `dump` and the controller's informers, RBAC refused too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gangscale.cli import main
from gangscale.kube.informer import ClusterCache
from gangscale.kube.refs import DAEMONSETS
from gangscale.loader import read_objects

M5 = {"nodeGroups": [{"name": "m5-large", "instanceType": "m5.large", "maxSize": 10},
                     {"name": "m5-xlarge", "instanceType": "m5.xlarge", "maxSize": 10}]}


def log_agent() -> dict[str, Any]:
    """Karpenter's "should account for daemonsets": a 1-CPU agent on every node."""
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "log-agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "log-agent"}}, "template": {
                "metadata": {"labels": {"app": "log-agent"}},
                "spec": {"containers": [{"name": "agent", "image": "agent:1", "env": [{"name": "TOKEN", "value": "s3cr3t"}],
                                         "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]}}}}


def app_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "app", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "image": "app:1",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}


def cluster(make_emulator, **kw: Any):
    emu = make_emulator(release="1.36", **kw)
    emu.apply_all([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                   for n in ("default", "kube-system")] + [log_agent(), app_pod()])
    return emu


def plan_live(tmp_path: Path, kubeconfig: str, *args: str) -> dict[str, Any]:
    catalog, out = tmp_path / "catalog.json", tmp_path / "plan.json"
    catalog.write_text(json.dumps(M5))
    assert main(["plan", "--kubeconfig", kubeconfig, "--nodegroups", str(catalog), "--time-limit", "5", "-o", "json",
                 "--output-file", str(out), *args]) == 0
    return json.loads(out.read_text())


def test_plan_reads_the_daemonsets_of_a_live_cluster_and_buys_room_for_the_agent_too(make_emulator, kubeconfig_for,
                                                                                     tmp_path):
    emu = cluster(make_emulator)
    plan = plan_live(tmp_path, kubeconfig_for(emu))
    assert plan["scaleUp"] == {"m5-xlarge": 1} and plan["warnings"] == []
    assert plan["daemonSetOverhead"]["m5-xlarge"]["cpu"] == "1"


def test_plan_in_one_namespace_still_counts_every_namespaces_daemonsets(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator)
    plan = plan_live(tmp_path, kubeconfig_for(emu), "-n", "default")
    assert plan["scaleUp"] == {"m5-xlarge": 1}


def test_when_rbac_refuses_daemonsets_the_plan_says_it_assumes_none(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, forbidden={("apps", "daemonsets")})
    plan = plan_live(tmp_path, kubeconfig_for(emu))
    assert plan["scaleUp"] == {"m5-large": 1}
    assert any("cannot list daemonsets.v1.apps" in w and "assumes no DaemonSet pod runs on the new nodes" in w
               for w in plan["warnings"]), plan["warnings"]


def test_dump_keeps_the_daemonsets_requests_and_drops_their_secrets(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator)
    out = tmp_path / "dump.json"
    assert main(["dump", "--kubeconfig", kubeconfig_for(emu), "--output-file", str(out)]) == 0
    assert "s3cr3t" not in out.read_text()
    ds = next(o for o in read_objects(out) if o["kind"] == "DaemonSet")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "100Mi"} and "env" not in container
    catalog, planned = tmp_path / "catalog.json", tmp_path / "plan.json"
    catalog.write_text(json.dumps(M5))
    assert main(["plan", "--cluster", str(out), "--nodegroups", str(catalog), "-o", "json",
                 "--output-file", str(planned)]) == 0
    assert json.loads(planned.read_text())["scaleUp"] == {"m5-xlarge": 1}


def test_the_controllers_cache_watches_daemonsets_and_syncs_empty_when_refused(make_emulator, client_for):
    emu = cluster(make_emulator)
    with ClusterCache(client_for(emu), [], optional_refs=(DAEMONSETS,)) as cache:
        assert cache.wait_synced(30)
        assert [o["metadata"]["name"] for o in cache.snapshot() if o["kind"] == "DaemonSet"] == ["log-agent"]
        assert cache.unreadable() == {}
    refused = cluster(make_emulator, forbidden={("apps", "daemonsets")})
    with ClusterCache(client_for(refused), [], optional_refs=(DAEMONSETS,)) as cache:
        assert cache.wait_synced(30)  # a refused optional list never holds the controller back
        assert not [o for o in cache.snapshot() if o["kind"] == "DaemonSet"]
        assert "403" in cache.unreadable()[DAEMONSETS] or "forbidden" in cache.unreadable()[DAEMONSETS].lower()


def run_check(emu, kubeconfig_for, capsys, tmp_path: Path, catalog: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "catalog-check.json"
    path.write_text(json.dumps(catalog))
    main(["check", "--kubeconfig", kubeconfig_for(emu), "-o", "json", "--nodegroups", str(path)])
    return {r["name"]: r for r in json.loads(capsys.readouterr().out)["results"]}


def test_check_reports_a_daemonset_whose_pod_fits_no_node_of_a_group(make_emulator, kubeconfig_for, capsys, tmp_path):
    emu = cluster(make_emulator)
    big = log_agent()
    big["metadata"]["name"] = "gpu-exporter"
    big["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "3", "memory": "1Gi"}
    emu.apply_all([big])
    r = run_check(emu, kubeconfig_for, capsys, tmp_path, M5)["daemonsets"]
    assert r["verdict"] == "warn"
    assert any("DaemonSet kube-system/gpu-exporter requests cpu 3" in d and "node group m5-large" in d
               for d in r["detail"]), r["detail"]
    assert not any("m5-xlarge" in d and "gpu-exporter" in d and "more than" in d for d in r["detail"])
    # on the m5.xlarge (3,920m) the 3-CPU exporter binds first (queue order: priority, then name): the agent is left
    assert any("kube-system/log-agent" in d and "beside the other daemon pods of node group m5-xlarge" in d
               for d in r["detail"]), r["detail"]


def test_check_is_fine_when_every_daemon_pod_fits_and_warns_when_rbac_refuses(make_emulator, kubeconfig_for, capsys,
                                                                             tmp_path):
    emu = cluster(make_emulator)
    assert run_check(emu, kubeconfig_for, capsys, tmp_path, M5)["daemonsets"]["verdict"] == "ok"
    refused = cluster(make_emulator, forbidden={("apps", "daemonsets")})
    r = run_check(refused, kubeconfig_for, capsys, tmp_path, M5)["daemonsets"]
    assert r["verdict"] == "warn" and "cannot list daemonsets.v1.apps" in r["summary"]


def test_with_the_agent_already_bound_on_a_node_of_the_group_the_live_plan_still_buys_the_larger_node(
        make_emulator, kubeconfig_for, tmp_path):
    """The group's running m5.large holds the agent's pod (930m left): the pod fits neither it nor a new m5.large."""
    emu = cluster(make_emulator)
    emu.apply_all([
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "ip-1", "labels": {
            "gangscale.io/node-group": "m5-large", "node.kubernetes.io/instance-type": "m5.large"}},
         "spec": {}, "status": {"allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                                "conditions": [{"type": "Ready", "status": "True"}]}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "log-agent-ip-1", "namespace": "kube-system",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "log-agent", "uid": "u"}]},
         "spec": {"nodeName": "ip-1", "containers": [{"name": "agent", "image": "agent:1",
                                                      "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]},
         "status": {"phase": "Running"}}])
    catalog = {"nodeGroups": [{**M5["nodeGroups"][0], "currentSize": 1}, M5["nodeGroups"][1]]}
    path, out = tmp_path / "catalog-bound.json", tmp_path / "plan-bound.json"
    path.write_text(json.dumps(catalog))
    assert main(["plan", "--kubeconfig", kubeconfig_for(emu), "--nodegroups", str(path), "-o", "json",
                 "--output-file", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["scaleUp"] == {"m5-xlarge": 1} and plan["existingNodes"] == {}
