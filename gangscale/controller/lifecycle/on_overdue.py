"""`Overdue`: late launches of provisioning gangs are covered by this pass's plan."""

from __future__ import annotations

from ...plan import Plan
from .record import Record
from .reports import EventTarget, Overdue
from .states import GangState
from .step import Step

# A lone late launch is not covered: its cover only races it with a head start of `lateLaunchSeconds`. A gang with
# several launches late waits for the slowest of them, and a second chance at each cuts that tail (docs/simulate.md,
# "Late launches": covering lone launches too cost the simulated week more per started gang than the 0.5% over
# Karpenter it allows, for no shorter p95)
MIN_COVERED_LAUNCHES = 2


def handle(step: Step, plan: Plan | None, report: Overdue) -> None:
    """A provisioning gang with `MIN_COVERED_LAUNCHES` or more launches still on their way `late_launch_seconds`
    after its booking, with time left before its deadline, has them covered once: this pass's plan buys each again
    (they are reserved for no gang, `reservations.reserved_upcoming`), the gang binds on whichever nodes are Ready
    first, and what it did not use goes back as soon as it runs (`_unlisted`). A gang waits for the slowest of its
    launches, and its Ready nodes idle, billed, meanwhile; with several late, one of them is often slow enough to
    time out the whole purchase, whose Ready nodes then go back at the deadline and are bought again from nothing."""
    wait = report.rules.late_launch_seconds
    if wait <= 0:
        return
    for rec in list(step.records.values()):
        due = due_at(rec, wait)
        if due is None or step.now < due or rec.deadline - step.now < wait:
            continue  # not late yet, or a new launch would not have the time a launch had
        late = _late(rec)
        if late:
            rec = step.put(rec, covered=late)
            step.emit(
                EventTarget.of_record(rec),
                "CoveringLateLaunches",
                f"{sum(late.values())} launches still on their way after {wait:.0f}s "
                f"({', '.join(f'{g} {n}' for g, n in sorted(late.items()))}): buying each again; "
                "the nodes the gang does not use go back when it runs",
            )


def _late(rec: Record) -> dict[str, int]:
    """Per group, its launches still on their way."""
    return {g: n - rec.arrived(g) for g, n in rec.requested.items() if n > rec.arrived(g)}


def due_at(rec: Record, wait: float) -> float | None:
    """When a pass first finds the record's launches late (`handle`): `wait` seconds after its booking, while a new
    launch would still have `wait` seconds before its deadline; None when that never comes (turned off, not
    provisioning, covered already, fewer than `MIN_COVERED_LAUNCHES` on their way). The controller wakes then
    (`wakes.record_due`): a late launch is bought again at once, not at the next change the cluster happens to make."""
    if (
        wait <= 0
        or rec.state != GangState.PROVISIONING
        or rec.covered
        or not rec.deadline
        or sum(_late(rec).values()) < MIN_COVERED_LAUNCHES
    ):
        return None
    due = rec.requested_at + wait
    return due if rec.deadline - due >= wait else None
