"""The scratch state of one transition (`Step`) and the helpers more than one report's handler uses:
a gang's current record, what a record owns, the reasons and notes several handlers write."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ...model import GangKey
from .record import Record, holds, pods_overlap
from .reports import (
    Action,
    Event,
    EventTarget,
    GangEvent,
    GangFacts,
    Release,
    StateChanged,
    Takeover,
)
from .states import RESTARTS, GangState, ReleaseWhy


@dataclass(slots=True)
class Step:
    """The scratch state of one transition (local to it; the caller only sees frozen results)."""

    records: dict[GangKey, Record]
    now: float
    actions: list[Action] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def set(self, rec: Record, state: GangState, reason: str, **changes: Any) -> Record:
        """The record in `state` with `reason`; `since` moves only when the state does."""
        if rec.state != state:
            self.events.append(StateChanged(rec.key, rec.state, state, reason))
            changes["since"] = self.now
        new = attributed_within(replace(rec, state=state, reason=reason, **changes))
        self.records[rec.key] = new
        return new

    def put(self, rec: Record, **changes: Any) -> Record:
        new = attributed_within(replace(rec, **changes))
        self.records[rec.key] = new
        return new

    def emit(self, target: EventTarget, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(GangEvent(target, reason, message, warning))


def attributed_within(rec: Record) -> Record:
    """A record never has more arrived nodes and named launches in a group than it holds there: what it gives up
    ends theirs too (its arrived nodes are kept first, then its named launches, oldest first)."""
    if not rec.nodes and not rec.launches:
        return rec
    nodes = {
        g: names[: rec.requested.get(g, 0)]
        for g, names in rec.nodes.items()
        if rec.requested.get(g, 0) > 0
    }
    launches = {
        g: ids[: max(0, rec.requested.get(g, 0) - len(nodes.get(g, ())))]
        for g, ids in rec.launches.items()
    }
    launches = {g: ids for g, ids in launches.items() if ids}
    return (
        rec
        if nodes == rec.nodes and launches == rec.launches
        else replace(rec, nodes=nodes, launches=launches)
    )


def current_record(step: Step, g: GangFacts) -> Record:
    """The gang's record for this generation: a new one when the gang was recreated or replaced.

    A new generation takes over the nodes bought for the previous one that are still on their way; not the
    spare nodes of a running one (a member recreated after a crash): those are reserved for no gang, and taking
    them over would make them a purchase that can time out. Its spare launches the cloud named go back now: the
    record that would give them back at its deadline is replaced, and a launch no record holds arrives as a node
    nobody waits for and idles, possibly past the deadline it was bought under (a slow launch arrives after it).
    Unnamed ones (an ASG's) cannot be told from another gang's.
    """
    rec = step.records.get(g.key)
    replaced = rec is not None and rec.pods and g.pods and not pods_overlap(g.pods, rec.pods)
    if (
        rec is not None
        and rec.generation == g.generation
        and rec.state not in RESTARTS
        and not replaced
    ):
        return rec  # an infeasible gang keeps its record (and what it holds): it is re-planned every pass
    new = Record(
        g.key,
        g.generation,
        GangState.NEW,
        "",
        step.now,
        first_seen=step.now,
    )
    if rec is not None and rec.state == GangState.RUNNING and rec.launches:
        step.actions.append(
            Release(
                rec.key,
                {grp: len(ids) for grp, ids in rec.launches.items()},
                ReleaseWhy.UNUSED,
                "a member was recreated",
                instances=tuple(i for ids in rec.launches.values() for i in ids),
            )
        )
    if (
        rec is not None and holds(rec) and rec.state != GangState.RUNNING
    ):  # a running gang's spares stay unreserved
        step.events.append(Takeover(g.key, rec.generation, g.generation, dict(rec.requested)))
        new = replace(
            new,
            requested=dict(rec.requested),
            requested_at=rec.requested_at,
            deadline=rec.deadline,
            booked_at=rec.booked_at,
            state=GangState.PROVISIONING,
            nodes=dict(rec.nodes),
            launches=dict(rec.launches),
            covered=dict(rec.covered),
            shared=rec.shared,
        )
    step.records[g.key] = new
    return new


def without(requested: Mapping[str, int], group: str) -> dict[str, int]:
    return {g: n for g, n in requested.items() if g != group}


def launch_failed_reason(group: str, why: str, released: int | None) -> str:
    gave = "nodes there" if released is None else f"{released} nodes there"
    return f"launch failed in {group} ({why}); gave back {gave}, re-planning"


def with_launched(
    rec: Record, launched: Mapping[str, tuple[str, ...]]
) -> dict[str, tuple[str, ...]]:
    """The record's named launches with the instances this scale-up launched for it."""
    out = dict(rec.launches)
    for grp, ids in launched.items():
        out[grp] = out.get(grp, ()) + tuple(ids)
    return {grp: ids for grp, ids in out.items() if ids}


def idle(nodes: Mapping[str, tuple[str, ...]], busy: frozenset[str]) -> dict[str, tuple[str, ...]]:
    kept = {g: tuple(n for n in names if n not in busy) for g, names in nodes.items()}
    return {g: names for g, names in kept.items() if names}


def timed_out_reason(rec: Record, released: int | None) -> str:
    gave = "" if released is None else f"{released} "
    # the deadline counts from the first booking, not a re-booking
    booked = rec.booked_at or rec.requested_at
    return (
        f"not all nodes arrived within {rec.deadline - booked:.0f}s; gave back {gave}unused nodes"
    )


def hand_over(step: Step) -> None:
    """A gang that waits for a launch some other gang's pods took at once (an unnamed launch of its record, on a
    cloud that names launches) takes over, oldest request first, a named launch still on its way that a running
    gang started without: that gang started on the waiting gang's node, so the launch it bought is the waiting
    gang's now, with the waiting gang's deadline: only when that is no later than the deadline it was bought under
    (else it would be kept past that). On a cloud that names no launch there is nothing to hand over."""
    donors = sorted(
        (r for r in step.records.values() if r.state == GangState.RUNNING and r.launches),
        key=lambda r: (r.requested_at, r.gang),
    )
    if not donors:
        return
    waiting = sorted(
        (
            r
            for r in step.records.values()
            if r.state not in (GangState.CANCELLED, GangState.RUNNING) and holds(r)
        ),
        key=lambda r: (r.requested_at, r.gang),
    )
    for rec in waiting:
        for group in list(rec.requested):
            for donor in donors:
                donor, rec = step.records[donor.key], step.records[rec.key]
                spare, want = donor.launches.get(group, ()), rec.unnamed(group)
                if (
                    want <= 0 or not spare or rec.deadline > donor.deadline
                ):  # never kept past its purchase's deadline
                    continue
                give = spare[:want]
                left = {**donor.launches, group: spare[len(give) :]}
                requested = {**donor.requested, group: donor.requested[group] - len(give)}
                step.put(
                    donor,
                    launches={g: i for g, i in left.items() if i},
                    requested={g: k for g, k in requested.items() if k > 0},
                )
                step.put(rec, launches={**rec.launches, group: rec.launches.get(group, ()) + give})
