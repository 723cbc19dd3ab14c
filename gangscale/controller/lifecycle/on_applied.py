"""`Applied`: the plan and the scale-up's outcome move every listed gang; unlisted ones end."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...model import GangKey
from ...plan import Plan
from .record import Record, cooling, holds
from .reports import Applied, GangFacts, Latency, ScaledUp
from .states import REPORTED_NAMES, TERMINAL, GangState
from .step import Step, current_record, hand_over, idle, with_launched


def handle(step: Step, plan: Plan | None, report: Applied) -> None:
    """Every listed gang takes the plan's decision; gangs no longer listed are running or cancelled."""
    results = {GangKey(r.namespace, r.name, r.api): r for r in (plan.gangs if plan else [])}
    _confirm_calls(step, report)
    for g in report.gangs:
        res = results.get(g.key)
        if res is None or cooling(
            step.records.get(g.key), g.generation, step.now, report.rules.backoff_seconds
        ):
            continue
        rec = current_record(step, g)
        mine = report.intents.get(g.key, {})
        if any(rec.late(grp) for grp in rec.covered) and res.decision not in (
            "scale-up",
            "fits-existing",
        ):
            _uncovered(step, rec, res.reason)
        elif res.decision == "scale-up" or mine:
            _scale_up_outcome(step, rec, g, res.reason, mine, report)
        elif res.decision == "fits-existing":
            on_way = bool(g.pod_keys & report.upcoming_pods)
            if on_way or (rec.state == GangState.PROVISIONING and rec.requested):
                step.set(rec, GangState.PROVISIONING, f"capacity on its way: {res.reason}")
            else:
                step.set(
                    rec,
                    GangState.READY,
                    f"capacity is there, waiting for the scheduler: {res.reason}",
                )
        else:
            state = (
                GangState(res.decision) if res.decision in REPORTED_NAMES else GangState.INFEASIBLE
            )
            step.set(rec, state, res.reason)
            step.emit(
                g.target,
                "NotTriggerScaleUp",
                res.reason,
                state in (GangState.INFEASIBLE, GangState.INVALID),
            )
    _unlisted(step, {g.key for g in report.gangs}, report)


def _scale_up_outcome(
    step: Step, rec: Record, g: GangFacts, reason: str, mine: Mapping[str, int], report: Applied
) -> None:
    """A gang the plan buys for: provisioning when its share was applied, re-planned when it was not."""
    if mine and all(grp in report.applied for grp in mine):
        step.events.extend(ScaledUp(grp, n) for grp, n in mine.items() if n > 0)
        step.events.append(Latency("requested", max(0.0, step.now - rec.first_seen)))
        rec = step.set(
            rec,
            GangState.PROVISIONING,
            reason,
            unconfirmed={},
            launches=with_launched(rec, report.launched.get(g.key, {})),
        )
        step.emit(
            g.target,
            "TriggeredScaleUp",
            "pod group triggered scale-up: "
            + ", ".join(f"{grp} +{n}" for grp, n in sorted(mine.items()))
            + f"; {reason}{_sharing_note(step, rec)}",
        )
    elif mine:
        requested = dict(rec.requested)
        for grp, n in mine.items():  # undo the booking of what the cloud did not add
            if grp not in report.applied:
                requested[grp] = requested.get(grp, 0) - n
        why = "; ".join(f"{grp}: {report.failed[grp]}" for grp in mine if grp in report.failed)
        rec = step.set(
            rec,
            GangState.PLANNED,
            f"scale-up not applied ({why or 'another group failed'}); "
            "re-planning on the alternatives",
            requested={grp: n for grp, n in requested.items() if n > 0},
            unconfirmed={},
            launches=with_launched(
                rec,
                {
                    grp: ids
                    for grp, ids in report.launched.get(g.key, {}).items()
                    if grp in report.applied
                },
            ),
        )
        step.emit(g.target, "NotTriggerScaleUp", rec.reason, True)
    elif rec.state == GangState.PROVISIONING and rec.requested:
        step.set(rec, GangState.PROVISIONING, f"capacity on its way: {reason}")
    else:
        enforce = report.rules.enforce_mode
        rec = step.set(rec, GangState.PLANNED, reason if enforce else f"dry-run: {reason}")
        step.emit(g.target, "TriggeredScaleUp" if enforce else "NotTriggerScaleUp", rec.reason)


