"""The webhook component's manifests: valid for 1.35-1.37, and the safety settings the issue asks for."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gangscale.controller.config import ControllerConfig
from gangscale.webhook.certs import dns_names

COMPONENT = Path(__file__).resolve().parents[2] / "config" / "deploy" / "webhook"


def docs() -> list[dict]:
    kust = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    out = []
    for name in kust["resources"]:
        out += [d for d in yaml.safe_load_all((COMPONENT / name).read_text()) if d]
    return out


def one(kind: str) -> dict:
    return next(d for d in docs() if d["kind"] == kind)


def test_the_component_lists_every_manifest_in_its_folder():
    kust = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component"
    assert sorted(kust["resources"]) == sorted(p.name for p in COMPONENT.glob("*.yaml") if p.name != "kustomization.yaml")


@pytest.mark.parametrize("version", ["1.35.0", "1.36.0", "1.37.0"])
def test_webhook_manifests_validate_against_the_official_schemas(version):
    for doc in docs():
        if not doc["apiVersion"].startswith("cert-manager.io/"):
            kubernetes_validate.validate(doc, version, strict=True)


def test_hooks_skip_system_namespaces_time_out_within_5_s_and_the_mutating_one_gates_by_default_and_is_ignored_on_failure():
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in one(kind)["webhooks"]:
            assert hook["timeoutSeconds"] <= 5
            excluded = hook["namespaceSelector"]["matchExpressions"][0]
            assert excluded["operator"] == "NotIn" and {"kube-system", "gangscale-system"} <= set(excluded["values"])
            assert one(kind)["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
                "gangscale-system/gangscale-webhook"
    mutating = one("MutatingWebhookConfiguration")["webhooks"][0]
    assert mutating["failurePolicy"] == "Ignore"
    validating = one("ValidatingWebhookConfiguration")["webhooks"][0]
    assert validating["failurePolicy"] == ControllerConfig().admission.failure_policy


def shipped_gate_mode() -> str:
    return yaml.safe_load((COMPONENT.parent / "config.yaml").read_text())["gateMode"]


def test_the_shipped_gate_mode_gates_gang_pods_in_every_namespace_but_the_system_ones_and_those_opting_out():
    """gateMode opt-out in the code, config.yaml and the chart's values; the mutating hook's namespaceSelector (the
    API server calls the hook only for namespaces whose labels it matches: docs/webhook.md cites the page) then
    selects every namespace but kube-system, kube-public, kube-node-lease, gangscale's own and those labelled
    gangscale.io/gate-mode=false, the label that also opts a namespace out of the controller's gate mode."""
    from gangscale.controller.config import SYSTEM_NAMESPACES
    from gangscale.controller.gates import GATE_MODE_KEY

    chart = yaml.safe_load((COMPONENT.parents[1] / "helm" / "gangscale" / "values.yaml").read_text())
    assert ControllerConfig().gate_mode == shipped_gate_mode() == chart["config"]["gateMode"] == "opt-out"
    selector = one("MutatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]
    assert "matchLabels" not in selector  # no opt-in label needed
    system, opt_out = selector["matchExpressions"]
    assert system == {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                      "values": [*SYSTEM_NAMESPACES, ControllerConfig().state_namespace]}
    assert opt_out == {"key": GATE_MODE_KEY, "operator": "NotIn", "values": ["false"]}


@pytest.mark.parametrize("gate_mode, opt_in", [("opt-out", False), ("opt-in", True), ("all", True), ("off", True)])
def test_the_charts_mutating_hook_selects_namespaces_as_its_gate_mode_says(gate_mode, opt_in):
    """opt-in and all keep the opt-in label (public API as documented); opt-out selects every namespace but the
    system ones; the chart's default renders what the kustomize component ships."""
    helm_template = pytest.importorskip("tests.controller.test_helm_chart").helm_template  # needs the Helm SDK

    docs = helm_template({"webhook": {"enabled": True}, "config": {"gateMode": gate_mode}})
    hook = next(d for d in docs if d["kind"] == "MutatingWebhookConfiguration")["webhooks"][0]
    assert ("matchLabels" in hook["namespaceSelector"]) is opt_in
    if opt_in:
        assert hook["namespaceSelector"]["matchLabels"] == {"gangscale.io/capacity-gate": "enabled"}
    default = helm_template({"webhook": {"enabled": True}})
    shipped = one("MutatingWebhookConfiguration")["webhooks"][0]["namespaceSelector"]
    assert next(d for d in default if d["kind"] == "MutatingWebhookConfiguration")["webhooks"][0][
        "namespaceSelector"] == shipped


def test_the_certificate_covers_the_service_and_lands_where_the_server_reads_it():
    cert, svc, dep = one("Certificate"), one("Service"), one("Deployment")
    assert set(dns_names(f"{svc['metadata']['name']}.{svc['metadata']['namespace']}")[:2]) == set(cert["spec"]["dnsNames"])
    spec = dep["spec"]["template"]["spec"]
    args = spec["containers"][0]["args"]
    cert_dir = args[args.index("--cert-dir") + 1]
    mount = next(m for m in spec["containers"][0]["volumeMounts"] if m["mountPath"] == cert_dir)
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    sa = one("ServiceAccount")
    assert "eks.amazonaws.com/role-arn" not in (sa["metadata"].get("annotations") or {})  # no cloud access


def test_the_webhook_may_only_read_gang_groups_and_touches_no_webhook_configuration_with_cert_manager():
    for rule in one("ClusterRole")["rules"]:  # the group lookup: one object at a time, never a list of everything
        assert rule["verbs"] == ["get"] and set(rule["resources"]) <= {"podgroups", "workloads"}
        assert "admissionregistration.k8s.io" not in rule["apiGroups"]
    readable = {(g, r) for rule in one("ClusterRole")["rules"] if rule["verbs"] == ["get"]
                for g in rule["apiGroups"] for r in rule["resources"]}
    from gangscale.webhook.lookup import SOURCES

    for sources in SOURCES.values():
        for api, plural in sources:
            assert (api.split("/")[0], plural) in readable


SELF_SIGNED = COMPONENT / "self-signed"


def test_only_the_self_signed_component_may_update_the_webhooks_own_configurations():
    kust = yaml.safe_load((SELF_SIGNED / "kustomization.yaml").read_text())
    assert kust["kind"] == "Component" and kust["resources"] == ["rbac.yaml"]
    role, binding = [d for d in yaml.safe_load_all((SELF_SIGNED / "rbac.yaml").read_text()) if d]
    assert role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                              "resources": ["mutatingwebhookconfigurations", "validatingwebhookconfigurations"],
                              "resourceNames": ["gangscale"], "verbs": ["get", "update"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": one("ServiceAccount")["metadata"]["name"],
                                    "namespace": "gangscale-system"}]
    for version in ("1.35.0", "1.36.0", "1.37.0"):
        for doc in (role, binding):
            kubernetes_validate.validate(doc, version, strict=True)
    from gangscale.webhook.certs import CONFIG_PATHS

    # what the bootstrap writes: these two, by name

    assert {p.rsplit("/", 1)[1] for p in CONFIG_PATHS} == set(role["rules"][0]["resources"])


