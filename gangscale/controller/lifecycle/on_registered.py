"""`Registered`: registered Nodes are attributed to the records they arrived for."""

from __future__ import annotations

from collections.abc import Iterable

from ...plan import Plan
from .record import Record, named_launches
from .reports import NodeSeen, Registered
from .states import GangState
from .step import Step, hand_over


def handle(step: Step, plan: Plan | None, report: Registered) -> None:
    """Forget attributed nodes that are gone (and the capacity they were), and a running gang's spares that now
    run a pod, then attribute the new arrivals.

    A launch the cloud named when it was bought (`Record.launches`: aws-fleet and `simulated` return instance
    ids) arrives as exactly its node (`_named_arrivals`). Not every cloud says which launch an instance came
    from (an ASG or an EKS node group only grows a desired capacity), so for the rest a registered node is a
    record's arrival when the record has unnamed launches in the node's group, the node was created at or after
    the record's request (its creationTimestamp, less `skew`), it is idle, it is no record's named launch, and
    no other record has it; a group's nodes are identical, so of the records that may own such a node, the
    oldest request takes it. What each record holds is kept exact, whichever node it is.
    """
    taken: set[str] = set()
    _named_arrivals(step, report, taken)
    _forget_gone(step, report, taken)
    _count_arrivals(step, report, taken)


def _forget_gone(step: Step, report: Registered, taken: set[str]) -> None:
    """Attributed nodes that are gone leave their record, and so does the capacity they were; the rest are
    `taken` (no other record gets them)."""
    seen = {n.name: n for n in report.nodes}
    for rec in list(step.records.values()):
        if not rec.nodes:
            continue
        nodes = {
            g: tuple(n for n in names if g not in report.groups or _still_its(rec, g, seen.get(n)))
            for g, names in rec.nodes.items()
        }
        gone = {
            g: len(rec.nodes[g]) - len(kept)
            for g, kept in nodes.items()
            if len(kept) < len(rec.nodes[g])
        }
        taken.update(n for names in nodes.values() for n in names)
        if gone:
            requested = {g: n - gone.get(g, 0) for g, n in rec.requested.items()}
            step.put(
                rec,
                nodes={g: k for g, k in nodes.items() if k},
                requested={g: n for g, n in requested.items() if n > 0},
            )


def _count_arrivals(step: Step, report: Registered, taken: set[str]) -> None:
    """Idle, Ready nodes no record holds or named go to the oldest request still waiting for an unnamed launch of
    their group, created at or after it (`_owner`)."""
    named = named_launches(step.records.values())
    # groups some record still waits for by count: attributing a node only lowers a record's want, so a group not
    # in it stays out for the whole loop (the idle nodes of other groups, often most, skip the records' scan)
    wanted = {
        g
        for r in step.records.values()
        if r.state != GangState.CANCELLED
        for g in r.requested
        if r.unnamed(g) > 0
    }
    for node in sorted(report.nodes, key=lambda n: (n.created, n.name)):
        if (
            node.name in taken
            or node.instance in named
            or not (node.idle and node.ready)
            or node.created <= 0
            or node.group not in wanted
        ):
            continue
        owner = _owner(step.records.values(), node, report.skew)
        if owner is not None:
            step.put(
                owner,
                nodes={**owner.nodes, node.group: owner.nodes.get(node.group, ()) + (node.name,)},
            )
            taken.add(node.name)


def _named_arrivals(step: Step, report: Registered, taken: set[str]) -> None:
    """A record's named launch that registered is its arrival, exactly, when Ready and idle (one still NotReady
    stays on its way). One that a pod took at once is no longer on its way: the record counts it as an unnamed
    launch, which `hand_over` turns into the named launch its taker's gang started without."""
    by_instance = {n.instance: n for n in report.nodes if n.instance}
    for rec in list(step.records.values()):
        if not rec.launches:
            continue
        launches: dict[str, tuple[str, ...]] = {}
        nodes = dict(rec.nodes)
        for g, ids in rec.launches.items():
            for i in ids:
                node = by_instance.get(i)
                if node is None or node.group != g or (node.idle and not node.ready):
                    launches[g] = launches.get(g, ()) + (i,)
                elif node.idle:
                    nodes[g] = nodes.get(g, ()) + (node.name,)
                    taken.add(node.name)
        if launches != rec.launches:
            step.put(rec, nodes=nodes, launches=launches)
    hand_over(step)


def _still_its(rec: Record, group: str, node: NodeSeen | None) -> bool:
    """An attributed node stays the record's while it is registered in its group; a running gang's spare only
    while it runs no pod (one that a gang used is no longer spare, and never given back for it)."""
    return (
        node is not None and node.group == group and (rec.state != GangState.RUNNING or node.idle)
    )


def _owner(records: Iterable[Record], node: NodeSeen, skew: float) -> Record | None:
    """The oldest request still waiting for a node of `node`'s group that may have launched it; a running gang's
    spare launches (`on_applied._spare`) only after every gang that waits."""
    waiting = [
        r
        for r in records
        if r.state != GangState.CANCELLED
        and r.unnamed(node.group) > 0
        and node.created >= r.requested_at - skew
    ]
    return min(
        waiting, key=lambda r: (r.state == GangState.RUNNING, r.requested_at, r.gang), default=None
    )
