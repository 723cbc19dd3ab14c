"""The gang lifecycle as one pure function: `transition(records, plan, report, now)`.

Invariant: every change the controller makes to a gang's record goes through
`transition`, which does no I/O and reads no clock. It takes the records, the
pass's plan and one *report* (what was observed or what an action did) and
returns new records, the actions to carry out (back a group off, give capacity
back, apply the scale-up) and the events to emit (Kubernetes Events, state-change
log lines, metric samples). Records, actions and events are frozen values; a
`Record` is replaced, never changed.

The reports, in the order a pass produces them:

- `Confirmed`: at the start of a pass, records booked before a cloud call whose outcome
  was never recorded (the controller died in the write-ahead window) are settled
  by the client tokens on the groups' instances where the cloud tags them, else against
  the groups' actual desired capacity: a record keeps only what provably landed;
- `LaunchesFailed`: launches failed in groups that provisioning gangs wait on;
- `Booked`: the plan's new nodes are booked on their gangs before the cloud is
  called (the write-ahead records), and the scale-up is to be applied;
- `Applied`: the plan (and the scale-up's outcome, when there was one) moves
  every listed gang, and gangs no longer listed become running or cancelled;
- `Expire`: cancel-grace and deadlines give capacity back, in every state that holds some (a running
  gang's spares, what it started without, without timing it out);
- `Released`: what the cloud actually gave back, for the reasons and events;
- `Recovered` (after a restart): what became of scale-up calls a record booked
  and never confirmed (launched instances adopted, or nothing to keep);
- `Registered`: the registered Nodes of the groups records hold capacity in; a node
  that registered after a record's request, idle, is attributed to it (`Record.nodes`,
  see `on_registered`) and stays that gang's until it binds or the record gives it up.

Write-ahead calls: `Booked` gives every record an `attempt` and, per group, the
client token of the call that buys its nodes there (`Record.calls`, derived
from gang key + generation + attempt by `client_token`). The token is saved
before the call; `Applied` removes it once the call's outcome is known, so a
token still in a saved record means "sent, or about to be, outcome unknown".

`Booked` also saves, per group, `Record.unconfirmed`: the group's desired
capacity below this record's share, and the nodes booked. After a restart,
`Recovered` first adopts or terminates the instances of `calls` that run outside
the group (aws-fleet), leaving a booking with an `unconfirmed` share to
`Confirmed`, which credits it with the group's instances carrying its call's
token (aws-fleet), or with what the group's desired capacity proves landed
(aws-asg: one call per group and pass). Each booking is settled once.

Gangs the plan puts on the same new nodes are booked as one unit (`Booked.shared`,
`Record.shared`): each its share of the unit's nodes (`shares.py`), one deadline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ...plan import Plan
from . import (
    on_applied,
    on_booked,
    on_confirmed,
    on_expire,
    on_launches_failed,
    on_overdue,
    on_recovered,
    on_recreated,
    on_registered,
    on_released,
)
from .on_confirmed import by_token
from .on_overdue import due_at as late_due_at
from .record import (
    PRINT_DIGITS,
    TICK,
    Record,
    Records,
    client_token,
    cooling,
    deadline_due_at,
    grace_due_at,
    holds,
    named_launches,
    past_deadline,
    pod_print,
    pod_prints,
    pods_overlap,
    spare_until,
    spares_expired,
)
from .reports import (
    Action,
    Applied,
    ApplyScaleUp,
    BackOff,
    Booked,
    CallRecovered,
    Confirmed,
    Event,
    EventTarget,
    Expire,
    GangEvent,
    GangFacts,
    GroupFailure,
    Latency,
    LaunchesFailed,
    NodeSeen,
    Overdue,
    Recovered,
    Recreated,
    Registered,
    Release,
    Released,
    ReleaseOutcome,
    Report,
    Result,
    Rules,
    ScaledUp,
    StateChanged,
    Takeover,
)
from .states import IN_FLIGHT, REPORTED, RESTARTS, TERMINAL, UNUSABLE, GangState, ReleaseWhy
from .step import Step, current_record

# one handler module per report kind; each `handle(step, plan, report)` changes the step's records only
HANDLERS: Mapping[type, Callable[[Step, Plan | None, Any], None]] = {
    Confirmed: on_confirmed.handle,
    LaunchesFailed: on_launches_failed.handle,
    Booked: on_booked.handle,
    Applied: on_applied.handle,
    Expire: on_expire.handle,
    Released: on_released.handle,
    Recovered: on_recovered.handle,
    Registered: on_registered.handle,
    Overdue: on_overdue.handle,
    Recreated: on_recreated.handle,
}


def transition(records: Records, plan: Plan | None, report: Report, now: float) -> Result:
    """Move the records by one report. Pure: the same inputs always give the same outputs."""
    step = Step(dict(records), now)
    HANDLERS[type(report)](step, plan, report)
    return step.records, tuple(step.actions), tuple(step.events)


__all__ = [
    "Action",
    "Applied",
    "ApplyScaleUp",
    "BackOff",
    "Booked",
    "CallRecovered",
    "Confirmed",
    "Event",
    "EventTarget",
    "Expire",
    "GangEvent",
    "GangFacts",
    "GangState",
    "GroupFailure",
    "IN_FLIGHT",
    "Latency",
    "LaunchesFailed",
    "NodeSeen",
    "Overdue",
    "PRINT_DIGITS",
    "REPORTED",
    "RESTARTS",
    "Record",
    "Records",
    "Recovered",
    "Recreated",
    "Registered",
    "Release",
    "ReleaseOutcome",
    "ReleaseWhy",
    "Released",
    "Report",
    "Result",
    "Rules",
    "ScaledUp",
    "StateChanged",
    "TERMINAL",
    "TICK",
    "Takeover",
    "UNUSABLE",
    "by_token",
    "client_token",
    "cooling",
    "current_record",
    "deadline_due_at",
    "grace_due_at",
    "holds",
    "late_due_at",
    "named_launches",
    "past_deadline",
    "pod_print",
    "pod_prints",
    "pods_overlap",
    "spare_until",
    "spares_expired",
    "transition",
]
