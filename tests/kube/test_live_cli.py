"""`gangscale plan` / `dump` / `check` against emulated 1.35, 1.36 and 1.37 servers, through the real client."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gangscale.cli import main
from gangscale.kube.live import read_cluster
from gangscale.loader import read_objects

from .conftest import FIXTURES, RELEASE_FIXTURE, load_fixture
from .emulator import Emulator

CATALOG = str(FIXTURES / "catalog.yaml")
ROOT = Path(__file__).resolve().parents[2]


def namespaces(*names: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]


def cluster(make_emulator, release: str = "1.36", *fixtures: str, **kw: Any) -> Emulator:
    emu = make_emulator(release=release, **kw)
    emu.apply_all(namespaces("ml", "batch") + load_fixture("nodes.yaml"))
    for f in fixtures or (RELEASE_FIXTURE[release],):
        emu.apply_all(load_fixture(f))
    return emu


def plan_json(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "plan.json"
    assert main(["plan", "--nodegroups", CATALOG, "--time-limit", "2", "-o", "json", "--output-file", str(out),
                 *args]) == 0
    return json.loads(out.read_text())


def decisions(plan: dict[str, Any]) -> dict[str, str]:
    return {f"{g['namespace']}/{g['name']}": g["decision"] for g in plan["gangs"]}


# ------------------------------------------------------------------------- plan


@pytest.mark.parametrize("release", sorted(RELEASE_FIXTURE))
def test_plan_live_matches_plan_from_its_dump(release, make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, release)
    kc = kubeconfig_for(emu)
    live = plan_json(tmp_path, "--kubeconfig", kc)
    gang = "ml/train/workers" if release == "1.35" else "ml/train"
    assert decisions(live) == {gang: "scale-up"}
    assert live["scaleUp"] == {"cpu": 1} and live["warnings"] == []

    dump = tmp_path / "cluster.json"
    assert main(["dump", "--kubeconfig", kc, "--output-file", str(dump)]) == 0
    from_file = plan_json(tmp_path, "--cluster", str(dump))
    assert (decisions(from_file), from_file["scaleUp"]) == (decisions(live), live["scaleUp"])


@pytest.mark.parametrize("release", sorted(RELEASE_FIXTURE))
def test_what_the_server_returns_still_validates_for_its_release(release, make_emulator, client_for):
    """The emulator answers like the real thing: read objects pass the release's strict schemas."""
    emu = cluster(make_emulator, release)
    objs = read_cluster(client_for(emu)).objects
    assert {o["kind"] for o in objs} >= {"Node", "Pod"}
    for obj in objs:
        kubernetes_validate.validate(obj, release, strict=True)


def test_plan_reads_every_gang_flavour_the_server_serves(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, "1.37", "v1beta1-podgroup.yaml", "coscheduling-podgroup.yaml",
                  "volcano-podgroup.yaml", coscheduling=True, volcano=True)
    plan = plan_json(tmp_path, "--kubeconfig", kubeconfig_for(emu))
    assert {g["api"] for g in plan["gangs"]} == {
        "scheduling.k8s.io/v1beta1", "scheduling.x-k8s.io/v1alpha1", "scheduling.volcano.sh/v1beta1"}
    pods = [r for r in emu.requests if r.path == "/api/v1/pods"]
    assert len(pods) == 1  # pods are read once, for the whole cluster, not once per gang


def test_plan_with_a_namespace_plans_only_its_gangs(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, "1.36", "v1alpha2-podgroup.yaml", "volcano-podgroup.yaml", volcano=True)
    plan = plan_json(tmp_path, "--kubeconfig", kubeconfig_for(emu), "-n", "batch")
    assert decisions(plan) == {"batch/vc-train": "scale-up"}
    assert "/apis/scheduling.volcano.sh/v1beta1/namespaces/batch/podgroups" in {r.path for r in emu.requests}


def test_a_server_without_gang_api_plans_pods_alone_and_says_why(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, "1.36", native_versions=(), generic_workload=False)
    plan = plan_json(tmp_path, "--kubeconfig", kubeconfig_for(emu))
    assert {g["api"] for g in plan["gangs"]} == {"none"}  # the server dropped the pods' link
    assert any("serves no gang API" in w for w in plan["warnings"])


def test_plan_waits_for_a_podgroup_that_is_not_there_yet(make_emulator, kubeconfig_for, tmp_path):
    emu = make_emulator(release="1.36")
    emu.apply_all(namespaces("ml") + load_fixture("nodes.yaml"))
    emu.apply_all([o for o in load_fixture("v1alpha2-podgroup.yaml") if o["kind"] == "Pod"])
    plan = plan_json(tmp_path, "--kubeconfig", kubeconfig_for(emu))
    assert decisions(plan) == {"ml/train": "waiting-for-podgroup"} and plan["scaleUp"] == {}


