"""Which nodes are empty long enough to give back, and may be: pure functions over the pass's cluster.

Invariant: a node running any pod other than a DaemonSet's, or one the
current plan puts pods on, is never a candidate; its keep (keep.py: a ski-rental
rule, or a fixed grace) starts when a node is first seen empty and restarts
whenever it is busy; a node a running
gang did not use (its record's spare) goes at its purchase's deadline even
within its keep. The size floor
(minSize) is checked against the cloud at the moment of the call, by the actuator.

Opt-outs: a node annotated `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"` (Cluster Autoscaler's,
cluster-autoscaler/core/scaledown/eligibility/eligibility.go `ScaleDownDisabledKey`) or
`gangscale.io/do-not-disrupt: "true"`, or running a pod annotated `gangscale.io/do-not-disrupt: "true"` (after
Karpenter's `karpenter.sh/do-not-disrupt`, honoured on nodes and pods alike: pkg/apis/v1/labels.go
`DoNotDisruptAnnotationKey`; Karpenter's own key is honoured too), is never a candidate.

The removal protocol (the reconciler's `_scale_down`): taint the node `DISRUPTION_TAINT` (NoSchedule), read the
pods bound to it again, and terminate it only when none of them `blocks_removal`; when one does, the taint comes
off and the node stays. Cluster Autoscaler taints `ToBeDeletedByClusterAutoscaler:NoSchedule` before it drains
and deletes (utils/taints/taints.go `MarkToBeDeleted`), Karpenter `karpenter.sh/disrupted:NoSchedule` before it
checks and terminates (pkg/apis/v1/taints.go `DisruptedNoScheduleTaint`): a pod the scheduler binds between the
emptiness check and the termination is seen, not killed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cloud_adapters.base import instance_id_from_provider_id

from ..ingest import Cluster
from ..model import Node, NodeGroup
from .gates import released_node


@dataclass(frozen=True, slots=True)
class EmptyNode:
    """A node of an owned group that stayed empty past its keep."""

    node: str
    group: NodeGroup
    instance_id: str
    empty_since: float


def busy_nodes(cluster: Cluster) -> set[str]:
    """Nodes running any pod that is not a DaemonSet's, and nodes gate mode released a pod to that the scheduler
    has not bound yet (`released_to`): never removed."""
    running = {
        p.node_name for p in cluster.bound if p.node_name and "DaemonSet" not in p.owner_kinds
    }
    return running | released_to(cluster)


def released_to(cluster: Cluster) -> set[str]:
    """The nodes pending pods were released to (`gates.released_node`: narrowed there, gangscale's gate gone, whether
    or not another gate still holds them): that node is their only feasible one, so it is taken even before the
    bind lands (a pod whose node is gone is `gates.stranded`, and recreated)."""
    return {node for g in cluster.gangs for p in g.pending if (node := released_node(p))}


def empty_nodes(
    empty_since: Mapping[str, float],
    cluster: Cluster,
    busy: set[str],
    groups: Mapping[str, NodeGroup],
    now: float,
) -> dict[str, float]:
    """The empty-since times carried to the next pass: every node of an owned group that is not busy, since it was
    first seen empty (now, for a node that just emptied)."""
    return {
        node.name: empty_since.get(node.name, now)
        for node in cluster.nodes
        if node.node_group in groups and node.name not in busy
    }


def due_nodes(
    since_by_node: Mapping[str, float],
    until: Mapping[str, float],
    cluster: Cluster,
    groups: Mapping[str, NodeGroup],
    now: float,
    spare_until: Mapping[str, float] | None = None,
    *,
    grace: float,
) -> list[EmptyNode]:
    """The empty nodes due to go back now: past their keep (`falls_due_at` of `until`: node -> give-back time,
    keep.py, else `grace` after it emptied), or a node bought for a gang that started without it, empty at its
    purchase's deadline (`spare_until`): it was bought for a gang that no longer needs it, and keeping it on top
    would bill it past that deadline."""
    spare = spare_until or {}
    due: list[EmptyNode] = []
    for node in cluster.nodes:
        since = since_by_node.get(node.name)
        group = groups.get(node.node_group or "")
        if since is None or group is None:
            continue
        iid = instance_id_from_provider_id(node.provider_id)
        kept = now >= falls_due_at(since, until.get(node.name), grace)
        if (kept or now >= spare.get(node.name, now + 1)) and iid:
            due.append(EmptyNode(node.name, group, iid, since))
    return due


def above_min_size(due: Iterable[EmptyNode]) -> list[EmptyNode]:
    """The due nodes a group can give back without going below its minSize at its discovered size (the first ones
    of each group): the others are not tainted at all, so a group held at minSize is not tainted and untainted
    every pass. The actuator checks the size again, fresh, at the call."""
    left: dict[str, int] = {}
    out = []
    for e in due:
        room = left.setdefault(e.group.name, e.group.current_size - e.group.min_size)
        if room > 0:
            left[e.group.name] = room - 1
            out.append(e)
    return out


DISRUPTION_TAINT = {"key": "gangscale.io/disruption", "value": "scale-down", "effect": "NoSchedule"}
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
DO_NOT_DISRUPT = ("gangscale.io/do-not-disrupt", "karpenter.sh/do-not-disrupt")


def _annotated(obj: Mapping[str, Any], keys: Iterable[str]) -> str | None:
    """The first of `keys` the object's annotations set to "true" (None: none)."""
    meta = obj.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(notes, Mapping):
        return None
    return next((k for k in keys if str(notes.get(k, "")).strip().lower() == "true"), None)


