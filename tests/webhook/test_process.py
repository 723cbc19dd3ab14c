"""`gangscale webhook` as a real process, the self-signed caBundle patch, and `gangscale check` on the webhooks."""

from __future__ import annotations

import base64
import copy
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gangscale.controller.config import ControllerConfig
from gangscale.webhook.certs import patch_ca_bundle
from tests.builders import pod
from tests.kube.conftest import _no_proxy, client_for, kubeconfig_for, make_emulator  # noqa: F401 - fixtures
from tests.kube.test_live_cli import run_check

from .conftest import CATALOG, Hook, write_file

ROOT = Path(__file__).resolve().parents[2]
WEBHOOKS = [d for d in yaml.safe_load_all((ROOT / "config/deploy/webhook/webhooks.yaml").read_text()) if d]


def installed(url: str | None, ca: bytes | None, kinds=("ValidatingWebhookConfiguration",
                                                          "MutatingWebhookConfiguration")) -> list[dict]:
    """The shipped configurations, pointed at `url` (instead of the Service) with `ca` as caBundle."""
    out = []
    for doc in WEBHOOKS:
        if doc["kind"] not in kinds:
            continue
        doc = copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            if url is not None:
                hook["clientConfig"] = {"url": f"{url}{hook['clientConfig']['service']['path']}"}
            if ca is not None:
                hook["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
        out.append(doc)
    return out


def test_check_reports_the_webhooks_missing_then_installed_and_answering_then_unreachable(
        make_emulator, kubeconfig_for, capsys, hook, tls_pair):  # noqa: F811
    emu = make_emulator(release="1.36")
    code, r = run_check(emu, kubeconfig_for, capsys)
    assert code == 0 and r["webhooks"]["verdict"] == "info" and "not installed" in r["webhooks"]["summary"]
    ca = Path(tls_pair[0]).read_bytes()
    emu.apply_all(installed(f"https://127.0.0.1:{hook.server.port}", ca))
    code, r = run_check(emu, kubeconfig_for, capsys)
    assert r["webhooks"]["verdict"] == "ok", r["webhooks"]
    assert "validating: validate.gangscale.io" in r["webhooks"]["detail"]
    hook.server.shutdown()
    hook.server.server_close()
    _, r = run_check(emu, kubeconfig_for, capsys)
    assert r["webhooks"]["verdict"] == "warn" and "not reachable" in r["webhooks"]["summary"]


def test_check_names_an_empty_ca_bundle_and_a_missing_half(make_emulator, kubeconfig_for, capsys):  # noqa: F811
    emu = make_emulator(release="1.37")
    emu.apply_all(installed(None, None, kinds=("ValidatingWebhookConfiguration",)))
    _, r = run_check(emu, kubeconfig_for, capsys)
    text = " ".join(r["webhooks"]["detail"])
    assert r["webhooks"]["verdict"] == "warn" and "caBundle is empty" in text and "no mutating" in text


def test_the_self_signed_bootstrap_patches_ca_bundle_of_both_configurations(make_emulator, client_for):  # noqa: F811
    emu = make_emulator(release="1.36")
    emu.apply_all(installed(None, None))
    admission = ControllerConfig.model_validate({"admission": {"failurePolicy": "Fail", "timeoutSeconds": 3}}).admission
    done = patch_ca_bundle(client_for(emu), "gangscale", b"-----BEGIN CERTIFICATE-----\nx\n", admission)
    assert done == ["mutatingwebhookconfigurations/gangscale", "validatingwebhookconfigurations/gangscale"]
    want = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nx\n").decode()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        obj = emu.get("admissionregistration.k8s.io/v1", kind, "", "gangscale")
        assert [h["clientConfig"]["caBundle"] for h in obj["webhooks"]] == [want]
        assert [h["timeoutSeconds"] for h in obj["webhooks"]] == [3]
        assert obj["webhooks"][0]["failurePolicy"] == ("Fail" if kind.startswith("Validating") else "Ignore")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_webhook_command_serves_reviews_and_learns_the_served_gang_apis_from_discovery(
        make_emulator, kubeconfig_for, tls_pair, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36")  # serves the native v1alpha2 PodGroup, not Volcano
    ca, cert, key = tls_pair
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "tls.crt").write_bytes(Path(cert).read_bytes())
    (certs / "tls.key").write_bytes(Path(key).read_bytes())
    cfg = write_file(tmp_path / "config.yaml", {"namespaceCaps": {"capped": {"maxGPUs": 1}}})
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "gangscale", "webhook", "--config", cfg, "--nodegroups",
                             write_file(tmp_path / "catalog.json", CATALOG), "--cert-dir", str(certs), "--listen",
                             f"127.0.0.1:{port}", "--kubeconfig", kubeconfig_for(emu)],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        hook = Hook(type("S", (), {"port": port})(), ca)  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while True:
            try:
                r = hook.review(pod("p", group="pg", cpu="64"))
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        assert not r["allowed"] and "cpu-small: needs 64 cpu, a node has 4" in r["status"]["message"]
        r = hook.review(pod("v", volcano="pg"))
        assert r["allowed"] and "scheduling.volcano.sh/v1beta1" in r["warnings"][0]
        assert "warnings" not in hook.review(pod("n", group="pg"))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    log = proc.stderr.read() if proc.stderr else ""
    assert "Traceback" not in log
    assert json.loads(log.splitlines()[0])["msg"] == "webhook serving"


def test_check_probes_a_service_webhook_through_the_api_servers_service_proxy(
        make_emulator, kubeconfig_for, capsys, hook, tls_pair):  # noqa: F811
    emu = make_emulator(release="1.36")
    emu.apply_all(installed(None, Path(tls_pair[0]).read_bytes()))  # as shipped: clientConfig.service
    _, r = run_check(emu, kubeconfig_for, capsys)
    assert r["webhooks"]["verdict"] == "warn" and "not reachable" in r["webhooks"]["summary"]  # no endpoints
    svc = WEBHOOKS[0]["webhooks"][0]["clientConfig"]["service"]
    emu.services[(svc["namespace"], svc["name"])] = f"https://127.0.0.1:{hook.server.port}"
    _, r = run_check(emu, kubeconfig_for, capsys)
    assert r["webhooks"]["verdict"] == "ok", r["webhooks"]
    assert any("/services/https:gangscale-webhook:443/proxy/healthz" in q.path for q in emu.requests)


def test_a_native_gangs_min_count_is_read_from_the_api_server_so_its_pods_are_judged_as_the_gang(
        make_emulator, client_for, hook_factory):  # noqa: F811
    from gangscale.webhook.lookup import kube_lookup
    from tests.builders import podgroup

    emu = make_emulator(release="1.36")  # serves scheduling.k8s.io/v1alpha2 PodGroups
    emu.apply(podgroup("train", "default", min_count=40))
    hook = hook_factory(lookup=kube_lookup(client_for(emu), frozenset(["scheduling.k8s.io/v1alpha2"])))
    r = hook.review(pod("train-0", group="train", gpu=1, tolerations=[{"operator": "Exists"}]))
    assert not r["allowed"] and "gpu-a: maxSize 4 holds 32 of 40 pods" in r["status"]["message"]
    assert emu.count("GET", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups/train") == 1
    r = hook.review(pod("other-0", group="other", gpu=1, tolerations=[{"operator": "Exists"}]))
    assert r["allowed"]  # no such group (yet): the pod is judged alone
