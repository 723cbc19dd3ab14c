"""What the controller bought, for whom, and until when — kept in the cluster.

A restart must not buy twice or forget a deadline, so the provisioning
records live in a ConfigMap (optimistic concurrency on resourceVersion), not
only in memory. Capacity on its way is also visible from the cloud itself
(target minus registered nodes), which the planner counts as upcoming nodes.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.refs import CONFIGMAPS

TERMINAL = ("running", "timed-out", "cancelled", "infeasible")
AUDIT_SECONDS = 24 * 3600  # terminal records are kept this long for audit, then dropped
MAX_RECORDS = 1000  # about 500 bytes each: the ConfigMap stays far below its 1 MiB limit


@dataclass(slots=True)
class Record:
    """One gang generation's provisioning, as the controller last saw it."""

    gang: str  # "namespace/name/api": the key
    namespace: str
    name: str
    api: str
    generation: str  # PodGroup uid (or pod uid for a lone pod); a new one restarts provisioning
    state: str
    reason: str
    since: float  # when the state was entered (epoch seconds)
    first_seen: float = 0.0  # when the gang was first pending (queue latency)
    requested: dict[str, int] = field(default_factory=dict)  # node group -> nodes bought for it
    requested_at: float = 0.0
    deadline: float = 0.0  # give back unused nodes when the gang is not running by then
    pods: list[str] = field(default_factory=list)  # pod uids this generation was planned for

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Record:
        known = {k: raw[k] for k in cls.__slots__ if k in raw}  # type: ignore[attr-defined]
        return cls(**known)


@dataclass(slots=True)
class ControllerState:
    records: dict[str, Record] = field(default_factory=dict)
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
            state = ControllerState({k: Record.from_json(v) for k, v in recs.items()},
                                    {str(k): float(v) for k, v in backoff.items()})
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError):
            return ControllerState()  # a corrupted state restarts from what the cloud and cluster show
        return state

    def save(self, state: ControllerState) -> None:
        """Persist what a restart needs: records holding capacity, and recent terminal ones for audit.

        Gangs that bought nothing are re-derived from the cluster on the next pass, which keeps
        the ConfigMap far below its 1 MiB limit however many pods are pending.
        """
        state.prune(time.time())
        kept = {k: r for k, r in state.records.items() if r.requested or r.state in ("timed-out", "cancelled")}
        body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": self.name, "namespace": self.namespace,
                         "labels": {"app.kubernetes.io/name": "gangscale"}},
            "data": {
                "records.json": orjson.dumps({k: r.to_json() for k, r in kept.items()}).decode(),
                "backoff.json": orjson.dumps(state.backoff).decode(),
            },
        }
        if self._rv:
            body["metadata"]["resourceVersion"] = self._rv
            cm = self.client.put(CONFIGMAPS.path(self.namespace, self.name), body)
        else:
            cm = self.client.post(CONFIGMAPS.path(self.namespace), body)
        self._rv = cm.get("metadata", {}).get("resourceVersion", "")
