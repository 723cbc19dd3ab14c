"""Fail-safe gates in the shipped manifests: the gating hook fails open (Helm and kustomize, valid for 1.35-1.37),
the webhook may read the controller's lease and lift gates only in gate mode, the alerts on old gates render on
metrics the webhook exports, and the uninstall hook stops the gating before it lifts every gate."""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gangscale.cli import main
from gangscale.controller.config import ControllerConfig, load_config
from gangscale.ingest import CAPACITY_GATE
from gangscale.webhook.failopen import FailOpenMetrics
from tests.kube.emulator import Emulator

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "config" / "deploy" / "webhook"
helm_chart = pytest.importorskip("tests.controller.test_helm_chart")  # skips without the Helm SDK, as that module does


def component() -> list[dict]:
    kust = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    return [d for f in kust["resources"] for d in yaml.safe_load_all((COMPONENT / f).read_text()) if d]


def hooks(docs: list[dict]) -> dict[str, dict]:
    return {h["name"]: h for d in docs if d["kind"].endswith("WebhookConfiguration") for h in d["webhooks"]}


def by_name(docs: list[dict], kind: str, name: str) -> dict | None:
    return next((d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name), None)


@pytest.mark.parametrize("version", ["1.35.0", "1.36.0", "1.37.0"])
def test_the_gating_hook_fails_open_in_the_helm_and_kustomize_manifests_and_both_validate(version):
    strict = {"webhook": {"enabled": True, "failurePolicy": "Fail"}, "config": {"admission": {"failurePolicy": "Fail"}}}
    for docs in (component(), helm_chart.helm_template(strict), helm_chart.helm_template({"webhook": {"enabled": True}})):
        assert hooks(docs)["gate.gangscale.io"]["failurePolicy"] == "Ignore"  # a down webhook never blocks a pod
        for d in docs:
            if d["apiVersion"].split("/")[0] not in ("cert-manager.io", "monitoring.coreos.com"):  # CRDs: no schema
                kubernetes_validate.validate(d, version, strict=True)
    # the validating hook only refuses objects, it never sets a gate: it keeps its setting
    assert hooks(helm_chart.helm_template(strict))["validate.gangscale.io"]["failurePolicy"] == "Fail"
    assert hooks(component())["validate.gangscale.io"]["failurePolicy"] == ControllerConfig().admission.failure_policy


@pytest.mark.parametrize("gate_mode", ["off", "opt-in", "all", "opt-out"])
def test_the_webhook_reads_the_controllers_lease_and_may_lift_gates_only_in_gate_mode(gate_mode):
    docs = helm_chart.helm_template({"webhook": {"enabled": True}, "config": {"gateMode": gate_mode,
                                                                             "leaseName": "my-leader"}})
    role = by_name(docs, "Role", "gangscale-webhook-fail-open")
    assert role is not None and role["rules"][0]["resourceNames"] == ["my-leader"]
    assert "update" not in role["rules"][0]["verbs"] and "create" not in role["rules"][0]["verbs"]  # read only
    pods = by_name(docs, "ClusterRole", "gangscale-webhook-fail-open")
    binding = by_name(docs, "ClusterRoleBinding", "gangscale-webhook-fail-open")
    if gate_mode == "off":
        assert pods is None and binding is None
    else:
        assert pods is not None and pods["rules"] == [{"apiGroups": [""], "resources": ["pods"],
                                                       "verbs": ["get", "list", "patch"]}]
        assert binding["subjects"][0]["name"] == "gangscale-webhook"
    shipped = by_name(component(), "Role", "gangscale-webhook-fail-open")  # kustomize: the default lease, gate mode on
    assert shipped["rules"][0]["resourceNames"] == [load_config(ROOT / "config/deploy/config.yaml").lease_name]


def test_the_alerts_on_gates_older_than_the_fail_open_time_render_on_metrics_the_webhook_exports():
    docs = helm_chart.helm_template({"webhook": {"enabled": True}, "serviceMonitor": {"enabled": True},
                                     "prometheusRule": {"enabled": True, "failedOpenWindow": "45m"}})
    rules = {r["alert"]: r for r in by_name(docs, "PrometheusRule", "gangscale")["spec"]["groups"][0]["rules"]}
    assert rules["GangscaleGateOlderThanFailOpen"]["expr"] == "max(gangscale_gates_older_than_fail_open) > 0"
    assert rules["GangscaleGatesFailedOpen"]["expr"] == \
        "sum(increase(gangscale_webhook_fail_open_gates_lifted_total[45m])) > 0"
    exported = {m.name for c in FailOpenMetrics(600).collectors() for m in c.describe()}
    for name in ("GangscaleGateOlderThanFailOpen", "GangscaleGatesFailedOpen"):
        for metric in re.findall(r"gangscale_[a-z_]+", rules[name]["expr"]):
            assert metric.removesuffix("_total") in exported, metric
    scrape = by_name(docs, "PodMonitor", "gangscale-webhook")  # the webhook's /metrics is scraped
    assert scrape["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "gangscale-webhook"}
    assert scrape["spec"]["podMetricsEndpoints"][0]["port"] == "https"
    off = helm_chart.helm_template({"prometheusRule": {"enabled": True}, "webhook": {"enabled": False}})
    # no webhook: no fail-open, no alert on it
    assert "GangscaleGateOlderThanFailOpen" not in str(by_name(off, "PrometheusRule", "gangscale"))


def test_the_uninstall_hook_deletes_the_gating_hook_before_it_lifts_every_gate(tmp_path, capsys):
    docs = helm_chart.helm_template({"webhook": {"enabled": True}})
    job = by_name(docs, "Job", "gangscale-ungate")["spec"]["template"]["spec"]["containers"][0]
    assert job["args"] == ["ungate", "--delete-mutating-webhook", "gangscale"]
    grants = by_name(docs, "ClusterRole", "gangscale-ungate")["rules"]
    assert {"apiGroups": ["admissionregistration.k8s.io"], "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["gangscale"], "verbs": ["delete"]} in grants
    emu = Emulator(release="1.36").start()
    try:
        for doc in copy.deepcopy(component()):
            if doc["kind"].endswith("WebhookConfiguration"):
                for h in doc["webhooks"]:
                    h["clientConfig"]["caBundle"] = base64.b64encode(b"x").decode()
                emu.apply(doc)
        emu.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
                   "spec": {"schedulingGates": [{"name": CAPACITY_GATE}], "containers": [{"name": "c"}]}})
        kc = emu.kubeconfig(str(tmp_path / "kc"))
        assert main(["ungate", "--kubeconfig", kc, *job["args"][1:]]) == 0
        assert emu.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "gangscale") is None
        assert emu.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "gangscale")
        assert not emu.get("v1", "Pod", "default", "p")["spec"].get("schedulingGates")
        out = capsys.readouterr().out
        assert out.index("deleted MutatingWebhookConfiguration gangscale") < out.index("lifted")
        assert main(["ungate", "--kubeconfig", kc, *job["args"][1:]]) == 0  # already gone: fine (Helm retries)
    finally:
        emu.stop()
