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
  see `_registered`) and stays that gang's until it binds or the record gives it up.

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

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any

from cloud_adapters.errors import ErrorKind

from ..model import API_NONE, Gang, GangKey
from ..plan import Plan
from .shares import unit_id

log = logging.getLogger("gangscale.controller")


class GangState(StrEnum):
    """A gang's provisioning state; the values are what records, logs and metrics show."""

    NEW = "new"  # a record just created, before the pass decides (also the write-ahead state)
    WAITING_FOR_PODGROUP = "waiting-for-podgroup"
    WAITING_FOR_ADMISSION = (
        "waiting-for-admission"  # Kueue has not admitted it: nothing is bought before Kueue
    )
    BELOW_QUORUM = "below-quorum"
    PLANNED = "planned"
    PROVISIONING = "provisioning"
    READY = "ready"
    RUNNING = "running"
    INFEASIBLE = "infeasible"
    TIMED_OUT = "timed-out"
    CANCELLED = "cancelled"
    INVALID = "invalid"
    DEFERRED = "deferred"


class ReleaseWhy(StrEnum):
    """Why capacity is given back (the `why` label of `gangscale_capacity_released_total`)."""

    LAUNCH_FAILED = "launch-failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed-out"
    UNUSABLE = (
        "unusable"  # below quorum (or its group object missing) for longer than the cancel grace
    )
    UNUSED = (
        "unused"  # launches still on their way at the deadline of a gang that started without them
    )


REPORTED = tuple(
    s for s in GangState if s is not GangState.NEW
)  # the `gangscale_gangs{state}` series
TERMINAL = frozenset(
    {GangState.RUNNING, GangState.TIMED_OUT, GangState.CANCELLED, GangState.INFEASIBLE}
)
IN_FLIGHT = frozenset({GangState.PROVISIONING, GangState.READY})  # capacity bought and not yet used
RESTARTS = frozenset(
    {GangState.RUNNING, GangState.TIMED_OUT, GangState.CANCELLED}
)  # pending again: a new record
UNUSABLE = frozenset(
    {GangState.BELOW_QUORUM, GangState.WAITING_FOR_PODGROUP, GangState.WAITING_FOR_ADMISSION}
)  # cannot use what it holds


@dataclass(frozen=True, slots=True)
class Record:
    """One gang generation's provisioning, as the controller last saw it (persisted as JSON), keyed by its gang."""

    key: GangKey
    generation: str  # PodGroup uid (or pod uid for a lone pod); a new one restarts provisioning
    state: GangState
    reason: str
    since: float  # when the state was entered (epoch seconds)
    first_seen: float = 0.0  # when the gang was first pending (queue latency)
    # node group -> nodes bought for it and not used yet (running: those it started without, `_spare`)
    requested: Mapping[str, int] = field(default_factory=dict)
    requested_at: float = 0.0
    deadline: float = 0.0  # give back unused nodes when the gang is not running by then
    booked_at: float = 0.0  # when the purchase `deadline` counts from was booked (a re-booking keeps both); 0: unknown
    # the pods this generation was planned for, as prints of their uids (`pod_prints`; whole uids in the records
    # of older controllers): enough to tell a gang whose pods were all replaced (`current_record`)
    pods: tuple[str, ...] = ()
    attempt: int = 0  # scale-ups booked for this generation (part of their client tokens)
    calls: Mapping[str, tuple[str, int]] = field(
        default_factory=dict
    )  # group -> (token, nodes): unconfirmed
    # write-ahead: group -> (desired capacity below this record's share, nodes booked) for a cloud call whose
    # outcome is not recorded yet; settled by `Confirmed` (a restart) or by `Applied` (the same pass)
    unconfirmed: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # group -> names of the registered nodes of `requested` that arrived for this record (never more than
    # requested there): reserved for the gang while it waits, so no later plan gives them away
    nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # group -> instance ids of its launches still on their way, when the cloud named them (aws-fleet, simulated;
    # an ASG does not): an arrival, a failed launch or a give-back of one of them is this record's and no other's
    launches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # group -> how many of its launches on their way were judged late (`_overdue`) and covered by a new launch;
    # set once per purchase: no plan counts on them, and whichever launches arrive first serve the gang
    covered: Mapping[str, int] = field(default_factory=dict)
    # the unit of new nodes this gang shares with other gangs (`shares.unit_id`), '' when none: the unit's nodes are
    # reserved for all its gangs, whichever record holds them, and its gangs share one deadline
    shared: str = ""

    @property
    def gang(self) -> str:
        """The gang as "namespace/name/api" (`str(GangKey)`): the stored records' and the client tokens' form."""
        return str(self.key)

    @property
    def namespace(self) -> str:
        return self.key.namespace

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def api(self) -> str:
        return self.key.api

    def to_json(self) -> dict[str, Any]:
        """The stored form: the key as its four strings (`gang`, `namespace`, `name`, `api`), as always written."""
        out = {
            "gang": self.gang,
            "namespace": self.namespace,
            "name": self.name,
            "api": self.api,
            "generation": self.generation,
            "state": self.state.value,
            "reason": self.reason,
            "since": self.since,
            "first_seen": self.first_seen,
            "requested": dict(self.requested),
            "requested_at": self.requested_at,
            "deadline": self.deadline,
            "pod_prints": "".join(pod_prints(self.pods)),
        }
        if self.attempt:  # written only when set: records of older controllers round-trip unchanged
            out["attempt"] = self.attempt
        if self.calls:
            out["calls"] = {g: [t, n] for g, (t, n) in self.calls.items()}
        if self.unconfirmed:
            out["unconfirmed"] = {g: [base, n] for g, (base, n) in self.unconfirmed.items()}
        if self.nodes:
            out["nodes"] = {g: list(names) for g, names in self.nodes.items()}
        if self.launches:
            out["launches"] = {g: list(ids) for g, ids in self.launches.items()}
        if self.covered:
            out["covered"] = dict(self.covered)
        if self.booked_at:
            out["booked_at"] = self.booked_at
        if self.shared:
            out["shared"] = self.shared
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Record:
        known = {k: raw[k] for k in cls.__slots__ if k in raw}  # type: ignore[attr-defined]
        known["key"] = GangKey(str(raw["namespace"]), str(raw["name"]), str(raw["api"]))
        known["state"] = GangState(known.get("state", "new"))
        known["requested"] = {str(g): int(n) for g, n in dict(known.get("requested") or {}).items()}
        prints = str(
            raw.get("pod_prints") or ""
        )  # "pods" (whole uids): records of older controllers
        known["pods"] = tuple(
            prints[i : i + PRINT_DIGITS] for i in range(0, len(prints), PRINT_DIGITS)
        ) or pod_prints(str(p) for p in known.get("pods") or ())
        known["attempt"] = int(known.get("attempt") or 0)
        known["calls"] = {
            str(g): (str(c[0]), int(c[1])) for g, c in dict(known.get("calls") or {}).items()
        }
        known["unconfirmed"] = {
            str(g): (int(v[0]), int(v[1])) for g, v in dict(known.get("unconfirmed") or {}).items()
        }
        known["nodes"] = {
            str(g): tuple(str(n) for n in names)
            for g, names in dict(known.get("nodes") or {}).items()
        }
        known["launches"] = {
            str(g): tuple(str(i) for i in ids)
            for g, ids in dict(known.get("launches") or {}).items()
        }
        known["covered"] = {str(g): int(n) for g, n in dict(known.get("covered") or {}).items()}
        known["shared"] = str(known.get("shared") or "")
        return cls(**known)

    def arrived(self, group: str) -> int:
        """How many of the nodes bought for it in `group` have registered (and are attributed to it)."""
        return len(self.nodes.get(group, ()))

    def late(self, group: str) -> int:
        """Its launches on their way in `group` that a cover replaced (never more than are on their way)."""
        return max(
            0, min(self.covered.get(group, 0), self.requested.get(group, 0) - self.arrived(group))
        )

    def unnamed(self, group: str) -> int:
        """Its launches on their way in `group` whose instance the cloud did not name (attributed by count)."""
        return (
            self.requested.get(group, 0) - self.arrived(group) - len(self.launches.get(group, ()))
        )


