"""Fairness and safety limits the controller puts around the planner.

The planner answers "what is cheapest for everyone"; an operator also needs
"no single gang may buy the cluster" (maximum gang size), "no namespace may
trigger more than its share" (caps on nodes and dollars per hour) and "a big
gang is not starved by a stream of small ones" (ageing).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ..model import Gang, GangKey, NodeGroup
from ..plan import Plan
from ..resources import GPU
from ..rfc3339 import parse_time
from ..scheduling import SchedulerConfig, nodes_from_views, simulate_seeds
from ..scheduling.queue import QueueKey, first_entry
from ..snapshot import ClusterSnapshot, PreDecision, SnapshotPolicy
from .config import ClusterCeiling, ControllerConfig, NamespaceCap
from .lifecycle import GangState, Record, holds
from .shares import charged

ON_HAND = "gangscale.io/on-hand"  # model-only label of the nodes a snapshot lists (registered or on their way)


def held_on_hand(
    snap: ClusterSnapshot, config: SchedulerConfig | None = None, seeds: Sequence[int] = (0,)
) -> ClusterSnapshot:
    """`snap` with the held gangs' pods (`snap.queued`) kept to the nodes the cluster has or has on their way,
    when they start there.

    A held gang's pods are Pending in kube-scheduler's queue: the scheduler places them on free capacity the
    moment it has some (PrioritySort: priority, then age), before any node this plan buys registers, so the model
    queues them too (a younger gang is not promised a node they take). Nothing is bought for them: they are never
    promised. A held gang the model starts on the capacity at hand (every seed; the held gangs alone, on the
    nodes with their bound pods) is kept to it: it binds there before a planned node registers, so a planned node
    it took from a tie-break would only look idle. One that starts nowhere on hand stays in the queue for the
    nodes still to come, as it does in the cluster: when a node bought for a younger gang registers and the held
    gang fits it, the scheduler gives it to the held gang first, so the model does too and the younger gang is
    not promised that node (a node only held gangs use is bare: `realize` drops it, so nothing is bought for
    them). Approximation: an older unheld gang that takes the capacity at hand first is not in the check.
    `snap` itself when nothing held is queued."""
    queued = snap.queued
    if not queued:
        return snap
    sims = simulate_seeds(
        nodes_from_views(snap.nodes, snap.bound), queued, seeds, bound=snap.bound, config=config
    )
    held = {g.key for g in queued if all(s.outcomes[g.key].started for s in sims)}
    if not held:
        return snap
    pin = ((ON_HAND, "true"),)
    nodes = [replace(v, labels={**v.labels, ON_HAND: "true"}) for v in snap.nodes]
    gangs = [
        replace(
            g,
            pending=tuple(
                replace(
                    p, placement=replace(p.placement, node_selector=p.placement.node_selector + pin)
                )
                for p in g.pending
            ),
        )
        if g.key in held
        else g
        for g in snap.gangs
    ]
    return replace(snap, nodes=nodes, gangs=gangs)


def gang_age(g: Gang, now: float, first_seen: float | None = None) -> float:
    created = parse_time(g.created) or min(
        (parse_time(p.created) or now for p in g.pending), default=now
    )
    if first_seen:
        created = min(created, first_seen)
    return max(0.0, now - created)


def gang_limits(
    gangs: Iterable[Gang], cfg: ControllerConfig, now: float, first_seen: Mapping[GangKey, float]
) -> tuple[dict[GangKey, PreDecision], dict[GangKey, int]]:
    """Oversized gangs to refuse, and the priority long-waiting ones are lifted to (for `SnapshotPolicy`)."""
    refused: dict[GangKey, PreDecision] = {}
    lifted: dict[GangKey, int] = {}
    for g in gangs:
        pods = len(g.pending)
        gpus = sum(p.requests.get(GPU, 0) for p in g.pending)
        if pods > cfg.max_gang_pods:
            refused[g.key] = PreDecision(
                GangState.INFEASIBLE.value,
                f"{pods} pending pods exceed the controller's maxGangPods limit of {cfg.max_gang_pods}",
            )
        elif gpus > cfg.max_gang_gpus:
            refused[g.key] = PreDecision(
                GangState.INFEASIBLE.value,
                f"{gpus} GPUs requested exceed the controller's maxGangGPUs limit of {cfg.max_gang_gpus}",
            )
        elif gang_age(g, now, first_seen.get(g.key)) >= cfg.ageing_seconds:
            # one step above every gang of the same priority that has not waited as long
            lifted[g.key] = g.effective_priority + 1
    return refused, lifted


def inflight_by_namespace(
    records: Iterable[Record], prices: Mapping[str, float]
) -> tuple[dict[str, int], dict[str, float]]:
    """Nodes and dollars per hour each namespace's records hold (bought and not yet used or given back).

    Every state counts: a gang below quorum, infeasible or cancelled within its grace still holds
    what was bought for it until that is given back.
    """
    nodes: dict[str, int] = defaultdict(int)
    dollars: dict[str, float] = defaultdict(float)
    for r in records:
        if holds(r):
            for g, n in r.requested.items():
                nodes[r.namespace] += n
                dollars[r.namespace] += n * prices.get(g, 0.0)
    return nodes, dollars


def _cap_order(g: Gang) -> tuple[int, QueueKey, str]:
    """The documented order: highest priority first (ageing included), then the order kube-scheduler's queue
    reaches them (`scheduling.queue.first_entry`: a gang's first member's creation). It must agree with the
    scheduler model's queue: a gang the caps keep but the queue reaches after one they defer would be promised
    capacity the model gives to the deferred one, and neither would be bought for."""
    return (-g.effective_priority, first_entry(g), str(g.key))


def _cap_text(cap: NamespaceCap) -> str:
    return " ".join(
        x
        for x in (
            f"maxNodes {cap.max_nodes}" if cap.max_nodes is not None else "",
            f"maxDollarsPerHour {cap.max_dollars_per_hour:g}"
            if cap.max_dollars_per_hour is not None
            else "",
        )
        if x
    )


def _within(cap: NamespaceCap, nodes: int, dollars: float) -> bool:
    return (cap.max_nodes is None or nodes <= cap.max_nodes) and (
        cap.max_dollars_per_hour is None or dollars <= cap.max_dollars_per_hour + 1e-9
    )


def over_caps(
    plan: Plan,
    snap: ClusterSnapshot,
    cfg: ControllerConfig,
    inflight_nodes: Mapping[str, int],
    inflight_dollars: Mapping[str, float],
) -> dict[GangKey, PreDecision]:
    """Gangs to hold back so every namespace stays within its caps.

    In each capped namespace the gangs the plan buys for are kept in the documented order
    (highest priority, then the scheduler's queue order: `_cap_order`) while they fit; one that could never fit the
    cap alone is `infeasible` and blocks nobody; the rest are `deferred`. Once a namespace's node cap is full,
    every other gang of it that the plan could not serve is deferred too, so the next plan cannot
    hand the room freed by the deferred gangs to them.
    """
    # by share: a node two gangs share is charged once, split between them
    gang_nodes = charged(plan, snap)
    decision = {GangKey(r.namespace, r.name, r.api): r.decision for r in plan.gangs}
    held: dict[GangKey, PreDecision] = {}
    for ns in sorted({k.namespace for k in gang_nodes}):
        cap = cfg.cap_for(ns)
        if cap.max_nodes is None and cap.max_dollars_per_hour is None:
            continue
        buying = sorted(
            (g for g in snap.gangs if g.namespace == ns and g.key in gang_nodes), key=_cap_order
        )
        ahead = (inflight_nodes.get(ns, 0), inflight_dollars.get(ns, 0.0))
        used_n, refused = _admit_in_order(ns, cap, buying, gang_nodes, ahead)
        held.update(refused)
        if cap.max_nodes is not None and used_n >= cap.max_nodes and refused:
            held.update(_defer_unserved(ns, cap, used_n, snap, gang_nodes, decision))
    return held


def _admit_in_order(
    ns: str,
    cap: NamespaceCap,
    buying: list[Gang],
    gang_nodes: Mapping[GangKey, tuple[int, float]],
    ahead: tuple[int, float],
) -> tuple[int, dict[GangKey, PreDecision]]:
    """The nodes the namespace uses once its buying gangs are admitted in order while they fit (`ahead`: nodes
    and $/h already held or on their way), and the gangs refused: `infeasible` alone, else `deferred`."""
    limit = _cap_text(cap)
    used_n, used_d = ahead
    refused: dict[GangKey, PreDecision] = {}
    for g in buying:
        c, d = gang_nodes[g.key]
        if not _within(cap, c, d):
            refused[g.key] = PreDecision(
                GangState.INFEASIBLE.value,
                f"needs {c} new nodes (${d:.2f}/h), more than "
                f"namespace {ns}'s cap ({limit}) allows at all",
            )
        elif _within(cap, used_n + c, used_d + d):
            used_n, used_d = used_n + c, used_d + d
        else:
            refused[g.key] = PreDecision(
                GangState.DEFERRED.value,
                (
                    f"namespace {ns} is at its cap ({limit}): {used_n} nodes are held or planned for its "
                    f"older or higher-priority gangs, and {c} more nodes (${d:.2f}/h) for this gang would "
                    "exceed it; waiting for capacity to free up"
                ),
            )
    return used_n, refused


def _defer_unserved(
    ns: str,
    cap: NamespaceCap,
    used_n: int,
    snap: ClusterSnapshot,
    gang_nodes: Mapping[GangKey, tuple[int, float]],
    decision: Mapping[GangKey, str],
) -> dict[GangKey, PreDecision]:
    """The namespace's node cap is full: every gang of it the plan could not serve waits too, so the next plan
    cannot hand it the room the deferred gangs free."""
    return {
        g.key: PreDecision(
            GangState.DEFERRED.value,
            f"namespace {ns} is at its cap ({_cap_text(cap)}) with "
            f"{used_n} nodes; waiting for capacity to free up",
        )
        for g in snap.gangs
        if g.namespace == ns
        and g.key not in gang_nodes
        and g.key not in snap.decided
        and decision.get(g.key) in (GangState.INFEASIBLE, GangState.DEFERRED)
    }


@dataclass(frozen=True, slots=True)
class Usage:
    """What the owned node groups hold together (their desired sizes: running and on their way)."""

    nodes: int = 0
    gpus: int = 0
    dollars_per_hour: float = 0.0

    @classmethod
    def of_groups(cls, groups: Iterable[NodeGroup]) -> Usage:
        gs = list(groups)
        return cls(
            sum(g.current_size for g in gs),
            sum(g.current_size * g.allocatable.get(GPU, 0) for g in gs),
            sum(g.current_size * g.price_per_hour for g in gs),
        )

    def plus(self, nodes: int, gpus: int, dollars: float) -> Usage:
        return Usage(self.nodes + nodes, self.gpus + gpus, self.dollars_per_hour + dollars)

    def within(self, c: ClusterCeiling) -> bool:
        return (
            (c.max_nodes is None or self.nodes <= c.max_nodes)
            and (c.max_gpus is None or self.gpus <= c.max_gpus)
            and (
                c.max_dollars_per_hour is None
                or self.dollars_per_hour <= c.max_dollars_per_hour + 1e-9
            )
        )


def _new_node_indices(plan: Plan, snap: ClusterSnapshot) -> dict[GangKey, set[int]]:
    """The plan's new nodes (by index) each gang has pods on."""
    pod_gang = {p.key: g.key for g in snap.gangs for p in g.pending}
    out: dict[GangKey, set[int]] = defaultdict(set)
    for i, n in enumerate(plan.new_nodes):
        for p in n.pods:
            if p in pod_gang:
                out[pod_gang[p]].add(i)
    return out


def over_ceiling(
    plan: Plan, snap: ClusterSnapshot, ceiling: ClusterCeiling, in_use: Usage
) -> dict[GangKey, PreDecision]:
    """Gangs to hold back so the owned groups stay within the cluster-wide ceiling (`clusterCeiling`).

    Every gang the plan buys for, across namespaces, in the caps' order (`_cap_order`): kept
    while the groups' desired sizes plus the nodes kept so far (a shared node counted once) fit the ceiling; a gang
    that would not fit the ceiling even in an empty cluster is `infeasible`, the others `deferred`."""
    nodes_of = _new_node_indices(plan, snap)
    gpus = {g.name: g.allocatable.get(GPU, 0) for g in snap.groups}

    def cost(idx: set[int]) -> tuple[int, int, float]:
        ns = [plan.new_nodes[i] for i in idx]
        return (
            len(ns),
            sum(gpus.get(n.node_group, 0) for n in ns),
            sum(n.price_per_hour for n in ns),
        )

    held: dict[GangKey, PreDecision] = {}
    kept: set[int] = set()
    for g in sorted((g for g in snap.gangs if g.key in nodes_of), key=_cap_order):
        mine = nodes_of[g.key]
        if in_use.plus(*cost(kept | mine)).within(ceiling):
            kept |= mine
            continue
        n, gp, d = cost(mine)
        limit = f"the cluster ceiling (clusterCeiling: {ceiling.describe()})"
        if not Usage().plus(n, gp, d).within(ceiling):
            held[g.key] = PreDecision(
                GangState.INFEASIBLE.value,
                f"needs {n} new nodes ({gp} GPUs, ${d:.2f}/h), more than {limit} allows at all",
            )
            continue
        held[g.key] = PreDecision(
            GangState.DEFERRED.value,
            (
                f"{limit} is reached: the owned node groups hold {in_use.nodes} nodes, {in_use.gpus} GPUs, "
                f"${in_use.dollars_per_hour:.2f}/h, and {n} more nodes ({gp} GPUs, ${d:.2f}/h) for this gang would "
                "exceed it; waiting for capacity to free up"
            ),
        )
    return held


def plan_within_caps(
    build: Callable[[SnapshotPolicy], ClusterSnapshot],
    make: Callable[[ClusterSnapshot], Plan],
    policy: SnapshotPolicy,
    cfg: ControllerConfig,
    inflight: tuple[Mapping[str, int], Mapping[str, float]],
    in_use: Usage = Usage(),
) -> tuple[ClusterSnapshot, Plan]:
    """Plan; while a namespace would go over its cap, or the owned groups (`in_use`) over the cluster ceiling, hold
    gangs back and plan again.

    The plan returned is always within caps: it is checked after every round, and every round
    holds at least one more gang (a held gang is never promised, so no new node counts for it), so this ends within one
    round per gang — in practice two.
    """
    snap = build(policy)
    plan = make(snap)
    for _ in range(len(snap.gangs) + 1):
        held = {
            **over_ceiling(plan, snap, cfg.cluster_ceiling, in_use),
            **over_caps(plan, snap, cfg, *inflight),
        }
        if not held:
            return snap, plan
        policy = policy.holding(held)
        snap = build(policy)
        plan = make(snap)
    raise AssertionError(
        "holding gangs back for the caps did not settle"
    )  # pragma: no cover - see the docstring
