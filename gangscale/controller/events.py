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
from ..model import API_NONE, Gang

log = logging.getLogger("gangscale.controller")

COMPONENT = "gangscale"


def involved_object(g: Gang) -> dict[str, Any]:
    """The object an event about `g` is attached to: its group object, or its pod for lone pods."""
    if g.api == API_NONE or not g.exists:
        pod = g.pending[0] if g.pending else None
        name = pod.name if pod else g.name
        return {"apiVersion": "v1", "kind": "Pod", "namespace": g.namespace, "name": name,
                "uid": pod.uid if pod else ""}
    if g.api == "scheduling.k8s.io/v1alpha1":
        return {"apiVersion": g.api, "kind": "Workload", "namespace": g.namespace, "name": g.name.split("/")[0],
                "uid": g.uid.split("/")[0]}
    return {"apiVersion": g.api, "kind": "PodGroup", "namespace": g.namespace, "name": g.name, "uid": g.uid}


class EventSink:
    """Posts core/v1 Events; never raises (an event that cannot be written is a log line)."""

    def __init__(self, client: KubeClient | None, dedupe_seconds: float = 600.0) -> None:
        self.client = client
        self.dedupe_seconds = dedupe_seconds
        self._recent: dict[tuple, float] = {}
        self.posted = 0

    def emit(self, g: Gang, reason: str, message: str, *, warning: bool = False) -> None:
        obj = involved_object(g)
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
            log.warning("cannot write event", extra={"gang": f"{g.namespace}/{g.name}", "reason": reason,
                                                     "error": str(exc)})
