"""ClusterSnapshot: what the solver needs and nothing else.

Free capacity of Ready, schedulable nodes; capacity already on its way (a
group's current size minus its registered nodes, as Cluster Autoscaler's
"upcoming nodes"); the groups that can still grow; and the gangs, each either
ready for the solver or already decided (invalid, waiting, below quorum).

What a caller decides around the planner (the controller's reservations,
ageing boosts and held gangs) comes in as a `SnapshotPolicy` value, so a
snapshot is complete when built and never patched afterwards; the cluster's
pods and gangs are copied where the policy changes them, never changed.

Its size follows what is pending, not the limits: a group's upcoming nodes
beyond the number of pods the solver could place are left out (each pod goes
on one node), so `currentSize: 1000000` builds at most one view per pending pod
beyond the nodes the policy reserves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .daemonsets import GroupDaemons, group_daemons, net_of_daemons, unfit_warnings
from .ingest import Cluster
from .model import Gang, GangKey, Node, NodeGroup, Pod, Taint, Toleration
from .resources import sub
from .rfc3339 import parse_time
from .warnlog import summarise

_NOTHING: dict[str, int] = {}  # a node's usage with no pod bound (never written to)
# planner-only taint on a node reserved for one gang (on its way or arrived)
RESERVED_TAINT = "gangscale.io/reserved-for"


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node that can take pods now (or soon, when `upcoming`)."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    free: dict[str, int]
    node_group: str | None = None
    upcoming: bool = False
    # a node bought for this gang (upcoming or arrived): only its pods may use it
    reserved_for: GangKey | None = None
    daemon_pods: tuple[
        Pod, ...
    ] = ()  # an upcoming node's DaemonSet pods, already taken off `free` (daemonsets.py)


@dataclass(frozen=True, slots=True)
class PreDecision:
    decision: str  # invalid | waiting-for-admission | waiting-for-podgroup | below-quorum
    reason: str
    # a caller's hold (`SnapshotPolicy.held`) of a gang whose pods still wait in kube-scheduler's queue (none gated):
    # nothing is planned or bought for it, but the scheduler model queues it (it may take free capacity)
    queued: bool = False


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """Decisions made around the planner, given to `build_snapshot` as a value.

    `reserved`: per node group, the gangs its upcoming nodes were bought for, one entry per node in
    the order they were bought; the first upcoming nodes of the group are reserved for them in turn.
    `reserved_nodes`: registered node name -> the gang it arrived for and that still waits for it; the
    node is reserved for that gang as an upcoming one would be.
    `priority`: the priority to plan a gang at (ageing lifts a long-waiting gang).
    `held`: gangs not to plan this time, with the decision and why (applies to gangs the snapshot
    would otherwise plan).
    `shared`: gang -> the reservation of the nodes it shares with other gangs (bought for them as one
    unit): its pods may use those nodes as well as its own.
    """

    reserved: Mapping[str, tuple[GangKey, ...]] = field(default_factory=dict)
    priority: Mapping[GangKey, int] = field(default_factory=dict)
    held: Mapping[GangKey, PreDecision] = field(default_factory=dict)
    reserved_nodes: Mapping[str, GangKey] = field(default_factory=dict)
    shared: Mapping[GangKey, GangKey] = field(default_factory=dict)

    def holding(self, more: Mapping[GangKey, PreDecision]) -> SnapshotPolicy:
        """The same policy, holding `more` gangs back as well."""
        return replace(self, held={**self.held, **more})


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    nodes: list[NodeView]
    groups: list[NodeGroup]
    gangs: list[Gang]  # every gang to report on
    decided: dict[GangKey, PreDecision] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    bound: list[Pod] = field(default_factory=list)  # pods on nodes: per-node pod rules count them
    # per node group, the DaemonSet pods each new node runs first; `groups` carry allocatable less their requests
    daemons: dict[str, GroupDaemons] = field(default_factory=dict)
    # every node, cordoned and NotReady ones too: topology spread counts their domains (spread.py)
    all_nodes: list[Node] = field(default_factory=list)

    @property
    def solvable(self) -> list[Gang]:
        return [g for g in self.gangs if g.key not in self.decided]

    @property
    def queued(self) -> list[Gang]:
        """Gangs held back (nothing is bought for them) whose pods kube-scheduler still queues and may place."""
        return [g for g in self.gangs if (d := self.decided.get(g.key)) is not None and d.queued]


def pre_decide(g: Gang) -> PreDecision | None:
    """Decisions that need no solver: the gang cannot be planned as it stands."""
    if g.invalid:
        return PreDecision("invalid", g.invalid)
    if (
        g.admission
    ):  # Kueue decides admission; capacity is bought after it (ingest's plan_unadmitted)
        return PreDecision("waiting-for-admission", g.admission)
    if not g.exists:
        return PreDecision(
            "waiting-for-podgroup",
            f"pods point at {g.api} {g.namespace}/{g.name}, which does not exist; "
            "they stay Pending until it is created",
        )
    present = len(g.pending) + g.bound
    if g.policy == "gang" and present < g.min_count:
        gated = f", {g.gated} more gated or terminating" if g.gated else ""
        return PreDecision(
            "below-quorum",
            f"{present} of minCount {g.min_count} pods exist ({g.bound} bound{gated}); "
            "the scheduler holds the gang until all have been created",
        )
    if not g.pending:
        return PreDecision(
            "below-quorum", "no pending pods"
        )  # pragma: no cover - filtered by ingest
    return None


def _reserved_for(owner: GangKey | None) -> tuple[Taint, ...]:
    return (Taint(RESERVED_TAINT, str(owner), "NoSchedule"),) if owner else ()


def _upcoming(
    g: NodeGroup, count: int, policy: SnapshotPolicy, daemon_pods: tuple[Pod, ...]
) -> list[NodeView]:
    """A group's nodes on their way (`g` net of its daemon pods); the first ones carry the reservations the policy
    names."""
    owners = policy.reserved.get(g.name, ())
    views = []
    for i in range(count):
        owner = owners[i] if i < len(owners) else None
        taints = g.taints + _reserved_for(owner)
        views.append(
            NodeView(
                f"{g.name}/upcoming-{i + 1}",
                dict(g.labels),
                taints,
                dict(g.allocatable),
                g.name,
                True,
                owner,
                daemon_pods,
            )
        )
    return views


def _as_planned(g: Gang, policy: SnapshotPolicy, reserved: set[GangKey]) -> Gang:
    """The gang as the policy plans it: a copy when a reservation or a priority changes it."""
    key = g.key
    mine = tuple(k for k in (key, policy.shared.get(key)) if k is not None and k in reserved)
    if mine:
        tols = tuple(Toleration(RESERVED_TAINT, "Equal", str(k), "NoSchedule") for k in mine)
        g = replace(
            g,
            pending=tuple(
                replace(
                    p, placement=replace(p.placement, tolerations=p.placement.tolerations + tols)
                )
                for p in g.pending
            ),
        )
    if key in policy.priority:
        g = replace(g, priority=policy.priority[key], queue_priority=g.scheduler_priority)
    return g


class NodeViews:
    """The views of Ready nodes made by a caller's last snapshot, kept for its next one (a controller's passes).

    A view is a function of its Node, the Node's usage by bound pods, the gang it is reserved for and whether its
    group is known; a node whose four are the same as last time gets the same view (nothing writes to a view),
    so a pass makes views only for the nodes that changed, and equal snapshots share their views."""

    def __init__(self) -> None:
        self.kept: dict[str, tuple[Node, dict[str, int], GangKey | None, str | None, NodeView]] = {}


def _held(g: Gang, policy: SnapshotPolicy) -> PreDecision | None:
    """The policy's hold of `g`, `queued` when no pending pod carries a scheduling gate (a gated pod is not in the
    scheduler's queue: KEP-3521, the SchedulingGates PreEnqueue plugin)."""
    d = policy.held.get(g.key)
    if d is None:
        return None
    return replace(d, queued=not any(p.scheduling_gates for p in g.pending))