PRINT_DIGITS = 12  # 48 bits: two disjoint 1,024-pod sets share a print with odds of 4 in a billion


@lru_cache(maxsize=1 << 17)
def pod_print(uid: str) -> str:
    """A pod uid as a record saves it: 12 hex digits of its sha256, a third of the uid's 36 characters (a record
    of a large gang lists every pod; the overlap test of `pods_overlap` needs no more). A print maps to itself."""
    if len(uid) == PRINT_DIGITS and all(c in "0123456789abcdef" for c in uid):
        return uid
    return hashlib.sha256(uid.encode()).hexdigest()[:PRINT_DIGITS]


def pod_prints(uids: Iterable[str]) -> tuple[str, ...]:
    """A record's pods as it keeps them: their prints, sorted, each once."""
    return tuple(sorted({pod_print(u) for u in uids}))


def pods_overlap(pending: Iterable[str], recorded: Iterable[str]) -> bool:
    """Any pending pod (uid) among a record's pods (uids, or prints once loaded)."""
    rec = {pod_print(p) for p in recorded}
    return any(pod_print(p) in rec for p in pending)


def client_token(members: Iterable[Record], group: str, unit: Mapping[str, int]) -> str:
    """The idempotency token of one scale-up call: the same records and attempt always give the same token."""
    basis = ";".join(sorted(f"{r.gang}#{r.generation}#{r.attempt}" for r in members))
    basis += "|" + group + "|" + ",".join(f"{g}={n}" for g, n in sorted(unit.items()))
    return "gangscale-" + hashlib.sha256(basis.encode()).hexdigest()[:40]


Records = Mapping[GangKey, Record]


def holds(rec: Record) -> bool:
    """The record owns capacity (nodes bought for it, not yet used or given back), whatever its state."""
    return bool(rec.requested)


# ------------------------------------------------------------------ inputs


