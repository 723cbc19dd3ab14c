"""The Helm chart's webhook without cert-manager (`webhook.certManager=false`, the default): the self-signed bootstrap,
as the kustomize component config/deploy/webhook/self-signed sets it up. Skipped, like test_helm_chart.py, without
the SDK."""

from __future__ import annotations

import kubernetes_validate

from gangscale.cli import build_parser

from .test_helm_chart import CHART, NAMESPACE, helm, helm_template, kustomize_build, normalise

SELF_SIGNED = {"webhook": {"enabled": True, "certManager": False, "replicas": 3}}
CERT_MANAGER = {"webhook": {"certManager": True, "replicas": 3}}


def test_without_cert_manager_the_chart_runs_one_self_signed_replica_that_patches_ca_bundle():
    docs = helm_template(SELF_SIGNED)
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert not {k for k, _ in kinds} & {"Certificate", "Issuer"}  # nothing needs cert-manager's CRDs
    assert ("PodDisruptionBudget", "gangscale-webhook") not in kinds  # minAvailable 1 of 1 would block drains
    for d in docs:
        if d["kind"].endswith("WebhookConfiguration"):
            assert "cert-manager.io/inject-ca-from" not in (d["metadata"].get("annotations") or {})
        kubernetes_validate.validate(d, "1.36.0", strict=True)
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangscale-webhook")
    assert dep["spec"]["replicas"] == 1  # each replica would make its own CA
    pod = dep["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    parsed = build_parser().parse_args(args)
    assert parsed.self_signed and parsed.service == f"gangscale-webhook.{NAMESPACE}"
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == parsed.cert_dir)
    assert not mount["readOnly"]
    assert next(v for v in pod["volumes"] if v["name"] == mount["name"]) == {"name": "tls", "emptyDir": {}}
    report = helm.lint(CHART, SELF_SIGNED, strict=True)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_the_default_chart_is_the_self_signed_one_needing_no_cert_manager():
    assert helm_template() == helm_template({"webhook": {"enabled": True, "certManager": False}})


def test_with_cert_manager_the_chart_keeps_the_certificate_and_the_ca_injection():
    docs = helm_template(CERT_MANAGER)
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangscale-webhook")
    assert dep["spec"]["replicas"] == 3 and "--self-signed" not in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    assert {"Certificate", "Issuer", "PodDisruptionBudget"} <= {d["kind"] for d in docs}


def _updates_webhook_configurations(docs: list[dict]) -> list[str]:
    """The ClusterRoles that may update a webhook configuration."""
    return [d["metadata"]["name"] for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]
            if "admissionregistration.k8s.io" in r["apiGroups"] and "update" in r["verbs"]]


def test_only_the_self_signed_mode_may_update_the_webhook_configurations_as_its_kustomize_component_does():
    assert _updates_webhook_configurations(helm_template(CERT_MANAGER)) == []
    with_cert_manager = normalise(helm_template(CERT_MANAGER))
    self_signed = normalise(helm_template(SELF_SIGNED))
    added = {k: v for k, v in self_signed.items() if k not in with_cert_manager}
    kust_cert_manager = normalise(kustomize_build(["gate-mode", "webhook"]))
    kust_added = {k: v for k, v in normalise(kustomize_build()).items() if k not in kust_cert_manager}
    assert sorted(added) == sorted(kust_added) == [("ClusterRole", "gangscale-webhook-self-signed"),
                                                   ("ClusterRoleBinding", "gangscale-webhook-self-signed")]
    assert added == kust_added
    assert _updates_webhook_configurations(helm_template(SELF_SIGNED)) == ["gangscale-webhook-self-signed"]