# cluster-autoscaler clusterstate/clusterstate.go MaxNodeStartupTime
MAX_NODE_STARTUP_SECONDS = 15 * 60


def still_starting(n: Node) -> bool:
    """A NotReady node still on its way, as CA's NotStarted (clusterstate.go `updateReadinessStats`): the model
    counts it as an upcoming node of its group, Ready once it arrives. A node whose Ready condition last changed
    MaxNodeStartupTime or more after it registered had started and went NotReady since (CA's Unready): it is no
    capacity, arriving or not, since kube-scheduler's TaintToleration filter rejects it while the node lifecycle
    controller keeps its `node.kubernetes.io/not-ready` NoSchedule taint on (TaintNodesByCondition:
    pkg/controller/nodelifecycle/node_lifecycle_controller.go), and it is not bought again. Without both
    timestamps a NotReady node is taken as starting (CA also bounds that by the node's age, which needs a clock
    the snapshot does not have)."""
    if n.ready:
        return False
    created, changed = parse_time(n.created), parse_time(n.ready_changed)
    return created is None or changed is None or changed - created < MAX_NODE_STARTUP_SECONDS


def _usage(bound: list[Pod]) -> dict[str, dict[str, int]]:
    """Per node, what its bound pods request."""
    usage: dict[str, dict[str, int]] = {}
    for pod in bound:  # (a busy cluster has thousands of bound pods per pass: no dict made per pod)
        u = usage.get(pod.node_name or "")
        if u is None:
            u = usage[pod.node_name or ""] = {}
        for k, v in pod.requests.items():
            u[k] = u.get(k, 0) + v
    return usage