@dataclass(frozen=True, slots=True)
class EventTarget:
    """What an Event about a gang is attached to: enough of the gang to name its object."""

    key: GangKey
    uid: str = ""  # the group object's uid
    pod_name: str = ""  # first pending pod: the object for lone pods and missing group objects
    pod_uid: str = ""
    exists: bool = True
    members: tuple[
        tuple[str, str], ...
    ] = ()  # pending pods (name, uid) by name: CA-style pod events go to them

    @classmethod
    def of_gang(cls, g: Gang) -> EventTarget:
        pod = g.pending[0] if g.pending else None
        return cls(
            g.key,
            g.uid,
            pod.name if pod else "",
            pod.uid if pod else "",
            g.exists,
            tuple(sorted((p.name, p.uid) for p in g.pending)),
        )

    @classmethod
    def of_record(cls, rec: Record) -> EventTarget:
        """A gang no longer listed: its record names it."""
        return cls(rec.key, rec.generation if rec.generation != "-" else "")

    @property
    def on_pod(self) -> bool:
        return self.key.api == API_NONE or not self.exists


@dataclass(frozen=True, slots=True)
class GangFacts:
    """What the lifecycle needs to know of one listed gang."""

    key: GangKey
    generation: str  # group uid, "-" when it has none
    pods: tuple[str, ...]  # pending pod uids, sorted
    pod_keys: frozenset[str]  # pending pods as "namespace/name" (the plan's names)
    deadline_seconds: float
    target: EventTarget

    @classmethod
    def of(cls, g: Gang, deadline_seconds: float) -> GangFacts:
        return cls(
            g.key,
            g.uid or "-",
            tuple(sorted(p.uid for p in g.pending)),
            frozenset(p.key for p in g.pending),
            deadline_seconds,
            EventTarget.of_gang(g),
        )


@dataclass(frozen=True, slots=True)
class Rules:
    """The configuration the lifecycle reads."""

    enforce_mode: bool  # mode: enforce (events say TriggeredScaleUp rather than dry-run)
    backoff_seconds: float
    cancel_grace_seconds: float
    late_launch_seconds: float = (
        0.0  # a launch still on its way this long after its booking is covered (0: never)
    )


@dataclass(frozen=True, slots=True)
class GroupFailure:
    """Launches in one group failed since a gang's request (typed: `kind` is the CloudError kind)."""

    group: str
    kind: ErrorKind
    message: str
    # launches of the group the cloud still has on their way (instances launching, or running without a Node):
    # they got capacity, so the gangs waiting on them keep them (oldest request first) and only the shortfall is
    # re-planned; None when the cloud could not say (then every launch in flight there is given back)
    on_way: int | None = None
    # the instance ids of those launches (None: not read): a record's named launch that is not among them failed
    on_way_ids: frozenset[str] | None = None
    # the instance ids of the registered Nodes: a named launch among them arrived (this pass's `Registered`
    # attributes it), it did not fail, although the cloud no longer has it on its way
    registered_ids: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class LaunchesFailed:
    failures: tuple[GroupFailure, ...]


@dataclass(frozen=True, slots=True)
class Overdue:
    """The clock's report before a plan: provisioning gangs whose launches are late get covers."""

    rules: Rules


@dataclass(frozen=True, slots=True)
class Recreated:
    """The listed gangs whose record is a running one with named spare launches, before a plan: a member was
    recreated, so the gang gets its new record now and those launches go back in this report's step (acted on,
    then saved with the pass; a crash between the two repeats it), never after the scale-up's write-ahead save,
    where a crash left them held by no record."""

    gangs: tuple[GangFacts, ...]


@dataclass(frozen=True, slots=True)
class Booked:
    gangs: tuple[GangFacts, ...]
    intents: Mapping[
        GangKey, Mapping[str, int]
    ]  # new nodes per gang and group, from the attribution
    units: tuple[
        tuple[frozenset[GangKey], Mapping[str, int]], ...
    ] = ()  # the atomic units and their gangs
    desired: Mapping[str, int] = field(
        default_factory=dict
    )  # each group's desired capacity before the call
    shared: tuple[
        frozenset[GangKey], ...
    ] = ()  # the sets of gangs that share new nodes (`shares.Unit.shared`)


@dataclass(frozen=True, slots=True)
class CallRecovered:
    """What a restart found for one unconfirmed call of a record: `adopted` instances joined the group."""

    key: GangKey
    group: str
    token: str
    adopted: int
    note: str = ""
    instances: tuple[
        str, ...
    ] = ()  # the adopted instances' ids: the record holds them by id, not by count


@dataclass(frozen=True, slots=True)
class Recovered:
    outcomes: tuple[CallRecovered, ...]


@dataclass(frozen=True, slots=True)
class Confirmed:
    """The groups' desired capacity now, read before anything else in the pass changes it, and, where the cloud
    tags what each call launched (aws-fleet's `gangscale.io/client-token`), the instances in the groups by token
    (None: the cloud cannot say; the bookings are then settled by desired capacity)."""

    desired: Mapping[str, int]
    tokens: Mapping[str, tuple[str, ...]] | None = None


