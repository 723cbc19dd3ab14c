"""Which gang the nodes on their way belong to, and which gang each newly bought node is for.

Invariant: a node bought for a gang stays that gang's until the gang binds or
its record gives it up: on its way, the snapshot reserves one of the group's
upcoming nodes for it (`SnapshotPolicy.reserved`); once registered, the node
the record's `nodes` name (lifecycle `Registered` attributes arrivals) is
reserved by name (`SnapshotPolicy.reserved_nodes`), so only that gang's pods
may use it in the next plan and no other gang's upcoming node is taken for it,
once the gang waits for no launch any more (`startable_now`): until then it
cannot start on its Ready nodes, and a gang that can start on them now may.
Gangs that share new nodes are booked together as a unit (`Record.shared`):
the unit's nodes are reserved for the unit (`shares.unit_key`), and every gang
of it may use them, whichever record of the unit holds them.
The attribution of a plan's new nodes books exactly the plan's new nodes.
In observe mode the scheduler model sees the same reservations (`held_in_the_model`): a node
reserved for a gang takes no other gang's pod there either.
Pure functions of records, plan and snapshot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace

from ..fit import placement_allows
from ..model import Gang, GangKey, Taint, Toleration
from ..plan import Plan
from ..snapshot import RESERVED_TAINT, ClusterSnapshot, NodeView
from .lifecycle import GangState, Record, holds, spares_expired
from .shares import by_gang, unit_key, units

LATE_API = "gangscale.io/late-launch"  # the api of `late_key`: no gang API is named so
FREE = frozenset(
    {GangState.CANCELLED, GangState.RUNNING}
)  # states whose held nodes no gang has reserved
# the reservation as a taint the scheduler model keeps (it drops the planner's `gangscale.io/reserved-for`)
HELD_TAINT = "gangscale.io/held-for"


def _reserving(records: Iterable[Record]) -> list[Record]:
    """Records whose nodes are reserved, oldest request first (a cancelled gang's are free until given back, and
    a running gang's spares, `lifecycle.on_applied._spare`, are free for any gang until its deadline)."""
    return sorted(
        (r for r in records if holds(r) and r.state not in FREE), key=lambda r: r.requested_at
    )


def still_waiting(records: Iterable[Record], listed: Collection[GangKey]) -> list[Record]:
    """The records whose gang the cluster still lists (pending members, or bound below minCount).

    A gang that is no longer listed has bound (or is gone): this pass's transition ends its record's
    claim (`running` or `cancelled`), but the plan comes first, so nothing may stay reserved for it
    there. Otherwise, when the scheduler bound the gang on a node another gang's record bought (it
    became Ready first), the gang's own node still on its way stays reserved for it and the plan buys
    the other gang a replacement; the spare then idles, billed with no pod, until some later gang takes it
    (possibly long past the deadline it was bought under)."""
    return [r for r in records if r.key in listed]


def late_key(key: GangKey) -> GangKey:
    """The reservation of a gang's late launches (`lifecycle.on_overdue`): a key no gang has, so no plan uses them."""
    return GangKey(key.namespace, key.name, LATE_API)


def reserved_upcoming(records: Iterable[Record]) -> dict[str, tuple[GangKey, ...]]:
    """Per group, the gangs its upcoming nodes were bought for, one entry per node still on its way, oldest
    request first (the nodes that arrived for a gang are reserved by name: `reserved_registered`); a gang's late
    launches, covered by new ones, are reserved for no gang (`late_key`): no plan counts on them twice."""
    out: dict[str, list[GangKey]] = defaultdict(list)
    for rec in _reserving(records):
        for group, n in rec.requested.items():
            late = rec.late(group)
            out[group].extend(
                [late_key(rec.key)] * late
                + [reservation_key(rec)] * (n - rec.arrived(group) - late)
            )
    return {g: tuple(keys) for g, keys in out.items() if keys}


def reserved_registered(records: Iterable[Record]) -> dict[str, GangKey]:
    """Registered node name -> the gang it arrived for, while that gang waits for it."""
    return {
        name: reservation_key(rec)
        for rec in _reserving(records)
        for names in rec.nodes.values()
        for name in names
    }


def startable_now(
    registered: Mapping[str, GangKey], upcoming: Mapping[str, tuple[GangKey, ...]]
) -> dict[str, GangKey]:
    """The registered nodes of `registered` whose gang has no node still on its way (`reserved_upcoming`).

    A gang that still waits for a launch cannot start on its Ready nodes this pass: holding them empty for it
    only delays a gang that could start on them now. Left free, the plan gives them to whichever gang it starts
    (the waiting one keeps its launches on their way, and the plan buys it what it no longer has: the same
    purchase the other gang would have needed). So does a cluster without gangscale: kube-scheduler binds the next
    pod of its queue to any Ready node it fits (kubernetes/kubernetes pkg/scheduler/schedule_one.go, `ScheduleOne`),
    and neither Cluster Autoscaler nor Karpenter binds the pod a node was bought for to it (Karpenter leaves the
    bind to kube-scheduler: aws/karpenter-provider-aws designs/node-ownership.md). A gang whose nodes have all
    arrived keeps them: it starts on them now."""
    waiting = {key for keys in upcoming.values() for key in keys}
    return {name: key for name, key in registered.items() if key not in waiting}


def expired_spares(
    records: Iterable[Record], now: float
) -> tuple[dict[str, tuple[GangKey, ...]], dict[str, GangKey]]:
    """What running gangs started without and still hold past their purchase's deadline, reserved for themselves:
    per group their launches on their way, and their registered nodes by name (`lifecycle.spares_expired`). No
    other gang's plan may count on them, so this pass gives them back (`lifecycle.on_expire._spares_due`, the
    scale-down's `spare_until`) instead of keeping them for a plan whose gang may not start on them in time (a
    node billed with no pod past the deadline it was bought under is stranded capacity)."""
    upcoming: dict[str, list[GangKey]] = defaultdict(list)
    nodes: dict[str, GangKey] = {}
    for rec in records:
        if spares_expired(rec, now):
            for group, n in rec.requested.items():
                upcoming[group].extend([rec.key] * (n - rec.arrived(group)))
            nodes.update({name: rec.key for names in rec.nodes.values() for name in names})
    return {g: tuple(keys) for g, keys in upcoming.items() if keys}, nodes


def upcoming_nodes(snap: ClusterSnapshot) -> dict[str, str]:
    """Upcoming node name -> its group, recognised by the snapshot's `upcoming` field."""
    return {v.name: v.node_group for v in snap.nodes if v.upcoming and v.node_group}


def planned_upcoming(plan: Plan, snap: ClusterSnapshot) -> dict[str, int]:
    """Per group, the nodes on their way that no gang has reserved and the plan puts pods on."""
    free = {
        v.name: v.node_group
        for v in snap.nodes
        if v.upcoming and v.node_group and v.reserved_for is None
    }
    return dict(
        Counter(free[name] for name, pods in plan.existing_nodes.items() if name in free and pods)
    )


def pods_on_upcoming(plan: Plan, snap: ClusterSnapshot) -> frozenset[str]:
    upcoming = upcoming_nodes(snap)
    return frozenset(
        p for name, pods in plan.existing_nodes.items() if name in upcoming for p in pods
    )


def attribute_new_nodes(plan: Plan, snap: ClusterSnapshot) -> dict[GangKey, dict[str, int]]:
    """Which gangs each new node is bought for, per group: every gang whose pods the plan puts on a unit of new
    nodes is booked its share of them (`shares.units`); the shares of a unit add up to its nodes, so what is
    booked is exactly what the plan buys. A gang whose share of a shared unit rounds to zero has a zero entry:
    it is booked with the unit all the same."""
    return by_gang(units(plan, snap.gangs))


def sharing_units(plan: Plan, snap: ClusterSnapshot) -> tuple[frozenset[GangKey], ...]:
    """The sets of gangs that share the plan's new nodes (two or more gangs on one unit)."""
    return tuple(frozenset(u.shares) for u in units(plan, snap.gangs) if u.shared)


def reservation_key(rec: Record) -> GangKey:
    """What a record's nodes are reserved for: its unit when it shares nodes with other gangs, else its gang."""
    return unit_key(rec.shared) if rec.shared else rec.key


def shared_reservations(
    records: Iterable[Record], listed: Collection[GangKey]
) -> dict[GangKey, GangKey]:
    """Listed gang -> the unit key it may use besides its own (the nodes bought for its unit, whichever of the
    unit's records holds them)."""
    return {
        r.key: unit_key(r.shared)
        for r in records
        if r.shared and r.key in listed and r.state not in FREE
    }


def _fits_alone(g: Gang, views: list[NodeView]) -> bool:
    """Whether every pending pod of `g` fits on `views` (`_fit_together`)."""
    return _fit_together([g], views)


def _fit_together(gangs: list[Gang], views: list[NodeView]) -> bool:
    """Whether every pending pod of `gangs` fits on `views` at once (first fit, largest pod first): no pod with
    per-node rules, and one domain of each gang's topology keys."""
    if not gangs or any(p.rules for g in gangs for p in g.pending):
        return False
    if any(
        g.topology_keys
        and len({tuple(v.labels.get(k) for k in g.topology_keys) for v in views}) > 1
        for g in gangs
    ):
        return False
    free = [dict(v.free) for v in views]
    for p in sorted(
        (p for g in gangs for p in g.pending),
        key=lambda p: sorted(p.requests.values(), reverse=True),
        reverse=True,
    ):
        for v, room in zip(views, free, strict=False):
            if placement_allows(p.placement, v.labels, v.taints) and all(
                room.get(r, 0) >= n for r, n in p.requests.items()
            ):
                for r, n in p.requests.items():
                    room[r] = room.get(r, 0) - n
                break
        else:
            return False
    return True


def held_in_the_model(snap: ClusterSnapshot) -> ClusterSnapshot:
    """`snap` with every reservation also as the scheduler model sees it: a reserved node is tainted `HELD_TAINT`
    for its gang (only that gang's pods tolerate it), and a gang that fits on its own reserved nodes alone is
    pinned there (nodeSelector `HELD_TAINT`, a label only its nodes carry); so are the gangs of a shared unit that
    fit on the unit's nodes all together (`_pinned_units`).

    The scheduler model drops the planner's reservation taint (`scheduling.simulate.nodes_from_views`: the real
    scheduler never sees it) and places every node at once, so without this an older gang would take, in observe
    mode, a node on its way for another gang (another namespace's, uncounted by its cap), and that gang would be
    bought a replacement. The
    controller keeps reserved nodes for their gang whatever the plan says, and time orders them: the nodes of a
    gang's purchase register before anything bought after it, and the gang binds on them once they are Ready
    (gate mode lifts its gate then and never narrows another gang onto them: `gates._may_move`). So the model
    sees the reservation as the solver does. `snap` itself when nothing is reserved."""
    owned: dict[GangKey, list[NodeView]] = defaultdict(list)
    for v in snap.nodes:
        if v.reserved_for is not None:
            owned[v.reserved_for].append(v)
    if not owned:
        return snap
    by_name = {str(k): k for k in owned}
    units = {g.key: _tolerated_units(g, by_name) for g in snap.gangs}
    pinned = {
        g.key: g.key
        for g in snap.gangs
        if g.key in owned and not units[g.key] and _fits_alone(g, owned[g.key])
    }
    pinned.update(_pinned_units(snap.gangs, units, owned))
    nodes = [_held_view(v, set(pinned.values())) for v in snap.nodes]
    gangs = [
        _tolerating(g, [k for k in (g.key, *units[g.key]) if k in owned], pinned)
        for g in snap.gangs
    ]
    return replace(snap, nodes=nodes, gangs=gangs)


def _held_view(v: NodeView, pinned: Collection[GangKey]) -> NodeView:
    """A reserved node as the model sees it: tainted `HELD_TAINT` for its gang, and labelled with it when the gang
    is pinned to its reserved nodes."""
    if v.reserved_for is None:
        return v
    held = str(v.reserved_for)
    return replace(
        v,
        taints=v.taints + (Taint(HELD_TAINT, held, "NoSchedule"),),
        labels={**v.labels, HELD_TAINT: held} if v.reserved_for in pinned else v.labels,
    )


def _tolerating(g: Gang, mine: list[GangKey], pinned: Mapping[GangKey, GangKey]) -> Gang:
    """The gang's pods tolerate its own reservation and the shared units' it may use (`mine`), and select its
    pinned nodes when it is pinned; `g` itself when it holds none."""
    if not mine:
        return g
    tols = tuple(Toleration(HELD_TAINT, "Equal", str(k), "NoSchedule") for k in mine)
    pin = ((HELD_TAINT, str(pinned[g.key])),) if g.key in pinned else ()
    pending = tuple(
        replace(
            p,
            placement=replace(
                p.placement,
                tolerations=p.placement.tolerations + tols,
                node_selector=p.placement.node_selector + pin,
            ),
        )
        for p in g.pending
    )
    return replace(g, pending=pending)


def _pinned_units(
    gangs: list[Gang],
    units: Mapping[GangKey, list[GangKey]],
    owned: Mapping[GangKey, list[NodeView]],
) -> dict[GangKey, GangKey]:
    """Gang -> the shared unit it is pinned to: the gangs of a unit, none with nodes of its own or of a second unit,
    that fit on the unit's nodes all together (they bind there first, as a lone gang does on its own nodes)."""
    members: dict[GangKey, list[Gang]] = defaultdict(list)
    for g in gangs:
        if len(units[g.key]) == 1 and g.key not in owned:
            members[units[g.key][0]].append(g)
    return {
        g.key: unit
        for unit, mine in members.items()
        if _fit_together(mine, owned[unit])
        for g in mine
    }


def _tolerated_units(g: Gang, by_name: Mapping[str, GangKey]) -> list[GangKey]:
    """The shared units' reservations `g`'s pods tolerate (the snapshot gave them the toleration: `_as_planned`)."""
    if not g.pending:
        return []
    found = {t.value for t in g.pending[0].placement.tolerations if t.key == RESERVED_TAINT}
    return [
        by_name[v] for v in sorted(found) if v in by_name and by_name[v].api == unit_key("").api
    ]
