"""The Helm chart (config/helm/gangscale): lints, renders valid objects, and with its defaults renders
what the kustomize manifests (config/deploy) apply, apart from the labels Helm adds; with
`webhook.enabled=true` it adds exactly the objects of the webhook component (config/deploy/webhook).

Helm here is the Helm v4 Go SDK itself, from the `helm-python-sdk` wheel (no Debian package or PyPI
wheel ships a Linux `helm` binary); `.ci/run` installs it, so in CI a missing SDK fails instead of
skipping. Kustomize has no installable binary here either: `kustomize_build` below applies exactly the
transformations config/deploy/kustomization.yaml asks for (namespace, labels without selectors, a
hashed ConfigMap generator), and `test_kustomize_build_covers_every_field_of_the_kustomization` fails
if the kustomization grows a field it does not apply.
"""

from __future__ import annotations

import copy
import hashlib
import os
import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from gangscale.controller.config import load_config
from gangscale.controller.metrics import Metrics

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "config" / "helm" / "gangscale"
DEPLOY = ROOT / "config" / "deploy"
WEBHOOK = DEPLOY / "webhook"
NAMESPACE = "gangscale-system"
HELM_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
               "helm.sh/chart"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}

try:
    import helm_python as helm
except ImportError:  # pragma: no cover - CI installs it
    if os.environ.get("CI"):
        raise
    pytest.skip("helm-python-sdk is not installed (`.ci/run` installs it)", allow_module_level=True)


