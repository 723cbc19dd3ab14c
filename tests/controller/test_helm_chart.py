"""The Helm chart (config/helm/gangscale): lints, renders valid objects, and with its defaults renders
what the kustomize manifests (config/deploy) apply, apart from the labels Helm adds: the controller, gate
mode's grants and the admission webhooks with the self-signed bootstrap; with `webhook.certManager=true` the
overlay without the webhook/self-signed component, with `webhook.enabled=false` the one without the webhook.

Helm here is the Helm v4 Go SDK itself, from the `helm-python-sdk` wheel (no Debian package or PyPI
wheel ships a Linux `helm` binary); `.ci/run` installs it, so in CI a missing SDK fails instead of
skipping. Kustomize has no installable binary here either: `kustomize_build` below applies exactly the
transformations config/deploy/kustomization.yaml asks for (components with their strategic-merge
patches, namespace, labels without selectors, a hashed ConfigMap generator), and `test_kustomize_build_covers_every_field_of_the_kustomization` fails
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
NAMESPACE = "gangscale-system"
HELM_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "app.kubernetes.io/version",
               "helm.sh/chart"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}

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


def kustomize_build(components: list[str] | None = None) -> list[dict]:
    """`kustomize build config/deploy` (with `components` in place of its own when given), for the fields that
    kustomization uses: each component's resources join its own, then the component's strategic-merge patches
    apply, then its namespace and labels, as kustomize does."""
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    docs = [d for f in kust["resources"] for d in yaml.safe_load_all((DEPLOY / f).read_text()) if d]
    for comp in kust.get("components", []) if components is None else components:
        inner = yaml.safe_load((DEPLOY / comp / "kustomization.yaml").read_text())
        assert inner["kind"] == "Component" and set(inner) <= {"apiVersion", "kind", "resources", "patches"}
        docs += [d for f in inner["resources"] for d in yaml.safe_load_all((DEPLOY / comp / f).read_text()) if d]
        for entry in inner.get("patches", []):
            assert set(entry) == {"path"}  # a file of patches, each naming its one target
            for patch in yaml.safe_load_all((DEPLOY / comp / entry["path"]).read_text()):
                docs = apply_patch(docs, patch)
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


def apply_patch(docs: list[dict], patch: dict) -> list[dict]:
    """One strategic-merge patch: it names exactly one object (apiVersion, kind, name, namespace), which
    `$patch: delete` removes; otherwise maps merge key by key, a null deletes its key, lists of named items (the
    pod spec's containers, volumes, volumeMounts) merge item by item, and any other list is replaced."""
    meta = patch["metadata"]

    def named(d: dict) -> bool:
        return (d["apiVersion"], d["kind"], d["metadata"]["name"], d["metadata"].get("namespace")) == (
            patch["apiVersion"], patch["kind"], meta["name"], meta.get("namespace"))

    [target] = [d for d in docs if named(d)]  # kustomize: "failed to find unique target for patch"
    if patch.get("$patch") == "delete":
        return [d for d in docs if d is not target]
    return [_merge(d, patch) if d is target else d for d in docs]


def _merge(base: object, patch: object) -> object:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(out[key], value) if key in out else value
        return out
    if isinstance(base, list) and isinstance(patch, list) and all(
            isinstance(item, dict) and "name" in item for item in base + patch):
        merged = list(base)
        for item in patch:
            at = [i for i, old in enumerate(merged) if old["name"] == item["name"]]
            if at:
                merged[at[0]] = _merge(merged[at[0]], item)
            else:
                merged.append(item)
        return merged
    return patch


def normalise(docs: list[dict]) -> dict[tuple[str, str], dict]:
    """Drop Helm's own labels and config checksum, kustomize's name hash; read config.yaml as data."""
    out = {}
    for d in copy.deepcopy(docs):
        _drop_helm_labels(d)
        template = d.get("spec", {}).get("template", {}).get("metadata", {})
        template.get("annotations", {}).pop("checksum/config", None)
        for meta in (template, d["metadata"]):  # a patch that deletes the last annotation leaves an empty map
            if meta.get("annotations") == {}:
                del meta["annotations"]
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


CERT_MANAGER = {"webhook": {"certManager": True}}


def test_helm_lint_finds_no_error_or_warning_with_defaults_and_with_monitoring_on():
    for values in (None, {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}, CERT_MANAGER,
                   {"webhook": {"enabled": False}}):
        report = helm.lint(CHART, values, strict=True)
        assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_kustomize_build_covers_every_field_of_the_kustomization():
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert set(kust) == {"apiVersion", "kind", "namespace", "resources", "components", "configMapGenerator",
                         "generatorOptions", "labels"}
    assert set(kust["generatorOptions"]) == {"disableNameSuffixHash"}


# The chart's webhook settings and the kustomize components that render the same objects: the defaults (the webhook
# with the self-signed bootstrap), cert-manager (the overlay without webhook/self-signed), no webhook (gate-mode alone).
INSTALLS = [({}, None), ({"webhook": {"certManager": True}}, ["gate-mode", "webhook"]),
            ({"webhook": {"enabled": False}}, ["gate-mode"])]


@pytest.mark.parametrize("values, components", INSTALLS)
def test_helm_template_equals_the_kustomize_output_apart_from_helm_labels(values, components):
    helm_docs = normalise(installed(helm_template(values)))
    kust_docs = normalise(kustomize_build(components))
    assert ("Namespace", NAMESPACE) not in helm_docs  # Helm: `--create-namespace`
    kust_docs.pop(("Namespace", NAMESPACE))
    assert sorted(helm_docs) == sorted(kust_docs)
    for key in kust_docs:
        assert helm_docs[key] == kust_docs[key], key
    namespace = normalise(helm_template({**values, "createNamespace": True}))[("Namespace", NAMESPACE)]
    assert namespace == normalise(kustomize_build(components))[("Namespace", NAMESPACE)]


def test_turning_the_webhook_off_or_to_cert_manager_leaves_the_controllers_objects_untouched():
    base = normalise(installed(helm_template({"webhook": {"enabled": False}})))
    for values, _ in INSTALLS:
        docs = normalise(installed(helm_template(values)))
        assert {k: docs[k] for k in base} == base


def _pod_args(docs: list[dict], name: str) -> list[str]:
    dep = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)
    return dep["spec"]["template"]["spec"]["containers"][0]["args"]


