"""`Booked`: the plan's new nodes booked on their gangs before the cloud is called (write-ahead)."""

from __future__ import annotations

from ...model import GangKey
from ...plan import Plan
from ..shares import unit_id
from .record import client_token, holds, pod_prints
from .reports import ApplyScaleUp, Booked
from .step import Step, current_record


def handle(step: Step, plan: Plan | None, report: Booked) -> None:
    """Book the plan's new nodes on the gangs they are for (the write-ahead record), then apply. A gang whose
    share of a shared unit is zero is booked all the same (its intents name the group with 0)."""
    below = dict(report.desired)  # per group: the desired capacity below the next gang's share
    for g in report.gangs:
        mine = report.intents.get(g.key)
        if not mine:
            continue
        rec = current_record(step, g)
        requested, unconfirmed = dict(rec.requested), {}
        for grp, n in sorted(mine.items()):
            if n <= 0:
                continue
            requested[grp] = requested.get(grp, 0) + n
            unconfirmed[grp] = (below.get(grp, 0), n)
            below[grp] = below.get(grp, 0) + n
        # A re-plan that buys more (after a launch failure) keeps the deadline of the nodes already held: moving
        # it on every rebooking let a gang whose launches keep failing hold its arrived nodes idle for good.
        kept = holds(rec) and rec.deadline
        deadline, booked_at = (
            (rec.deadline, rec.booked_at) if kept else (step.now + g.deadline_seconds, step.now)
        )
        step.put(
            rec,
            requested=requested,
            requested_at=step.now,
            deadline=deadline,
            booked_at=booked_at,
            pods=pod_prints(g.pods),
            attempt=rec.attempt + 1,
            unconfirmed=unconfirmed,
        )
    for keys in report.shared:
        _share(step, keys)
    step.actions.append(ApplyScaleUp(dict(report.intents), _book_calls(step, report)))


def _share(step: Step, keys: frozenset[GangKey]) -> None:
    """Gangs that share new nodes become one unit: one `shared` id, the earliest of their deadlines. A member
    already in a unit brings that unit's other records along (units that share a node are one unit)."""
    members = [step.records[k] for k in sorted(keys, key=str) if k in step.records]
    if len(members) < 2:
        return
    before = {r.shared for r in members if r.shared}
    joined = {r.key: r for r in step.records.values() if r.shared and r.shared in before}
    joined.update({r.key: r for r in members})
    uid = unit_id(f"{r.gang}#{r.generation}#{r.attempt}" for r in members)
    deadline = min((r.deadline for r in joined.values() if r.deadline), default=0.0)
    for rec in joined.values():
        step.put(rec, shared=uid, deadline=deadline or rec.deadline)


def _book_calls(step: Step, report: Booked) -> tuple[dict[str, str], ...]:
    """Per atomic unit, each group's client token, recorded on the records it buys for (write-ahead)."""
    tokens = []
    for keys, unit in report.units:
        members = [
            step.records[k]
            for k in sorted(keys, key=str)
            if k in step.records and report.intents.get(k)
        ]
        by_group = {grp: client_token(members, grp, unit) for grp in unit}
        for rec in members:
            mine = report.intents[rec.key]
            step.put(
                rec,
                calls={
                    **rec.calls,
                    **{g: (t, mine[g]) for g, t in by_group.items() if mine.get(g)},
                },
            )
        tokens.append(by_group)
    return tuple(tokens)
