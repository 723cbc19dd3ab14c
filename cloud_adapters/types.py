"""The node and node-group shapes the planner and the cloud adapters share.

They live here, in the lowest package, so that `cloud_adapters` imports nothing
from `gangscale` (gangscale re-exports them from `gangscale.model`). Slotted
dataclasses, frozen: built once at the edges (catalog, discovery, ingest) with their final values;
a later stage that knows more (a Node's group, matched by providerID) makes a copy with `replace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: dict[str, int]
    ready: bool = True
    unschedulable: bool = False
    node_group: str | None = None
    provider_id: str = ""
    created: str = ""  # metadata.creationTimestamp (RFC 3339): when it registered
    # the Ready condition's lastTransitionTime (RFC 3339; "" when not given)
    ready_changed: str = ""


@dataclass(frozen=True, slots=True)
class NodeGroup:
    """A group of identical nodes the cloud can grow (CA's NodeGroup)."""

    name: str
    instance_type: str
    price_per_hour: float
    min_size: int
    max_size: int
    current_size: int
    allocatable: dict[str, int]
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    # set by the controller, never by a cloud: the group may not grow until then (epoch seconds) after it failed to
    # deliver, and its maxSize is cut to its size meanwhile; 0: not backed off
    backed_off_until: float = 0.0

    @property
    def headroom(self) -> int:
        return max(0, self.max_size - self.current_size)