def assert_the_install_gates_gang_pods_once_enforced(docs: list[dict], tmp_path: Path) -> None:
    """The shipped install: the mutating hook on every namespace but the system ones and those labelled
    gangscale.io/gate-mode=false, ignored when it fails; its certificate from the self-signed bootstrap, so no
    cert-manager; gate mode's pod writes and the two policies fencing them; and a config in dry-run, in which the
    hook sets no gate, with gateMode opt-out."""
    from gangscale.cli import build_parser
    from gangscale.controller.config import SYSTEM_NAMESPACES
    from gangscale.controller.gates import GATE_MODE_KEY

    objs = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    [hook] = objs[("MutatingWebhookConfiguration", "gangscale")]["webhooks"]
    assert hook["failurePolicy"] == "Ignore"  # a webhook that is down never blocks a pod
    assert hook["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [*SYSTEM_NAMESPACES, NAMESPACE]},
        {"key": GATE_MODE_KEY, "operator": "NotIn", "values": ["false"]}]}
    assert hook["clientConfig"]["service"] == {"name": "gangscale-webhook", "namespace": NAMESPACE,
                                               "path": "/mutate", "port": 443}
    assert ("Service", "gangscale-webhook") in objs and ("ValidatingWebhookConfiguration", "gangscale") in objs
    webhook = build_parser().parse_args(_pod_args(docs, "gangscale-webhook"))
    assert webhook.self_signed and webhook.service == f"gangscale-webhook.{NAMESPACE}"
    assert objs[("Deployment", "gangscale-webhook")]["spec"]["replicas"] == 1
    assert ("ClusterRole", "gangscale-webhook-self-signed") in objs
    assert not [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
    assert objs[("ClusterRole", "gangscale-gate-mode")]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch", "delete"]}]
    for name in ("gangscale-pod-writes", "gangscale-capacity-gate"):
        assert objs[("ValidatingAdmissionPolicyBinding", name)]["spec"] == {"policyName": name,
                                                                           "validationActions": ["Deny"]}
        assert objs[("ValidatingAdmissionPolicy", name)]["spec"]["failurePolicy"] == "Fail"
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"]
    (tmp_path / "config.yaml").write_text(config)
    cfg = load_config(tmp_path / "config.yaml")
    assert (cfg.mode, cfg.gate_mode, cfg.admission.failure_policy) == ("dry-run", "opt-out", "Ignore")
    for version in ("1.35.0", "1.36.0", "1.37.0"):
        for d in docs:
            kubernetes_validate.validate(d, version, strict=True)


def test_the_default_chart_gates_gang_pods_in_every_namespace_but_the_system_ones_once_enforced(tmp_path):
    assert_the_install_gates_gang_pods_once_enforced(installed(helm_template()), tmp_path)


def test_the_default_kustomize_build_gates_gang_pods_in_every_namespace_but_the_system_ones_once_enforced(tmp_path):
    assert_the_install_gates_gang_pods_once_enforced(kustomize_build(), tmp_path)


def test_the_webhook_values_reach_the_hooks_and_the_config_the_webhook_loads(tmp_path):
    docs = helm_template({"webhook": {"certManager": True, "replicas": 3, "failurePolicy": "Fail", "timeoutSeconds": 3},
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
    for d in helm_template(CERT_MANAGER) + helm_template():
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
    by_kind = {d["kind"]: d for d in installed(docs) if not d["metadata"]["name"].startswith("gangscale-webhook")}
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
                          "prometheusRule": {"enabled": True, "noSuccessfulPassMinutes": 7},
                          "webhook": {"enabled": False}})  # the webhook's alerts: tests/webhook/test_failopen_manifests.py
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
