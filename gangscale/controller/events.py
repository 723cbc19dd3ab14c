"""Kubernetes Events on the gang's object, with Cluster Autoscaler's reasons where they mean the same.

`TriggeredScaleUp` / `NotTriggerScaleUp` as CA writes them, plus
`ScaleUpTimedOut` and `CapacityReleased`. An identical event within the
dedupe window is not posted again, so a resync every 30 s does not flood
`kubectl describe`.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import datetime, timezone
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
        return {"apiVersion": "v1", "kind": "Pod", "namespace": key.namespace, "name": t.pod_name or key.name,
                "uid": t.pod_uid}
    if kind == "Workload":
        return {"apiVersion": key.api, "kind": kind, "namespace": key.namespace, "name": key.name.split("/")[0],
                "uid": t.uid.split("/")[0]}
    return {"apiVersion": key.api, "kind": kind, "namespace": key.namespace, "name": key.name, "uid": t.uid}


class EventSink:
    """Posts core/v1 Events; never raises (an event that cannot be written is a log line)."""

    def __init__(self, client: KubeClient | None, dedupe_seconds: float = 600.0) -> None:
        self.client = client
        self.dedupe_seconds = dedupe_seconds
        self._recent: dict[tuple, float] = {}
        self.posted = 0

    def emit(self, target: EventTarget, reason: str, message: str, *, warning: bool = False) -> None:
        obj = involved_object(target)
        key = (obj["namespace"], obj["kind"], obj["name"], reason, message)
        now = time.time()
        if now - self._recent.get(key, 0.0) < self.dedupe_seconds:
            return
        self._recent[key] = now
        if len(self._recent) > 10000:
            self._recent = {k: t for k, t in self._recent.items() if now - t < self.dedupe_seconds}
        if self.client is None:
            return
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{obj['name'][:200]}.{uuid.uuid4().hex[:16]}", "namespace": obj["namespace"]},
            "involvedObject": obj, "reason": reason, "message": message[:1024],
            "type": "Warning" if warning else "Normal", "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.client.post(f"/api/v1/namespaces/{obj['namespace']}/events", body)
            self.posted += 1
        except KubeError as exc:
            log.warning("cannot write event", extra={"gang": str(target.key), "reason": reason,
                                                     "error": str(exc)})