def test_the_self_signed_component_turns_the_webhook_into_one_self_signed_replica_without_cert_manager():
    """config/deploy/webhook/self-signed patches the webhook component (config/deploy/kustomization.yaml includes
    both): one replica running `--self-signed` for the webhook Service on an emptyDir, and none of cert-manager's
    objects or annotations. The patches name the component's objects, so a rename there fails here."""
    from gangscale.cli import build_parser

    kust = yaml.safe_load((SELF_SIGNED / "kustomization.yaml").read_text())
    assert sorted(p.name for p in SELF_SIGNED.glob("*.yaml") if p.name != "kustomization.yaml") == sorted(
        kust["resources"] + [entry["path"] for entry in kust["patches"]])
    patches = [d for entry in kust["patches"] for d in yaml.safe_load_all((SELF_SIGNED / entry["path"]).read_text())]
    deleted = {(p["kind"], p["metadata"]["name"]) for p in patches if p.get("$patch") == "delete"}
    assert deleted == {(d["kind"], d["metadata"]["name"]) for d in docs()
                       if d["kind"] in ("Issuer", "Certificate", "PodDisruptionBudget")}
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        [patch] = [p for p in patches if p["kind"] == kind]
        assert patch["metadata"] == {"name": one(kind)["metadata"]["name"],
                                     "annotations": {"cert-manager.io/inject-ca-from": None}}
    [dep] = [p for p in patches if p["kind"] == "Deployment"]
    assert dep["metadata"] == one("Deployment")["metadata"] and dep["spec"]["replicas"] == 1
    [container] = dep["spec"]["template"]["spec"]["containers"]
    svc = one("Service")["metadata"]
    assert container["args"] == [*one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"],
                                 "--self-signed", "--service", f"{svc['name']}.{svc['namespace']}"]
    parsed = build_parser().parse_args(container["args"])
    assert parsed.self_signed and set(dns_names(parsed.service)) >= {f"{svc['name']}.{svc['namespace']}.svc"}
    [mount] = container["volumeMounts"]
    assert mount["mountPath"] == parsed.cert_dir and mount["readOnly"] is False  # the bootstrap writes the pair
    assert dep["spec"]["template"]["spec"]["volumes"] == [{"name": mount["name"], "secret": None, "emptyDir": {}}]
