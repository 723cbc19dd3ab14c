"""Fail-open: once gangscale's controller is gone, the webhook lifts every `gangscale.io/capacity` gate.

Only the controller lifts a gate in gate mode (once its gang's capacity is Ready), so a controller that stays
down would hold every gated pod for ever. `FailOpen` runs on its own thread in `gangscale webhook`: every
`interval` seconds it reads the controller's Lease (controller/leader.py) and, once the lease has been stale for
`after` seconds (config `gateFailOpenSeconds`), lifts every capacity gate with `gangscale ungate`'s code (one JSON
patch per pod, a `test` of the gate then its `remove`; KEP-3521 lets a gate be removed at any time), logs why,
posts a Warning Event on the Lease, and counts what it did in the webhook's metrics.

Staleness: the lease is alive until the later of `renewTime + leaseDurationSeconds` and the moment this process
first saw its current resourceVersion. The second term keeps the gates shut when the webhook has just started,
when a controller released the lease on a clean shutdown (leader.py `release` zeroes renewTime), and when the
nodes' clocks disagree: the lease must also be seen unchanged for `after` seconds. A missing lease is stale from
the moment it is first seen missing.

Fence: before every `batch` pod writes the lease is read again, and a new resourceVersion (a controller renewed,
took or released it) stops the lift at once; the next round judges afresh. So at most `batch` gate writes follow
a controller's return, as the controller's own writes stop when `LeaderElector.check` fails.

Replicas: every webhook replica runs the loop, with no lease of its own. The lift is idempotent: a pod the other
replica already ungated fails the patch's `test`, is read again and found done (controller/ungate.py), so two
replicas cost at most twice the reads, and one replica left alive is enough.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge

from ..controller.events import EventSink
from ..controller.leader import LEASE_PATH
from ..controller.ungate import UngateReport, gate_names, ungate
from ..ingest import CAPACITY_GATE
from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.lister import list_all
from ..kube.refs import PODS
from ..rfc3339 import parse_time

DEFAULT_BATCH = 10  # pod writes between two reads of the lease


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The controller's Lease as read: its resourceVersion ('' when missing) and when it expires (epoch s, 0: no
    holder)."""

    resource_version: str
    expires: float


def read_lease(client: KubeClient, namespace: str, name: str) -> LeaseView:
    """The Lease `namespace/name`; a missing one is `LeaseView('', 0)`, any other failure raises KubeError."""
    try:
        lease = client.get(f"{LEASE_PATH.format(ns=namespace)}/{name}")
    except KubeError as exc:
        if exc.status == 404:
            return LeaseView("", 0.0)
        raise
    raw_spec, raw_meta = lease.get("spec"), lease.get("metadata")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    meta: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    rv = str(meta.get("resourceVersion") or "?")
    try:
        duration = float(spec.get("leaseDurationSeconds") or 0)
    except (TypeError, ValueError):
        duration = 0.0
    if not spec.get("holderIdentity") or not math.isfinite(duration):
        return LeaseView(rv, 0.0)
    return LeaseView(rv, (parse_time(spec.get("renewTime")) or 0.0) + max(0.0, duration))


class Staleness:
    """Seconds the lease has been stale as this process saw it (the module's rule)."""

    def __init__(self) -> None:
        self._rv: str | None = None
        self._since = 0.0

    def stale_for(self, view: LeaseView, now: float) -> float:
        if view.resource_version != self._rv:
            self._rv, self._since = view.resource_version, now
        return max(0.0, now - max(view.expires, self._since))


def gate_ages(pods: Iterable[dict[str, Any]], now: float, gate: str = CAPACITY_GATE) -> list[float]:
    """Age in seconds of every pod carrying `gate`: a gate is only ever set at creation (KEP-3521), so the pod's
    age is the gate's."""
    ages = []
    for p in pods:
        meta = p.get("metadata")
        if gate in gate_names(p) and isinstance(meta, dict):
            created = parse_time(meta.get("creationTimestamp")) or 0.0
            ages.append(max(0.0, now - created) if created else 0.0)
    return ages


