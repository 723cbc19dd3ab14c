"""The lifecycle's inputs and outputs as frozen values: the facts of a listed gang, the reports (what was
observed or what an action did), the actions it asks for and the events it emits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cloud_adapters.errors import ErrorKind

from ...model import API_NONE, Gang, GangKey
from .record import Record
from .states import GangState, ReleaseWhy


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
    # a launch still on its way this long after its booking is covered (0: never)
    late_launch_seconds: float = 0.0


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
    # each group's desired capacity before the call
    desired: Mapping[str, int] = field(default_factory=dict)
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
    # group -> why its share was not applied
    failed: Mapping[str, str] = field(default_factory=dict)
    upcoming_pods: frozenset[str] = frozenset()  # pods the plan puts on nodes on their way
    # (namespace, group name) with a bound member
    bound_groups: frozenset[tuple[str, str]] = frozenset()
    # registered nodes running a pod (not a DaemonSet's): used, never spare
    busy: frozenset[str] = frozenset()
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
    # the instance ids of `on_way`, per group
    on_way_ids: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeSeen:
    """A registered Node of a discovered group, as attribution needs it."""

    name: str
    group: str
    created: float  # creationTimestamp, epoch seconds (0: unknown, never attributed as an arrival)
    idle: bool  # no pod but DaemonSets' bound to it
    # only a Ready node is an arrival; a NotReady one that was attributed stays so
    ready: bool = True
    instance: str = ""  # its instance id (from spec.providerID): a record's named launch arrives as exactly this node


@dataclass(frozen=True, slots=True)
class Registered:
    """The registered nodes of the discovered `groups` this pass (the whole list: a node of one of them that
    is missing is gone; nodes of a group not discovered this pass are left as they were)."""

    nodes: tuple[NodeSeen, ...]
    groups: frozenset[str]
    skew: float = 0.0  # a node created this much before a request may still be its


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
    # only slots the cloud has not launched (a failed launch's): never an instance
    unlaunched_only: bool = False
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
