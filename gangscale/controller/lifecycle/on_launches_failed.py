"""`LaunchesFailed`: launches failed in groups provisioning gangs wait on: give back, re-plan."""

from __future__ import annotations

from collections.abc import Iterable

from ...model import GangKey
from ...plan import Plan
from .record import Record, holds
from .reports import BackOff, GroupFailure, LaunchesFailed, Release
from .states import GangState, ReleaseWhy
from .step import Step, launch_failed_reason


def handle(step: Step, plan: Plan | None, report: LaunchesFailed) -> None:
    """Back the group off and take back what gangs waiting there lost, so they are re-planned now.

    Nodes that already arrived for a gang stay its own (reserved). When the cloud says how many launches are
    still on their way in the group (`on_way`), the gangs keep those, oldest request first, and only the
    launches that failed are given back and re-planned, so one failed launch never cancels the others that
    had capacity and costs the gang another whole launch delay. Otherwise every launch in flight goes back."""
    moved: set[GangKey] = set()
    for f in report.failures:
        step.actions.append(BackOff(f.group, f.kind, f.message))
        left = _unnamed_on_way(step.records.values(), f)
        for rec in sorted(step.records.values(), key=lambda r: (r.requested_at, r.gang)):
            left = _lose(step, rec, f, left, moved)


def _failed_named(named: tuple[str, ...], f: GroupFailure) -> tuple[str, ...]:
    """The record's named launches in the group that failed: not registered, and (when the cloud says what it has
    on its way) no longer on their way."""
    if f.on_way is None:
        return tuple(i for i in named if i not in f.registered_ids)
    return tuple(
        i
        for i in named
        if f.on_way_ids is not None and i not in f.on_way_ids and i not in f.registered_ids
    )


def _lose(
    step: Step, rec: Record, f: GroupFailure, left: int | None, moved: set[GangKey]
) -> int | None:
    """What one record loses to the group's failed launches: a provisioning gang gives them back and is re-planned;
    another only drops its failed named launches from its account. Returns the unnamed launches still on their way
    for the next record (None: unknown, every launch in flight goes back)."""
    in_flight = rec.requested.get(f.group, 0) - rec.arrived(f.group)
    if in_flight <= 0 or not holds(rec):
        return left
    named = rec.launches.get(f.group, ())
    failed = _failed_named(named, f)
    unnamed = in_flight - len(named)
    kept = 0 if left is None else min(unnamed, left)
    lost = len(failed) + unnamed - kept
    if left is not None:
        left -= kept
    launches = {**rec.launches, f.group: tuple(i for i in named if i not in failed)}
    launches = {g: ids for g, ids in launches.items() if ids}
    if lost <= 0 or (rec.state != GangState.PROVISIONING and rec.key not in moved):
        if (
            failed
        ):  # a named launch of a gang not waiting on it (a running gang's spare): off its account
            left_there = {**rec.requested, f.group: rec.requested[f.group] - len(failed)}
            requested = {g: n for g, n in left_there.items() if n > 0}
            step.put(rec, requested=requested, launches=launches)
        return left
    unlaunched = f.on_way is not None
    step.actions.append(
        Release(rec.key, {f.group: lost}, ReleaseWhy.LAUNCH_FAILED, f.message, unlaunched)
    )
    requested = {**rec.requested, f.group: rec.requested[f.group] - lost}
    step.set(
        rec,
        GangState.PLANNED,
        launch_failed_reason(f.group, f.message, None),
        requested={g: n for g, n in requested.items() if n > 0},
        launches=launches,
    )
    moved.add(rec.key)
    return left


def _unnamed_on_way(records: Iterable[Record], f: GroupFailure) -> int | None:
    """The launches on their way in `f.group` that no record named: kept by the unnamed in-flight counts, oldest
    request first (None: the cloud could not say)."""
    if f.on_way is None:
        return None
    named = {i for r in records if holds(r) for i in r.launches.get(f.group, ())}
    return max(0, f.on_way - len(named if f.on_way_ids is None else named & f.on_way_ids))
