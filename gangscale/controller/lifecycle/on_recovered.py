"""`Recovered`: what became of the unconfirmed calls a restart settled."""

from __future__ import annotations

from ...plan import Plan
from .reports import Recovered
from .states import IN_FLIGHT, TERMINAL, GangState
from .step import Step, with_launched


def handle(step: Step, plan: Plan | None, report: Recovered) -> None:
    """After a restart: the call's loose instances were adopted or terminated; the record is settled once.

    A booking with an `unconfirmed` share is left to `Confirmed`, with its call (the token) kept for it:
    adopted instances are in the group with the token, terminated ones are not, and instances the call
    attached before the crash (none loose, "nothing launched") are in it already. Undoing the share
    here too would take it off the record twice, or take off nodes that did land. Only a record stored
    without a share (`unconfirmed` is optional in the stored format) is settled here: it holds the
    adopted instances by id.
    """
    for out in report.outcomes:
        rec = step.records.get(out.key)
        call = rec.calls.get(out.group) if rec is not None else None
        if rec is None or call is None or call[0] != out.token:
            continue
        calls = {g: c for g, c in rec.calls.items() if g != out.group}
        if out.group in rec.unconfirmed:
            continue  # `Confirmed` settles the share, by the call's token (kept for it) or desired capacity
        elif out.adopted:
            why = f"{out.adopted} nodes launched in {out.group} before a restart joined the group"
            state = (
                rec.state
                if rec.state in IN_FLIGHT or rec.state in TERMINAL
                else GangState.PROVISIONING
            )
            step.set(
                rec,
                state,
                why if state is GangState.PROVISIONING else rec.reason,
                calls=calls,
                launches=with_launched(rec, {out.group: out.instances[: call[1]]}),
            )
        else:
            requested = dict(rec.requested)
            requested[out.group] = max(0, requested.get(out.group, 0) - call[1])
            kept = {g: n for g, n in requested.items() if n > 0}
            step.put(
                rec,
                calls=calls,
                requested=kept,
                reason=f"the scale-up of {out.group} did not complete before a restart "
                f"({out.note or 'nothing launched'}); re-planning",
            )
