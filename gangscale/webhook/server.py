"""`gangscale webhook`: the admission webhooks over HTTPS (standard library http.server + ssl).

TLS only: a connection whose handshake fails (plain HTTP included) is closed
without an answer. The handshake runs in the connection's own thread, so a
slow client never stalls accept(). Bodies above admission.maxBodyBytes get
413 before they are read. The certificate files are re-read when they change
(cert-manager rotation, or a new self-signed pair), checked at most every
CERT_RECHECK_SECONDS.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson

from .admission import handle
from .metrics import WebhookMetrics
from .rules import Policy

CERT_RECHECK_SECONDS = 10.0
READ_TIMEOUT_SECONDS = 10.0
LINGER_SECONDS, LINGER_CHUNKS = 1.0, 64  # after a 413: at most 4 MiB or 1 s per read


class CertStore:
    """An SSLContext for a cert/key pair, rebuilt when either file's mtime changes."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert, self.key = cert, key
        self._lock = threading.Lock()
        self._stamp: tuple[float, float] | None = None
        self._checked = 0.0
        self._context = self._load()

    def _load(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(self.cert, self.key)
        self._stamp = (os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime)
        return ctx

    def context(self) -> ssl.SSLContext:
        now = time.monotonic()
        with self._lock:
            if now - self._checked >= CERT_RECHECK_SECONDS:
                self._checked = now
                try:
                    if (os.stat(self.cert).st_mtime, os.stat(self.key).st_mtime) != self._stamp:
                        self._context = self._load()
                except (OSError, ssl.SSLError) as exc:  # half-written rotation: keep serving the old pair
                    print(json.dumps({"msg": "certificate reload failed", "error": str(exc)}), file=sys.stderr)
            return self._context


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], policy: Policy, certs: CertStore) -> None:
        self.policy, self.certs = policy, certs
        self.metrics = WebhookMetrics()  # served at GET /metrics (metrics.py)
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(READ_TIMEOUT_SECONDS)
        request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # headers and body are two writes: no Nagle wait
        try:
            tls = self.certs.context().wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # plain HTTP or a failed handshake: refused, no answer
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def shutdown_request(self, request: Any) -> None:
        try:
            request.close()  # detached by wrap_socket, or never wrapped
        except OSError:
            pass

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"  # the API server keeps connections open

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # one JSON line per error instead (below); reviews are too many to log

    def _send(self, code: int, doc: dict[str, Any]) -> None:
        if self.command == "POST":
            self.server.metrics.observe(self.path.split("?")[0], code, doc, time.monotonic() - self._started)
        body = orjson.dumps(doc)
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if code >= 400:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _linger(self) -> None:
        """Read and drop a little of the unread body, so closing does not reset the answer away (bounded)."""
        self.connection.settimeout(LINGER_SECONDS)
        try:
            for _ in range(LINGER_CHUNKS):
                if not self.rfile.read1(65536):
                    break
        except OSError:
            pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path in ("/healthz", "/readyz"):
            self._send(200, {"status": "ok"})
        elif self.path == "/metrics":
            body = self.server.metrics.render()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:  # noqa: N802
        self._started = time.monotonic()
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._send(411, {"error": "Content-Length is required"})
            return
        if int(length) > self.server.policy.config.admission.max_body_bytes:
            self._send(413, {"error": f"body of {length} bytes is over the limit of "
                                      f"{self.server.policy.config.admission.max_body_bytes}"})
            self._linger()
            return
        body = self.rfile.read(int(length))
        try:
            code, doc = handle(self.path.split("?")[0], body, self.server.policy)
        except Exception as exc:  # noqa: BLE001 - last resort: an answer, never a dropped connection
            code, doc = 500, {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        self._send(code, doc)


def start(policy: Policy, cert: str, key: str, host: str = "127.0.0.1", port: int = 0) -> WebhookServer:
    """A running server on its own thread (tests, benchmarks); `serve` for the command."""
    server = WebhookServer((host, port), policy, CertStore(cert, key))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    return server


def serve(policy: Policy, cert: str, key: str, address: str) -> int:
    host, _, port = address.rpartition(":")
    server = WebhookServer((host or "0.0.0.0", int(port)), policy, CertStore(cert, key))
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    print(json.dumps({"msg": "webhook serving", "address": address, "groups": len(policy.groups),
                      "servedGangAPIs": sorted(policy.served) if policy.served is not None else None}),
          file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        return 130
    finally:
        server.server_close()
    return 0
