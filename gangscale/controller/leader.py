"""Leader election on a coordination.k8s.io/v1 Lease: only the holder scales.

The lease is taken when absent or expired and renewed before it runs out; a
write that loses a race gets 409 Conflict and this replica stays a follower.
A leader that cannot renew in time steps down on its own, before another
replica can take the lease, so two replicas never act at once.

Renewal runs on its own thread (`LeaseKeeper`), never inside a reconcile
pass, so a pass blocked on the cloud (fleet instances still pending, throttling
retries) keeps the lease. Every mutation is fenced: `check(margin)` raises
`LostLeadership` unless our last renewal is still valid `margin` seconds from
now, so a deposed leader stops before its next cloud call.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import Any

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..rfc3339 import parse_time

log = logging.getLogger("gangscale.controller")
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
FENCE_MARGIN = 1.0  # seconds of lease a mutation must still have left when it starts


class LostLeadership(Exception):
    """This replica no longer holds the lease: the pass stops before touching the cloud or the state."""


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration: float = 15.0,
        clock=time.time,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.clock = clock
        self._held_until = 0.0
        self.terms = 0  # how many times this replica became leader (a new term reloads the state)

    @property
    def is_leader(self) -> bool:
        """True only while our last successful renewal is comfortably inside the lease."""
        return self.clock() < self._held_until

    def check(self, what: str = "", margin: float | None = None) -> None:
        """The fence: raise `LostLeadership` unless the lease is ours for at least `margin` more seconds.

        The default margin is `FENCE_MARGIN`, or a quarter of a shorter lease, so that a lease of a
        few seconds is not lost to the margin alone between two renewals.
        """
        if margin is None:
            margin = min(FENCE_MARGIN, self.duration / 4)
        left = self._held_until - self.clock()
        if left < margin:
            raise LostLeadership(
                f"not the leader any more (lease {'lapsed' if left <= 0 else 'about to lapse'})"
                + (f"; {what} not done" if what else "")
            )

    def try_acquire_or_renew(self) -> bool:
        now = self.clock()
        base = LEASE_PATH.format(ns=self.namespace)
        try:
            try:
                lease = self.client.get(f"{base}/{self.name}")
            except KubeError as exc:
                if exc.status != 404:
                    raise
                self.client.post(base, self._body(now, now, 0, None))
                return self._won(now, "created the lease")
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = parse_time(spec.get("renewTime")) or 0.0
            duration = float(spec.get("leaseDurationSeconds") or self.duration)
            if holder != self.identity and holder and now < renewed + duration:
                self._held_until = 0.0
                return False
            transitions = int(spec.get("leaseTransitions") or 0) + (
                0 if holder == self.identity else 1
            )
            acquired = (
                (parse_time(spec.get("acquireTime")) or 0.0) if holder == self.identity else now
            )
            self.client.put(
                f"{base}/{self.name}",
                self._body(now, acquired, transitions, lease["metadata"].get("resourceVersion")),
            )
            return self._won(
                now,
                "renewed"
                if holder == self.identity
                else f"took the lease from {holder or 'nobody'}",
            )
        except KubeError as exc:
            if exc.status != 409:
                log.warning("lease call failed", extra={"error": str(exc)})
            self._held_until = 0.0
            return False

    def _won(self, now: float, how: str) -> bool:
        if not self.is_leader:
            self.terms += 1
            log.info(
                "leading",
                extra={
                    "lease": f"{self.namespace}/{self.name}",
                    "identity": self.identity,
                    "how": how,
                },
            )
        # step down a third of the lease early: another replica can only take it once it has fully expired
        self._held_until = now + self.duration * 2 / 3
        return True

    def release(self) -> None:
        """Give the lease up on shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        base = LEASE_PATH.format(ns=self.namespace)
        try:
            lease = self.client.get(f"{base}/{self.name}")
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._body(
                    self.clock(),
                    self.clock(),
                    int(lease["spec"].get("leaseTransitions") or 0),
                    lease["metadata"].get("resourceVersion"),
                )
                body["spec"]["holderIdentity"] = None
                body["spec"]["renewTime"] = _stamp(0)
                self.client.put(f"{base}/{self.name}", body)
        except KubeError:
            pass
        self._held_until = 0.0

    def _body(
        self, now: float, acquired: float, transitions: int, rv: str | None
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv:
            meta["resourceVersion"] = rv
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.duration),
                "acquireTime": _stamp(acquired),
                "renewTime": _stamp(now),
                "leaseTransitions": transitions,
            },
        }


class LeaseKeeper:
    """Renews (or tries to take) the lease every `interval` seconds on its own thread."""

    def __init__(self, elector: LeaderElector, interval: float) -> None:
        self.elector = elector
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease", daemon=True)
        self.rounds = 0  # attempts made (the first one happens before start() returns)

    def start(self) -> LeaseKeeper:
        self._round()
        self._thread.start()
        return self

    def _round(self) -> None:
        try:
            self.elector.try_acquire_or_renew()
        except Exception:  # noqa: BLE001 - the thread must survive anything; the lease then simply lapses
            log.exception("lease renewal failed")
        self.rounds += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._round()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 5)
