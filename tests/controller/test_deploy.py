"""The shipped manifests and config: valid for a real cluster, and the safety settings are there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gangscale.controller.config import ControllerConfig, load_config
from gangscale.loader import InputError

DEPLOY = Path(__file__).resolve().parents[2] / "config" / "deploy"
MANIFESTS = ["namespace.yaml", "serviceaccount.yaml", "rbac.yaml", "deployment.yaml", "pdb.yaml", "service.yaml",
             "networkpolicy.yaml"]


def docs() -> list[dict]:
    out = []
    for name in MANIFESTS:
        out += [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]
    return out


@pytest.mark.parametrize("version", ["1.35.0", "1.36.0", "1.37.0"])
def test_manifests_validate_against_the_official_schemas(version):
    for doc in docs():
        kubernetes_validate.validate(doc, version, strict=True)


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(MANIFESTS)
    assert kust["configMapGenerator"][0]["files"] == ["config.yaml"]


def test_the_overlay_installs_gate_mode_and_the_webhook_with_its_self_signed_certificate():
    """The default install gates gang pods once config.yaml says mode: enforce: gate mode's pod writes and their
    policies, the webhook, and its certificate without cert-manager (a component that patches the webhook's, so it
    comes after it). Each component lists every file in its folder."""
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kust["components"] == ["gate-mode", "webhook", "webhook/self-signed"]
    for name in kust["components"]:
        inner = yaml.safe_load((DEPLOY / name / "kustomization.yaml").read_text())
        listed = inner["resources"] + [entry["path"] for entry in inner.get("patches", [])]
        assert inner["kind"] == "Component"
        assert sorted(listed) == sorted(p.name for p in (DEPLOY / name).glob("*.yaml") if p.name != "kustomization.yaml")
    cfg = load_config(DEPLOY / "config.yaml")
    assert (cfg.mode, cfg.gate_mode) == ("dry-run", "opt-out")  # the hook sets no gate until mode: enforce


def test_deployment_is_ha_non_root_and_read_only():
    dep = next(d for d in docs() if d["kind"] == "Deployment")
    spec = dep["spec"]["template"]["spec"]
    container = spec["containers"][0]
    assert dep["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {p["httpGet"]["path"] for p in (container["livenessProbe"], container["readinessProbe"])} == {"/healthz", "/readyz"}
    sa = next(d for d in docs() if d["kind"] == "ServiceAccount")
    assert "eks.amazonaws.com/role-arn" in sa["metadata"]["annotations"]
    assert next(d for d in docs() if d["kind"] == "PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_rbac_is_read_only_on_the_cluster_but_for_podgroup_status_and_writes_no_pod_outside_gate_mode():
    role = next(d for d in docs() if d["kind"] == "ClusterRole")
    writes = []
    for rule in role["rules"]:
        if set(rule["resources"]) & {"pods", "nodes", "namespaces", "podgroups", "workloads"}:
            extra = set(rule["verbs"]) - {"get", "list", "watch"}
            writes += [(r, v) for r in rule["resources"] for v in sorted(extra)]
    # gate mode's release and recovery are granted by config/deploy/gate-mode only (test_pod_write_policy.py);
    # the scale-down's node taint is the one node write
    assert sorted(writes) == [("nodes", "patch")]
    status = [(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
              for v in rule["verbs"] if r.endswith("/status")]
    # its own PodGroup condition: native and Volcano (scheduler-plugins' status has no conditions)
    assert sorted(status) == [("scheduling.k8s.io", "podgroups/status", "patch"),
                              ("scheduling.volcano.sh", "podgroups/status", "patch")]
    reads = {r for rule in role["rules"] if "watch" in rule["verbs"] for r in rule["resources"]}
    assert "namespaces" in reads  # gate mode's opt-in label
    ns_role = next(d for d in docs() if d["kind"] == "Role")
    named = [r for r in ns_role["rules"] if "update" in r["verbs"] and r["resources"] != ["configmaps"]]
    assert named and all(r.get("resourceNames") for r in named)  # the lease by name; the records' ConfigMaps:
    records = [r for r in ns_role["rules"] if r["resources"] == ["configmaps"]]  # one per gang, in its namespace
    assert [sorted(r["verbs"]) for r in records] == [["create", "delete", "get", "list", "update"]]
    assert ns_role["metadata"]["namespace"] == "gangscale-system"
    assert not [r for r in role["rules"] if "configmaps" in r["resources"]]  # and none cluster-wide


def test_rbac_lets_the_controller_watch_the_dra_and_kueue_resources_it_reads():
    from gangscale.kube.discovery import DRA_PLURALS
    from gangscale.kube.refs import DRA_GROUP, KUEUE_GROUP

    role = next(d for d in docs() if d["kind"] == "ClusterRole")
    granted = {(g, r) for rule in role["rules"] if {"list", "watch"} <= set(rule["verbs"])
               for g in rule["apiGroups"] for r in rule["resources"]}
    wanted = {(DRA_GROUP, p) for p in DRA_PLURALS} | {(KUEUE_GROUP, "workloads")}
    assert wanted <= granted, wanted - granted
    for rule in role["rules"]:
        if set(rule["apiGroups"]) & {DRA_GROUP, KUEUE_GROUP}:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}


def test_shipped_config_is_valid_and_starts_in_dry_run():
    cfg = load_config(DEPLOY / "config.yaml")
    assert cfg.mode == "dry-run"
    assert cfg.cap_for("ml-research").max_nodes == 128 and cfg.cap_for("other").max_nodes == 64
    assert ControllerConfig().mode == "dry-run"
    assert cfg.plan_unadmitted is False and ControllerConfig.model_validate({"planUnadmitted": True}).plan_unadmitted


def test_a_bad_config_names_the_field_and_exits_2(tmp_path):
    bad = tmp_path / "config.yaml"
    bad.write_text("mode: enforce\nmaxGangPods: -3\n")
    with pytest.raises(InputError, match="maxGangPods"):
        load_config(bad)
    bad.write_text("mdoe: enforce\n")
    proc = subprocess.run([sys.executable, "-m", "gangscale", "run", "--config", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "mdoe" in proc.stderr and "Traceback" not in proc.stderr