def helm_template(values: dict | None = None) -> list[dict]:
    """`helm template gangscale config/helm/gangscale -n gangscale-system [--set ...]`."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values or {}, name="gangscale", namespace=NAMESPACE, is_install=True)
    return [d for _, text in sorted(rendered.items()) for d in yaml.safe_load_all(text) if d]


def installed(docs: list[dict]) -> list[dict]:
    """The objects `helm install` keeps: without the hooks (the uninstall's `gangscale ungate` Job and its RBAC,
    which kustomize users run by hand, docs/controller.md "Uninstall")."""
    return [d for d in docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]


def kustomize_build() -> list[dict]:
    """`kustomize build config/deploy`, for the fields that kustomization uses (its components' resources join
    its own before its namespace and labels apply, as kustomize does)."""
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs = [d for f in kust["resources"] for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d]
    for comp in kust.get("components", []):
        inner = yaml.safe_load((DEPLOY / comp / "kustomization.yaml").read_text())
        assert inner["kind"] == "Component" and set(inner) == {"apiVersion", "kind", "resources"}
        docs += [d for f in inner["resources"] for d in yaml.safe_load_all((DEPLOY / comp / f).read_text()) if d]
    for gen in kust["configMapGenerator"]:
        data = {f: (DEPLOY / f).read_text() for f in gen["files"]}
        suffix = hashlib.sha256(repr(sorted(data.items())).encode()).hexdigest()[:10]
        name = f"{gen['name']}-{suffix}" if not kust["generatorOptions"]["disableNameSuffixHash"] else gen["name"]
        docs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
        for d in docs:  # kustomize rewrites references to the generated name
            for vol in d.get("spec", {}).get("template", {}).get("spec", {}).get("volumes", []):
                if vol.get("configMap", {}).get("name") == gen["name"]:
                    vol["configMap"]["name"] = name
    for d in docs:
        if d["kind"] not in CLUSTER_SCOPED:
            d["metadata"]["namespace"] = kust["namespace"]
        for entry in kust["labels"]:
            assert entry["includeSelectors"] is False and not entry.get("includeTemplates")
            d["metadata"].setdefault("labels", {}).update(entry["pairs"])
    return docs


def normalise(docs: list[dict]) -> dict[tuple[str, str], dict]:
    """Drop Helm's own labels and config checksum, kustomize's name hash; read config.yaml as data."""
    out = {}
    for d in copy.deepcopy(docs):
        _drop_helm_labels(d)
        template = d.get("spec", {}).get("template", {}).get("metadata", {})
        template.get("annotations", {}).pop("checksum/config", None)
        if template.get("annotations") == {}:
            del template["annotations"]
        text = yaml.safe_dump(d)
        d = yaml.safe_load(re.sub(r"gangscale-config-[0-9a-f]{10}", "gangscale-config", text))
        if d["kind"] == "ConfigMap":
            d["data"] = {k: yaml.safe_load(v) for k, v in d["data"].items()}
        out[(d["kind"], d["metadata"]["name"])] = d
    return out


def _drop_helm_labels(node: object) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("labels"), dict):
            for key in HELM_LABELS:
                node["labels"].pop(key, None)
        for v in node.values():
            _drop_helm_labels(v)
    elif isinstance(node, list):
        for v in node:
            _drop_helm_labels(v)


def kustomize_webhook_component() -> list[dict]:
    """The objects config/deploy/webhook (a Component: no namespace or label transformer) adds."""
    kust = yaml.safe_load((WEBHOOK / "kustomization.yaml").read_text())
    assert set(kust) == {"apiVersion", "kind", "resources"}  # nothing else to apply
    return [d for f in kust["resources"] for d in yaml.safe_load_all((WEBHOOK / f).read_text()) if d]


def _without_empty_labels(docs: dict[tuple[str, str], dict]) -> dict[tuple[str, str], dict]:
    for d in docs.values():
        if d["metadata"].get("labels") == {}:
            del d["metadata"]["labels"]
    return docs


WEBHOOK_ON = {"webhook": {"enabled": True}}


def test_helm_lint_finds_no_error_or_warning_with_defaults_and_with_monitoring_on():
    for values in (None, {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}, WEBHOOK_ON):
        report = helm.lint(CHART, values, strict=True)
        assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_kustomize_build_covers_every_field_of_the_kustomization():
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert set(kust) == {"apiVersion", "kind", "namespace", "resources", "components", "configMapGenerator",
                         "generatorOptions", "labels"}
    assert set(kust["generatorOptions"]) == {"disableNameSuffixHash"}


def test_helm_template_with_defaults_equals_the_kustomize_output_apart_from_helm_labels():
    helm_docs = normalise(installed(helm_template()))
    kust_docs = normalise(kustomize_build())
    assert ("Namespace", NAMESPACE) not in helm_docs  # Helm: `--create-namespace`
    kust_docs.pop(("Namespace", NAMESPACE))
    assert sorted(helm_docs) == sorted(kust_docs)
    for key in kust_docs:
        assert helm_docs[key] == kust_docs[key], key
    namespace = normalise(helm_template({"createNamespace": True}))[("Namespace", NAMESPACE)]
    assert namespace == normalise(kustomize_build())[("Namespace", NAMESPACE)]


def test_helm_template_with_the_webhook_enabled_adds_the_kustomize_webhook_component_apart_from_helm_labels():
    base = normalise(installed(helm_template()))
    with_webhook = normalise(installed(helm_template(WEBHOOK_ON)))
    added = _without_empty_labels({k: v for k, v in with_webhook.items() if k not in base})
    component = _without_empty_labels(normalise(kustomize_webhook_component()))
    assert sorted(added) == sorted(component)
    for key in component:
        assert added[key] == component[key], key
    assert {k: with_webhook[k] for k in base} == base  # the controller's objects and config are untouched


def test_the_webhook_values_reach_the_hooks_and_the_config_the_webhook_loads(tmp_path):
    docs = helm_template({"webhook": {"enabled": True, "replicas": 3, "failurePolicy": "Fail", "timeoutSeconds": 3},
                          "image": {"repository": "registry.example/gs", "tag": "9.9.9"}})
    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    validating = objs[("ValidatingWebhookConfiguration", "gangscale")]["webhooks"][0]
    mutating = objs[("MutatingWebhookConfiguration", "gangscale")]["webhooks"][0]
    assert (validating["failurePolicy"], validating["timeoutSeconds"]) == ("Fail", 3)
    assert (mutating["failurePolicy"], mutating["timeoutSeconds"]) == ("Ignore", 3)
    dep = objs[("Deployment", "gangscale-webhook")]
    assert dep["spec"]["replicas"] == 3
    assert dep["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/gs:9.9.9"
    path = tmp_path / "config.yaml"
    path.write_text(objs[("ConfigMap", "gangscale-config")]["data"]["config.yaml"])
    admission = load_config(path).admission  # what the --self-signed bootstrap writes back into the hooks
    assert (admission.failure_policy, admission.timeout_seconds) == ("Fail", 3)
    assert admission.rules == load_config(DEPLOY / "config.yaml").admission.rules  # the rest is kept


def test_without_webhook_values_the_hooks_follow_the_config_admission_section():
    docs = helm_template({"webhook": {"enabled": True}, "config": {"admission": {"failurePolicy": "Fail",
                                                                                 "timeoutSeconds": 2}}})
    validating = next(d for d in docs if d["kind"] == "ValidatingWebhookConfiguration")["webhooks"][0]
    assert (validating["failurePolicy"], validating["timeoutSeconds"]) == ("Fail", 2)


def test_a_webhook_timeout_above_5_s_fails_the_render_naming_the_value():
    with pytest.raises(Exception, match="webhook.timeoutSeconds must be 1-5"):
        helm_template({"webhook": {"enabled": True, "timeoutSeconds": 9}})


@pytest.mark.parametrize("version", ["1.35.0", "1.36.0", "1.37.0"])
def test_the_rendered_webhook_objects_validate_against_the_official_schemas(version):
    docs = helm_template({"webhook": {"enabled": True}, "nodeSelector": {"role": "system"},
                          "image": {"pullPolicy": "Always"}, "podAnnotations": {"a": "b"}})
    kinds = set()
    for d in docs:
        if not d["apiVersion"].startswith("cert-manager.io/"):  # a CRD: no official schema
            kubernetes_validate.validate(d, version, strict=True)
            kinds.add(d["kind"])
    assert {"ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"} <= kinds


def test_every_object_helm_adds_labels_to_is_labelled_as_helm_documents():
    for d in helm_template(WEBHOOK_ON):
        assert HELM_LABELS <= set(d["metadata"]["labels"]), d["kind"]


@pytest.mark.parametrize("version", ["1.35.0", "1.36.0", "1.37.0"])
def test_the_rendered_chart_validates_against_the_official_schemas(version):
    for d in helm_template({"createNamespace": True, "nodeSelector": {"role": "system"},
                            "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
                            "image": {"pullPolicy": "Always"}, "podAnnotations": {"a": "b"}}):
        kubernetes_validate.validate(d, version, strict=True)


def test_values_reach_the_objects_and_the_config_the_controller_loads(tmp_path):
    docs = helm_template({
        "image": {"repository": "registry.example/gs", "tag": "9.9.9"}, "provider": "aws-eks",
        "clusterName": "prod-1", "region": "eu-west-1", "replicas": 3, "pdb": {"enabled": False},
        "serviceAccount": {"roleArn": "arn:aws:iam::123456789012:role/gs"},
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
        "config": {"mode": "enforce", "resyncSeconds": "45s"}})
    by_kind = {d["kind"]: d for d in installed(docs)}
    dep = by_kind["Deployment"]
    assert dep["spec"]["replicas"] == 3 and "PodDisruptionBudget" not in by_kind
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example/gs:9.9.9"
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    sa = by_kind["ServiceAccount"]
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/gs"}
    path = tmp_path / "config.yaml"
    path.write_text(by_kind["ConfigMap"]["data"]["config.yaml"])
    cfg = load_config(path)
    assert (cfg.provider, cfg.cluster_name, cfg.region, cfg.mode) == ("aws-eks", "prod-1", "eu-west-1", "enforce")
    assert cfg.resync_seconds == 45 and cfg.state_namespace == NAMESPACE
    assert cfg.cap_for("ml-research").max_nodes == 128  # the defaults not overridden are kept


def test_a_config_change_changes_the_pod_template_so_the_pods_roll():
    def checksum(values: dict) -> str:
        dep = next(d for d in helm_template(values) if d["kind"] == "Deployment")
        return dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    assert checksum({}) != checksum({"config": {"mode": "enforce"}})
    assert checksum({}) != checksum({"clusterName": "other"})


def test_an_empty_role_arn_leaves_the_service_account_unannotated():
    sa = next(d for d in installed(helm_template({"serviceAccount": {"roleArn": ""}})) if d["kind"] == "ServiceAccount")
    assert "annotations" not in sa["metadata"]


def test_the_service_monitor_and_alerts_are_off_by_default_and_name_real_metrics_when_on():
    assert {d["kind"] for d in helm_template()} & {"ServiceMonitor", "PrometheusRule"} == set()
    docs = helm_template({"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
                          "prometheusRule": {"enabled": True, "noSuccessfulPassMinutes": 7}})
    sm = next(d for d in docs if d["kind"] == "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics" and sm["metadata"]["labels"]["release"] == "prom"
    rules = next(d for d in docs if d["kind"] == "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert [r["alert"] for r in rules] == ["GangscaleNoSuccessfulPass", "GangscaleScaleUpFailures",
                                          "GangscaleStrandedCapacityReleased", "GangscaleGangsPastDeadline"]
    assert "[7m]" in rules[0]["expr"] and rules[0]["for"] == "7m"
    exported = {m.name for m in Metrics().registry.collect()}
    for rule in rules:
        for name in re.findall(r"gangscale_[a-z_]+", rule["expr"]):
            assert name.removesuffix("_total") in exported, (rule["alert"], name)
        assert "{{ $labels" not in rule["annotations"]["summary"] or "$labels." in rule["annotations"]["summary"]


def _ingress_ports(docs: list[dict], name: str) -> list[tuple[str, str | int]]:
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == name)
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    return [(p["protocol"], p["port"]) for rule in policy["spec"]["ingress"] for p in rule["ports"]]


def test_the_network_policies_admit_only_the_metrics_port_and_the_webhook_port_and_can_be_turned_off():
    docs = helm_template({"webhook": {"enabled": True}})
    controller = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "gangscale")
    ports = {p["name"] for c in controller["spec"]["template"]["spec"]["containers"] for p in c["ports"]}
    assert _ingress_ports(docs, "gangscale") == [("TCP", "metrics")] and ports == {"metrics"}
    assert _ingress_ports(docs, "gangscale-webhook") == [("TCP", "https")]
    selected = {d["metadata"]["name"]: d["spec"]["podSelector"]["matchLabels"] for d in docs
                if d["kind"] == "NetworkPolicy"}
    assert selected == {"gangscale": {"app.kubernetes.io/name": "gangscale"},
                        "gangscale-webhook": {"app.kubernetes.io/name": "gangscale-webhook"}}
    scraper = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    narrowed = helm_template({"networkPolicy": {"metricsFrom": scraper}})
    policy = next(d for d in narrowed if d["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"][0]["from"] == scraper
    off = helm_template({"webhook": {"enabled": True}, "networkPolicy": {"enabled": False}})
    assert not [d for d in off if d["kind"] == "NetworkPolicy"]


def test_a_health_address_moves_the_probes_and_the_network_policy_admits_its_port(tmp_path):
    docs = helm_template({"config": {"metricsAddress": "127.0.0.1:8080", "healthAddress": "0.0.0.0:8081"}})
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"metrics": 8080, "health": 8081}
    assert container["livenessProbe"]["httpGet"]["port"] == container["readinessProbe"]["httpGet"]["port"] == "health"
    assert _ingress_ports(docs, "gangscale") == [("TCP", "metrics"), ("TCP", "health")]
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(config)
    assert load_config(path).health_address == "0.0.0.0:8081"
