"""The planner's own view of a cluster: pods, nodes, gangs and node groups.

Frozen slotted dataclasses: `ingest`/`catalog` build each one with its final
values from whatever the edges read (files, the API server, a cloud); a later
stage that needs another value makes a copy (`dataclasses.replace`).
`Node`, `NodeGroup` and `Taint` are shared with the cloud adapters and defined
in `cloud_adapters.types` (dependencies point one way: gangscale → cloud_adapters).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar

from cloud_adapters.types import Node, NodeGroup, Taint  # noqa: F401  (re-exported: shared with the cloud adapters)

Policy = Literal["gang", "basic"]

# API flavours a gang can come from (`Gang.api`).
API_WORKLOAD = "scheduling.k8s.io/v1alpha1"  # 1.35 Workload + spec.workloadRef
API_PODGROUP_V1ALPHA2 = "scheduling.k8s.io/v1alpha2"  # 1.36
API_PODGROUP_V1BETA1 = "scheduling.k8s.io/v1beta1"  # 1.37
API_COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"  # scheduler-plugins
API_VOLCANO = "scheduling.volcano.sh/v1beta1"
API_NONE = "none"  # a pending pod with no group: its own basic group


@dataclass(frozen=True, slots=True, order=True)
class GangKey:
    """A gang's identity: one shape everywhere, printed as "namespace/name/api" (records, logs, metrics)."""

    namespace: str
    name: str
    api: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}/{self.api}"

    @property
    def group(self) -> tuple[str, str]:
        """(namespace, name): what a pod's `group_key` points at."""
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str | None  # None/"" with operator Exists tolerates everything
    operator: str  # Equal | Exists
    value: str
    effect: str | None  # None tolerates every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node-selector requirement (required node affinity)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """Everything that decides *where* a pod may go, hashable for aggregation."""

    node_selector: tuple[tuple[str, str], ...] = ()
    # Required node affinity: OR over terms, AND inside a term. Empty: no rule.
    affinity: tuple[tuple[Requirement, ...], ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A pod label selector: every matchLabels pair and every expression must hold."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()  # In | NotIn | Exists | DoesNotExist only


@dataclass(frozen=True, slots=True)
class PodTerm:
    """Which pods a per-node rule counts: a selector within namespaces (None: every namespace)."""

    selector: LabelSelector
    namespaces: frozenset[str] | None


@dataclass(frozen=True, slots=True)
class DomainSpread:
    """One DoNotSchedule topologySpreadConstraint on a key other than `kubernetes.io/hostname` (a zone, any label).

    As kube-scheduler's PodTopologySpread filter reads it (pkg/scheduler/framework/plugins/podtopologyspread/
    {common.go,filtering.go}): a node counts as a domain of `key` when it has every spread key of the pod, its labels
    match the pod's required node affinity (`honor_affinity`, nodeAffinityPolicy Honor, the default) and, with
    `honor_taints` (nodeTaintsPolicy Honor; Ignore is the default), the pod tolerates its taints. A pod may go to a
    domain when matching pods there + itself - the global minimum <= `max_skew`; with fewer domains than
    `min_domains` (KEP-3022) the global minimum is 0. `term`'s selector has matchLabelKeys merged in (KEP-3243).
    """

    term: PodTerm
    key: str
    max_skew: int
    min_domains: int = 1
    honor_affinity: bool = True
    honor_taints: bool = False

    @property
    def what(self) -> str:
        """For people: the constraint, as a reason names it."""
        return f"topologySpreadConstraints maxSkew {self.max_skew} on {self.key}"


@dataclass(frozen=True, slots=True)
class PodRules:
    """The pod-to-pod placement rules gangscale models.

    `anti_affinity`: required podAntiAffinity terms on the hostname key (no pod matching the term may
    share the node). `spread`: (term, maxSkew) of DoNotSchedule topologySpreadConstraints on the
    hostname key. `host_ports`: (protocol, port) pairs the pod binds on its node. `domain_spread`:
    DoNotSchedule topologySpreadConstraints on any other key (zones; `spread.py` plans them). Anything
    else of this family is refused at ingest (the gang becomes `invalid`).
    """

    anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[tuple[PodTerm, int], ...] = ()
    host_ports: tuple[tuple[str, int], ...] = ()
    domain_spread: tuple[DomainSpread, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.anti_affinity or self.spread or self.host_ports or self.domain_spread)


NO_RULES = PodRules()


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    requests: dict[str, int]  # as the scheduler computes them, incl. one "pods"
    placement: Placement
    priority: int = 0
    node_name: str | None = None  # bound when set
    phase: str = "Pending"
    group_key: tuple[str, str] | None = None  # (namespace, gang name) it points at
    group_api: str = API_NONE
    created: str = ""
    scheduling_gates: tuple[str, ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    owner_kinds: tuple[
        str, ...
    ] = ()  # e.g. ("DaemonSet",): such pods never keep a node from scale-down
    labels: dict[str, str] = field(default_factory=dict)  # what other pods' selectors match
    rules: PodRules = NO_RULES  # pod anti-affinity, spread and hostPorts (per node)
    scheduler_name: str = "default-scheduler"  # spec.schedulerName: picks the scheduler profile

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


_D = TypeVar("_D")


def slot_builder(cls: type[_D]) -> Callable[..., _D]:
    """A positional constructor for a frozen slotted dataclass that puts each value straight into its slot: the
    object `cls(*values)` makes, without the generated `__init__`'s per-field `object.__setattr__` (2x faster).
    For the one object built per input item at scale (`new_pod`, `new_gang`). Every field must be given, in
    declaration order (a missing one is a TypeError, never an unset slot). Written out as code, as `dataclass`
    writes `__init__`: a loop over the slots costs half of what it saves."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls}
    scope.update({f"put_{n}": getattr(cls, n).__set__ for n in names})
    lines = [
        f"def build({', '.join(names)}):",
        "    obj = new(cls)",
        *(f"    put_{n}(obj, {n})" for n in names),
        "    return obj",
    ]
    exec("\n".join(lines), scope)  # noqa: S102 - our own field names, as dataclasses does
    build = scope["build"]
    build.__qualname__ = build.__name__ = f"new_{cls.__name__.lower()}"
    return build


new_pod = slot_builder(Pod)


@dataclass(frozen=True, slots=True)
class Gang:
    """A scheduling group: the unit that is placed whole or not at all."""

    namespace: str
    name: str
    api: str
    policy: Policy = "basic"
    min_count: int = 1
    priority: int | None = None  # group priority; None: take the pods'
    topology_keys: tuple[str, ...] = ()
    pending: tuple[Pod, ...] = ()  # in the order ingest read them
    bound: int = 0  # members already bound to a node (count toward minCount)
    gated: int = 0  # members held by schedulingGates or terminating: not schedulable yet
    exists: bool = True  # False: pods point at a group object that is missing
    invalid: str | None = None  # reason naming the bad field
    created: str = ""
    uid: str = ""  # the group object's uid (a lone pod's uid): a new uid is a new generation
    # of the group object (or the lone pod)
    annotations: dict[str, str] = field(default_factory=dict)
    # why Kueue has not admitted it yet (decision waiting-for-admission)
    admission: str | None = None
    # what kube-scheduler queues by, when planning lifts `priority` (ageing)
    queue_priority: int | None = None

    @property
    def key(self) -> GangKey:
        """The gang's one identity (the planner's decisions, the controller's records, logs)."""
        return GangKey(self.namespace, self.name, self.api)

    @property
    def effective_priority(self) -> int:
        if self.priority is not None:
            return self.priority
        return max((p.priority for p in self.pending), default=0)

    @property
    def scheduler_priority(self) -> int:
        """The priority kube-scheduler's PrioritySort sees: ageing is gangscale's, the scheduler knows nothing of it."""
        return self.queue_priority if self.queue_priority is not None else self.effective_priority


new_gang = slot_builder(
    Gang
)  # ingest: each gang with its members, from its head (a Gang per gang, 3x `replace`)