def test_a_malformed_podgroup_is_reported_and_the_rest_is_planned(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, "1.36", "v1alpha2-podgroup.yaml", "volcano-podgroup.yaml", volcano=True)
    emu.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
               "metadata": {"name": "vc-train", "namespace": "batch"}, "spec": {"minMember": "two"}})
    plan = plan_json(tmp_path, "--kubeconfig", kubeconfig_for(emu))
    got = decisions(plan)
    assert got["batch/vc-train"] == "invalid" and got["ml/train"] == "scale-up"
    assert "spec.minMember" in next(g["reason"] for g in plan["gangs"] if g["name"] == "vc-train")


def test_context_flag_picks_the_cluster(make_emulator, tmp_path):
    emu = cluster(make_emulator, "1.36")
    kc = tmp_path / "two-contexts.yaml"
    kc.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "dead",
        "clusters": [{"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}},
                     {"name": "emu", "cluster": {"server": emu.url}}],
        "users": [{"name": "u", "user": {"token": emu.token}}],
        "contexts": [{"name": "dead", "context": {"cluster": "dead", "user": "u"}},
                     {"name": "emu", "context": {"cluster": "emu", "user": "u"}}],
    }))
    assert decisions(plan_json(tmp_path, "--kubeconfig", str(kc), "--context", "emu")) == {"ml/train": "scale-up"}


