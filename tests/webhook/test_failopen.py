"""Fail-open, end to end: the real `gangscale webhook` process against the emulator lifts every capacity gate once
the controller's lease is stale, never while a controller (the real `LeaderElector`) keeps it, and stops at the
fence when a controller comes back mid-way (gangscale/webhook/failopen.py)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gangscale.controller.leader import LeaderElector, LeaseKeeper
from gangscale.ingest import CAPACITY_GATE
from gangscale.webhook.failopen import DEFAULT_BATCH
from tests.builders import pod
from tests.kube.conftest import _no_proxy, client_for, kubeconfig_for, make_emulator  # noqa: F401 - fixtures

from .conftest import write_file

ROOT = Path(__file__).resolve().parents[2]
NS = "gangscale-system"
LEASE = "gangscale-leader"
OTHER_GATE = "kueue.x-k8s.io/admission"


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease(renewed: float, duration: int = 15, holder: str = "gangscale-0") -> dict:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE, "namespace": NS},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "renewTime": _stamp(renewed),
                     "acquireTime": _stamp(renewed)}}


def gated_pods(emu, n: int, ns: str = "team") -> list[str]:
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    names = [f"train-{i:03d}" for i in range(n)]
    for name in names:
        emu.apply(pod(name, ns, group="train", schedulingGates=[{"name": CAPACITY_GATE}]))
    return names


def gates(emu, ns: str, name: str) -> list[str]:
    return [g["name"] for g in (emu.get("v1", "Pod", ns, name) or {}).get("spec", {}).get("schedulingGates") or []]


def wait_for(cond, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def value(gauge) -> float:
    """A gauge's one sample, as a scrape reads it."""
    return gauge.collect()[0].samples[0].value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Webhook:
    """A running `gangscale webhook`: its stderr lines collected as they come, its /metrics readable."""

    def __init__(self, proc: subprocess.Popen, port: int, ca: str) -> None:
        self.proc, self.port, self.ca = proc, port, ca
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def logged(self, msg: str) -> list[dict]:
        return [d for d in (json.loads(x) for x in list(self.lines) if x.startswith("{")) if d.get("msg") == msg]

    def metric(self, name: str) -> float:
        ctx = ssl.create_default_context(cafile=self.ca)
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=ctx, timeout=10)
        try:
            conn.request("GET", "/metrics")
            text = conn.getresponse().read().decode()
        finally:
            conn.close()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name == name)


@contextmanager
def webhook(emu, kubeconfig: str, tls_pair, tmp_path: Path, config: dict, *flags: str) -> Iterator[Webhook]:
    ca, cert, key = tls_pair
    certs = tmp_path / f"certs-{_free_port()}"
    certs.mkdir()
    (certs / "tls.crt").write_bytes(Path(cert).read_bytes())
    (certs / "tls.key").write_bytes(Path(key).read_bytes())
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gangscale", "webhook", "--config",
                             write_file(tmp_path / f"config-{port}.yaml", config), "--cert-dir", str(certs),
                             "--listen", f"127.0.0.1:{port}", "--kubeconfig", kubeconfig, "--no-discovery", *flags],
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True)
    hook = Webhook(proc, port, ca)
    try:
        wait_for(lambda: hook.logged("webhook serving") or proc.poll() is not None, "the webhook to serve")
        assert proc.poll() is None, "".join(hook.lines)
        yield hook
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert not any("Traceback" in x for x in hook.lines), "".join(hook.lines)


