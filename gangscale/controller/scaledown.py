"""Which nodes are empty long enough to give back: a pure function over the pass's cluster.

Invariant: a node running any pod other than a DaemonSet's, or one the
current plan puts pods on, is never a candidate; the grace period starts when
a node is first seen empty and restarts whenever it is busy; a node a running
gang did not use (its record's spare) goes at its purchase's deadline even
within the grace. The size floor
(minSize) is checked against the cloud at the moment of the call, by the actuator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cloud_adapters.base import instance_id_from_provider_id

from ..ingest import Cluster
from ..model import NodeGroup


@dataclass(frozen=True, slots=True)
class EmptyNode:
    """A node of an owned group that stayed empty past the grace period."""

    node: str
    group: NodeGroup
    instance_id: str
    empty_since: float


def busy_nodes(cluster: Cluster) -> set[str]:
    """Nodes running any pod that is not a DaemonSet's: never removed."""
    return {p.node_name for p in cluster.bound if p.node_name and "DaemonSet" not in p.owner_kinds}


def due_for_scale_down(empty_since: Mapping[str, float], cluster: Cluster, busy: set[str],
                       groups: Mapping[str, NodeGroup], now: float, grace: float,
                       spare_until: Mapping[str, float] | None = None) -> tuple[dict[str, float], list[EmptyNode]]:
    """The empty-since times carried to the next pass, and the nodes due to go back now: empty for the grace, or a
    node bought for a gang that started without it, empty at its purchase's deadline (`spare_until`): it was
    bought for a gang that no longer needs it, and waiting the grace on top would bill it past that deadline."""
    spare = spare_until or {}
    since_by_node: dict[str, float] = {}
    due: list[EmptyNode] = []
    for node in cluster.nodes:
        group = groups.get(node.node_group or "")
        if group is None or node.name in busy:
            continue
        since = since_by_node[node.name] = empty_since.get(node.name, now)
        iid = instance_id_from_provider_id(node.provider_id)
        if (now - since >= grace or now >= spare.get(node.name, now + 1)) and iid:
            due.append(EmptyNode(node.name, group, iid, since))
    return since_by_node, due
