"""Fairness and safety limits the controller puts around the planner.

The planner answers "what is cheapest for everyone"; an operator also needs
"no single gang may buy the cluster" (maximum gang size), "no namespace may
trigger more than its share" (caps on nodes and dollars per hour) and "a big
gang is not starved by a stream of small ones" (ageing).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from ..model import Gang, GangKey
from ..plan import Plan
from ..resources import GPU
from ..snapshot import ClusterSnapshot, PreDecision, SnapshotPolicy
from .config import ControllerConfig
from .lifecycle import IN_FLIGHT, Record

CAP_ROUNDS = 4  # each round only removes gangs, so this settles quickly


def parse_time(stamp: str) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def gang_age(g: Gang, now: float, first_seen: float | None = None) -> float:
    created = parse_time(g.created) or min((parse_time(p.created) or now for p in g.pending), default=now)
    if first_seen:
        created = min(created, first_seen)
    return max(0.0, now - created)


def gang_limits(gangs: Iterable[Gang], cfg: ControllerConfig, now: float, first_seen: Mapping[GangKey, float]
                ) -> tuple[dict[GangKey, PreDecision], dict[GangKey, int]]:
    """Oversized gangs to refuse, and the priority long-waiting ones are lifted to (for `SnapshotPolicy`)."""
    refused: dict[GangKey, PreDecision] = {}
    lifted: dict[GangKey, int] = {}
    for g in gangs:
        pods = len(g.pending)
        gpus = sum(p.requests.get(GPU, 0) for p in g.pending)
        if pods > cfg.max_gang_pods:
            refused[g.gang_key] = PreDecision(
                "infeasible", f"{pods} pending pods exceed the controller's maxGangPods limit of {cfg.max_gang_pods}")
        elif gpus > cfg.max_gang_gpus:
            refused[g.gang_key] = PreDecision(
                "infeasible", f"{gpus} GPUs requested exceed the controller's maxGangGPUs limit of {cfg.max_gang_gpus}")
        elif gang_age(g, now, first_seen.get(g.gang_key)) >= cfg.ageing_seconds:
            # one step above every gang of the same priority that has not waited as long
            lifted[g.gang_key] = g.effective_priority + 1
    return refused, lifted


def inflight_by_namespace(records: Iterable[Record], prices: Mapping[str, float]
                          ) -> tuple[dict[str, int], dict[str, float]]:
    """Nodes and dollars per hour bought for each namespace's gangs and still on their way."""
    nodes: dict[str, int] = defaultdict(int)
    dollars: dict[str, float] = defaultdict(float)
    for r in records:
        if r.state in IN_FLIGHT:
            for g, n in r.requested.items():
                nodes[r.namespace] += n
                dollars[r.namespace] += n * prices.get(g, 0.0)
    return nodes, dollars


def namespace_usage(plan: Plan) -> tuple[dict[str, int], dict[str, float]]:
    """New nodes and dollars per hour per namespace; a shared node counts for each namespace on it."""
    nodes: dict[str, int] = defaultdict(int)
    dollars: dict[str, float] = defaultdict(float)
    for n in plan.new_nodes:
        for ns in {p.split("/", 1)[0] for p in n.pods}:  # pods are "namespace/name"
            nodes[ns] += 1
            dollars[ns] += n.price_per_hour
    return nodes, dollars


def _new_nodes_per_gang(plan: Plan, snap: ClusterSnapshot) -> dict[GangKey, tuple[int, float]]:
    """Nodes (and their dollars per hour) each gang rides in the plan; a shared node counts for each."""
    pod_gang: dict[str, Gang] = {p.key: g for g in snap.gangs for p in g.pending}
    gang_nodes: dict[GangKey, tuple[int, float]] = defaultdict(lambda: (0, 0.0))
    for n in plan.new_nodes:
        for key in {pod_gang[p].gang_key for p in n.pods if p in pod_gang}:
            c, d = gang_nodes[key]
            gang_nodes[key] = (c + 1, d + n.price_per_hour)
    return gang_nodes


def over_caps(plan: Plan, snap: ClusterSnapshot, cfg: ControllerConfig,
              inflight_nodes: Mapping[str, int], inflight_dollars: Mapping[str, float]) -> dict[GangKey, str]:
    """Gangs to hold back so every namespace stays within its caps, lowest priority and youngest first."""
    nodes, dollars = namespace_usage(plan)
    gang_nodes = _new_nodes_per_gang(plan, snap)
    held: dict[GangKey, str] = {}
    for ns in sorted(set(nodes) | set(inflight_nodes)):
        cap = cfg.cap_for(ns)
        used_n = nodes.get(ns, 0) + inflight_nodes.get(ns, 0)
        used_d = dollars.get(ns, 0.0) + inflight_dollars.get(ns, 0.0)
        candidates = sorted((g for g in snap.gangs if g.namespace == ns and g.gang_key in gang_nodes),
                            key=lambda g: (g.effective_priority, g.created), reverse=True)
        while candidates and ((cap.max_nodes is not None and used_n > cap.max_nodes)
                              or (cap.max_dollars_per_hour is not None and used_d > cap.max_dollars_per_hour + 1e-9)):
            g = candidates.pop()  # lowest priority, youngest
            c, d = gang_nodes[g.gang_key]
            used_n -= c
            used_d -= d
            limit = (f"maxNodes {cap.max_nodes}" if cap.max_nodes is not None else "") + (
                f" maxDollarsPerHour {cap.max_dollars_per_hour:g}" if cap.max_dollars_per_hour is not None else "")
            held[g.gang_key] = (f"namespace {ns} is at its cap ({limit.strip()}): {c} more nodes "
                                f"(${d:.2f}/h) for this gang would exceed it; waiting for capacity to free up")
    return held


def plan_within_caps(build: Callable[[SnapshotPolicy], ClusterSnapshot], make: Callable[[ClusterSnapshot], Plan],
                     policy: SnapshotPolicy, cfg: ControllerConfig, inflight: tuple[Mapping[str, int],
                     Mapping[str, float]]) -> tuple[ClusterSnapshot, Plan]:
    """Plan; while a namespace would go over its cap, hold its lowest gangs back (deferred) and plan again."""
    snap = build(policy)
    plan = make(snap)
    for _ in range(CAP_ROUNDS):
        held = over_caps(plan, snap, cfg, *inflight)
        if not held:
            break
        policy = policy.holding({key: PreDecision("deferred", reason) for key, reason in held.items()})
        snap = build(policy)
        plan = make(snap)
    return snap, plan
