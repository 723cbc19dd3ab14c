"""`Confirmed`: bookings whose call's outcome was never recorded keep only what provably landed."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...model import GangKey
from ...plan import Plan
from .record import Record
from .reports import Confirmed, EventTarget, ScaledUp
from .states import GangState
from .step import Step


def handle(step: Step, plan: Plan | None, report: Confirmed) -> None:
    """Settle write-ahead bookings whose call's outcome was never recorded: keep what provably landed.

    Where the cloud tags what each call launched (`report.tokens`), a booking whose call has a client token
    landed for exactly the instances in the group carrying that token, whatever order the pass made its calls
    in (`by_token`); the record holds them by id (`Record.launches`). Otherwise a record booked `n` nodes of a
    group whose desired capacity was `base` below its share, and the call landed for
    `clamp(desired_now - base, 0, n)` of them (one call per group and pass, as aws-asg makes). The rest is
    taken off the record, so nothing is counted (or later given back) that the call never bought.
    """
    dealt = by_token(step.records.values(), report.tokens)
    for key, rec in list(step.records.items()):
        if not rec.unconfirmed:
            continue
        requested, landed, launches = dict(rec.requested), {}, dict(rec.launches)
        for grp, (base, n) in sorted(rec.unconfirmed.items()):
            ids = dealt.get((key, grp))
            got = (
                len(ids)
                if ids is not None
                else max(0, min(n, report.desired.get(grp, base) - base))
            )
            requested[grp] = requested.get(grp, 0) - (n - got)
            if ids:
                launches[grp] = launches.get(grp, ()) + ids
            if got:
                landed[grp] = got
        requested = {g: n for g, n in requested.items() if n > 0}
        calls = {g: c for g, c in rec.calls.items() if g not in rec.unconfirmed}  # settled here too
        if landed:
            bought = ", ".join(f"{g} +{n}" for g, n in sorted(landed.items()))
            step.events.extend(ScaledUp(g, n) for g, n in sorted(landed.items()))
            rec = step.set(
                rec,
                GangState.PROVISIONING,
                f"the scale-up made before a restart landed: {bought}",
                requested=requested,
                unconfirmed={},
                calls=calls,
                launches=launches,
            )
            step.emit(
                EventTarget.of_record(rec),
                "TriggeredScaleUp",
                f"pod group triggered scale-up: {bought}",
            )
        else:
            state = GangState.PLANNED if rec.state == GangState.NEW else rec.state
            step.set(
                rec,
                state,
                "the scale-up booked before a restart never reached the cloud; re-planning",
                requested=requested,
                unconfirmed={},
                calls=calls,
            )


def by_token(
    records: Iterable[Record], tokens: Mapping[str, tuple[str, ...]] | None
) -> dict[tuple[GangKey, str], tuple[str, ...]]:
    """(gang, group) -> the instances its unconfirmed booking there landed, by the call's client token: the group's
    instances carrying the token, dealt to the records that share the call in gang order, each at most its share
    (one call answers them all at once: which instance answers which gang does not matter, that each answers one
    does). Empty when `tokens` is None (the cloud does not tag its launches)."""
    if tokens is None:
        return {}
    held = {i for r in records for ids in r.launches.values() for i in ids}
    sharing: dict[str, list[tuple[GangKey, str, int]]] = {}
    for rec in records:
        for grp, (_, n) in rec.unconfirmed.items():
            if grp in rec.calls:
                sharing.setdefault(rec.calls[grp][0], []).append((rec.key, grp, n))
    out: dict[tuple[GangKey, str], tuple[str, ...]] = {}
    for token, shares in sharing.items():
        ids = [i for i in sorted(tokens.get(token, ())) if i not in held]
        for key, grp, n in sorted(shares, key=lambda s: (str(s[0]), s[1])):
            out[(key, grp)], ids = tuple(ids[:n]), ids[n:]
    return out
