"""`Expire`: the cancel grace and the deadlines give unused capacity back."""

from __future__ import annotations

from collections.abc import Iterable

from ...model import GangKey
from ...plan import Plan
from .record import Record, holds, past_deadline, spares_expired
from .reports import BackOff, Expire, Release
from .states import IN_FLIGHT, RESTARTS, UNUSABLE, GangState, ReleaseWhy
from .step import Step, idle, timed_out_reason


def _own(rec: Record, key: GangKey, groups: dict[str, int], why: ReleaseWhy) -> Release:
    """The release of `groups`, the record's own first: its named launches and its registered nodes
    (`Release.instances`, `nodes`)."""
    return Release(
        key,
        groups,
        why,
        instances=tuple(i for ids in rec.launches.values() for i in ids),
        nodes=tuple(n for names in rec.nodes.values() for n in names),
    )


def handle(step: Step, plan: Plan | None, report: Expire) -> None:
    """Cancelled past the grace, or not delivered by the deadline: give the unused capacity back."""
    grace = report.rules.cancel_grace_seconds
    for key, rec in list(step.records.items()):
        if rec.state == GangState.CANCELLED:
            if holds(rec) and step.now - rec.since >= grace:
                step.actions.append(_own(rec, key, dict(rec.requested), ReleaseWhy.CANCELLED))
                step.put(rec, requested={})
        elif (
            (rec.state in IN_FLIGHT or holds(rec))
            and rec.state not in RESTARTS
            and past_deadline(rec.deadline, step.now)
        ):  # whatever state it reached: below quorum, infeasible, planned...
            for group in rec.requested:  # it did not deliver in time: try the alternatives first
                step.actions.append(
                    BackOff(
                        group,
                        ReleaseWhy.TIMED_OUT,
                        f"timed-out: nodes for {rec.gang} did not arrive",
                    )
                )
            step.actions.append(_own(rec, key, dict(rec.requested), ReleaseWhy.TIMED_OUT))
            step.set(rec, GangState.TIMED_OUT, timed_out_reason(rec, None), requested={})
        elif rec.state in UNUSABLE and holds(rec) and step.now - rec.since >= grace:
            step.actions.append(_own(rec, key, dict(rec.requested), ReleaseWhy.UNUSABLE))
            step.put(rec, requested={})
        elif spares_expired(rec, step.now):
            _spares_due(step, rec, report)


def _spares_due(step: Step, rec: Record, report: Expire) -> None:
    """A running gang past its deadline gives back what it did not use, but not what the plan puts pods on: those
    stay its own (a launch until it arrives, a node until it is used) and go back once no plan counts on them.

    Launches on their way go back now, never more than the cloud has on their way beyond what waiting gangs count
    on (a node its gang bound on at once was never attributed to it: its own count can be stale). Arrived nodes
    are handed to this pass's scale-down (`spare_until`, read before this report), then are ordinary nodes."""
    records = step.records.values()
    named = {
        g: tuple(i for i in rec.launches.get(g, ()) if i in report.on_way_ids.get(g, frozenset()))
        for g in rec.requested
    }  # its named launches the cloud still has on their way
    possible = {
        g: len(named[g])
        + min(
            rec.unnamed(g),
            max(0, report.on_way.get(g, 0) - _waited_for(records, g) - len(named[g])),
        )
        for g in rec.requested
    }
    late = {g: n - report.planned_upcoming.get(g, 0) for g, n in possible.items()}
    late = {g: n for g, n in late.items() if n > 0}
    if late:
        step.actions.append(
            Release(
                rec.key,
                late,
                ReleaseWhy.UNUSED,
                instances=tuple(i for g, n in late.items() for i in named[g][:n]),
            )
        )
    nodes = idle(
        rec.nodes,
        frozenset(n for names in rec.nodes.values() for n in names) - report.planned_nodes,
    )
    requested = {g: len(nodes.get(g, ())) + n - late.get(g, 0) for g, n in possible.items()}
    requested = {g: n for g, n in requested.items() if n > 0}
    launches = {g: ids[late.get(g, 0) :] for g, ids in named.items() if ids[late.get(g, 0) :]}
    if requested != rec.requested or nodes != rec.nodes or launches != rec.launches:
        step.put(rec, requested=requested, nodes=nodes, launches=launches)


def _waited_for(records: Iterable[Record], group: str) -> int:
    """The launches of `group` that gangs still waiting count on (every record holding there but a running one)."""
    return sum(
        max(0, r.requested.get(group, 0) - r.arrived(group))
        for r in records
        if r.state != GangState.RUNNING and holds(r)
    )