@dataclass(frozen=True, slots=True)
class Applied:
    gangs: tuple[GangFacts, ...]
    rules: Rules
    intents: Mapping[GangKey, Mapping[str, int]] = field(default_factory=dict)
    applied: frozenset[str] = frozenset()  # groups the scale-up grew
    failed: Mapping[str, str] = field(
        default_factory=dict
    )  # group -> why its share was not applied
    upcoming_pods: frozenset[str] = frozenset()  # pods the plan puts on nodes on their way
    bound_groups: frozenset[tuple[str, str]] = (
        frozenset()
    )  # (namespace, group name) with a bound member
    busy: frozenset[str] = (
        frozenset()
    )  # registered nodes running a pod (not a DaemonSet's): used, never spare
    # per gang and group, the instance ids the scale-up launched for it (when the cloud named them)
    launched: Mapping[GangKey, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Expire:
    rules: Rules
    # per group, the nodes on their way that this pass's plan puts pods on beyond what waiting gangs have reserved
    # there: a running gang's spare launches the plan counts on are not given back at its deadline
    planned_upcoming: Mapping[str, int] = field(default_factory=dict)
    # per group, the launches the cloud has on their way (read only for the groups where a running gang past its
    # deadline still counts launches of its own): never more are given back than exist beyond what waiting gangs
    # count on, whatever a record's own count says (a node its gang bound on at once was never attributed to it)
    on_way: Mapping[str, int] = field(default_factory=dict)
    planned_nodes: frozenset[str] = frozenset()  # registered nodes the plan puts pods on
    on_way_ids: Mapping[str, frozenset[str]] = field(
        default_factory=dict
    )  # the instance ids of `on_way`, per group


@dataclass(frozen=True, slots=True)
class NodeSeen:
    """A registered Node of a discovered group, as attribution needs it."""

    name: str
    group: str
    created: float  # creationTimestamp, epoch seconds (0: unknown, never attributed as an arrival)
    idle: bool  # no pod but DaemonSets' bound to it
    ready: bool = (
        True  # only a Ready node is an arrival; a NotReady one that was attributed stays so
    )
    instance: str = ""  # its instance id (from spec.providerID): a record's named launch arrives as exactly this node


@dataclass(frozen=True, slots=True)
class Registered:
    """The registered nodes of the discovered `groups` this pass (the whole list: a node of one of them that
    is missing is gone; nodes of a group not discovered this pass are left as they were)."""

    nodes: tuple[NodeSeen, ...]
    groups: frozenset[str]
    skew: float = 0.0  # a node created this much before a request may still be its


# ----------------------------------------------------------------- outputs


@dataclass(frozen=True, slots=True)
class BackOff:
    """Keep a group from growing for the backoff period."""

    group: str
    kind: ErrorKind | ReleaseWhy  # the metric's `kind` label: the CloudError's kind, or timed-out
    why: str


@dataclass(frozen=True, slots=True)
class Release:
    """Give back up to `groups` of what `key` bought (launches in flight first, never a busy node)."""

    key: GangKey
    groups: Mapping[str, int]
    why: ReleaseWhy
    detail: str = ""  # the launch failure, for the reason
    unlaunched_only: bool = (
        False  # only slots the cloud has not launched (a failed launch's): never an instance
    )
    # what is the record's own, given back before anything counted: its launches the cloud named (instance ids) and
    # its registered nodes; another gang's launch or node is never taken for it while these cover the count
    instances: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ApplyScaleUp:
    intents: Mapping[GangKey, Mapping[str, int]]
    tokens: tuple[
        Mapping[str, str], ...
    ] = ()  # per atomic unit (Booked.units), group -> client token


@dataclass(frozen=True, slots=True)
class ReleaseOutcome:
    action: Release
    released: int


@dataclass(frozen=True, slots=True)
class Released:
    outcomes: tuple[ReleaseOutcome, ...]


@dataclass(frozen=True, slots=True)
class GangEvent:
    target: EventTarget
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True, slots=True)
class StateChanged:
    key: GangKey
    old: GangState
    new: GangState
    reason: str


@dataclass(frozen=True, slots=True)
class Takeover:
    """A new generation of a gang takes over the nodes bought for the previous one."""

    key: GangKey
    old_generation: str
    new_generation: str
    requested: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class ScaledUp:
    group: str
    nodes: int


@dataclass(frozen=True, slots=True)
class Latency:
    stage: str  # requested | running
    seconds: float


Report = (
    Confirmed
    | LaunchesFailed
    | Booked
    | Applied
    | Expire
    | Released
    | Recovered
    | Registered
    | Overdue
    | Recreated
)
Action = BackOff | Release | ApplyScaleUp
Event = GangEvent | StateChanged | Takeover | ScaledUp | Latency
Result = tuple[dict[GangKey, Record], tuple[Action, ...], tuple[Event, ...]]


# --------------------------------------------------------------- transition


def transition(records: Records, plan: Plan | None, report: Report, now: float) -> Result:
    """Move the records by one report. Pure: the same inputs always give the same outputs."""
    step = _Step(dict(records), now)
    if isinstance(report, Confirmed):
        _confirmed(step, report)
    elif isinstance(report, LaunchesFailed):
        _launches_failed(step, report)
    elif isinstance(report, Booked):
        _booked(step, report)
    elif isinstance(report, Applied):
        _applied(step, plan, report)
    elif isinstance(report, Expire):
        _expire(step, report)
    elif isinstance(report, Released):
        _released(step, report)
    elif isinstance(report, Recovered):
        _recovered(step, report)
    elif isinstance(report, Registered):
        _registered(step, report)
    elif isinstance(report, Overdue):
        _overdue(step, report)
    elif isinstance(report, Recreated):
        _recreated(step, report)
    else:  # pragma: no cover - a new report type without a handler
        raise TypeError(f"unknown report {type(report).__name__}")
    return step.records, tuple(step.actions), tuple(step.events)