def _existing_views(
    cluster: Cluster, known: set[str], policy: SnapshotPolicy, views: NodeViews | None
) -> tuple[list[NodeView], dict[str, int]]:
    """A view of each schedulable node (the caller's previous one where nothing it derives from changed;
    `views` updated), and per node group the nodes registered and past starting."""
    usage = _usage(cluster.bound)
    registered: dict[str, int] = {}
    nodes: list[NodeView] = []
    kept = views.kept if views is not None else {}
    made: dict[str, tuple[Node, dict[str, int], GangKey | None, str | None, NodeView]] = {}
    for n in cluster.nodes:
        # a starting node is on its way: an upcoming view stands for it
        if n.node_group and not still_starting(n):
            registered[n.node_group] = registered.get(n.node_group, 0) + 1
        if not n.ready or n.unschedulable:
            continue
        used = usage.get(n.name, _NOTHING)
        owner = policy.reserved_nodes.get(n.name)
        group = n.node_group if n.node_group in known else None
        last = kept.get(n.name)
        if (
            last is not None
            and last[0] is n
            and last[2] == owner
            and last[3] == group
            and last[1] == used
        ):
            view = last[4]
        else:
            view = _node_view(n, used, owner, group)
        made[n.name] = (n, used, owner, group, view)
        nodes.append(view)
    if views is not None:
        views.kept = made
    return nodes, registered


def _node_view(n: Node, used: dict[str, int], owner: GangKey | None, group: str | None) -> NodeView:
    """An existing node as the planner sees it: hostname and name labels, the reservation taint, free capacity."""
    labels = dict(n.labels)
    labels.setdefault("kubernetes.io/hostname", n.name)
    labels["metadata.name"] = n.name  # for matchFields
    return NodeView(
        n.name,
        labels,
        n.taints + _reserved_for(owner),
        sub(n.allocatable, used),
        group,
        reserved_for=owner,
    )


def build_snapshot(
    cluster: Cluster,
    groups: list[NodeGroup],
    warnings: list[str] | None = None,
    policy: SnapshotPolicy | None = None,
    *,
    views: NodeViews | None = None,
) -> ClusterSnapshot:
    """`views`: the node views of the caller's previous snapshot, to reuse where nothing they derive from changed
    (and updated to this snapshot's); None: every view made afresh."""
    policy = policy or SnapshotPolicy()
    nodes, registered = _existing_views(cluster, {g.name for g in groups}, policy, views)
    decided = {
        g.key: d for g in cluster.gangs if (d := pre_decide(g) or _held(g, policy)) is not None
    }
    pending = sum(len(g.pending) for g in cluster.gangs if g.key not in decided)
    daemons = group_daemons(groups, cluster.daemonsets)
    extra = [*(warnings or []), *unfit_warnings(daemons, groups)]
    groups = net_of_daemons(groups, daemons)
    for g in groups:
        on_the_way = max(0, g.current_size - registered.get(g.name, 0))
        # the reserved ones, then one per pending pod
        wanted = len(policy.reserved.get(g.name, ())) + pending
        pods = daemons[g.name].pods if g.name in daemons else ()
        nodes.extend(_upcoming(g, min(wanted, on_the_way), policy, pods))

    reserved = {v.reserved_for for v in nodes if v.reserved_for is not None}
    gangs = [_as_planned(g, policy, reserved) for g in cluster.gangs]
    snap = ClusterSnapshot(
        nodes,
        list(groups),
        gangs,
        warnings=summarise([*cluster.warnings, *extra]),  # capped per kind
        bound=cluster.bound,
        decided=decided,
        daemons=daemons,
        all_nodes=list(cluster.nodes),
    )
    return snap