def test_a_stale_lease_has_every_capacity_gate_lifted_by_both_webhook_replicas_within_the_fail_open_time(
        make_emulator, kubeconfig_for, client_for, tls_pair, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36")
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    emu.apply(lease(time.time() - 3600))  # the controller stopped renewing an hour ago
    names = gated_pods(emu, 5)
    emu.apply(pod("queued", "team", schedulingGates=[{"name": OTHER_GATE}, {"name": CAPACITY_GATE}]))
    emu.apply(pod("kueue-only", "team", schedulingGates=[{"name": OTHER_GATE}]))
    started = time.monotonic()
    cfg = {"gateFailOpenSeconds": 2}
    with webhook(emu, kubeconfig_for(emu), tls_pair, tmp_path, cfg) as a, \
            webhook(emu, kubeconfig_for(emu), tls_pair, tmp_path, cfg) as b:
        wait_for(lambda: all(not gates(emu, "team", n) for n in names) and gates(emu, "team", "queued") == [OTHER_GATE],
                 "every capacity gate lifted")
        assert time.monotonic() - started >= 2  # not before the lease was seen stale for the fail-open time
        assert gates(emu, "team", "kueue-only") == [OTHER_GATE]  # another gate stays
        wait_for(lambda: a.logged("fail-open: capacity gates lifted") or b.logged("fail-open: capacity gates lifted"),
                 "the log line")
        lines = a.logged("fail-open: capacity gates lifted") + b.logged("fail-open: capacity gates lifted")
        assert all(d["failed"] == {} and d["stopped"] is None for d in lines), lines  # idempotent: no failures
        assert "has not been renewed" in lines[0]["why"]
        assert a.metric("gangscale_webhook_fail_open_gates_lifted_total") \
            + b.metric("gangscale_webhook_fail_open_gates_lifted_total") >= 6
        assert a.metric("gangscale_webhook_leader_lease_stale_seconds") >= 2
    events = [e for e in client_for(emu).get(f"/api/v1/namespaces/{NS}/events")["items"]
              if e.get("reason") == "GatesFailedOpen"]
    assert events and events[0]["involvedObject"]["kind"] == "Lease" and events[0]["type"] == "Warning"


def test_a_lease_a_controller_keeps_renewing_never_has_a_gate_lifted(
        make_emulator, kubeconfig_for, client_for, tls_pair, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36")
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    names = gated_pods(emu, 3)
    elector = LeaderElector(client_for(emu), NS, LEASE, "gangscale-0", duration=2.0)
    keeper = LeaseKeeper(elector, 0.5).start()  # the controller's own renewal
    try:
        with webhook(emu, kubeconfig_for(emu), tls_pair, tmp_path, {"gateFailOpenSeconds": 60},
                     "--fail-open-after", "1") as hook:
            path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{LEASE}"
            t0 = time.monotonic()
            wait_for(lambda: emu.count("GET", path) >= 20 + keeper.rounds and time.monotonic() - t0 > 4,
                     "several fail-open rounds")
            assert all(gates(emu, "team", n) == [CAPACITY_GATE] for n in names)
            assert hook.metric("gangscale_webhook_fail_open_gates_lifted_total") == 0
            assert hook.metric("gangscale_oldest_gate_age_seconds") > 0
            assert not hook.logged("fail-open: capacity gates lifted")
    finally:
        keeper.stop()
    assert emu.count("PATCH", "/api/v1/namespaces/team/pods/train-000") == 0


def test_a_lift_stops_at_the_fence_when_a_controller_takes_the_lease_again_mid_way(
        make_emulator, kubeconfig_for, tls_pair, tmp_path):  # noqa: F811
    emu = make_emulator(release="1.36")
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    emu.apply(lease(time.time() - 3600))
    names = gated_pods(emu, 3 * DEFAULT_BATCH)
    handle = emu.handle
    back = threading.Event()

    def controller_returns_at_the_first_pod_write(h, method):  # before that write is served
        if method == "PATCH" and "/pods/" in h.path and not back.is_set():
            back.set()
            emu.apply(lease(time.time(), duration=3600, holder="gangscale-1"))
        return handle(h, method)

    emu.handle = controller_returns_at_the_first_pod_write
    with webhook(emu, kubeconfig_for(emu), tls_pair, tmp_path, {"gateFailOpenSeconds": 1}) as hook:
        wait_for(lambda: hook.logged("fail-open: capacity gates lifted"), "the lift to end")
        line = hook.logged("fail-open: capacity gates lifted")[0]
        assert line["lifted"] == DEFAULT_BATCH and "was written again" in line["stopped"]
        still = [n for n in names if gates(emu, "team", n) == [CAPACITY_GATE]]
        assert len(still) == 2 * DEFAULT_BATCH  # one batch went through, then the fence held
        assert hook.metric("gangscale_webhook_fail_open_lifts_total") == 1


def test_a_released_or_newly_seen_lease_is_stale_only_once_seen_unchanged_for_the_fail_open_time(
        make_emulator, client_for):  # noqa: F811
    from gangscale.webhook.failopen import FailOpen

    emu = make_emulator(release="1.36")
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    gated_pods(emu, 2)
    t = [time.time() + 7200]  # the webhook's clock: the pods are two hours old, the lease long expired
    emu.apply(lease(time.time() - 3600))
    loop = FailOpen(client_for(emu), NS, LEASE, 600, clock=lambda: t[0])
    assert loop.round() is None  # first seen now: not stale yet, whatever renewTime says
    assert value(loop.metrics.overdue) == 2 and value(loop.metrics.oldest) >= 7200
    t[0] += 599
    assert loop.round() is None
    released = lease(0, holder="")  # a clean shutdown hands the lease over: renewTime zeroed, no holder
    emu.apply(released)
    t[0] += 10
    assert loop.round() is None and value(loop.metrics.lease_stale) == 0  # a new resourceVersion: alive
    t[0] += 600
    report = loop.round()
    assert report is not None and sorted(report.lifted) == ["team/train-000", "team/train-001"]
    assert value(loop.metrics.overdue) == 2  # measured before the lift; the next round sees none
    assert loop.round() is None and value(loop.metrics.overdue) == 0