def _name(obj: Mapping[str, Any]) -> str | None:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else None


def protected_nodes(objects: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Node name -> why it must not be scaled down: an opt-out annotation on the node or on a pod bound to it."""
    out: dict[str, str] = {}
    for o in objects:
        kind = o.get("kind")
        if kind == "Node":
            key = _annotated(o, (SCALE_DOWN_DISABLED, *DO_NOT_DISRUPT))
            name = _name(o)
            if key and name:
                out[name] = f"annotated {key}=true"
        elif kind == "Pod":
            key = _annotated(o, DO_NOT_DISRUPT)
            spec = o.get("spec")
            node = spec.get("nodeName") if isinstance(spec, Mapping) else None
            if key and isinstance(node, str) and node:
                out.setdefault(node, f"runs a pod annotated {key}=true")
    return out


def tainted_nodes(nodes: Iterable[Node]) -> set[str]:
    """Nodes that carry the disruption taint (a removal this controller started and did not finish)."""
    return {n.name for n in nodes if any(t.key == DISRUPTION_TAINT["key"] for t in n.taints)}


def pod_key(pod: Mapping[str, Any]) -> str:
    """`namespace/name` of a pod as read ("?" for what is missing)."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    return f"{meta.get('namespace') or '?'}/{meta.get('name') or '?'}"


def blocks_removal(pod: Mapping[str, Any]) -> bool:
    """A pod read on a node about to go keeps the node: any pod not finished, but a DaemonSet's or a mirror pod
    (as `busy_nodes`: those run on every node and go with it)."""
    status, meta = pod.get("status"), pod.get("metadata")
    if isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"):
        return False
    if not isinstance(meta, Mapping):
        return True
    owners = meta.get("ownerReferences")
    if isinstance(owners, list) and any(
        isinstance(r, Mapping) and r.get("kind") in ("DaemonSet", "Node") for r in owners
    ):
        return False
    notes = meta.get("annotations")
    return not (isinstance(notes, Mapping) and notes.get("kubernetes.io/config.mirror"))


def falls_due_at(empty_since: float, keep_until: float | None, grace: float) -> float:
    """When a node empty since `empty_since` is due for its keep: at the give-back time its keep rule decided
    (`keep.keep_until`), or the fixed grace after it emptied when none was decided. The one reading of the keep
    time: `due_nodes` takes a node at or after it, and the controller's wake-up (`wakes.next_due`) is it."""
    return keep_until if keep_until is not None else empty_since + grace