class FailOpenMetrics:
    """The loop's metrics; registered in the webhook's registry (metrics.py `PROCESS_COLLECTORS`)."""

    def __init__(self, after: float) -> None:
        self.lease_stale = Gauge(
            "gangscale_webhook_leader_lease_stale_seconds",
            "How long the controller's lease has been stale, as this webhook saw it",
            registry=None,
        )
        self.fail_open = Gauge(
            "gangscale_webhook_fail_open_seconds", "The configured fail-open time", registry=None
        )
        self.fail_open.set(after)
        self.oldest = Gauge(
            "gangscale_oldest_gate_age_seconds",
            "Age of the oldest pod behind the gangscale.io/capacity gate (0: none)",
            registry=None,
        )
        self.overdue = Gauge(
            "gangscale_gates_older_than_fail_open",
            "Pods behind the gangscale.io/capacity gate for longer than the fail-open time",
            registry=None,
        )
        self.lifted = Counter(
            "gangscale_webhook_fail_open_gates_lifted_total",
            "Capacity gates the webhook lifted because the controller's lease was stale",
            registry=None,
        )
        self.lifts = Counter(
            "gangscale_webhook_fail_open_lifts_total",
            "Fail-open lifts, by result: done, fenced "
            "(a controller came back) or failed (some pod could not be patched)",
            ["result"],
            registry=None,
        )

    def collectors(self) -> list[Any]:
        return [
            self.lease_stale,
            self.fail_open,
            self.oldest,
            self.overdue,
            self.lifted,
            self.lifts,
        ]


log = logging.getLogger(
    "gangscale.webhook"
)  # JSON lines through the controller's logger (controller/logs.py)


class FailOpen:
    """The loop (module doc). `round()` is one pass; `start()` runs it every `interval` on a daemon thread."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        lease: str,
        after: float,
        *,
        interval: float | None = None,
        batch: int = DEFAULT_BATCH,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.namespace, self.lease, self.after = client, namespace, lease, after
        self.interval = interval if interval is not None else min(30.0, max(0.1, after / 10))
        self.batch, self.clock = batch, clock
        # the pod list behind the gate-age gauges: at most every half fail-open time (5 min at most) while the lease
        # is fresh, since the alert only asks whether a gate is older than `after`; every round while it is stale
        self.scan_every = max(self.interval, min(300.0, after / 2))
        self._scanned_at = -math.inf
        self._gated = 0
        self.metrics = FailOpenMetrics(after)
        self.staleness = Staleness()
        self.events = EventSink(client)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fail-open", daemon=True)

    def round(self) -> UngateReport | None:
        """Read the lease and the gated pods; lift every gate when the lease is stale. The report, or None."""
        now = self.clock()
        view = read_lease(self.client, self.namespace, self.lease)
        stale = self.staleness.stale_for(view, now)
        self.metrics.lease_stale.set(stale)
        if stale >= self.after or now - self._scanned_at >= self.scan_every:
            self._scan(now)
        if stale < self.after or not self._gated:
            return None
        return self._lift(view, stale)

    def _scan(self, now: float) -> None:
        ages = gate_ages(list_all(self.client, PODS).items, now)
        self._scanned_at, self._gated = now, len(ages)
        self.metrics.oldest.set(max(ages, default=0.0))
        self.metrics.overdue.set(sum(1 for a in ages if a > self.after))

    def _lift(self, judged: LeaseView, stale: float) -> UngateReport:
        why = (
            f"the controller's lease {self.namespace}/{self.lease} has not been renewed for {int(stale)} s "
            f"(fail-open after {int(self.after)} s)"
        )
        report = ungate(self.client, fence=lambda: self._fence(judged), batch=self.batch)
        self.metrics.lifted.inc(len(report.lifted))
        result = "fenced" if report.stopped else "failed" if report.failed else "done"
        self.metrics.lifts.labels(result).inc()
        log.warning(
            "fail-open: capacity gates lifted",
            extra={
                "why": why,
                "lifted": len(report.lifted),
                "failed": report.failed,
                "stopped": report.stopped,
            },
        )
        if report.lifted:
            text = f"lifted {CAPACITY_GATE} from {len(report.lifted)} pod(s): {why}"
            self.events.emit_on(
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "namespace": self.namespace,
                    "name": self.lease,
                },
                "GatesFailedOpen",
                text,
                warning=True,
            )
        return report

    def _fence(self, judged: LeaseView) -> str | None:
        """None while the lease is still the one judged stale; else why the lift must stop."""
        try:
            now = read_lease(self.client, self.namespace, self.lease)
        except KubeError as exc:
            return f"cannot read the controller's lease again: {exc}"
        if now.resource_version != judged.resource_version:
            return (
                f"the controller's lease was written again (resourceVersion {judged.resource_version or 'none'} "
                f"-> {now.resource_version or 'none'})"
            )
        return None

    def start(self) -> FailOpen:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.round()
            except Exception as exc:  # noqa: BLE001 - the loop must survive anything; it tries again next round
                log.warning(
                    "fail-open round failed", extra={"error": str(exc), "kind": type(exc).__name__}
                )
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 5)