@pytest.mark.parametrize("case", ["unreachable", "bad-token", "no-config", "missing-file", "in-cluster-no-token"])
def test_a_cluster_that_cannot_be_read_exits_2_with_one_sentence(case, make_emulator, kubeconfig_for, tmp_path,
                                                                  monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if case == "unreachable":
        emu = make_emulator(release="1.36")
        kc = kubeconfig_for(emu)
        emu.stop()
        args = ["--kubeconfig", kc, "--request-timeout", "2"]
    elif case == "bad-token":
        args = ["--kubeconfig", kubeconfig_for(make_emulator(release="1.36"), token="wrong")]
    elif case == "missing-file":
        args = ["--kubeconfig", str(tmp_path / "nope")]
    elif case == "in-cluster-no-token":  # in a pod whose service account token is not mounted
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
        monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "1")
        args = []
    else:
        args = []
    assert main(["plan", "--nodegroups", CATALOG, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gangscale: ") and "Traceback" not in err and len(err.splitlines()) == 1
    expected = {"unreachable": "cannot reach the API server", "bad-token": "401",
                "no-config": "--kubeconfig", "missing-file": "no such kubeconfig",
                "in-cluster-no-token": "token"}[case]
    assert expected in err


# ------------------------------------------------------------------------- dump


def test_dump_redacts_secrets_and_reads_back(make_emulator, kubeconfig_for, tmp_path):
    emu = cluster(make_emulator, "1.36")
    out = tmp_path / "dump.yaml"
    assert main(["dump", "--kubeconfig", kubeconfig_for(emu), "-o", "yaml", "--output-file", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# gangscale dump of http://127.0.0.1:") and "s3cr3t" not in text
    objs = read_objects(out)
    assert {o["kind"] for o in objs} == {"Node", "Pod", "PodGroup"}
    pod = next(o for o in objs if o["metadata"]["name"] == "train-0")
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "train"}
    assert pod["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "4", "memory": "8Gi"}
    assert "env" not in pod["spec"]["containers"][0]

    raw = tmp_path / "raw.json"
    assert main(["dump", "--kubeconfig", kubeconfig_for(emu), "--no-redact", "--output-file", str(raw)]) == 0
    assert "s3cr3t" in raw.read_text()


# ------------------------------------------------------------------------ check


def run_check(emu: Emulator, kubeconfig_for, capsys, *extra: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", "--kubeconfig", kubeconfig_for(emu), "-o", "json", *extra])
    report = json.loads(capsys.readouterr().out)
    assert report["exitCode"] == code
    return code, {r["name"]: r for r in report["results"]}


@pytest.mark.parametrize("release, maturity", [("1.35", "warn"), ("1.36", "warn"), ("1.37", "info")])
def test_check_passes_on_each_release_with_the_gates_on(release, maturity, make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release=release)
    code, r = run_check(emu, kubeconfig_for, capsys)
    assert code == 0
    verdicts = {k: v["verdict"] for k, v in r.items()}
    assert verdicts == {"server": "ok", "gang-apis": "ok", "api-maturity": maturity, "pod-field": "ok",
                        "scheduler": "info", "rbac": "ok", "cluster-autoscaler": "ok",
                        "webhooks": "info", "limits": "ok",  # limits: the built-in defaults, no --config
                        "daemonsets": "info"}
    field = "workloadRef" if release == "1.35" else "schedulingGroup"
    assert field in r["pod-field"]["summary"]
    assert ("alpha" if maturity == "warn" else "beta but off by default") in r["api-maturity"]["summary"]
    probes = [x for x in emu.requests if x.method == "POST" and x.path == "/api/v1/namespaces/default/pods"]
    assert probes and all(x.query.get("dryRun") == "All" for x in probes)
    assert emu.get("v1", "Pod", "default", "gangscale-check") is None  # never changes the cluster


def test_check_fails_when_the_feature_gate_is_off(make_emulator, kubeconfig_for, capsys):
    code, r = run_check(make_emulator(release="1.36", native_versions=(), generic_workload=False), kubeconfig_for,
                        capsys)
    assert code == 1
    assert r["gang-apis"]["verdict"] == "fail" and "--runtime-config=scheduling.k8s.io/v1alpha2=true" in " ".join(
        r["gang-apis"]["detail"])
    assert r["pod-field"]["verdict"] == "warn" and "drops spec.schedulingGroup" in r["pod-field"]["summary"]


def test_check_fails_when_the_api_is_served_but_the_apiserver_drops_the_field(make_emulator, kubeconfig_for,
                                                                               capsys):
    """API servers with mixed flags: discovery from one, the create lands on one without the gate."""
    code, r = run_check(make_emulator(release="1.37", generic_workload=False), kubeconfig_for, capsys)
    assert code == 1 and r["pod-field"]["verdict"] == "fail"
    assert "GenericWorkload" in r["pod-field"]["summary"]


def test_check_with_only_volcano_is_fine_without_the_native_field(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36", native_versions=(), generic_workload=False, volcano=True)
    code, r = run_check(emu, kubeconfig_for, capsys)
    assert code == 0 and r["gang-apis"]["verdict"] == "ok" and r["pod-field"]["verdict"] == "info"
    assert r["api-maturity"]["verdict"] == "info"


def test_check_reports_missing_permissions(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36")
    emu.denied |= {("watch", "", "pods"), ("list", "scheduling.k8s.io", "podgroups")}
    code, r = run_check(emu, kubeconfig_for, capsys)
    assert code == 1 and r["rbac"]["verdict"] == "fail"
    assert "watch pods (all namespaces)" in r["rbac"]["summary"]
    assert "list podgroups.scheduling.k8s.io" in r["rbac"]["summary"]


def test_check_warns_about_cluster_autoscaler_on_the_same_groups(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36")
    emu.apply({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
        "spec": {"template": {"spec": {"containers": [{
            "name": "cluster-autoscaler", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0",
            "command": ["./cluster-autoscaler", "--cloud-provider=aws", "--nodes=1:10:cpu", "--nodes=0:4:other",
                        "--node-group-auto-discovery=asg:tag=k8s.io/cluster-autoscaler/enabled"]}]}}},
    })
    code, r = run_check(emu, kubeconfig_for, capsys, "--nodegroups", CATALOG)
    ca = r["cluster-autoscaler"]
    assert code == 0 and ca["verdict"] == "warn" and "kube-system/cluster-autoscaler" in ca["summary"]
    text = " ".join(ca["detail"])
    assert "CA and gangscale both scale: cpu" in text and "asg:tag=k8s.io/cluster-autoscaler/enabled" in text
    assert "remove CA's auto-discovery tags" in text


def test_check_sees_a_managed_autoscaler_by_its_status_configmap(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36")
    emu.apply({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cluster-autoscaler-status", "namespace": "kube-system"},
               "data": {"status": "Cluster-autoscaler status at ..."}})
    _, r = run_check(emu, kubeconfig_for, capsys)
    assert r["cluster-autoscaler"]["verdict"] == "warn" and "cluster-autoscaler-status" in r["cluster-autoscaler"][
        "summary"]


@pytest.mark.parametrize("gates, verdict", [("GenericWorkload=true,GangScheduling=true", "ok"),
                                            ("GenericWorkload=true", "fail")])
def test_check_reads_the_scheduler_gates_of_a_kubeadm_control_plane(gates, verdict, make_emulator, kubeconfig_for,
                                                                     capsys):
    emu = make_emulator(release="1.36")
    emu.apply({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "kube-scheduler-cp", "namespace": "kube-system",
                            "labels": {"component": "kube-scheduler", "tier": "control-plane"}},
               "spec": {"nodeName": "cp", "containers": [{"name": "kube-scheduler", "image": "kube-scheduler",
                        "command": ["kube-scheduler", f"--feature-gates={gates}", "--leader-elect=true"]}]}})
    code, r = run_check(emu, kubeconfig_for, capsys)
    assert r["scheduler"]["verdict"] == verdict and code == (0 if verdict == "ok" else 1)


def test_check_on_an_unreachable_server_exits_2(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36")
    kc = kubeconfig_for(emu)
    emu.stop()
    assert main(["check", "--kubeconfig", kc, "--request-timeout", "2"]) == 2
    out = capsys.readouterr().out
    assert "FAIL  server" in out and "exit 2" in out


def test_check_as_a_user_runs_it(make_emulator, kubeconfig_for):
    emu = make_emulator(release="1.36")
    proc = subprocess.run([sys.executable, "-m", "gangscale", "check", "--kubeconfig", kubeconfig_for(emu)],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "OK    pod-field" in proc.stdout and "WARN  api-maturity" in proc.stdout
    assert proc.stdout.rstrip().endswith("result: 0 failed, 1 warnings (exit 0)")