@dataclass(slots=True)
class _Step:
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
        new = _attributed_within(replace(rec, state=state, reason=reason, **changes))
        self.records[rec.key] = new
        return new

    def put(self, rec: Record, **changes: Any) -> Record:
        new = _attributed_within(replace(rec, **changes))
        self.records[rec.key] = new
        return new

    def emit(self, target: EventTarget, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(GangEvent(target, reason, message, warning))


def _attributed_within(rec: Record) -> Record:
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


def _own(rec: Record) -> dict[str, tuple[str, ...]]:
    """A release's first choice: the record's named launches and its registered nodes (`Release.instances`, `nodes`)."""
    return {
        "instances": tuple(i for ids in rec.launches.values() for i in ids),
        "nodes": tuple(n for names in rec.nodes.values() for n in names),
    }


def cooling(rec: Record | None, generation: str, now: float, backoff_seconds: float) -> bool:
    """A gang that just timed out waits one backoff period before it is bought for again."""
    return (
        rec is not None
        and rec.state == GangState.TIMED_OUT
        and rec.generation == generation
        and now - rec.since < backoff_seconds
    )


def current_record(step: _Step, g: GangFacts) -> Record:
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


def _recreated(step: _Step, report: Recreated) -> None:
    """A running gang listed with pending members again takes its new record before the plan (`current_record`)."""
    for g in report.gangs:
        rec = step.records.get(g.key)
        if rec is not None and rec.state == GangState.RUNNING and rec.launches and g.pods:
            current_record(step, g)


def _without(requested: Mapping[str, int], group: str) -> dict[str, int]:
    return {g: n for g, n in requested.items() if g != group}


# ------------------------------------------------------------------ phases


def _confirmed(step: _Step, report: Confirmed) -> None:
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


def _launches_failed(step: _Step, report: LaunchesFailed) -> None:
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
            in_flight = rec.requested.get(f.group, 0) - rec.arrived(f.group)
            if in_flight <= 0 or not holds(rec):
                continue
            named = rec.launches.get(f.group, ())
            failed = (
                tuple(i for i in named if i not in f.registered_ids)
                if f.on_way is None
                else tuple(
                    # a named launch the cloud no longer has on its way, and that did not register either
                    i
                    for i in named
                    if f.on_way_ids is not None
                    and i not in f.on_way_ids
                    and i not in f.registered_ids
                )
            )
            unnamed = in_flight - len(named)
            kept = (
                0 if left is None else min(unnamed, left)
            )  # unknown: every launch in flight goes back
            lost = len(failed) + unnamed - kept
            if left is not None:
                left -= kept
            launches = {**rec.launches, f.group: tuple(i for i in named if i not in failed)}
            launches = {g: ids for g, ids in launches.items() if ids}
            requested = {**rec.requested, f.group: rec.requested[f.group] - lost}
            requested = {g: n for g, n in requested.items() if n > 0}
            if lost <= 0 or (rec.state != GangState.PROVISIONING and rec.key not in moved):
                if failed:  # a named launch of a gang not waiting on it (a running gang's spare): off its account
                    left_there = {**rec.requested, f.group: rec.requested[f.group] - len(failed)}
                    step.put(
                        rec,
                        requested={g: n for g, n in left_there.items() if n > 0},
                        launches=launches,
                    )
                continue
            step.actions.append(
                Release(
                    rec.key,
                    {f.group: lost},
                    ReleaseWhy.LAUNCH_FAILED,
                    f.message,
                    unlaunched_only=f.on_way is not None,
                )
            )
            step.set(
                rec,
                GangState.PLANNED,
                _launch_failed_reason(f.group, f.message, None),
                requested=requested,
                launches=launches,
            )
            moved.add(rec.key)


def _unnamed_on_way(records: Iterable[Record], f: GroupFailure) -> int | None:
    """The launches on their way in `f.group` that no record named: kept by the unnamed in-flight counts, oldest
    request first (None: the cloud could not say)."""
    if f.on_way is None:
        return None
    named = {i for r in records if holds(r) for i in r.launches.get(f.group, ())}
    return max(0, f.on_way - len(named if f.on_way_ids is None else named & f.on_way_ids))


def _launch_failed_reason(group: str, why: str, released: int | None) -> str:
    gave = "nodes there" if released is None else f"{released} nodes there"
    return f"launch failed in {group} ({why}); gave back {gave}, re-planning"


def _booked(step: _Step, report: Booked) -> None:
    """Book the plan's new nodes on the gangs they are for (the write-ahead record), then apply. A gang whose
    share of a shared unit is zero is booked all the same (its intents name the group with 0)."""
    below = dict(report.desired)  # per group: the desired capacity below the next gang's share
    for g in report.gangs:
        mine = report.intents.get(g.key)
        if not mine:
            continue
        rec = current_record(step, g)
        requested, unconfirmed = dict(rec.requested), {}
        for grp, n in sorted(mine.items()):
            if n <= 0:
                continue
            requested[grp] = requested.get(grp, 0) + n
            unconfirmed[grp] = (below.get(grp, 0), n)
            below[grp] = below.get(grp, 0) + n
        # A re-plan that buys more (after a launch failure) keeps the deadline of the nodes already held: moving
        # it on every rebooking let a gang whose launches keep failing hold its arrived nodes idle for good.
        kept = holds(rec) and rec.deadline
        deadline, booked_at = (
            (rec.deadline, rec.booked_at) if kept else (step.now + g.deadline_seconds, step.now)
        )
        step.put(
            rec,
            requested=requested,
            requested_at=step.now,
            deadline=deadline,
            booked_at=booked_at,
            pods=pod_prints(g.pods),
            attempt=rec.attempt + 1,
            unconfirmed=unconfirmed,
        )
    for keys in report.shared:
        _share(step, keys)
    step.actions.append(ApplyScaleUp(dict(report.intents), _book_calls(step, report)))


def _share(step: _Step, keys: frozenset[GangKey]) -> None:
    """Gangs that share new nodes become one unit: one `shared` id, the earliest of their deadlines. A member
    already in a unit brings that unit's other records along (units that share a node are one unit)."""
    members = [step.records[k] for k in sorted(keys, key=str) if k in step.records]
    if len(members) < 2:
        return
    before = {r.shared for r in members if r.shared}
    joined = {r.key: r for r in step.records.values() if r.shared and r.shared in before}
    joined.update({r.key: r for r in members})
    uid = unit_id(f"{r.gang}#{r.generation}#{r.attempt}" for r in members)
    deadline = min((r.deadline for r in joined.values() if r.deadline), default=0.0)
    for rec in joined.values():
        step.put(rec, shared=uid, deadline=deadline or rec.deadline)


def _book_calls(step: _Step, report: Booked) -> tuple[dict[str, str], ...]:
    """Per atomic unit, each group's client token, recorded on the records it buys for (write-ahead)."""
    tokens = []
    for keys, unit in report.units:
        members = [
            step.records[k]
            for k in sorted(keys, key=str)
            if k in step.records and report.intents.get(k)
        ]
        by_group = {grp: client_token(members, grp, unit) for grp in unit}
        for rec in members:
            mine = report.intents[rec.key]
            step.put(
                rec,
                calls={
                    **rec.calls,
                    **{g: (t, mine[g]) for g, t in by_group.items() if mine.get(g)},
                },
            )
        tokens.append(by_group)
    return tuple(tokens)


def _applied(step: _Step, plan: Plan | None, report: Applied) -> None:
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
            state = GangState(res.decision) if res.decision in REPORTED else GangState.INFEASIBLE
            step.set(rec, state, res.reason)
            step.emit(
                g.target,
                "NotTriggerScaleUp",
                res.reason,
                state in (GangState.INFEASIBLE, GangState.INVALID),
            )
    _unlisted(step, {g.key for g in report.gangs}, report)


def _scale_up_outcome(
    step: _Step, rec: Record, g: GangFacts, reason: str, mine: Mapping[str, int], report: Applied
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
            launches=_with_launched(rec, report.launched.get(g.key, {})),
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
            launches=_with_launched(
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


def _sharing_note(step: _Step, rec: Record) -> str:
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


def _with_launched(
    rec: Record, launched: Mapping[str, tuple[str, ...]]
) -> dict[str, tuple[str, ...]]:
    """The record's named launches with the instances this scale-up launched for it."""
    out = dict(rec.launches)
    for grp, ids in launched.items():
        out[grp] = out.get(grp, ()) + tuple(ids)
    return {grp: ids for grp, ids in out.items() if ids}


def _unlisted(step: _Step, seen: set[GangKey], report: Applied) -> None:
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
                nodes=_idle(rec.nodes, report.busy),
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
    _hand_over(
        step
    )  # a gang that just started may have started on another's node: its launches are that gang's


def _overdue(step: _Step, report: Overdue) -> None:
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


def _uncovered(step: _Step, rec: Record, reason: str) -> None:
    """Its late launches could not be bought again (no room, a cap): it waits for them after all, and is not
    covered again (the counts stay, at zero, so `_overdue` leaves it alone)."""
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


def _idle(nodes: Mapping[str, tuple[str, ...]], busy: frozenset[str]) -> dict[str, tuple[str, ...]]:
    kept = {g: tuple(n for n in names if n not in busy) for g, names in nodes.items()}
    return {g: names for g, names in kept.items() if names}


def _spare_note(spare: Mapping[str, int], now: bool = False) -> str:
    n = sum(spare.values())
    when = "now (late launches and their covers)" if now else "at its deadline"
    return (
        f"; {n} nodes bought for it are not used and go back {when} unless a gang uses them"
        if n
        else ""
    )


TICK = 0.001  # how long after a strict deadline a pass acts on it


def past_deadline(deadline: float, now: float) -> bool:
    """The deadline rule, stated once: a purchase's deadline (0: none) has passed strictly after its time."""
    return bool(deadline) and now > deadline


def deadline_due_at(rec: Record) -> float | None:
    """The first time a pass finds the record past its deadline (`past_deadline`); None: it has none."""
    return rec.deadline + TICK if rec.deadline else None


def grace_due_at(rec: Record, grace: float) -> float:
    """When a grace counted from the record's state change ends (`_expire`'s cancel grace, `cooling`): at its
    time, as both compare `now - since` with `>=` or `<`."""
    return rec.since + grace


def spares_expired(rec: Record, now: float) -> bool:
    """A running gang still holding what it started without, past its purchase's deadline: those go back now
    (`_spares_due`, the scale-down, and no plan counts on them: `reservations.expired_spares`)."""
    return rec.state == GangState.RUNNING and holds(rec) and past_deadline(rec.deadline, now)


def spare_until(records: Iterable[Record]) -> dict[str, float]:
    """Node name -> the deadline of the purchase it came from, for the nodes a running gang did not use (each
    goes at `past_deadline` of it)."""
    return {
        name: rec.deadline
        for rec in records
        if rec.state == GangState.RUNNING and rec.deadline
        for names in rec.nodes.values()
        for name in names
    }


def _expire(step: _Step, report: Expire) -> None:
    """Cancelled past the grace, or not delivered by the deadline: give the unused capacity back."""
    grace = report.rules.cancel_grace_seconds
    for key, rec in list(step.records.items()):
        if rec.state == GangState.CANCELLED:
            if holds(rec) and step.now - rec.since >= grace:
                step.actions.append(
                    Release(key, dict(rec.requested), ReleaseWhy.CANCELLED, **_own(rec))
                )
                step.put(rec, requested={})
        elif (
            (rec.state in IN_FLIGHT or holds(rec))
            and rec.state not in RESTARTS
            and past_deadline(rec.deadline, step.now)
        ):  # whatever state it reached: below quorum, infeasible, planned...
            for group in rec.requested:  # it did not deliver in time: try the alternatives first
                step.actions.append(
                    BackOff(
                        group,
                        ReleaseWhy.TIMED_OUT,
                        f"timed-out: nodes for {rec.gang} did not arrive",
                    )
                )
            step.actions.append(
                Release(key, dict(rec.requested), ReleaseWhy.TIMED_OUT, **_own(rec))
            )
            step.set(rec, GangState.TIMED_OUT, _timed_out_reason(rec, None), requested={})
        elif rec.state in UNUSABLE and holds(rec) and step.now - rec.since >= grace:
            step.actions.append(Release(key, dict(rec.requested), ReleaseWhy.UNUSABLE, **_own(rec)))
            step.put(rec, requested={})
        elif spares_expired(rec, step.now):
            _spares_due(step, rec, report)


def _spares_due(step: _Step, rec: Record, report: Expire) -> None:
    """A running gang past its deadline gives back what it did not use, but not what the plan puts pods on: those
    stay its own (a launch until it arrives, a node until it is used) and go back once no plan counts on them.

    Launches on their way go back now, never more than the cloud has on their way beyond what waiting gangs count
    on (a node its gang bound on at once was never attributed to it: its own count can be stale). Arrived nodes
    are handed to this pass's scale-down (`spare_until`, read before this report), then are ordinary nodes."""
    records = step.records.values()
    named = {
        g: tuple(i for i in rec.launches.get(g, ()) if i in report.on_way_ids.get(g, frozenset()))
        for g in rec.requested
    }  # its named launches the cloud still has on their way
    possible = {
        g: len(named[g])
        + min(
            rec.unnamed(g),
            max(0, report.on_way.get(g, 0) - _waited_for(records, g) - len(named[g])),
        )
        for g in rec.requested
    }
    late = {g: n - report.planned_upcoming.get(g, 0) for g, n in possible.items()}
    late = {g: n for g, n in late.items() if n > 0}
    if late:
        step.actions.append(
            Release(
                rec.key,
                late,
                ReleaseWhy.UNUSED,
                instances=tuple(i for g, n in late.items() for i in named[g][:n]),
            )
        )
    nodes = _idle(
        rec.nodes,
        frozenset(n for names in rec.nodes.values() for n in names) - report.planned_nodes,
    )
    requested = {g: len(nodes.get(g, ())) + n - late.get(g, 0) for g, n in possible.items()}
    requested = {g: n for g, n in requested.items() if n > 0}
    launches = {g: ids[late.get(g, 0) :] for g, ids in named.items() if ids[late.get(g, 0) :]}
    if requested != rec.requested or nodes != rec.nodes or launches != rec.launches:
        step.put(rec, requested=requested, nodes=nodes, launches=launches)


def _waited_for(records: Iterable[Record], group: str) -> int:
    """The launches of `group` that gangs still waiting count on (every record holding there but a running one)."""
    return sum(
        max(0, r.requested.get(group, 0) - r.arrived(group))
        for r in records
        if r.state != GangState.RUNNING and holds(r)
    )


def _timed_out_reason(rec: Record, released: int | None) -> str:
    gave = "" if released is None else f"{released} "
    booked = (
        rec.booked_at or rec.requested_at
    )  # the deadline counts from the first booking, not a re-booking
    return (
        f"not all nodes arrived within {rec.deadline - booked:.0f}s; gave back {gave}unused nodes"
    )


def _released(step: _Step, report: Released) -> None:
    """The reasons and events once the cloud has said how much it gave back."""
    for out in report.outcomes:
        rec = step.records.get(out.action.key)
        if rec is None:
            continue
        target, n = EventTarget.of_record(rec), out.released
        if out.action.why == ReleaseWhy.LAUNCH_FAILED:
            group = next(iter(out.action.groups), "")
            rec = step.put(rec, reason=_launch_failed_reason(group, out.action.detail, n))
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
            rec = step.put(rec, reason=_timed_out_reason(rec, n))
            step.emit(target, "ScaleUpTimedOut", rec.reason, True)
            if n:
                step.emit(
                    target, "CapacityReleased", f"gave back {n} unused nodes bought for this gang"
                )


# ------------------------------------------------------------ write-ahead calls


def _confirm_calls(step: _Step, report: Applied) -> None:
    """A call whose outcome the scale-up reported is no longer unconfirmed."""
    settled = set(report.applied) | set(report.failed)
    for key in report.intents:
        rec = step.records.get(key)
        if rec is not None and any(g in settled for g in rec.calls):
            step.put(rec, calls={g: c for g, c in rec.calls.items() if g not in settled})


def _recovered(step: _Step, report: Recovered) -> None:
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
                launches=_with_launched(rec, {out.group: out.instances[: call[1]]}),
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


# ------------------------------------------------------------ arrived nodes


def _registered(step: _Step, report: Registered) -> None:
    """Forget attributed nodes that are gone (and the capacity they were), and a running gang's spares that now
    run a pod, then attribute the new arrivals.

    A launch the cloud named when it was bought (`Record.launches`: aws-fleet and `simulated` return instance
    ids) arrives as exactly its node (`_named_arrivals`). Not every cloud says which launch an instance came
    from (an ASG or an EKS node group only grows a desired capacity), so for the rest a registered node is a
    record's arrival when the record has unnamed launches in the node's group, the node was created at or after
    the record's request (its creationTimestamp, less `skew`), it is idle, it is no record's named launch, and
    no other record has it; a group's nodes are identical, so of the records that may own such a node, the
    oldest request takes it. What each record holds is kept exact, whichever node it is.
    """
    seen = {n.name: n for n in report.nodes}
    taken: set[str] = set()
    _named_arrivals(step, report, taken)
    for rec in list(step.records.values()):
        if not rec.nodes:
            continue
        nodes = {
            g: tuple(n for n in names if g not in report.groups or _still_its(rec, g, seen.get(n)))
            for g, names in rec.nodes.items()
        }
        gone = {
            g: len(rec.nodes[g]) - len(kept)
            for g, kept in nodes.items()
            if len(kept) < len(rec.nodes[g])
        }
        taken.update(n for names in nodes.values() for n in names)
        if gone:
            requested = {g: n - gone.get(g, 0) for g, n in rec.requested.items()}
            step.put(
                rec,
                nodes={g: k for g, k in nodes.items() if k},
                requested={g: n for g, n in requested.items() if n > 0},
            )
    named = named_launches(step.records.values())
    # groups some record still waits for by count: attributing a node only lowers a record's want, so a group not
    # in it stays out for the whole loop (the idle nodes of other groups, often most, skip the records' scan)
    wanted = {
        g
        for r in step.records.values()
        if r.state != GangState.CANCELLED
        for g in r.requested
        if r.unnamed(g) > 0
    }
    for node in sorted(report.nodes, key=lambda n: (n.created, n.name)):
        if (
            node.name in taken
            or node.instance in named
            or not (node.idle and node.ready)
            or node.created <= 0
            or node.group not in wanted
        ):
            continue
        owner = _owner(step.records.values(), node, report.skew)
        if owner is not None:
            step.put(
                owner,
                nodes={**owner.nodes, node.group: owner.nodes.get(node.group, ()) + (node.name,)},
            )
            taken.add(node.name)


def named_launches(records: Iterable[Record]) -> set[str]:
    """The instance ids of the records' launches the cloud named that have not arrived (`Record.launches`)."""
    return {i for r in records for ids in r.launches.values() for i in ids}


def _named_arrivals(step: _Step, report: Registered, taken: set[str]) -> None:
    """A record's named launch that registered is its arrival, exactly, when Ready and idle (one still NotReady
    stays on its way). One that a pod took at once is no longer on its way: the record counts it as an unnamed
    launch, which `_hand_over` turns into the named launch its taker's gang started without."""
    by_instance = {n.instance: n for n in report.nodes if n.instance}
    for rec in list(step.records.values()):
        if not rec.launches:
            continue
        launches: dict[str, tuple[str, ...]] = {}
        nodes = dict(rec.nodes)
        for g, ids in rec.launches.items():
            for i in ids:
                node = by_instance.get(i)
                if node is None or node.group != g or (node.idle and not node.ready):
                    launches[g] = launches.get(g, ()) + (i,)
                elif node.idle:
                    nodes[g] = nodes.get(g, ()) + (node.name,)
                    taken.add(node.name)
        if launches != rec.launches:
            step.put(rec, nodes=nodes, launches=launches)
    _hand_over(step)


def _hand_over(step: _Step) -> None:
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


def _still_its(rec: Record, group: str, node: NodeSeen | None) -> bool:
    """An attributed node stays the record's while it is registered in its group; a running gang's spare only
    while it runs no pod (one that a gang used is no longer spare, and never given back for it)."""
    return (
        node is not None and node.group == group and (rec.state != GangState.RUNNING or node.idle)
    )


def _owner(records: Iterable[Record], node: NodeSeen, skew: float) -> Record | None:
    """The oldest request still waiting for a node of `node`'s group that may have launched it; a running gang's
    spare launches (`_spare`) only after every gang that waits."""
    waiting = [
        r
        for r in records
        if r.state != GangState.CANCELLED
        and r.unnamed(node.group) > 0
        and node.created >= r.requested_at - skew
    ]
    return min(
        waiting, key=lambda r: (r.state == GangState.RUNNING, r.requested_at, r.gang), default=None
    )
