"""What the leader publishes after each pass for `gangscale status`: every gang of the last plan with its decision,
and every node group's sizes, in one small ConfigMap (`gangscale-status`).

The records ConfigMap holds only gangs that bought capacity (records.py); this one holds what a plan knew about
every pending gang, infeasible, below quorum and invalid ones included, and the per-group view Cluster
Autoscaler's status ConfigMap gives (`cluster-autoscaler-status`: target size, ready, registered, min and max,
backoff; CA `clusterstate/clusterstate.go`, `ClusterStateRegistry` and its `NodeGroupStatus`). The leader writes
it, fenced like every write, only when it changed or at least every REFRESH_SECONDS (so its `updated` time shows
the view is current: `status_due`, which `decide` asks of what it last wrote, `Shown`), and never fails a pass over
it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.refs import CONFIGMAPS
from ..model import Node, NodeGroup
from ..plan import Plan
from ..rfc3339 import format_time

log = logging.getLogger("gangscale.controller")

STATUS_CONFIGMAP = "gangscale-status"
REFRESH_SECONDS = 60.0
MAX_GANGS = 2000  # about 250 bytes a row: the ConfigMap stays far below its 1 MiB limit


@dataclass(frozen=True, slots=True)
class GroupSizes:
    """One node group as the last pass saw it: the cloud's sizes and the cluster's Nodes of it."""

    name: str
    target: int  # the cloud's desired size
    registered: int  # Nodes of the group in the cluster
    ready: int  # of them, Ready
    min_size: int
    max_size: int
    backoff_until: float  # epoch; 0: not backed off

    @property
    def upcoming(self) -> int:
        """Instances the cloud is bringing up that have no Node yet (CA's "upcoming" nodes)."""
        return max(0, self.target - self.registered)


def group_sizes(
    groups: Mapping[str, NodeGroup], nodes: Iterable[Node], backoff: Mapping[str, float], now: float
) -> list[GroupSizes]:
    """Every discovered group by name, with its registered and Ready Nodes and its backoff if still running."""
    registered: dict[str, int] = {}
    ready: dict[str, int] = {}
    for n in nodes:
        if n.node_group:
            registered[n.node_group] = registered.get(n.node_group, 0) + 1
            ready[n.node_group] = ready.get(n.node_group, 0) + (1 if n.ready else 0)
    return [
        GroupSizes(
            g.name,
            g.current_size,
            registered.get(g.name, 0),
            ready.get(g.name, 0),
            g.min_size,
            g.max_size,
            until if (until := backoff.get(g.name, 0.0)) > now else 0.0,
        )
        for g in sorted(groups.values(), key=lambda g: g.name)
    ]


@dataclass(frozen=True, slots=True)
class Shown:
    """The status ConfigMap as this leader last wrote it: its data (None: not written yet) and when."""

    data: Mapping[str, str] | None = None
    written: float = 0.0


def status_due(shown: Shown, data: Mapping[str, str], now: float) -> bool:
    """Whether `data` is to be written now: it differs from what was last written, or that is REFRESH_SECONDS old."""
    return data != shown.data or now - shown.written >= REFRESH_SECONDS


def gang_rows(plan: Plan) -> tuple[list[dict[str, Any]], int]:
    """The plan's gangs as status rows (at most MAX_GANGS) and how many were left out."""
    rows = [
        {
            "namespace": r.namespace,
            "name": r.name,
            "api": r.api,
            "decision": r.decision,
            "reason": r.reason,
            "minCount": r.min_count,
            "pending": r.pending,
            "placed": r.placed,
            "bound": r.bound,
            "priority": r.priority,
        }
        for r in plan.gangs[:MAX_GANGS]
    ]
    return rows, max(0, len(plan.gangs) - MAX_GANGS)


def group_rows(sizes: Iterable[GroupSizes]) -> list[dict[str, Any]]:
    return [
        {
            "name": s.name,
            "target": s.target,
            "ready": s.ready,
            "registered": s.registered,
            "upcoming": s.upcoming,
            "minSize": s.min_size,
            "maxSize": s.max_size,
            "backoffUntil": format_time(s.backoff_until) if s.backoff_until else None,
        }
        for s in sizes
    ]


def status_data(
    plan: Plan, sizes: Iterable[GroupSizes], identity: str, mode: str
) -> dict[str, str]:
    """The ConfigMap's data (without its `updated` time): gangs.json, nodegroups.json, pass.json."""
    gangs, omitted = gang_rows(plan)
    return {
        "gangs.json": orjson.dumps(gangs).decode(),
        "nodegroups.json": orjson.dumps(group_rows(sizes)).decode(),
        "pass.json": orjson.dumps(
            {
                "leader": identity,
                "mode": mode,
                "gangsOmitted": omitted,
                "planStatus": plan.solver.status,
            }
        ).decode(),
    }


class StatusPublisher:
    """Writes the status ConfigMap: replaced whole (only the leader writes it), created when missing. When to write
    it is `decide`'s (`status_due`)."""

    def __init__(self, client: KubeClient, namespace: str, name: str = STATUS_CONFIGMAP) -> None:
        self.client, self.namespace, self.name = client, namespace, name

    def publish(self, data: Mapping[str, str], now: float) -> str | None:
        """Write `data` with its `updated` time; None when written, else why not (one sentence, never raised)."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "gangscale"},
            },
            "data": {**data, "updated": format_time(now)},
        }
        try:
            try:
                self.client.put(CONFIGMAPS.path(self.namespace, self.name), body)
            except KubeError as exc:
                if exc.status != 404:
                    raise
                self.client.post(CONFIGMAPS.path(self.namespace), body)
        except KubeError as exc:
            return f"cannot write ConfigMap {self.namespace}/{self.name}: {exc}"
        return None
