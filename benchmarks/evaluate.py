"""One independent evaluator for every policy's output.

It trusts no policy: every placement is re-checked against the snapshot
(resources on the node's free capacity or the group's allocatable, selectors,
affinity and taints through gangscale.fit's table, node-group max size, each
pod placed at most once). Then it counts, with the gang semantics of the
Kubernetes gang APIs:

- a gang (policy ``gang``) is *satisfied* when its placed pods plus members
  already bound reach minCount, all in one domain of its topology key when it
  has one;
- *useful* pods are the placed pods of satisfied gangs and of basic groups
  (ungrouped pods are basic groups of one);
- a *stranded* node is a bought node none of whose pods is useful (all its pods
  belong to gangs that cannot reach minCount, or it holds none): it bills and
  runs nothing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from gangscale.resources import CPU, MEMORY

from .world import Placed, World


@dataclass(slots=True)
class Metrics:
    policy: str
    gangs: int  # gang-policy groups the scheduler is trying to place
    gangs_satisfied: int
    groups: int  # every solvable group (gang, basic, ungrouped pods)
    groups_placed: int  # groups with something useful placed
    pods_pending: int
    pods_placed: int
    useful_pods: int
    new_nodes: int
    cost: float  # dollars per hour of the nodes bought
    stranded_nodes: int
    stranded_cost: float
    pods_on_existing: int
    violations: list[str] = field(default_factory=list)
    satisfied: list[int] = field(default_factory=list)  # gang indices (World.gangs) satisfied
    placed_per_pod: list[int] = field(default_factory=list, repr=False)  # pod indices placed
    lower_bound: float | None = None  # proven $/h bound for placing this policy's placed pods
    cost_ratio: float | None = None
    seconds: float | None = None
    peak_mb: float | None = None
    notes: dict = field(default_factory=dict)
    # what kube-scheduler (gangscale.scheduling) does with these nodes, per scoring strategy: see `model_run`
    model: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("placed_per_pod")
        d["violations"] = self.violations[:20]
        d["violation_count"] = len(self.violations)
        return d


def evaluate(world: World, placed: Placed, policy: str) -> Metrics:
    w = world
    violations: list[str] = []
    R = len(w.resources)
    where: dict[int, tuple[str, int]] = {}  # pod -> ("node", index) | ("new", new node index)

    def take(keys: list[str], dest: tuple[str, int]) -> list[int]:
        out = []
        for k in keys:
            p = w.pod_index.get(k)
            if p is None:
                violations.append(f"{k}: not a pending pod of a schedulable group")
                continue
            if p in where:
                violations.append(f"{k}: placed twice")
                continue
            where[p] = dest
            out.append(p)
        return out

    def check(label: str, pods: list[int], free: np.ndarray, sig: int) -> None:
        if not pods:
            return
        shapes = w.pod_shape[pods]
        load = w.shape_req[shapes].sum(axis=0)
        if not (load <= free).all():
            over = [w.resources[r] for r in range(R) if load[r] > free[r]]
            violations.append(f"{label}: over capacity in {', '.join(over)}")
        bad = [w.pods[p].key for p, s in zip(pods, shapes, strict=True) if not w.compat[s, sig]]
        if bad:
            violations.append(
                f"{label}: {len(bad)} pods not allowed by selectors/taints (e.g. {bad[0]})"
            )

    for name, keys in placed.existing.items():
        j = w.node_index.get(name)
        if j is None:
            violations.append(f"{name}: not a schedulable node")
            continue
        pods = take(keys, ("node", j))
        check(name, pods, w.node_free[j], int(w.node_sig[j]))

    per_group: Counter[int] = Counter()
    new_pods: list[list[int]] = []
    new_group: list[int] = []
    for i, (gname, keys) in enumerate(placed.new_nodes):
        g = w.group_index.get(gname)
        pods = take(keys, ("new", i))
        new_pods.append(pods)
        new_group.append(-1 if g is None else g)
        if g is None:
            violations.append(f"new node {i}: unknown node group {gname}")
            continue
        per_group[g] += 1
        check(f"new {gname} #{i}", pods, w.group_alloc[g], int(w.group_sig[g]))
    for g, n in per_group.items():
        if n > w.group_headroom[g]:
            violations.append(
                f"{w.group_names[g]}: {n} new nodes but only {w.group_headroom[g]} below maxSize"
            )

    def domain(p: int, keys: tuple[str, ...]) -> tuple:
        kind, i = where[p]
        labels = (
            w.node_labels[i]
            if kind == "node"
            else (w.group_labels[new_group[i]] if new_group[i] >= 0 else {})
        )
        return tuple(labels.get(k) for k in keys)

    placed_by_gang: dict[int, list[int]] = {}
    for p in where:
        placed_by_gang.setdefault(int(w.pod_gang[p]), []).append(p)
    useful_gang = [False] * len(w.gangs)
    satisfied = []
    n_gangs = 0
    for gi, ref in enumerate(w.gangs):
        mine = placed_by_gang.get(gi, [])
        if ref.policy != "gang":
            useful_gang[gi] = bool(mine)
            continue
        n_gangs += 1
        if ref.topology_keys and mine:
            best = max(Counter(domain(p, ref.topology_keys) for p in mine).values())
        else:
            best = len(mine)
        if mine and best + ref.gang.bound >= ref.gang.min_count and best >= ref.need:
            useful_gang[gi] = True
            satisfied.append(gi)
    useful_pods = sum(len(placed_by_gang.get(gi, [])) for gi, u in enumerate(useful_gang) if u)
    cost = stranded_cost = 0.0
    stranded = 0
    for pods, g in zip(new_pods, new_group, strict=True):
        price = float(w.group_price[g]) if g >= 0 else 0.0
        cost += price
        if not any(useful_gang[int(w.pod_gang[p])] for p in pods):
            stranded += 1
            stranded_cost += price
    return Metrics(
        policy=policy,
        gangs=n_gangs,
        gangs_satisfied=len(satisfied),
        groups=len(w.gangs),
        groups_placed=sum(useful_gang),
        pods_pending=len(w.pods),
        pods_placed=len(where),
        useful_pods=useful_pods,
        new_nodes=len(placed.new_nodes),
        cost=round(cost, 6),
        stranded_nodes=stranded,
        stranded_cost=round(stranded_cost, 6),
        pods_on_existing=sum(1 for kind, _ in where.values() if kind == "node"),
        violations=violations,
        satisfied=satisfied,
        placed_per_pod=sorted(where),
        notes={
            **placed.notes,
            "daemonset_cost": daemonset_cost(w, [g for g, _ in placed.new_nodes]),
        },
    )


def daemonset_cost(world: World, groups: list[str]) -> float:
    """$/h of the bought nodes' room their DaemonSet pods take: per new node, its price times the larger of the cpu
    and memory shares of the node's allocatable that its daemon pods request (`ClusterSnapshot.daemons`)."""
    snap = world.snap
    price = {g.name: g.price_per_hour for g in snap.groups}
    share: dict[str, float] = {}
    for g in snap.groups:
        d = snap.daemons.get(g.name)
        if d is None:
            continue
        load = d.load
        share[g.name] = max(
            (
                load.get(r, 0) / (g.allocatable.get(r, 0) + load.get(r, 0))
                for r in (CPU, MEMORY)
                if g.allocatable.get(r, 0) + load.get(r, 0) > 0
            ),
            default=0.0,
        )
    return round(sum(price.get(g, 0.0) * share.get(g, 0.0) for g in groups), 6)


