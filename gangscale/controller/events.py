"""Kubernetes Events on the gang's object and its member pods, aggregated, with Cluster Autoscaler's reasons.

`TriggeredScaleUp` / `NotTriggerScaleUp` as CA writes them (cluster-autoscaler/processors/status/
eventing_scale_up_processor.go: on each pod, "pod triggered scale-up: ..." / "pod didn't trigger
scale-up: ..."), plus `ScaleUpTimedOut`, `CapacityReleased` and `GateLifted` on the group object.
Events about no gang (the aws-fleet janitor's `OrphanInstancesTerminated`) go on the controller's
state ConfigMap, as CA puts its own on its `cluster-autoscaler-status` ConfigMap.

Invariant: one Event object per (object, type, reason, message), as client-go's EventCorrelator
keeps one: a repeat adds to its `count` and moves `lastTimestamp` (a merge patch) instead of
creating another object. Repeats are counted at once but written at most once per
`refresh_seconds` per Event, which is CA's own limit (utils/kubernetes/factory.go: one event per
key per 5 minutes), and a gang's CA-style events go to at most `pods_per_gang` of its pending
pods (the first by name), so a 1,000-pod gang costs a bounded number of calls per pass.
Nothing here raises: an Event that cannot be written is a log line. Every write is fenced like the
controller's other writes (`fence`, the leader elector's check): a replica whose lease lapsed writes no
Event, however late its pass runs (the refused event is a log line; the pass's next fenced write ends it).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..model import (
    API_COSCHEDULING,
    API_PODGROUP_V1ALPHA2,
    API_PODGROUP_V1BETA1,
    API_VOLCANO,
    API_WORKLOAD,
)
from ..rfc3339 import format_time
from .leader import LostLeadership
from .lifecycle import EventTarget

log = logging.getLogger("gangscale.controller")

COMPONENT = "gangscale"


# The kind of the group object per gang API flavour (`Gang.api` is the object's apiVersion).
GROUP_KINDS: dict[str, str] = {
    API_WORKLOAD: "Workload",  # 1.35: a gang is one podGroup of a Workload, named "<workload>/<group>"
    API_PODGROUP_V1ALPHA2: "PodGroup",
    API_PODGROUP_V1BETA1: "PodGroup",
    API_COSCHEDULING: "PodGroup",
    API_VOLCANO: "PodGroup",
}


def involved_object(t: EventTarget) -> dict[str, Any]:
    """The object an event about a gang is attached to: its group object, or its pod for lone pods."""
    key = t.key
    kind = GROUP_KINDS.get(key.api, "PodGroup")
    if t.on_pod:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": key.namespace,
            "name": t.pod_name or key.name,
            "uid": t.pod_uid,
        }
    if kind == "Workload":
        return {
            "apiVersion": key.api,
            "kind": kind,
            "namespace": key.namespace,
            "name": key.name.split("/")[0],
            "uid": t.uid.split("/")[0],
        }
    return {
        "apiVersion": key.api,
        "kind": kind,
        "namespace": key.namespace,
        "name": key.name,
        "uid": t.uid,
    }


# The CA reasons that also go on member pods, and the prefix CA puts on the pod's message.
POD_MESSAGES: dict[str, str] = {
    "TriggeredScaleUp": "pod triggered scale-up",
    "NotTriggerScaleUp": "pod didn't trigger scale-up",
}
GROUP_PREFIX = "pod group triggered scale-up: "
EVENT_TTL_SECONDS = 3600.0  # the API server's default --event-ttl: older series are forgotten
MAX_SERIES = 10000


def pod_object(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid}


def state_object(namespace: str, name: str) -> dict[str, Any]:
    """The controller's state ConfigMap: events about no gang go there (as CA's go on cluster-autoscaler-status)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace, "name": name}


def pod_message(reason: str, gang: str, message: str) -> str:
    """CA's pod message, naming the gang: "pod triggered scale-up: gang ns/name: cpu +2; ..."."""
    return f"{POD_MESSAGES[reason]}: gang {gang}: {message.removeprefix(GROUP_PREFIX)}"


@dataclass(slots=True)
class _Series:
    """One Event object and how often its event happened (ahead of the object's `count` until the refresh)."""

    name: str
    count: int
    written_at: float


