"""What the controller bought, for whom, and until when — kept in the cluster.

A restart must not buy twice or forget a deadline, so the provisioning
records live in a ConfigMap (optimistic concurrency on resourceVersion), not
only in memory. Capacity on its way is also visible from the cloud itself
(target minus registered nodes), which the planner counts as upcoming nodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import orjson

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.refs import CONFIGMAPS
from ..model import GangKey
from .lifecycle import TERMINAL, GangState, Record

__all__ = ["ControllerState", "Record", "StateStore"]

AUDIT_SECONDS = 24 * 3600  # terminal records are kept this long for audit, then dropped
MAX_RECORDS = 1000  # about 500 bytes each: the ConfigMap stays far below its 1 MiB limit
KEPT_WITHOUT_CAPACITY = (GangState.TIMED_OUT, GangState.CANCELLED)  # for audit, even when holding nothing


@dataclass(slots=True)
class ControllerState:
    """The leader's memory between passes: records by gang, backoffs by group (held by the reconciler)."""

    records: dict[GangKey, Record] = field(default_factory=dict)
    backoff: dict[str, float] = field(default_factory=dict)  # node group -> backed off until (epoch)

    def prune(self, now: float) -> None:
        for key, r in list(self.records.items()):
            if r.state in TERMINAL and now - r.since > AUDIT_SECONDS:
                del self.records[key]
        if len(self.records) > MAX_RECORDS:
            for key, _ in sorted(self.records.items(), key=lambda kv: kv[1].since)[: len(self.records) - MAX_RECORDS]:
                del self.records[key]
        self.backoff = {g: t for g, t in self.backoff.items() if t > now}


class StateStore:
    """The ControllerState in one ConfigMap; writes fail on a concurrent change (409)."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self._rv = ""

    def load(self) -> ControllerState:
        try:
            cm = self.client.get(CONFIGMAPS.path(self.namespace, self.name))
        except KubeError as exc:
            if exc.status == 404:
                self._rv = ""
                return ControllerState()
            raise
        self._rv = cm.get("metadata", {}).get("resourceVersion", "")
        data = cm.get("data") or {}
        try:
            recs = orjson.loads(data.get("records.json", "{}"))
            backoff = orjson.loads(data.get("backoff.json", "{}"))
            loaded = (Record.from_json(v) for v in recs.values())
            state = ControllerState({r.key: r for r in loaded},
                                    {str(k): float(v) for k, v in backoff.items()})
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError, KeyError):
            return ControllerState()  # a corrupted state restarts from what the cloud and cluster show
        return state

    def save(self, state: ControllerState) -> None:
        """Persist what a restart needs: records holding capacity, and recent terminal ones for audit.

        Gangs that bought nothing are re-derived from the cluster on the next pass, which keeps
        the ConfigMap far below its 1 MiB limit however many pods are pending.
        """
        state.prune(time.time())
        kept = [r for r in state.records.values() if r.requested or r.state in KEPT_WITHOUT_CAPACITY
                or (r.shared and r.state not in TERMINAL)]  # a unit's gang with a zero share: it rides the unit
        body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/name": "gangscale"}},
            "data": {
                "records.json": orjson.dumps({r.gang: r.to_json() for r in kept}).decode(),
                "backoff.json": orjson.dumps(state.backoff).decode(),
            },
        }
        if self._rv:
            body["metadata"]["resourceVersion"] = self._rv
            cm = self.client.put(CONFIGMAPS.path(self.namespace, self.name), body)
        else:
            cm = self.client.post(CONFIGMAPS.path(self.namespace), body)
        self._rv = cm.get("metadata", {}).get("resourceVersion", "")
