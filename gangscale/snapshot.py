"""ClusterSnapshot: what the solver needs and nothing else.

Free capacity of Ready, schedulable nodes; capacity already on its way (a
group's current size minus its registered nodes, as Cluster Autoscaler's
"upcoming nodes"); the groups that can still grow; and the gangs, each either
ready for the solver or already decided (invalid, waiting, below quorum).

Its size follows what is pending, not the limits: a group's upcoming nodes
beyond the number of pods the solver could place are left out (each pod goes
on one node), so `currentSize: 1000000` builds at most one view per pending pod.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .ingest import Cluster
from .model import Gang, NodeGroup, Taint
from .resources import sub


@dataclass(slots=True)
class NodeView:
    """A node that can take pods now (or soon, when `upcoming`)."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    free: dict[str, int]
    node_group: str | None = None
    upcoming: bool = False


@dataclass(slots=True)
class PreDecision:
    decision: str  # invalid | waiting-for-podgroup | below-quorum
    reason: str


@dataclass(slots=True)
class ClusterSnapshot:
    nodes: list[NodeView]
    groups: list[NodeGroup]
    gangs: list[Gang]  # every gang to report on
    decided: dict[tuple[str, str, str], PreDecision] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def solvable(self) -> list[Gang]:
        return [g for g in self.gangs if g.key not in self.decided]


def pre_decide(g: Gang) -> PreDecision | None:
    """Decisions that need no solver: the gang cannot be planned as it stands."""
    if g.invalid:
        return PreDecision("invalid", g.invalid)
    if not g.exists:
        return PreDecision(
            "waiting-for-podgroup",
            f"pods point at {g.api} {g.namespace}/{g.name}, which does not exist; they stay Pending until it is created",
        )
    present = len(g.pending) + g.bound
    if g.policy == "gang" and present < g.min_count:
        gated = f", {g.gated} more gated or terminating" if g.gated else ""
        return PreDecision(
            "below-quorum",
            f"{present} of minCount {g.min_count} pods exist ({g.bound} bound{gated}); "
            "the scheduler holds the gang until all have been created",
        )
    if not g.pending:
        return PreDecision("below-quorum", "no pending pods")  # pragma: no cover - filtered by ingest
    return None


def build_snapshot(cluster: Cluster, groups: list[NodeGroup], warnings: list[str] | None = None) -> ClusterSnapshot:
    usage: dict[str, dict[str, int]] = {}
    for pod in cluster.bound:
        u = usage.setdefault(pod.node_name or "", {})
        for k, v in pod.requests.items():
            u[k] = u.get(k, 0) + v

    known = {g.name for g in groups}
    registered: dict[str, int] = {}
    nodes: list[NodeView] = []
    for n in cluster.nodes:
        if n.node_group:
            registered[n.node_group] = registered.get(n.node_group, 0) + 1
        if not n.ready or n.unschedulable:
            continue
        free = sub(n.allocatable, usage.get(n.name, {}))
        labels = dict(n.labels)
        labels.setdefault("kubernetes.io/hostname", n.name)
        labels["metadata.name"] = n.name  # for matchFields
        nodes.append(NodeView(n.name, labels, n.taints, free, n.node_group if n.node_group in known else None))

    decided = {g.key: d for g in cluster.gangs if (d := pre_decide(g)) is not None}
    pending = sum(len(g.pending) for g in cluster.gangs if g.key not in decided)
    for g in groups:
        for i in range(min(pending, max(0, g.current_size - registered.get(g.name, 0)))):
            nodes.append(NodeView(f"{g.name}/upcoming-{i + 1}", dict(g.labels), g.taints, dict(g.allocatable), g.name, True))

    snap = ClusterSnapshot(nodes, list(groups), list(cluster.gangs), warnings=list(cluster.warnings) + list(warnings or []))
    snap.decided.update(decided)
    return snap