class EventSink:
    """Posts and aggregates core/v1 Events; never raises. `calls` counts API requests made."""

    def __init__(
        self,
        client: KubeClient | None,
        refresh_seconds: float = 300.0,
        pods_per_gang: int = 10,
        clock: Callable[[], float] = time.time,
        fence: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        # raises LostLeadership when this replica may no longer write; None: never fenced
        self.fence = fence
        self.fenced = 0  # events refused because the lease was lost
        self.refresh_seconds = refresh_seconds
        self.pods_per_gang = pods_per_gang
        self.clock = clock
        self._series: dict[tuple[str, ...], _Series] = {}
        self.calls = 0

    def emit(
        self, target: EventTarget, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """The event on the gang's object and, for CA's reasons, on up to `pods_per_gang` pending members."""
        obj = involved_object(target)
        self._event(obj, reason, message[:1024], warning, str(target.key))
        if reason not in POD_MESSAGES or target.on_pod:
            return
        text = pod_message(reason, f"{target.key.namespace}/{target.key.name}", message)[:1024]
        for name, uid in target.members[: self.pods_per_gang]:
            self._event(
                pod_object(target.key.namespace, name, uid), reason, text, warning, str(target.key)
            )

    def emit_on(
        self, obj: dict[str, Any], reason: str, message: str, *, warning: bool = False
    ) -> None:
        """An event on an object that is no gang's (e.g. `state_object`), aggregated like the others."""
        self._event(
            obj, reason, message[:1024], warning, f"{obj['kind']}/{obj['namespace']}/{obj['name']}"
        )

    def _event(
        self, obj: dict[str, Any], reason: str, message: str, warning: bool, gang: str
    ) -> None:
        kind = "Warning" if warning else "Normal"
        key = (
            obj["namespace"],
            obj["kind"],
            obj["name"],
            obj.get("uid") or "",
            kind,
            reason,
            message,
        )
        now = self.clock()
        series = self._series.get(key)
        if series is not None:
            series.count += 1
            if now - series.written_at < self.refresh_seconds or self.client is None:
                return
            if not self._may_write(reason, gang):
                return
            if self._bump(obj["namespace"], series, now, gang, reason):
                return
        if self.client is not None and series is None and not self._may_write(reason, gang):
            return
        name = self._create(obj, reason, message, kind, now, gang)
        if name is not None:
            self._series[key] = _Series(name, 1, now)
            self._trim(now)

    def _may_write(self, reason: str, gang: str) -> bool:
        """The fence, asked before each API write: False (and a log line) once the lease is lost."""
        if self.fence is None:
            return True
        try:
            self.fence(f"event {reason}")
        except LostLeadership as exc:
            self.fenced += 1
            log.warning(
                "event not written: leadership lost",
                extra={"gang": gang, "reason": reason, "error": str(exc)},
            )
            return False
        return True

    def _create(
        self, obj: dict[str, Any], reason: str, message: str, kind: str, now: float, gang: str
    ) -> str | None:
        """POST a new Event with count 1; its name, or None when it could not be written."""
        name = f"{obj['name'][:200]}.{uuid.uuid4().hex[:16]}"
        if self.client is None:
            return name
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": obj["namespace"]},
            "involvedObject": obj,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": COMPONENT,
            "firstTimestamp": format_time(now),
            "lastTimestamp": format_time(now),
            "count": 1,
        }
        try:
            self.calls += 1
            self.client.post(f"/api/v1/namespaces/{obj['namespace']}/events", body)
        except KubeError as exc:
            log.warning(
                "cannot write event", extra={"gang": gang, "reason": reason, "error": str(exc)}
            )
            return None
        return name

    def _bump(self, namespace: str, series: _Series, now: float, gang: str, reason: str) -> bool:
        """Write the repeats counted since the last write; False when the Event is gone (create anew)."""
        assert self.client is not None
        try:
            self.calls += 1
            self.client.patch(
                f"/api/v1/namespaces/{namespace}/events/{series.name}",
                {"count": series.count, "lastTimestamp": format_time(now)},
            )
        except KubeError as exc:
            if (
                exc.status == 404
            ):  # expired (--event-ttl) or deleted: a new object starts the count again
                return False
            log.warning(
                "cannot update event", extra={"gang": gang, "reason": reason, "error": str(exc)}
            )
            return True
        series.written_at = now
        return True

    def _trim(self, now: float) -> None:
        if len(self._series) <= MAX_SERIES:
            return
        live = {k: s for k, s in self._series.items() if now - s.written_at < EVENT_TTL_SECONDS}
        if len(live) > MAX_SERIES // 2:
            live = dict(sorted(live.items(), key=lambda kv: kv[1].written_at)[-(MAX_SERIES // 2) :])
        self._series = live
