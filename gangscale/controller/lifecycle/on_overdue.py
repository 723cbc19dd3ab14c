"""`Overdue`: late launches of provisioning gangs are covered by this pass's plan."""

from __future__ import annotations

from ...plan import Plan
from .reports import EventTarget, Overdue
from .states import GangState
from .step import Step


def handle(step: Step, plan: Plan | None, report: Overdue) -> None:
    """A provisioning gang whose launches are still on their way `late_launch_seconds` after its booking, with time
    left before its deadline, has them covered once: this pass's plan buys each again (they are reserved for no gang,
    `reservations.reserved_upcoming`), the gang binds on whichever nodes are Ready first, and what it did not use goes
    back as soon as it runs (`_unlisted`). Without it one slow launch of eight times out the whole purchase: its Ready
    nodes go back at the deadline and the gang is bought again from nothing."""
    wait = report.rules.late_launch_seconds
    if wait <= 0:
        return
    for rec in list(step.records.values()):
        if (
            rec.state != GangState.PROVISIONING
            or rec.covered
            or not rec.requested
            or not rec.deadline
        ):
            continue
        if (
            step.now - rec.requested_at < wait or rec.deadline - step.now < wait
        ):  # late, and a new launch has time
            continue
        late = {g: n - rec.arrived(g) for g, n in rec.requested.items() if n > rec.arrived(g)}
        if late:
            rec = step.put(rec, covered=late)
            step.emit(
                EventTarget.of_record(rec),
                "CoveringLateLaunches",
                f"{sum(late.values())} launches still on their way after {wait:.0f}s "
                f"({', '.join(f'{g} {n}' for g, n in sorted(late.items()))}): buying each again; "
                "the nodes the gang does not use go back when it runs",
            )
