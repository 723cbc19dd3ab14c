"""TLS operations: a rotated certificate is served without a restart; `--self-signed` bootstraps a pair and caBundle."""

from __future__ import annotations

import base64
import os
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gangscale.webhook import server as server_mod
from gangscale.webhook.certs import dns_names, make_pair, write_pair
from gangscale.webhook.server import start
from tests.kube.conftest import _no_proxy, client_for, kubeconfig_for, make_emulator  # noqa: F401 - fixtures

from .conftest import make_config
from .test_process import ROOT, _free_port, installed

SERVICE = "gangscale-webhook.gangscale-system"


def healthz(port: int, ca_pem: bytes, hostname: str) -> bytes:
    """GET /healthz over TLS verified against `ca_pem` for `hostname` (raises ssl.SSLError otherwise)."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=hostname) as tls:
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return tls.recv(4096)


def test_a_renewed_certificate_is_served_without_a_restart_and_a_half_written_one_is_ignored(tmp_path, monkeypatch):
    from gangscale.webhook.rules import Policy

    monkeypatch.setattr(server_mod, "CERT_RECHECK_SECONDS", 0.0)  # cert-manager renews; the server looks each time
    cert, key = str(tmp_path / "tls.crt"), str(tmp_path / "tls.key")
    old_ca, c, k = make_pair(["localhost"], ip="127.0.0.1")
    write_pair(cert, key, c, k)
    srv = start(Policy(make_config()), cert, key)
    try:
        assert healthz(srv.port, old_ca, "127.0.0.1").startswith(b"HTTP/1.1 200")
        new_ca, c, k = make_pair(["localhost"], ip="127.0.0.1")
        write_pair(cert, key, c, k)
        stamp = time.time() + 5  # a new mtime even on a coarse clock
        os.utime(cert, (stamp, stamp))
        assert healthz(srv.port, new_ca, "127.0.0.1").startswith(b"HTTP/1.1 200")
        with pytest.raises(ssl.SSLError):
            healthz(srv.port, old_ca, "127.0.0.1")  # the old pair is gone
        Path(key).write_bytes(b"half a key")  # a rotation caught mid-write
        os.utime(key, (stamp + 5, stamp + 5))
        assert healthz(srv.port, new_ca, "127.0.0.1").startswith(b"HTTP/1.1 200")  # the last good pair serves on
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_self_signed_command_makes_a_pair_for_the_service_and_patches_ca_bundle(
        make_emulator, kubeconfig_for, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36")
    emu.apply_all(installed(None, None))  # as shipped, no caBundle (no cert-manager)
    port = _free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text("admission: {failurePolicy: Fail, timeoutSeconds: 2}\n")
    proc = subprocess.Popen([sys.executable, "-m", "gangscale", "webhook", "--self-signed", "--config", str(cfg),
                             "--cert-dir", str(tmp_path / "certs"), "--listen", f"127.0.0.1:{port}",
                             "--kubeconfig", kubeconfig_for(emu), "--service", SERVICE],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            hook = emu.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "gangscale")
            bundle = hook["webhooks"][0]["clientConfig"].get("caBundle")
            if bundle:
                try:
                    answer = healthz(port, base64.b64decode(bundle), dns_names(SERVICE)[0])
                    break
                except OSError:
                    pass
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        assert answer.startswith(b"HTTP/1.1 200")  # the API server, trusting caBundle, reaches <svc>.<ns>.svc
        assert hook["webhooks"][0]["failurePolicy"] == "Fail" and hook["webhooks"][0]["timeoutSeconds"] == 2
        mutating = emu.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "gangscale")
        assert mutating["webhooks"][0]["clientConfig"]["caBundle"] == bundle
        assert mutating["webhooks"][0]["failurePolicy"] == "Ignore"
        assert oct(os.stat(tmp_path / "certs" / "tls.key").st_mode & 0o777) == "0o600"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")


WEBHOOK_SA = "system:serviceaccount:gangscale-system:gangscale-webhook"
COMPONENT = ROOT / "config" / "deploy" / "webhook"


def _rbac(*files: Path) -> list[dict]:
    import yaml

    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d and d["kind"].endswith(("Role", "Binding"))]


def _self_signed(emu, kubeconfig_for, tmp_path: Path) -> list[str]:  # noqa: F811
    """`gangscale webhook --self-signed` authenticated as the webhook's ServiceAccount."""
    emu.users["webhook-token"] = WEBHOOK_SA
    return [sys.executable, "-m", "gangscale", "webhook", "--self-signed", "--cert-dir", str(tmp_path / "certs"),
            "--listen", f"127.0.0.1:{_free_port()}", "--no-discovery", "--no-group-lookup",
            "--kubeconfig", kubeconfig_for(emu, token="webhook-token"), "--service", SERVICE]


def _ca_bundle(emu) -> str | None:
    hook = emu.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "", "gangscale")
    return hook["webhooks"][0]["clientConfig"].get("caBundle")


def test_with_the_cert_manager_rbac_the_webhooks_account_cannot_touch_its_configurations(
        make_emulator, kubeconfig_for, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36", rbac=True)
    emu.apply_all(installed(None, None))  # as shipped, no caBundle
    emu.apply_all(_rbac(COMPONENT / "rbac.yaml"))
    proc = subprocess.run(_self_signed(emu, kubeconfig_for, tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and not _ca_bundle(emu), proc.stderr  # refused, one line, nothing changed
    assert "Traceback" not in proc.stderr and '"self-signed bootstrap failed: caBundle not patched"' in proc.stderr
    assert f'User \\"{WEBHOOK_SA}\\" cannot get resource \\"mutatingwebhookconfigurations\\"' in proc.stderr


def test_with_the_self_signed_component_the_webhooks_account_patches_the_ca_bundle(
        make_emulator, kubeconfig_for, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36", rbac=True)
    emu.apply_all(installed(None, None))
    emu.apply_all(_rbac(COMPONENT / "rbac.yaml", COMPONENT / "self-signed" / "rbac.yaml"))
    server = subprocess.Popen(_self_signed(emu, kubeconfig_for, tmp_path), env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not _ca_bundle(emu):
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read() if server.stderr else ""
            time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert "Traceback" not in (server.stderr.read() if server.stderr else "")