def _sharing_note(step: Step, rec: Record) -> str:
    """What the TriggeredScaleUp says of a shared unit: its share, and the gangs it shares the nodes with."""
    if not rec.shared:
        return ""
    unit = [r for r in step.records.values() if r.shared == rec.shared]
    nodes = ", ".join(f"{g} {n}" for g, n in sorted(_sum(r.requested for r in unit).items()))
    others = ", ".join(sorted(r.gang for r in unit if r.key != rec.key))
    return (
        f" (its share; the gangs of its unit hold {nodes} new or held nodes, shared with {others})"
    )


def _sum(maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for m in maps:
        for g, n in m.items():
            out[g] = out.get(g, 0) + n
    return out


def _unlisted(step: Step, seen: set[GangKey], report: Applied) -> None:
    """A record whose gang is no longer listed: running when a member is bound, else cancelled."""
    for key, rec in list(step.records.items()):
        if (
            rec.state in (GangState.CANCELLED, GangState.RUNNING)
            or (rec.state in TERMINAL and not holds(rec))
            or (key in seen)
        ):  # (the states first: most records are past, and a key's hash is a Python call)
            continue  # an infeasible gang that still holds nodes is cancelled, so they go back (a running one's spares
            # go back at its deadline)
        if key.group in report.bound_groups:
            step.events.append(Latency("running", max(0.0, step.now - rec.first_seen)))
            bought = ", ".join(f"{g} +{n}" for g, n in sorted(rec.requested.items()))
            spare = _spare(rec, report.busy)
            covered = any(
                rec.covered.values()
            )  # its spares were bought against lateness: they go back now
            step.set(
                rec,
                GangState.RUNNING,
                "all members are bound"
                + (f" (nodes bought for it: {bought})" if bought else "")
                + _spare_note(spare, covered),
                requested=spare,
                nodes=idle(rec.nodes, report.busy),
                covered={},
                deadline=min(rec.deadline, step.now) if covered else rec.deadline,
            )
        else:
            reason = "the gang and its pods are gone"
            if rec.requested:
                reason += (
                    f"; its unused nodes go back in {report.rules.cancel_grace_seconds:.0f}s "
                    "unless a new generation of the gang takes them"
                )
            step.set(rec, GangState.CANCELLED, reason)
    hand_over(
        step
    )  # a gang that just started may have started on another's node: its launches are that gang's


def _uncovered(step: Step, rec: Record, reason: str) -> None:
    """Its late launches could not be bought again (no room, a cap): it waits for them after all, and is not
    covered again (the counts stay, at zero, so `on_overdue` leaves it alone)."""
    step.set(
        rec,
        GangState.PROVISIONING,
        f"capacity on its way; its late launches cannot be bought again: {reason}",
        covered={g: 0 for g in rec.covered},
    )


def _spare(rec: Record, busy: frozenset[str]) -> dict[str, int]:
    """Per group, the nodes bought for a gang that it started without (on nodes that were Ready first): those that
    arrived for it and run no pod, and its launches still on their way. They stay the record's until its deadline,
    reserved for no one: a plan may give them to any gang, a launch that arrives is attributed to it after every
    waiting gang, and the scale-down gives back those still empty at the deadline (`spare_until`) instead of an
    empty-node grace later, past the deadline the purchase was made under."""
    spare = {
        g: n - sum(1 for name in rec.nodes.get(g, ()) if name in busy)
        for g, n in rec.requested.items()
    }
    return {g: n for g, n in spare.items() if n > 0}


def _spare_note(spare: Mapping[str, int], now: bool = False) -> str:
    n = sum(spare.values())
    when = "now (late launches and their covers)" if now else "at its deadline"
    return (
        f"; {n} nodes bought for it are not used and go back {when} unless a gang uses them"
        if n
        else ""
    )


def _confirm_calls(step: Step, report: Applied) -> None:
    """A call whose outcome the scale-up reported is no longer unconfirmed."""
    settled = set(report.applied) | set(report.failed)
    for key in report.intents:
        rec = step.records.get(key)
        if rec is not None and any(g in settled for g in rec.calls):
            step.put(rec, calls={g: c for g, c in rec.calls.items() if g not in settled})
