"""`Recreated`: a running gang with a recreated member gives its named spare launches back."""

from __future__ import annotations

from ...plan import Plan
from .reports import Recreated
from .states import GangState
from .step import Step, current_record


def handle(step: Step, plan: Plan | None, report: Recreated) -> None:
    """A running gang listed with pending members again takes its new record before the plan (`current_record`)."""
    for g in report.gangs:
        rec = step.records.get(g.key)
        if rec is not None and rec.state == GangState.RUNNING and rec.launches and g.pods:
            current_record(step, g)
