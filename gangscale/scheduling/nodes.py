"""The nodes as the scheduler model sees them, built from a snapshot or a plan.

A `SimNode` is one node kube-scheduler can place pods on: existing, upcoming (bought, not yet
registered) or new (planned). Invariant: its `allocatable` is the node's whole allocatable, so the
pods already bound on it (and an arriving node's DaemonSet pods, bound before any queued pod) are
added back as requests, never subtracted twice; the planner-only reservation taint is never on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..model import NodeGroup, Placement, Pod, Taint
from ..snapshot import RESERVED_TAINT, NodeView

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def pinned_names(pl: Placement) -> frozenset[str] | None:
    """The node names a placement's required affinity allows when every term names them (`metadata.name In`,
    as gate mode narrows a released pod: KEP-3521), else None. Filters need look at no other node."""
    if not pl.affinity:
        return None
    names: set[str] = set()
    for term in pl.affinity:
        if not term:
            continue  # an empty term matches no node
        named = [r for r in term if r.key == "metadata.name" and r.operator == "In"]
        if not named:
            return None
        allowed = set(named[0].values)
        for r in named[1:]:
            allowed &= set(r.values)
        names |= allowed
    return frozenset(names)


@dataclass(slots=True)
class SimNode:
    """A node the scheduler sees: existing, upcoming (bought, not yet registered) or new (planned)."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: dict[str, int]
    node_group: str | None = None
    kind: str = "existing"  # existing | upcoming | new
    unschedulable: bool = False
    # DaemonSet pods on an arriving (upcoming or new) node: bound before any queued pod, as the DaemonSet controller
    # creates them when the node registers and they tolerate its not-ready taints (gangscale.daemonsets)
    daemon_pods: tuple[Pod, ...] = ()


def nodes_from_views(views: Iterable[NodeView], bound: Iterable[Pod] = ()) -> list[SimNode]:
    """Snapshot nodes as the scheduler sees them: allocatable = free + what bound pods request (and, on an upcoming
    node, what its DaemonSet pods request: they are bound on it first).

    The planner-only reservation taint is dropped: the real scheduler never sees it.
    """
    used: dict[str, dict[str, int]] = {}
    for p in bound:
        if p.node_name:
            acc = used.setdefault(p.node_name, {})
            for k, x in p.requests.items():
                acc[k] = acc.get(k, 0) + x
    out = []
    for v in views:
        u = used.get(v.name)
        if v.daemon_pods:
            u = dict(u or {})
            for p in v.daemon_pods:
                for k, x in p.requests.items():
                    u[k] = u.get(k, 0) + x
        # no bound pod: the free capacity itself (the same keys and values as the general case)
        if u is None:
            alloc = {k: x if x > 0 else 0 for k, x in v.free.items()}
        else:
            alloc = {k: max(0, v.free.get(k, 0)) + u.get(k, 0) for k in set(v.free) | set(u)}
        taints = (
            v.taints
            if not any(t.key == RESERVED_TAINT for t in v.taints)
            else tuple(t for t in v.taints if t.key != RESERVED_TAINT)
        )
        out.append(
            SimNode(
                v.name,
                dict(v.labels),
                tuple(taints),
                alloc,
                v.node_group,
                "upcoming" if v.upcoming else "existing",
                daemon_pods=v.daemon_pods,
            )
        )
    return out


def planned_nodes(
    groups: Sequence[NodeGroup],
    names: Sequence[str],
    daemons: Mapping[str, Sequence[Pod]] | None = None,
) -> list[SimNode]:
    """One new node per entry of `names` (node-group names, e.g. a plan's `newNodes[].nodeGroup`). `daemons`: per
    group, the DaemonSet pods its new nodes run, when `groups` carry allocatable net of them (a snapshot's): the
    node gets them back, bound (None: `groups` as they are, no daemon pods)."""
    by_name = {g.name: g for g in groups}
    out = []
    for i, gname in enumerate(names):
        out.append(
            arriving_node(
                by_name[gname], f"{gname}/new-{i + 1}", tuple((daemons or {}).get(gname, ()))
            )
        )
    return out


def arriving_node(
    g: NodeGroup, name: str, daemon_pods: tuple[Pod, ...] = (), net: bool = True
) -> SimNode:
    """A new node `name` of group `g` with its DaemonSet pods bound. `net`: `g.allocatable` is already less the daemon
    pods' requests (a snapshot's groups), so they are added back to make the node's allocatable."""
    labels = {**g.labels, "kubernetes.io/hostname": name, "metadata.name": name}
    alloc = dict(g.allocatable)
    if net:
        for p in daemon_pods:
            for k, x in p.requests.items():
                alloc[k] = alloc.get(k, 0) + x
    return SimNode(name, labels, tuple(g.taints), alloc, g.name, "new", daemon_pods=daemon_pods)
