"""Hostile kubeconfigs and servers: credentials never printed, bad TLS data is one sentence, lists are bounded.

Every test runs the real CLI (`plan`, `check`, `dump`) through the official
client against the emulator, and reads what a user or a log collector would see.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gangscale.cli import main
from gangscale.kube.client import connect
from gangscale.kube.errors import KubeError
from gangscale.kube.informer import Informer
from gangscale.kube.lister import list_all
from gangscale.kube.refs import PODS

from .conftest import FIXTURES
from .emulator import Emulator

CATALOG = str(FIXTURES / "catalog.yaml")
ROOT = Path(__file__).resolve().parents[2]
SECRETS = ("PASSW0RD", "T0KEN-123", "EXEC-S3CRET")
COMMANDS = {
    "plan": ["plan", "--nodegroups", CATALOG, "-o", "yaml"],
    "check": ["check"],
    "dump": ["dump", "-o", "yaml"],
}


def write_kubeconfig(path: Path, server: str, user: dict[str, Any], **cluster: Any) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return str(path)


def run_cli(command: str, kubeconfig: str, capsys: pytest.CaptureFixture[str],
            caplog: pytest.LogCaptureFixture) -> tuple[int, str, str, str]:
    """(exit code, stdout, stderr, every log record) of one CLI run, logs captured at DEBUG."""
    with caplog.at_level(logging.DEBUG):
        code = main([*COMMANDS[command], "--kubeconfig", kubeconfig, "--request-timeout", "2"])
    out, err = capsys.readouterr()
    return code, out, err, caplog.text


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, f"{leaked} printed in: {text[:2000]}"


# --------------------------------------------------------------- item 8: credentials


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_password_in_the_server_url_is_never_printed_by_plan_check_or_dump(command, make_emulator, tmp_path,
                                                                             capsys, caplog):
    emu = make_emulator(release="1.36")
    server = emu.url.replace("http://", "http://alice:PASSW0RD@")
    kc = write_kubeconfig(tmp_path / "kc", server, {"token": emu.token})
    code, out, err, logs = run_cli(command, kc, capsys, caplog)
    assert code == 0, err
    assert_no_secret(out, err, logs)
    if command != "plan":  # check's title line and dump's header name the server, redacted
        assert "http://***@127.0.0.1:" in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_credentials_of_an_unreachable_server_are_not_in_its_errors_or_retry_warnings(command, tmp_path, capsys,
                                                                                      caplog):
    kc = write_kubeconfig(tmp_path / "kc", "http://bob:PASSW0RD@127.0.0.1:9/?access_token=T0KEN-123",
                          {"token": "t"})
    code, out, err, logs = run_cli(command, kc, capsys, caplog)
    assert code == 2
    assert "cannot reach the API server at http://***@127.0.0.1:9/?access_token=***" in out + err
    assert "Retrying" in logs  # urllib3's warnings were logged, and redacted
    assert_no_secret(out, err, logs)


def test_the_controller_never_logs_the_credentials_of_an_unreachable_server(tmp_path):
    kc = write_kubeconfig(tmp_path / "kc", "http://bob:PASSW0RD@127.0.0.1:9/?access_token=T0KEN-123", {"token": "t"})
    proc = subprocess.run([sys.executable, "-m", "gangscale", "run", "--kubeconfig", kc, "--provider", "simulated",
                           "--nodegroups", CATALOG, "--log-level", "debug"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2
    assert "Retrying" in proc.stdout + proc.stderr  # urllib3's warnings went through the JSON log, redacted
    assert "cannot reach the API server at http://***@127.0.0.1:9/?access_token=***" in proc.stdout + proc.stderr
    assert_no_secret(proc.stdout, proc.stderr)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_exec_plugin_printing_a_secret_on_stderr_fails_in_one_line_without_it(command, make_emulator, tmp_path,
                                                                                 capsys, caplog):
    emu = make_emulator(release="1.36")
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                       "args": ["-c", "import sys; sys.stderr.write('token EXEC-S3CRET expired\\n'); sys.exit(3)"]}}
    kc = write_kubeconfig(tmp_path / "kc", emu.url, plugin)
    code, out, err, logs = run_cli(command, kc, capsys, caplog)
    assert code == 2
    assert_no_secret(out, err, logs)
    assert err.splitlines() == [f"gangscale: kubeconfig: exec credential plugin {Path(sys.executable).name!r} exited with "
                       "status 3 (its stderr is not shown, it may hold secrets: run the command by hand to see it)"]


def test_an_exec_plugin_that_works_authenticates_without_a_terminal(make_emulator, tmp_path, capsys, caplog):
    emu = make_emulator(release="1.36")
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                             "status": {"token": emu.token}})
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                       "args": ["-c", f"import sys; sys.stderr.write('EXEC-S3CRET'); print({credential!r})"]}}
    code, out, err, logs = run_cli("check", write_kubeconfig(tmp_path / "kc", emu.url, plugin), capsys, caplog)
    assert code == 0 and "OK    rbac" in out
    assert_no_secret(out, err, logs)


def test_redaction_is_one_helper_for_aws_and_kubernetes():
    from cloud_adapters import aws_common, redact
    from gangscale.kube import client

    assert aws_common.redact_url is redact.redact_url and client.redact_url is redact.redact_url
    assert KubeError("GET https://u:PASSW0RD@h/x?token=T0KEN-123&limit=5").args[0] == \
        "GET https://***@h/x?token=***&limit=5"


# ------------------------------------------------------- item 6: bad certificate data


@pytest.mark.parametrize("command", [*sorted(COMMANDS), "run"])
@pytest.mark.parametrize("ca, expected", [
    ("not base64 at all!", "is not valid base64"),
    ("aGVsbG8gd29ybGQ=", "certificate-authority(-data) is not a PEM certificate"),  # "hello world"
])
def test_bad_certificate_authority_data_is_one_sentence_and_exit_2(command, ca, expected, tmp_path, capsys, caplog):
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:9", {"token": "t"},
                          **{"certificate-authority-data": ca})
    if command == "run":  # a process of its own: run sets up logging for the whole interpreter
        proc = subprocess.run([sys.executable, "-m", "gangscale", "run", "--kubeconfig", kc, "--provider",
                               "simulated", "--nodegroups", CATALOG], capture_output=True, text=True, timeout=60,
                              cwd=ROOT)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        code, out, err, _ = run_cli(command, kc, capsys, caplog)
    assert code == 2
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("gangscale: kubeconfig: ") and expected in lines[0], lines
    assert "Traceback" not in out + err


def kubeconfig_alias_bomb() -> str:
    """A valid-looking kubeconfig whose contexts are 9**9 aliases of one context (~700 bytes)."""
    lines = ["apiVersion: v1", "kind: Config", "current-context: c", "anchors:",
             "  a0: &a0 {name: c, context: {cluster: c, user: u}}"]
    lines += [f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    lines += ["clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]", "users: [{name: u, user: {token: t}}]",
              "contexts: *a9"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("command, how", [*[(c, "--kubeconfig") for c in [*sorted(COMMANDS), "run"]],
                                          ("check", "KUBECONFIG")])
def test_a_kubeconfig_alias_bomb_is_refused_in_one_line_instead_of_expanded(command, how, tmp_path):
    """The Kubernetes client's own YAML loader expanded it for minutes at ~1 GB; gangscale's loader refuses it."""
    kc = tmp_path / "kubeconfig"
    kc.write_text(kubeconfig_alias_bomb())
    argv = [*COMMANDS[command]] if command != "run" else ["run", "--provider", "simulated", "--nodegroups", CATALOG]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if how == "KUBECONFIG":
        env["KUBECONFIG"] = f"{tmp_path / 'absent'}{os.pathsep}{kc}"
    else:
        argv += ["--kubeconfig", str(kc)]
    proc = subprocess.run([sys.executable, "-m", "gangscale", *argv], capture_output=True, text=True, timeout=60,
                          cwd=ROOT, env=env)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1, lines[-3:]
    assert lines[0].startswith(f"gangscale: kubeconfig: {kc}: YAML aliases would add more than") and "alias bomb" in lines[0]


def test_bad_client_certificate_data_is_one_sentence(tmp_path):
    kc = write_kubeconfig(tmp_path / "kc", "https://127.0.0.1:9",
                          {"client-certificate-data": "aGVsbG8=", "client-key-data": "aGVsbG8="})
    with pytest.raises(KubeError, match="client-certificate.* is not a usable PEM pair"):
        connect(kc)


# ------------------------------------------------- item 11: pagination that never ends


def test_a_server_that_always_returns_a_continue_token_is_stopped_at_the_item_bound(make_emulator, client_for):
    emu = make_emulator(release="1.36")
    emu.apply_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}} for i in range(5)])
    emu.endless_continue = True
    with pytest.raises(KubeError, match=r"listing pods.v1 stopped at 40 items .*--max-list-items"):
        list_all(client_for(emu), PODS, page_size=5, max_items=40)
    assert emu.count("GET", "/api/v1/pods") == 9  # 8 pages of 5, and the 9th would pass the bound


def test_a_server_returning_empty_pages_with_a_continue_token_is_stopped_at_the_page_bound(make_emulator,
                                                                                         client_for):
    emu = make_emulator(release="1.36")
    emu.endless_continue = True  # no pods: every page is empty and still says "continue"
    with pytest.raises(KubeError, match=r"listing pods.v1 stopped after 30 pages"):
        list_all(client_for(emu), PODS, page_size=5, max_items=1000, max_pages=30)
    assert emu.count("GET", "/api/v1/pods") == 30


def test_plan_names_the_resource_and_the_flag_when_the_list_never_ends(make_emulator, kubeconfig_for, capsys):
    emu = make_emulator(release="1.36")
    emu.apply_all([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"n{i}"}} for i in range(3)])
    emu.endless_continue = True
    code = main(["plan", "--nodegroups", CATALOG, "--kubeconfig", kubeconfig_for(emu), "--max-list-items", "100"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "listing nodes.v1 stopped at 100 items" in err and "--max-list-items" in err


def test_the_informer_initial_list_is_bounded_too(make_emulator, client_for):
    emu = make_emulator(release="1.36")
    emu.apply_all([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}} for i in range(5)])
    emu.endless_continue = True
    inf = Informer(client_for(emu), PODS, page_size=5, max_items=25).start()
    try:
        assert not inf.wait_synced(1.0)
        for _ in range(100):
            if inf.stats.errors:
                break
            time.sleep(0.05)
        assert "listing pods.v1 stopped at 25 items" in inf.stats.last_error
    finally:
        inf.stop()


# ------------------------------------------------------------ item 11: dump annotations


def test_dump_drops_annotations_by_default_except_the_ones_the_planner_reads(make_emulator, kubeconfig_for,
                                                                             tmp_path):
    emu = make_emulator(release="1.36", volcano=True)
    emu.apply_all([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "batch"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "w-0", "namespace": "batch",
            "annotations": {"vault.hashicorp.com/agent-inject-token": "hvs.VAULT-T0KEN",
                            "kubectl.kubernetes.io/last-applied-configuration": "{...}",
                            "scheduling.k8s.io/group-name": "vc-train",
                            "gangscale.io/provisioning-deadline-seconds": "600"}},
         "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}},
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {
            "name": "vc-train", "namespace": "batch", "annotations": {"team.example.com/api-key": "K3Y"}},
         "spec": {"minMember": 1}},
    ])
    out = tmp_path / "dump.json"
    assert main(["dump", "--kubeconfig", kubeconfig_for(emu), "--output-file", str(out)]) == 0
    assert "VAULT-T0KEN" not in out.read_text() and "K3Y" not in out.read_text()
    objs = {o["metadata"]["name"]: o for o in json.loads(out.read_text())["items"]}
    assert objs["w-0"]["metadata"]["annotations"] == {
        "scheduling.k8s.io/group-name": "vc-train", "gangscale.io/provisioning-deadline-seconds": "600",
        "gangscale.io/redacted": "true"}
    assert objs["vc-train"]["metadata"].get("annotations") == {}
    # and the dump still plans the Volcano gang, linked by the kept annotation
    plan = tmp_path / "plan.json"
    assert main(["plan", "--cluster", str(out), "--nodegroups", CATALOG, "-o", "json", "--output-file",
                 str(plan)]) == 0
    assert {g["name"]: g["api"] for g in json.loads(plan.read_text())["gangs"]} == {
        "vc-train": "scheduling.volcano.sh/v1beta1"}

    raw = tmp_path / "raw.json"
    assert main(["dump", "--kubeconfig", kubeconfig_for(emu), "--no-redact", "--output-file", str(raw)]) == 0
    assert "VAULT-T0KEN" in raw.read_text()


def test_the_list_bound_flag_default_matches_the_lister():
    from gangscale.kube import flags, lister

    assert flags.MAX_LIST_ITEMS == lister.DEFAULT_MAX_ITEMS
