"""`Released`: what the cloud actually gave back, for the reasons and events."""

from __future__ import annotations

from ...plan import Plan
from .reports import EventTarget, Released
from .states import ReleaseWhy
from .step import Step, launch_failed_reason, timed_out_reason


def handle(step: Step, plan: Plan | None, report: Released) -> None:
    """The reasons and events once the cloud has said how much it gave back."""
    for out in report.outcomes:
        rec = step.records.get(out.action.key)
        if rec is None:
            continue
        target, n = EventTarget.of_record(rec), out.released
        if out.action.why == ReleaseWhy.LAUNCH_FAILED:
            group = next(iter(out.action.groups), "")
            rec = step.put(rec, reason=launch_failed_reason(group, out.action.detail, n))
            step.emit(target, "NotTriggerScaleUp", rec.reason, True)
        elif out.action.why == ReleaseWhy.UNUSABLE:
            rec = step.put(
                rec,
                reason=f"{rec.reason}; it could not use its nodes within the cancel grace, "
                f"gave back {n} unused nodes bought for it",
            )
            if n:
                step.emit(
                    target,
                    "CapacityReleased",
                    f"gave back {n} unused nodes bought for this gang ({rec.state.value})",
                )
        elif out.action.why == ReleaseWhy.UNUSED and out.action.detail:
            if n:  # a running generation's spare launches, when a new record replaces it
                step.emit(
                    target,
                    "CapacityReleased",
                    f"gave back {n} nodes still on their way that this gang "
                    f"started without ({out.action.detail})",
                )
        elif out.action.why == ReleaseWhy.UNUSED:
            if n:
                rec = step.put(
                    rec,
                    reason=f"{rec.reason}; gave back {n} launches it did not use at its deadline",
                )
                step.emit(
                    target,
                    "CapacityReleased",
                    f"gave back {n} nodes bought for this gang that it started "
                    "without, still on their way at its deadline",
                )
        elif out.action.why == ReleaseWhy.CANCELLED:
            rec = step.put(
                rec, reason=f"the gang and its pods are gone; gave back {n} unused nodes"
            )
            if n:
                step.emit(target, "CapacityReleased", rec.reason)
        else:
            rec = step.put(rec, reason=timed_out_reason(rec, n))
            step.emit(target, "ScaleUpTimedOut", rec.reason, True)
            if n:
                step.emit(
                    target, "CapacityReleased", f"gave back {n} unused nodes bought for this gang"
                )
