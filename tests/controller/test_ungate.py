"""`gangscale ungate` against the emulator (the official client over HTTP): every `gangscale.io/capacity` gate
lifted, other gates kept, nothing changed by --dry-run, -n limits it; and the Helm chart's pre-delete hook runs
it with RBAC that allows exactly that."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gangscale.cli import main
from tests.kube.emulator import Emulator

ROOT = Path(__file__).resolve().parents[2]
GATE = "gangscale.io/capacity"
KUEUE = "kueue.x-k8s.io/admission"


def pod(ns: str, name: str, *gates: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingGates": [{"name": g} for g in gates],
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1"}}}]}}


@pytest.fixture
def emu(tmp_path):
    e = Emulator(release="1.36").start()
    for ns in ("ml", "web"):
        e.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    e.apply_all([pod("ml", "a-0", GATE), pod("ml", "a-1", KUEUE, GATE), pod("web", "b-0", GATE),
                 pod("web", "plain"), pod("web", "queued", KUEUE)])
    try:
        yield e, e.kubeconfig(str(tmp_path / "kc"))
    finally:
        e.stop()


def gates_of(e: Emulator, ns: str, name: str) -> list[str]:
    return [g["name"] for g in e.get("v1", "Pod", ns, name)["spec"].get("schedulingGates") or []]


def all_gates(e: Emulator) -> dict[str, list[str]]:
    return {f"{ns}/{n}": gates_of(e, ns, n) for ns, n in (("ml", "a-0"), ("ml", "a-1"), ("web", "b-0"),
                                                           ("web", "plain"), ("web", "queued"))}


def test_ungate_lifts_every_capacity_gate_in_every_namespace_and_keeps_the_other_gates(emu, capsys):
    e, kc = emu
    code = main(["ungate", "--kubeconfig", kc])
    out = capsys.readouterr().out
    assert code == 0
    assert all_gates(e) == {"ml/a-0": [], "ml/a-1": [KUEUE], "web/b-0": [], "web/plain": [], "web/queued": [KUEUE]}
    assert out.splitlines()[-1] == "3 pod(s) lifted in all namespaces"
    assert f"lifted {GATE} from pod ml/a-1" in out
    assert main(["ungate", "--kubeconfig", kc]) == 0  # idempotent: nothing left to lift
    assert capsys.readouterr().out.splitlines()[-1] == "0 pod(s) lifted in all namespaces"


def test_ungate_dry_run_lists_the_gated_pods_and_changes_nothing(emu, capsys):
    e, kc = emu
    before = all_gates(e)
    assert main(["ungate", "--kubeconfig", kc, "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"would lift {GATE} from pod ml/a-0", f"would lift {GATE} from pod ml/a-1",
                   f"would lift {GATE} from pod web/b-0", "3 pod(s) would lift in all namespaces"]
    assert all_gates(e) == before


def test_ungate_with_a_namespace_touches_only_that_namespace(emu, capsys):
    e, kc = emu
    assert main(["ungate", "--kubeconfig", kc, "-n", "web"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 pod(s) lifted in namespace web"
    assert gates_of(e, "web", "b-0") == [] and gates_of(e, "ml", "a-0") == [GATE]


def test_a_patch_built_from_a_stale_read_is_built_again_from_a_fresh_one(emu):
    from gangscale.controller import ungate as mod
    from gangscale.kube.client import connect

    e, kc = emu
    real = mod.gated

    def stale(pods, gate=GATE):  # the list saw ml/a-1's gates before the Kueue gate ahead of ours was lifted
        return [(ns, n, [GATE] if (ns, n) == ("ml", "a-1") else names) for ns, n, names in real(pods, gate)]

    mod.gated = stale
    try:
        with connect(kc) as client:
            report = mod.ungate(client)
    finally:
        mod.gated = real
    assert report.failed == {} and sorted(report.lifted) == ["ml/a-0", "ml/a-1", "web/b-0"]
    assert gates_of(e, "ml", "a-1") == [KUEUE]


def test_the_chart_runs_ungate_as_a_pre_delete_hook_with_rbac_for_exactly_that():
    from .test_helm_chart import helm_template

    def hooks(values: dict) -> list[dict]:
        return [d for d in helm_template(values) if "helm.sh/hook" in d["metadata"].get("annotations", {})]

    docs = hooks({"webhook": {"enabled": False}})
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    assert {d["metadata"]["annotations"]["helm.sh/hook"] for d in docs} == {"pre-delete"}
    weights = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in by_kind.items()}
    assert weights["Job"] > max(weights[k] for k in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"))
    assert [r["verbs"] for r in by_kind["ClusterRole"]["rules"]] == [["list", "get", "patch"]]
    assert by_kind["ClusterRole"]["rules"][0]["resources"] == ["pods"]
    job = by_kind["Job"]["spec"]["template"]["spec"]
    assert job["containers"][0]["args"] == ["ungate"] and job["restartPolicy"] == "Never"
    assert job["serviceAccountName"] == by_kind["ServiceAccount"]["metadata"]["name"]
    assert job["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert not hooks({"ungateOnUninstall": False})
    # with the webhook (the default) the hook first deletes the gating hook, and may delete only that
    [role] = [d for d in hooks({}) if d["kind"] == "ClusterRole"]
    assert role["rules"][1:] == [{"apiGroups": ["admissionregistration.k8s.io"],
                                  "resources": ["mutatingwebhookconfigurations"], "resourceNames": ["gangscale"],
                                  "verbs": ["delete"]}]


def documented_command() -> str:
    """The kubectl-only command docs/controller.md gives kustomize users (the line after `<!-- ungate-kubectl -->`)."""
    text = (ROOT / "docs" / "controller.md").read_text()
    block = text[text.index("<!-- ungate-kubectl -->"):].split("```sh\n", 1)[1].split("```", 1)[0]
    [line] = block.strip().splitlines()
    return line


def go_template(template: str, data: dict, tmp_path) -> str:
    """`template` run by Go's text/template over `data`, as `kubectl -o go-template` runs it (through Helm's engine,
    the same Go package; no kubectl binary is installed here)."""
    import helm_python as helm

    chart = tmp_path / "gotemplate"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: gotemplate\nversion: 0.1.0\n")
    (chart / "templates" / "out.txt").write_text("{{- with .Values.data -}}" + template + "{{- end -}}")
    with helm.Chart.load(chart) as c:
        return c.render({"data": data}, name="t", namespace="default", is_install=True)["gotemplate/templates/out.txt"]


def test_the_documented_kubectl_command_lifts_every_capacity_gate_and_only_those(emu, tmp_path):
    from gangscale.kube.client import connect
    from gangscale.kube.lister import list_all
    from gangscale.kube.refs import PODS

    pytest.importorskip("helm_python")
    e, kc = emu
    command = documented_command()
    get, loop = command.split(" | ", 1)
    template = get.split("-o go-template='", 1)[1].rsplit("'", 1)[0]
    with connect(kc) as client:
        listed = go_template(template, {"items": list_all(client, PODS).items}, tmp_path)
        assert sorted(listed.splitlines()) == ["ml a-0 0", "ml a-1 1", "web b-0 0"]
        # the loop as bash runs it, with `kubectl` recording its arguments; each patch then sent as kubectl sends it
        record = 'kubectl() { printf "%s\\037" "$@"; printf "\\036"; }\n'
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", record + loop], input=listed, capture_output=True,
                             text=True, timeout=60, check=False)
        assert ran.returncode == 0, ran.stderr
        calls = [c.split("\037")[:-1] for c in ran.stdout.split("\036") if c]
        assert len(calls) == 3
        for args in calls:
            assert args[:2] == ["patch", "pod"] and args[2] == "-n" and args[5:7] == ["--type=json", "-p"]
            client.json_patch(PODS.path(args[3], args[4]), json.loads(args[7]))
    assert all_gates(e) == {"ml/a-0": [], "ml/a-1": [KUEUE], "web/b-0": [], "web/plain": [], "web/queued": [KUEUE]}