def placed_from_plan(plan: dict) -> Placed:
    """gangscale's plan JSON (the public contract) as a `Placed`."""
    out = Placed(
        existing={k: list(v) for k, v in plan.get("existingNodes", {}).items()},
        new_nodes=[(n["nodeGroup"], list(n["pods"])) for n in plan.get("newNodes", [])],
    )
    solver = plan.get("solver", {})
    out.notes = {
        "scheduler": (plan.get("scheduler") or {}).get("mode"),
        "status": solver.get("status"),
        "greedyOnly": solver.get("greedyOnly"),
        "solverSeconds": solver.get("seconds"),
        "gap": solver.get("gap"),
        "planLowerBound": plan.get("lowerBoundPerHour"),
        "planCost": plan.get("costPerHour"),
    }
    return out


# The scheduler profiles every policy's nodes are run through: upstream's default (LeastAllocated on
# cpu and memory) and MostAllocated on cpu and memory (what EKS's scoringStrategy setting offers).
MODEL_PROFILES = ("LeastAllocated", "MostAllocated")


def model_run(
    world: World, placed: Placed, strategy: str, seed: int = 0, promised: set[str] | None = None
) -> dict:
    """Run kube-scheduler's model over existing + upcoming + the policy's new nodes and every pending gang.

    The scheduler does not know which pods a policy meant for which node: it places every pending
    pod in queue order. Reported: gangs (policy ``gang``) that really start, the policy's new nodes
    left empty and their $/h, and the policy's $/h per started gang. A gang below quorum is rolled back
    (Permit timeout, group cycle), so in the model's final state a bought node holding no useful pod
    holds no pod at all: the model's stranded nodes are its empty ones.
    """
    import time

    from gangscale.scheduling import nodes_from_views, planned_nodes, simulate, strategy_config

    start = time.perf_counter()
    snap = world.snap
    daemons = {
        name: d.pods for name, d in snap.daemons.items()
    }  # bound on each new node before the queue
    nodes = nodes_from_views(snap.nodes, snap.bound) + planned_nodes(
        snap.groups, [g for g, _ in placed.new_nodes], daemons
    )
    res = simulate(
        nodes,
        snap.solvable,
        bound=snap.bound,
        config=strategy_config(strategy),
        seed=seed,
        stable_ties=True,
    )  # observe mode's draws: its seed-0 check is this replay
    gangs = [g for g in snap.solvable if g.policy == "gang"]
    started = sum(1 for g in gangs if res.outcomes[g.key].started)
    empty = [n.rpartition("/new-")[0] for n in res.empty_nodes if "/new-" in n]
    new_empty = len(empty)
    empty_cost = sum(
        float(world.group_price[world.group_index[g]]) for g in empty if g in world.group_index
    )
    cost = sum(
        float(world.group_price[world.group_index[g]])
        for g, _ in placed.new_nodes
        if g in world.group_index
    )
    extra = {}
    if promised is not None:  # observe mode: the gangs ("namespace/name") the plan promises
        ok = {f"{g.namespace}/{g.name}" for g in gangs if res.outcomes[g.key].started}
        extra = {"promised": len(promised), "promised_not_started": len(promised - ok)}
    return {
        **extra,
        "gangs_started": started,
        "gangs": len(gangs),
        "groups_started": len(res.started),
        "empty_nodes": new_empty,
        "empty_cost": round(empty_cost, 6),
        "cost_per_started_gang": round(cost / started, 4) if started else None,
        "pods_placed": len(res.placement),
        "seconds": round(time.perf_counter() - start, 3),
        "profile": res.profiles[0] if res.profiles else strategy,
    }


def promised_gangs(plan: dict) -> set[str]:
    """The gang-policy groups an observe-mode plan promises ("namespace/name")."""
    return {
        f"{g['namespace']}/{g['name']}"
        for g in plan.get("gangs", [])
        if g.get("policy") == "gang" and g.get("decision") in ("scale-up", "fits-existing")
    }


# MostAllocated on cpu and memory as a KubeSchedulerConfiguration: what gangscale plans against for that column
MOST_ALLOCATED_FILE = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
"""
