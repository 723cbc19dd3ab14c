"""`gangscale webhook`: the admission webhooks over HTTPS (standard library http.server + ssl).

TLS only: a connection whose handshake fails (plain HTTP included) is closed
without an answer. The handshake runs in the connection's own thread, so a
slow client never stalls accept(). Bodies above admission.maxBodyBytes get
413 before they are read. The certificate files are re-read when they change
(cert-manager rotation, or a new self-signed pair), checked at most every
CERT_RECHECK_SECONDS.

Deadlines are whole, not per read: the TLS handshake, and each request from its
first byte to its last (request line, headers, body), get REQUEST_DEADLINE_SECONDS
in all, so a client trickling a byte at a time is cut off on time; only the wait
for a kept-alive connection's next request is per read (IDLE_TIMEOUT_SECONDS).
A client that goes away (reset, EOF, TLS alert) at any point is one log line,
never a traceback. Logs are the controller's JSON lines (controller/logs.py).
"""

from __future__ import annotations

import io
import logging
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

log = logging.getLogger("gangscale.webhook")

CERT_RECHECK_SECONDS = 10.0
IDLE_TIMEOUT_SECONDS = 10.0  # per read, while a kept-alive connection waits for its next request
# a handshake, or a request from its first byte to its last: the API server gives up on a call after the hook's
# timeoutSeconds (at most 30; the shipped hooks say 5), so a request still arriving after twice that is no review
REQUEST_DEADLINE_SECONDS = 10.0
LINGER_SECONDS, LINGER_CHUNKS = 1.0, 64  # after a 413: at most 4 MiB or 1 s per read
_GONE = (
    ConnectionError,
    ssl.SSLError,
    TimeoutError,
    OSError,
)  # a client that reset, closed or stalled


class DeadlinePassed(Exception):  # noqa: N818 - not a TimeoutError: http.server would swallow that silently
    """The request did not arrive whole within its deadline."""


class _DeadlineReader(io.RawIOBase):
    """A connection's reads: a request's first byte is awaited for IDLE_TIMEOUT_SECONDS per read; from it on, the
    request must arrive whole within `deadline` seconds (`DeadlinePassed`). `next_request` re-arms the idle wait."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self.sock, self.deadline = sock, deadline
        self.until: float | None = None

    def readable(self) -> bool:
        return True

    def next_request(self) -> None:
        self.until = None

    def readinto(self, buf: Any) -> int:
        now = time.monotonic()
        if self.until is not None and now >= self.until:
            raise DeadlinePassed
        self.sock.settimeout(IDLE_TIMEOUT_SECONDS if self.until is None else self.until - now)
        try:
            n = self.sock.recv_into(buf)
        except TimeoutError:
            if self.until is not None:
                raise DeadlinePassed from None
            raise
        if n and self.until is None:  # the request's first byte: its deadline runs from now
            self.until = time.monotonic() + self.deadline
        return n

    def left(self) -> float:
        """Seconds left of the current request's deadline (the whole deadline between requests)."""
        return self.deadline if self.until is None else max(0.001, self.until - time.monotonic())


def _client(address: Any) -> str:
    return (
        f"{address[0]}:{address[1]}"
        if isinstance(address, tuple) and len(address) >= 2
        else str(address)
    )


def _gone(client: Any, stage: str, exc: BaseException) -> None:
    log.info(
        "client disconnected",
        extra={
            "client": _client(client),
            "stage": stage,
            "error": f"{type(exc).__name__}: {exc}"[:200],
        },
    )


def _late(client: Any, stage: str, deadline: float) -> None:
    log.warning(
        "request deadline passed: connection closed",
        extra={"client": _client(client), "stage": stage, "deadlineSeconds": deadline},
    )


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
                except (
                    OSError,
                    ssl.SSLError,
                ) as exc:  # half-written rotation: keep serving the old pair
                    log.warning("certificate reload failed", extra={"error": str(exc)})
            return self._context


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        policy: Policy,
        certs: CertStore,
        deadline: float = REQUEST_DEADLINE_SECONDS,
    ) -> None:
        self.policy, self.certs, self.deadline = policy, certs, deadline
        self.metrics = WebhookMetrics()  # served at GET /metrics (metrics.py)
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # the handshake's timeout bounds it whole (CPython's SSLSocket.do_handshake keeps one deadline across reads)
        request.settimeout(self.deadline)
        request.setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )  # headers and body are two writes: no Nagle wait
        try:
            tls = self.certs.context().wrap_socket(request, server_side=True)
        except TimeoutError:
            _late(client_address, "handshake", self.deadline)
            return
        except _GONE as exc:
            _gone(
                client_address, "handshake", exc
            )  # plain HTTP, a reset or a stalled handshake: no answer
            return
        try:
            handler: Any = self.RequestHandlerClass  # typeshed types its server argument as `Self`
            handler(tls, client_address, self)
        except _GONE as exc:
            _gone(client_address, "answer", exc)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Last resort for what `finish_request` did not foresee: one JSON line (with the exception), no stderr dump."""
        log.error(
            "connection failed", extra={"client": _client(client_address)}, exc_info=sys.exc_info()
        )

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

    def setup(self) -> None:
        super().setup()
        self.reader = _DeadlineReader(self.connection, self.server.deadline)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        """One request under its deadline; a deadline passed or a client gone closes the connection with one line."""
        self.reader.next_request()
        try:
            super().handle_one_request()
        except DeadlinePassed:
            self.close_connection = True
            _late(self.client_address, "request", self.server.deadline)
        except _GONE as exc:
            self.close_connection = True
            _gone(self.client_address, "request", exc)

    def _send(self, code: int, doc: dict[str, Any]) -> None:
        if self.command == "POST":
            self.server.metrics.observe(
                self.path.split("?")[0], code, doc, time.monotonic() - self._started
            )
        body = orjson.dumps(doc)
        self.connection.settimeout(
            self.reader.left()
        )  # the answer too: a client that reads nothing is cut off
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
            self._send(
                413,
                {
                    "error": f"body of {length} bytes is over the limit of "
                    f"{self.server.policy.config.admission.max_body_bytes}"
                },
            )
            self._linger()
            return
        body = self.rfile.read(int(length))
        if len(body) < int(length):  # the client closed mid-body: nobody to answer
            self.close_connection = True
            _gone(self.client_address, "request", EOFError(f"{len(body)} of {length} body bytes"))
            return
        try:
            code, doc = handle(self.path.split("?")[0], body, self.server.policy)
        except Exception as exc:  # noqa: BLE001 - last resort: an answer, never a dropped connection
            code, doc = 500, {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        self._send(code, doc)


def start(
    policy: Policy,
    cert: str,
    key: str,
    host: str = "127.0.0.1",
    port: int = 0,
    deadline: float = REQUEST_DEADLINE_SECONDS,
) -> WebhookServer:
    """A running server on its own thread (tests, benchmarks); `serve` for the command."""
    server = WebhookServer((host, port), policy, CertStore(cert, key), deadline)
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
    ).start()
    return server


def serve(
    policy: Policy, cert: str, key: str, address: str, deadline: float = REQUEST_DEADLINE_SECONDS
) -> int:
    host, _, port = address.rpartition(":")
    server = WebhookServer((host or "0.0.0.0", int(port)), policy, CertStore(cert, key), deadline)
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    log.info(
        "webhook serving",
        extra={
            "address": address,
            "groups": len(policy.groups),
            "requestDeadlineSeconds": deadline,
            "servedGangAPIs": sorted(policy.served) if policy.served is not None else None,
        },
    )
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        return 130
    finally:
        server.server_close()
    return 0
