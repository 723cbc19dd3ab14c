"""The chart's operator values (config/helm/gangscale/values.yaml): every documented value changes what is rendered,
each reaches the field it names, the rendered objects stay valid against the official schemas, and the README's
values table is the one scripts/chart-values-table.py generates."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import kubernetes_validate
import pytest

from .test_helm_chart import CHART, helm_template, installed

ROOT = Path(__file__).resolve().parents[2]
# cert-manager on, so that the webhook's replicas and PDB (one self-signed replica has neither) are rendered too
BASE = {"webhook": {"enabled": True, "certManager": True}, "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True}}
DIGEST = "sha256:" + "ab" * 32

# One value per documented key that differs from its default (the test below fails when a key is added without one)
OVERRIDES = {
    "image.repository": "registry.example/gs", "image.tag": "9.9.9", "image.digest": DIGEST,
    "image.pullPolicy": "Always", "imagePullSecrets": [{"name": "regcred"}], "provider": "aws-eks",
    "clusterName": "prod", "region": "eu-west-1", "serviceAccount.name": "gs",
    "serviceAccount.roleArn": "arn:aws:iam::123456789012:role/other", "serviceAccount.annotations": {"a": "b"},
    "createNamespace": True, "replicas": 3, "strategy": {"type": "Recreate"}, "pdb.enabled": False,
    "pdb.minAvailable": 2, "logLevel": "debug", "extraArgs": ["--identity", "x"],
    "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}], "priorityClassName": "high",
    "resources": {"requests": {"cpu": "1"}}, "podSecurityContext": {"fsGroup": 2000},
    "securityContext": {"privileged": False}, "nodeSelector": {"role": "system"},
    "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"podAntiAffinity": None}, "topologySpreadConstraints": [], "podAnnotations": {"a": "b"},
    "config": {"mode": "enforce"}, "metricsPort": 9090, "serviceMonitor.enabled": False,
    "serviceMonitor.interval": "15s", "serviceMonitor.labels": {"release": "prom"}, "prometheusRule.enabled": False,
    "prometheusRule.labels": {"release": "prom"}, "prometheusRule.noSuccessfulPassMinutes": 7,
    "prometheusRule.scaleUpFailureWindow": "30m", "prometheusRule.releasedWindow": "1h",
    "prometheusRule.pastDeadlineFor": "10m", "prometheusRule.failedOpenWindow": "1h", "ungateOnUninstall": False, "webhook.enabled": False,
    "webhook.certManager": False, "webhook.replicas": 3, "webhook.pdb.minAvailable": 2,
    "webhook.failurePolicy": "Fail", "webhook.timeoutSeconds": 3, "webhook.resources": {"requests": {"cpu": "1"}},
    "webhook.extraArgs": ["--no-discovery"], "webhook.extraEnv": [{"name": "A", "value": "b"}],
    "webhook.affinity": {"nodeAffinity": None}, "webhook.topologySpreadConstraints": [],
}


def _script():
    spec = importlib.util.spec_from_file_location("chart_values_table", ROOT / "scripts" / "chart-values-table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def nested(path: str, value: object, base: dict | None = None) -> dict:
    out = copy.deepcopy(base or {})
    node = out
    *parents, last = path.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return out


def by_name(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in installed(docs)}


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    """Pod specs of the controller, the webhook and the uninstall hook, by workload name."""
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "Job")}


def test_the_readme_values_table_is_the_generated_one():
    script = _script()
    readme = (CHART / "README.md").read_text()
    assert script.with_table(readme, (CHART / "values.yaml").read_text()) == readme, \
        "run `python scripts/chart-values-table.py`"
    assert script.main(["--check"]) == 0


def test_the_table_script_reads_nested_keys_and_multi_line_comments():
    text = "a:\n  # -- first\n  # and more\n  b: 1\n  c: 2\n# -- top\nd: {x: 1}\n"
    assert _script().documented(text) == [("a.b", "first and more"), ("d", "top")]
    assert "| `a.b` | int | `1` | first and more |" in _script().table(text)


@pytest.mark.slow
def test_every_documented_value_changes_the_rendered_chart():
    keys = [k for k, _ in _script().documented((CHART / "values.yaml").read_text())]
    assert sorted(OVERRIDES) == sorted(keys)
    base = helm_template(BASE)
    unchanged = [k for k in keys if helm_template(nested(k, OVERRIDES[k], BASE)) == base]
    assert unchanged == []


def test_the_image_is_pinned_by_digest_in_every_pod_and_pulled_with_the_secrets():
    docs = helm_template(nested("image.digest", DIGEST, {**BASE, "imagePullSecrets": [{"name": "regcred"}]}))
    specs = pod_specs(docs)
    assert set(specs) == {"gangscale", "gangscale-webhook", "gangscale-ungate"}
    for spec in specs.values():
        assert spec["containers"][0]["image"] == f"ghcr.io/gangscale/gangscale:0.1.0@{DIGEST}"
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert "imagePullSecrets" not in pod_specs(helm_template())["gangscale"]


def test_log_level_and_extra_args_and_env_reach_the_containers():
    docs = helm_template({**BASE, "logLevel": "debug", "extraArgs": ["--identity", "x"],
                          "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                          "webhook": {"enabled": True, "extraArgs": ["--no-discovery"],
                                      "extraEnv": [{"name": "A", "value": "b"}]}})
    ctl, hook = pod_specs(docs)["gangscale"]["containers"][0], pod_specs(docs)["gangscale-webhook"]["containers"][0]
    assert ctl["args"] == ["run", "--config", "/etc/gangscale/config.yaml", "--log-level", "debug", "--identity", "x"]
    assert ctl["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy:3128"}
    assert [e["name"] for e in ctl["env"]] == ["POD_NAME", "AWS_STS_REGIONAL_ENDPOINTS", "HTTPS_PROXY"]
    assert hook["args"][-1] == "--no-discovery" and hook["env"] == [{"name": "A", "value": "b"}]


def test_the_log_level_and_args_parse_as_gangscale_run_flags():
    from gangscale.cli import build_parser

    args = pod_specs(helm_template({"logLevel": "warning", "extraArgs": ["--identity", "x"]}))["gangscale"]
    parsed = build_parser().parse_args(args["containers"][0]["args"])
    assert (parsed.command, parsed.log_level, parsed.identity) == ("run", "warning", "x")


def test_the_default_security_context_has_no_fixed_uid_and_is_overridable():
    for name, spec in pod_specs(helm_template(BASE)).items():
        assert spec["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}, name
        assert "runAsUser" not in str(spec), name  # OpenShift's restricted SCC assigns a random UID
        sc = spec["containers"][0]["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["capabilities"] == {"drop": ["ALL"]}, name
    spec = pod_specs(helm_template({"podSecurityContext": {"runAsUser": 1001, "fsGroup": 2000},
                                    "securityContext": {"readOnlyRootFilesystem": False}}))["gangscale"]
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1001, "fsGroup": 2000,
                                       "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is False


def test_the_replicas_are_kept_apart_by_required_anti_affinity_and_spread_over_zones():
    docs = helm_template(BASE)
    for name, spec in pod_specs(docs).items():
        if name == "gangscale-ungate":
            continue
        [term] = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == {"topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": name}}}
        [spread] = spec["topologySpreadConstraints"]
        assert spread["topologyKey"] == "topology.kubernetes.io/zone"
        assert spread["labelSelector"] == term["labelSelector"]
        [expr] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"]
        assert expr == {"key": "gangscale.io/node-group", "operator": "DoesNotExist"}
    for dep in (d for d in docs if d["kind"] == "Deployment"):  # a rollout never needs a third node
        assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    spec = pod_specs(helm_template({"affinity": {"podAntiAffinity": None}}))["gangscale"]
    assert set(spec["affinity"]) == {"nodeAffinity"}  # a key set to null is dropped, the rest kept


def test_priority_node_selector_and_tolerations_reach_every_pod_and_an_empty_priority_is_left_out():
    values = {**BASE, "nodeSelector": {"role": "system"},
              "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}]}
    for name, spec in pod_specs(helm_template(values)).items():
        assert spec["priorityClassName"] == "system-cluster-critical", name
        assert spec["nodeSelector"] == {"role": "system"} and spec["tolerations"][0]["key"] == "system", name
    assert "priorityClassName" not in pod_specs(helm_template({"priorityClassName": ""}))["gangscale"]


@pytest.mark.parametrize("version", ["1.35.0", "1.37.0"])
def test_the_chart_with_every_operator_value_set_validates_against_the_official_schemas(version):
    values = {**BASE, "image": {"digest": DIGEST, "pullPolicy": "IfNotPresent"}, "imagePullSecrets": [{"name": "r"}],
              "logLevel": "debug", "extraArgs": ["--identity", "x"], "extraEnv": [{"name": "A", "value": "b"}],
              "podSecurityContext": {"fsGroup": 2000}, "securityContext": {"runAsNonRoot": True},
              "nodeSelector": {"role": "system"},
              "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
              "webhook": {"enabled": True, "extraArgs": ["--no-discovery"], "extraEnv": [{"name": "A", "value": "b"}]},
              "createNamespace": True}
    kinds = set()
    for d in helm_template(values):
        if d["apiVersion"].startswith(("cert-manager.io/", "monitoring.coreos.com/")):  # CRDs: no official schema
            continue
        kubernetes_validate.validate(d, version, strict=True)
        kinds.add(d["kind"])
    assert {"Deployment", "Job", "ClusterRole", "ServiceAccount"} <= kinds
