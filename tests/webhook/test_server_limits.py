"""`gangscale webhook` as a process, against clients that misbehave: a whole-request deadline (a client
trickling one byte a second is cut off after REQUEST_DEADLINE_SECONDS in all, not per read), and
disconnects at any point logged as one JSON line by the controller's JSON logger, never a traceback."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangscale.webhook.server import REQUEST_DEADLINE_SECONDS
from tests.builders import pod

from .conftest import CATALOG, Hook
from .test_process import _free_port

ROOT = Path(__file__).resolve().parents[2]
HEAD = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n"


class WebhookProcess:
    def __init__(self, tmp: Path, tls_pair: tuple[str, str, str]) -> None:
        ca, cert, key = tls_pair
        certs = tmp / "certs"
        certs.mkdir()
        (certs / "tls.crt").write_bytes(Path(cert).read_bytes())
        (certs / "tls.key").write_bytes(Path(key).read_bytes())
        (tmp / "catalog.json").write_text(json.dumps(CATALOG))
        (tmp / "config.yaml").write_text(json.dumps({"admission": {"servedGangAPIs": ["scheduling.k8s.io/v1alpha2"]}}))
        self.port, self.ca = _free_port(), ca
        self.log_path = tmp / "webhook.log"
        self._log = open(self.log_path, "w")  # noqa: SIM115 - the process's stderr, closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gangscale", "webhook", "--config", str(tmp / "config.yaml"), "--nodegroups",
             str(tmp / "catalog.json"), "--cert-dir", str(certs), "--listen", f"127.0.0.1:{self.port}",
             "--no-discovery", "--no-group-lookup"],
            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=self._log, stdout=self._log)
        self.hook = Hook(type("S", (), {"port": self.port})(), ca)  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while True:
            try:
                self.hook.review(pod("p"))
                return
            except OSError:
                assert self.proc.poll() is None and time.monotonic() < deadline, self.log_path.read_text()
                time.sleep(0.2)

    def tls(self) -> ssl.SSLSocket:
        ctx = ssl.create_default_context(cafile=self.ca)
        return ctx.wrap_socket(socket.create_connection(("127.0.0.1", self.port), timeout=10),
                               server_hostname="localhost")

    def lines(self) -> list[str]:
        return self.log_path.read_text().splitlines()

    def stop(self) -> list[str]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=15)
        self._log.close()
        return self.lines()


@pytest.fixture
def webhook(tmp_path, tls_pair) -> Iterator[WebhookProcess]:
    proc = WebhookProcess(tmp_path, tls_pair)
    yield proc
    proc.stop()


def _closed(sock: ssl.SSLSocket) -> bool:
    """True once the server has closed the connection (EOF or reset), without blocking."""
    if sock.pending() == 0 and not select.select([sock], [], [], 0)[0]:
        return False
    sock.setblocking(False)  # readable may be only TLS 1.3 session tickets: no application data to wait for
    try:
        return sock.recv(1) == b""
    except ssl.SSLWantReadError:
        return False
    except (ssl.SSLError, OSError):
        return True
    finally:
        sock.settimeout(10)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0): the peer's next read or write fails at once."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _client_hello() -> bytes:
    """The first flight of a TLS client, as bytes to trickle by hand."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def _raw_closed(sock: socket.socket) -> bool:
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(4096) == b""
    except OSError:
        return True


@pytest.mark.slow
def test_a_client_sending_one_byte_a_second_is_cut_off_at_the_whole_request_deadline(webhook):
    sock = webhook.tls()  # a request trickled after the handshake
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)  # a handshake trickled
    hello = _client_hello()
    start = time.monotonic()
    closed_after: dict[str, float] = {}
    body = HEAD + b"{" * 64
    for i in range(len(body)):  # 1 byte/s: every read gets a byte well within any per-read timeout
        now = time.monotonic() - start
        if now > REQUEST_DEADLINE_SECONDS + 20 or len(closed_after) == 2:
            break
        if "request" not in closed_after and _closed(sock):
            closed_after["request"] = now
        if "handshake" not in closed_after and _raw_closed(raw):
            closed_after["handshake"] = now
        for name, conn, data in (("request", sock, body), ("handshake", raw, hello)):
            if name not in closed_after and i < len(data):
                try:
                    conn.send(data[i:i + 1])
                except OSError:  # ssl.SSLError included
                    closed_after[name] = now
        if i % 5 == 0:
            assert webhook.hook.review(pod("p"))["allowed"]  # meanwhile other clients are answered
        time.sleep(1.0)
    sock.close()
    raw.close()
    for name in ("request", "handshake"):
        assert name in closed_after and closed_after[name] < REQUEST_DEADLINE_SECONDS + 8, closed_after
        assert closed_after[name] >= REQUEST_DEADLINE_SECONDS - 1  # the deadline, not a per-read timeout
    cut = [json.loads(line) for line in webhook.lines() if "deadline passed" in line]
    assert sorted(c["stage"] for c in cut) == ["handshake", "request"]
    assert all(c["level"] == "warning" and c["deadlineSeconds"] == REQUEST_DEADLINE_SECONDS for c in cut)


def _every_line_is_a_json_log_line(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        doc = json.loads(line)  # a traceback or a bare print would not parse, or lack the logger's keys
        assert {"time", "level", "logger", "msg"} <= set(doc), line
        assert "exception" not in doc and "Traceback" not in line, line
        out.append(doc)
    return out


def test_clients_that_disconnect_at_any_point_are_one_json_log_line_each_never_a_traceback(webhook):
    review = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": "default", "object": pod("p")}}).encode()
    full = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: " \
           + str(len(review)).encode() + b"\r\n\r\n" + review
    for _ in range(20):  # the whole review sent, the connection reset before the answer is read
        sock = webhook.tls()
        sock.sendall(full)
        _reset(sock)
    sock = webhook.tls()  # half a body, then a reset
    sock.sendall(full[: len(full) // 2])
    _reset(sock)
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=10)  # a reset mid-handshake
    raw.sendall(b"\x16\x03\x01\x00")
    _reset(raw)
    assert webhook.hook.review(pod("p"))["allowed"]  # still serving
    time.sleep(1.0)
    logs = _every_line_is_a_json_log_line(webhook.stop())
    assert all(d["logger"] == "gangscale.webhook" for d in logs)
    assert [d["msg"] for d in logs].count("webhook serving") == 1
    gone = [d for d in logs if d["msg"] == "client disconnected"]
    assert gone and all(d["level"] == "info" and d["client"].startswith("127.0.0.1:") for d in gone)
