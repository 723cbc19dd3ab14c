"""Which gang the nodes on their way belong to, and which gang each newly bought node is for.

Invariant: a node bought for a gang stays that gang's until the gang binds or
its record gives it up: on its way, the snapshot reserves one of the group's
upcoming nodes for it (`SnapshotPolicy.reserved`); once registered, the node
the record's `nodes` name (lifecycle `Registered` attributes arrivals) is
reserved by name (`SnapshotPolicy.reserved_nodes`), so only that gang's pods
may use it in the next plan and no other gang's upcoming node is taken for it.
The attribution of a plan's new nodes never counts a gang's own nodes twice.
Pure functions of records, plan and snapshot.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping

from ..model import Gang, GangKey
from ..plan import Plan
from ..snapshot import ClusterSnapshot
from .lifecycle import GangState, Record, holds

FREE = frozenset({GangState.CANCELLED, GangState.RUNNING})  # states whose held nodes no gang has reserved


def _reserving(records: Iterable[Record]) -> list[Record]:
    """Records whose nodes are reserved, oldest request first (a cancelled gang's are free until given back, and
    a running gang's spares, `lifecycle._spare`, are free for any gang until its deadline)."""
    return sorted((r for r in records if holds(r) and r.state not in FREE), key=lambda r: r.requested_at)


def still_waiting(records: Iterable[Record], listed: Collection[GangKey]) -> list[Record]:
    """The records whose gang the cluster still lists (pending members, or bound below minCount).

    A gang that is no longer listed has bound (or is gone): this pass's transition ends its record's
    claim (`running` or `cancelled`), but the plan comes first, so nothing may stay reserved for it
    there. Otherwise, when the scheduler bound the gang on a node another gang's record bought (it
    became Ready first), the gang's own node still on its way stays reserved for it and the plan buys
    the other gang a replacement; the spare then idles until some later gang takes it (issue 10's
    smoke hour: a p4d billed 18 minutes with no pod, 170 s past its launch + the 900 s deadline + a scan)."""
    return [r for r in records if r.key in listed]


def reserved_upcoming(records: Iterable[Record]) -> dict[str, tuple[GangKey, ...]]:
    """Per group, the gangs its upcoming nodes were bought for, one entry per node still on its way, oldest
    request first (the nodes that arrived for a gang are reserved by name: `reserved_registered`)."""
    out: dict[str, list[GangKey]] = defaultdict(list)
    for rec in _reserving(records):
        for group, n in rec.requested.items():
            out[group].extend([rec.key] * (n - rec.arrived(group)))
    return {g: tuple(keys) for g, keys in out.items() if keys}


def reserved_registered(records: Iterable[Record]) -> dict[str, GangKey]:
    """Registered node name -> the gang it arrived for, while that gang waits for it."""
    return {name: rec.key for rec in _reserving(records) for names in rec.nodes.values() for name in names}


def expired_spares(records: Iterable[Record], now: float) -> tuple[dict[str, tuple[GangKey, ...]], dict[str, GangKey]]:
    """What running gangs started without and still hold past their purchase's deadline, reserved for themselves:
    per group their launches on their way, and their registered nodes by name. No other gang's plan may count on
    them, so this pass gives them back (`lifecycle._spares_due`, the scale-down's `spare_until`) instead of keeping
    them for a plan whose gang may not start on them in time: a node billed with no pod past the deadline it was
    bought under is what issue 10 counts."""
    upcoming: dict[str, list[GangKey]] = defaultdict(list)
    nodes: dict[str, GangKey] = {}
    for rec in records:
        if rec.state == GangState.RUNNING and holds(rec) and rec.deadline and now > rec.deadline:
            for group, n in rec.requested.items():
                upcoming[group].extend([rec.key] * (n - rec.arrived(group)))
            nodes.update({name: rec.key for names in rec.nodes.values() for name in names})
    return {g: tuple(keys) for g, keys in upcoming.items() if keys}, nodes


def owned_in_flight(records: Mapping[GangKey, Record], gangs: Iterable[Gang]) -> dict[GangKey, dict[str, int]]:
    """What each listed gang already has on its way, per group (its provisioning record, less what arrived)."""
    out = {}
    for g in gangs:
        rec = records.get(g.gang_key)
        if rec is not None and holds(rec):
            out[g.gang_key] = {grp: n - rec.arrived(grp) for grp, n in rec.requested.items() if n > rec.arrived(grp)}
    return out


def upcoming_nodes(snap: ClusterSnapshot) -> dict[str, str]:
    """Upcoming node name -> its group, recognised by the snapshot's `upcoming` field."""
    return {v.name: v.node_group for v in snap.nodes if v.upcoming and v.node_group}


def planned_upcoming(plan: Plan, snap: ClusterSnapshot) -> dict[str, int]:
    """Per group, the nodes on their way that no gang has reserved and the plan puts pods on."""
    free = {v.name: v.node_group for v in snap.nodes if v.upcoming and v.node_group and v.reserved_for is None}
    return dict(Counter(free[name] for name, pods in plan.existing_nodes.items() if name in free and pods))


def pods_on_upcoming(plan: Plan, snap: ClusterSnapshot) -> frozenset[str]:
    upcoming = upcoming_nodes(snap)
    return frozenset(p for name, pods in plan.existing_nodes.items() if name in upcoming for p in pods)


def _holdings(plan: Plan, snap: ClusterSnapshot) -> tuple[dict[GangKey, Counter[str]], dict[str, Counter[GangKey]]]:
    """Per gang, the new and upcoming nodes it rides (a node belongs to the gang with most pods on it);
    per group, how many of its new nodes each gang rides."""
    gang_of = {p.key: g.gang_key for g in snap.gangs for p in g.pending}

    def majority(pods: list[str]) -> GangKey | None:
        counts = Counter(gang_of[p] for p in pods if p in gang_of)
        return counts.most_common(1)[0][0] if counts else None

    holding: dict[GangKey, Counter[str]] = defaultdict(Counter)
    new_owner: dict[str, Counter[GangKey]] = defaultdict(Counter)
    for n in plan.new_nodes:
        key = majority(n.pods)
        if key is not None:
            holding[key][n.node_group] += 1
            new_owner[n.node_group][key] += 1
    upcoming = upcoming_nodes(snap)
    for name, pods in plan.existing_nodes.items():
        key = majority(pods) if name in upcoming else None
        if key is not None:
            holding[key][upcoming[name]] += 1
    return holding, new_owner


def attribute_new_nodes(plan: Plan, snap: ClusterSnapshot, owned: Mapping[GangKey, Mapping[str, int]]
                        ) -> dict[GangKey, dict[str, int]]:
    """Which gang each new node is bought for, per group.

    A gang that already owns nodes on their way (`owned`, from its provisioning
    record) claims the plan's new and upcoming nodes of a group only beyond what
    it owns there; whatever of the group's new nodes is left goes to the gangs on them.
    """
    holding, new_owner = _holdings(plan, snap)
    out: dict[GangKey, dict[str, int]] = defaultdict(dict)
    for group, total in Counter(n.node_group for n in plan.new_nodes).items():
        left = total
        for key, cnt in sorted(holding.items(), key=lambda kv: kv[0]):
            take = min(left, max(0, cnt[group] - owned.get(key, {}).get(group, 0)))
            if take:
                out[key][group] = take
                left -= take
        for key, cnt in new_owner[group].most_common():  # the rest: by who rides the new nodes
            if not left:
                break
            take = min(left, cnt - out[key].get(group, 0))
            if take > 0:
                out[key][group] = out[key].get(group, 0) + take
                left -= take
    return dict(out)
