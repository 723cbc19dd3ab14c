"""Gate mode in the benchmark: the plan's nodes are bought and Ready, then gates.py decides which gangs leave the gate.

What `gangscale run` does with `gangscale.io/capacity`, replayed on the scheduler model
(`gangscale.scheduling.simulate`) with every bought node registered and Ready:

- The plan is gate mode's own (`gate_plan`): the solver's plan on `gates.scheduled_first`'s
  snapshot, as `gangscale run` plans when pods carry the gate.
- Pods linked to a group carry the gate (the webhook gates exactly those); ungrouped pods do not, so
  they are in the scheduler's queue before any gate is lifted, go first and land where the
  scheduler puts them: on the nodes the cluster has the moment they exist, and what finds no room
  there once every node is Ready.
- The release itself is the controller's code, not a copy: `gates.release` (what `gates.decide`
  calls) on a snapshot whose upcoming and new nodes are live nodes named as the plan names them.
  It releases the gangs the plan starts (`scale-up` / `fits-existing`), only the pods the plan
  placed (an elastic gang's extra members stay gated), each pod narrowed to one node: the plan's,
  or another Ready node with room where the ungated pods took the planned room. Deferred gangs and
  gangs that no longer fit stay gated, so they take no capacity.
- One model run then schedules the ungated pods first and the released pods, each narrowed as
  `gates.narrowed` writes it (the same requirement the patch adds).

Invariant: a gang counts as started only if the model started it from the released pods; nothing of a
gang that stays gated is ever on a node. Cost: `gates.release`'s model runs of the ungated queue (one
per seed of `gates.SEEDS`) and one model run of everything, like `evaluate.model_run`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gangscale.api import SolveOptions, make_plan
from gangscale.controller.gates import (
    STARTING,
    GateDecision,
    gated,
    narrowed,
    release,
    scheduled_first,
)
from gangscale.ingest import CAPACITY_GATE
from gangscale.model import API_NONE, Gang, GangKey, Taint, Toleration
from gangscale.scheduling import SchedulerConfig, SimResult, nodes_from_views, simulate
from gangscale.snapshot import RESERVED_TAINT, ClusterSnapshot, NodeView

from .world import World

PASSES = 3  # controller passes replayed: release; re-plan what stays held and release again (twice at most)
REPLAN_SECONDS = 2.0  # the solver's time limit in a later pass (a small plan: the gangs still held)


@dataclass(slots=True)
class GateRun:
    """The released gangs, the model's result, and the bought nodes left empty."""

    order: list[GangKey]  # released gangs, in the order their gates were lifted
    result: SimResult
    empty: list[str]  # bought nodes no pod landed on
    decision: GateDecision  # every lift of every pass; the gangs the last pass left held
    later: list[str] = field(default_factory=list)  # node groups of the nodes later passes bought

    @property
    def started(self) -> set[GangKey]:
        return {k for k in self.order if self.result.outcomes[k].started}


def plan_placement(plan: dict) -> dict[str, str]:
    """Pod key -> the node the plan put it on, new nodes named as `planned_nodes` names them."""
    where = {p: node for node, pods in plan.get("existingNodes", {}).items() for p in pods}
    for i, n in enumerate(plan.get("newNodes", [])):
        where.update({p: f"{n['nodeGroup']}/new-{i + 1}" for p in n["pods"]})
    return where


def plan_starts(plan: dict) -> set[GangKey]:
    """The key of every group the plan starts: the ones gate mode releases."""
    return {
        GangKey(g["namespace"], g["name"], g.get("api", API_NONE))
        for g in plan.get("gangs", [])
        if g.get("decision") in STARTING
    }


def _registered(snap: ClusterSnapshot, plan: dict) -> ClusterSnapshot:
    """`snap` once every node on its way and every node the plan buys has registered and is Ready, each named as
    the plan names it (a Node's name is what the narrowing names)."""
    nodes = [
        replace(v, upcoming=False, labels={**v.labels, "metadata.name": v.name}) for v in snap.nodes
    ]
    groups = {g.name: g for g in snap.groups}
    for i, n in enumerate(plan.get("newNodes", [])):
        g = groups[n["nodeGroup"]]
        name = f"{g.name}/new-{i + 1}"
        labels = {**g.labels, "kubernetes.io/hostname": name, "metadata.name": name}
        nodes.append(
            NodeView(
                name,
                labels,
                tuple(g.taints),
                dict(g.allocatable),
                g.name,
                daemon_pods=_daemons(snap, g.name),
            )
        )
    return replace(snap, nodes=nodes)


def _daemons(snap: ClusterSnapshot, group: str) -> tuple:
    """The DaemonSet pods a new node of `group` runs: the model binds them first (`NodeView.daemon_pods`; the view's
    free room, like the group's allocatable in the snapshot, is already less their requests)."""
    d = snap.daemons.get(group)
    return d.pods if d is not None else ()


def _gate(g: Gang) -> Gang:
    """`g` as the webhook admits it: every pod of a group carries the gate; ungrouped pods carry none."""
    if g.api == API_NONE:
        return g
    return replace(
        g, pending=tuple(replace(p, scheduling_gates=(CAPACITY_GATE,)) for p in g.pending)
    )


def _run(
    nodes, ungated: Sequence[Gang], released: Sequence[Gang], bound, config, seed
) -> SimResult:
    """One model run: the ungated pods first (in their own queue order), then the released pods."""

    def early(
        prio: int, created: str
    ) -> str:  # before every release, in PrioritySort's order among themselves
        return f"0-{(1 << 40) - prio:016d}-{created}"

    queue = [
        replace(
            g,
            pending=tuple(
                replace(p, priority=0, created=early(p.priority, p.created)) for p in g.pending
            ),
            priority=0,
            created=early(g.effective_priority, g.created),
        )
        for g in ungated
    ]
    queue += [
        replace(
            g,
            priority=0,
            created=f"1-{i:07d}",
            pending=tuple(replace(p, priority=0, created=f"1-{i:07d}") for p in g.pending),
        )
        for i, g in enumerate(released)
    ]
    return simulate(nodes, queue, bound=bound, config=config, seed=seed)


def _bind(snap: ClusterSnapshot, res: SimResult, gangs: Sequence[Gang]) -> ClusterSnapshot:
    """`snap` with the pods `res` placed bound where it placed them (their room taken off the nodes)."""
    pods = [
        replace(p, node_name=res.placement[p.key])
        for g in gangs
        for p in g.pending
        if p.key in res.placement
    ]
    used: dict[str, dict[str, int]] = {}
    for p in pods:
        u = used.setdefault(p.node_name or "", {})
        for r, n in p.requests.items():
            u[r] = u.get(r, 0) + n
    nodes = [
        replace(v, free={r: n - used[v.name].get(r, 0) for r, n in v.free.items()})
        if v.name in used
        else v
        for v in snap.nodes
    ]
    return replace(snap, nodes=nodes, bound=[*snap.bound, *pods])


def _narrowed(decision: GateDecision) -> list[Gang]:
    """The released gangs as the scheduler gets them: each pod ungated and narrowed to its node."""
    out = []
    for lift in decision.lifts:
        on = dict(zip((p.key for p in lift.pods), lift.nodes, strict=False))
        out.append(
            replace(
                lift.gang,
                pending=tuple(
                    replace(p, scheduling_gates=(), placement=narrowed(p.placement, on[p.key]))
                    for p in lift.pods
                ),
            )
        )
    return out


def _unreserved(snap: ClusterSnapshot) -> ClusterSnapshot:
    """`snap` without the last pass's reservations (each pass reserves anew, from its own records)."""
    return replace(
        snap,
        nodes=[
            replace(
                v, reserved_for=None, taints=tuple(t for t in v.taints if t.key != RESERVED_TAINT)
            )
            if v.reserved_for is not None
            else v
            for v in snap.nodes
        ],
    )


def _reserve(
    snap: ClusterSnapshot, held: Sequence[Gang], where: Mapping[str, str]
) -> tuple[ClusterSnapshot, list[Gang]]:
    """The controller's reservations (controller/reservations.py): a node that arrived for a held gang and is still
    empty stays that gang's (tainted for it; its pods tolerate the taint), so its next plan uses it first
    (`gates._own_first` moves the gang onto it at release). A node the plan shared between several held gangs is
    reserved for none of them: given to one, the others could not use it in the next plan and would buy anew, and
    the one it was given to might not need it."""
    busy = {p.node_name for p in snap.bound}
    snap = _unreserved(snap)
    owners: dict[str, set[GangKey]] = {}
    for g in held:
        for p in g.pending:
            if p.key in where:
                owners.setdefault(where[p.key], set()).add(g.key)
    owner = {name: next(iter(ks)) for name, ks in owners.items() if len(ks) == 1}
    nodes = [
        replace(
            v,
            reserved_for=owner[v.name],
            taints=(*v.taints, Taint(RESERVED_TAINT, str(owner[v.name]), "NoSchedule")),
        )
        if v.name in owner and v.name not in busy
        else v
        for v in snap.nodes
    ]
    mine = {k for v in nodes if (k := v.reserved_for) is not None}
    held = [
        replace(
            g,
            pending=tuple(
                replace(
                    p,
                    placement=replace(
                        p.placement,
                        tolerations=(
                            *p.placement.tolerations,
                            Toleration(RESERVED_TAINT, "Equal", str(g.key), "NoSchedule"),
                        ),
                    ),
                )
                for p in g.pending
            ),
        )
        if g.key in mine
        else g
        for g in held
    ]
    return replace(snap, nodes=nodes), held


def _replan(
    snap: ClusterSnapshot, held: Sequence[Gang], where: Mapping[str, str], bought: Counter, n: int
) -> tuple[ClusterSnapshot, dict[str, str], dict[GangKey, tuple[str, str]], list[str]]:
    """The controller's next pass for the gangs still held: a plan on the cluster as it stands (every node bought
    so far counts toward its group's size; the empty nodes that arrived for a held gang reserved for it), its new
    nodes registered. Returns the snapshot with them, where the plan puts each pod, its decision per gang, and the
    new nodes' groups."""
    groups = [replace(g, current_size=g.current_size + bought[g.name]) for g in snap.groups]
    snap, held = _reserve(snap, held, where)
    plan = make_plan(
        replace(snap, gangs=list(held), decided={}, groups=groups),
        SolveOptions(time_limit=REPLAN_SECONDS),
    )
    where = {p: node for node, pods in plan.existing_nodes.items() for p in pods}
    # the reservations stay in the snapshot the release sees, as in the controller's pass (its own nodes first:
    # `gates._own_first`); the scheduler model never sees the taint (`nodes_from_views` drops it)
    by_name = {g.name: g for g in groups}
    nodes = list(snap.nodes)
    for i, new in enumerate(plan.new_nodes):
        g = by_name[new.node_group]
        name = f"{g.name}/pass{n}-{i + 1}"
        nodes.append(
            NodeView(
                name,
                {**g.labels, "kubernetes.io/hostname": name, "metadata.name": name},
                tuple(g.taints),
                dict(g.allocatable),
                g.name,
                daemon_pods=_daemons(snap, g.name),
            )
        )
        where.update({p: name for p in new.pods})
    decisions: dict[GangKey, tuple[str, str]] = {
        GangKey(r.namespace, r.name, r.api): (r.decision, r.reason) for r in plan.gangs
    }
    return (
        replace(snap, nodes=nodes, groups=groups),
        where,
        decisions,
        [n.node_group for n in plan.new_nodes],
    )


def gate_replay(
    world: World, plan: dict, config: SchedulerConfig | None, seed: int = 0, passes: int = PASSES
) -> GateRun:
    """Replay gate mode over `plan` (see the module docstring): the ungated pods bind first, on the nodes the
    cluster has as soon as they exist, the rest once the nodes are Ready; the controller's next pass releases the
    gangs around them, narrowed; the scheduler places those; a gang left held is planned again (more nodes) and
    released on the pass after."""
    gangs = [_gate(g) for g in world.snap.solvable]
    ungated = [replace(g, pending=tuple(p for p in g.pending if not gated(p))) for g in gangs]
    ungated = [g for g in ungated if g.pending]
    live = [
        v for v in world.snap.nodes if not v.upcoming
    ]  # the scheduler has them the moment the pods exist
    res = _run(
        nodes_from_views(live, world.snap.bound), ungated, [], world.snap.bound, config, seed
    )
    snap = _bind(_registered(world.snap, plan), res, ungated)
    rest = [
        replace(g, pending=tuple(p for p in g.pending if p.key not in res.placement))
        for g in ungated
    ]
    rest = [
        g for g in rest if g.pending
    ]  # the rest wait for nodes: they go first once every node is Ready
    later = _run(nodes_from_views(snap.nodes, snap.bound), rest, [], snap.bound, config, seed)
    snap = _bind(snap, later, rest)
    res.placement.update(later.placement)
    res.outcomes.update(later.outcomes)
    run = GateRun([], res, [], GateDecision((), {}))
    bought = Counter(n["nodeGroup"] for n in plan.get("newNodes", []))
    where = plan_placement(plan)
    starts = plan_starts(plan)
    decisions = {g.key: ("scale-up", "") for g in gangs if g.key in starts}
    pending = [replace(g, pending=tuple(p for p in g.pending if gated(p))) for g in gangs]
    for n in range(1, passes + 1):
        pending = [g for g in pending if g.pending]
        decision = release(pending, where, decisions, snap, lambda g: True, config=config)
        released = _narrowed(decision)
        out = _run(nodes_from_views(snap.nodes, snap.bound), [], released, snap.bound, config, seed)
        snap = _bind(snap, out, released)
        res.placement.update(out.placement)
        res.outcomes.update({k: o for k, o in out.outcomes.items()})
        run.order += [g.key for g in released]
        run.decision = GateDecision(run.decision.lifts + decision.lifts, decision.held)
        done = {p.key for g in released for p in g.pending}
        pending = [
            replace(g, pending=tuple(p for p in g.pending if p.key not in done)) for g in pending
        ]
        if not decision.held or n == passes:
            break
        snap, where, decisions, more = _replan(
            snap, [g for g in pending if g.key in decision.held], where, bought, n
        )
        run.later += more
        bought.update(more)
    # the nodes this plan and the later passes bought (nodes already on their way are every policy's, as before)
    new = {v.name for v in snap.nodes if "/new-" in v.name or "/pass" in v.name}
    busy = set(res.placement.values())
    run.empty = sorted(name for name in new if name not in busy)
    return run


def _group_of(node: str) -> str:
    """A bought node's group, from the name the replay gives it (group/new-i, group/passN-i, group/upcoming-i)."""
    return node.rpartition("/")[0]


def gate_plan(world: World, strategy: str, options: SolveOptions) -> dict:
    """The plan `gangscale run` makes in gate mode (the webhook's gates on every group's pods): the solver's plan
    on `gates.scheduled_first`'s snapshot, so nothing is bought for ungrouped pods the scheduler places on capacity
    the cluster has before any gang is released."""
    from gangscale.scheduling import strategy_config

    snap = replace(world.snap, gangs=[_gate(g) for g in world.snap.gangs])
    return make_plan(
        scheduled_first(snap, lambda g: True, config=strategy_config(strategy)), options
    ).to_dict()


def gate_model_run(world: World, plan: dict, strategy: str, seed: int = 0) -> dict:
    """`evaluate.model_run`'s columns for gate mode over `plan` (gate mode's plan, `gate_plan`, as the controller
    makes it)."""
    from gangscale.scheduling import strategy_config

    start = time.perf_counter()
    run = gate_replay(world, plan, strategy_config(strategy), seed)
    gangs = [g for g in world.snap.solvable if g.policy == "gang"]
    starts = plan_starts(plan)
    promised = {g.key for g in gangs if g.key in starts}
    started = promised & run.started
    price = {g.name: g.price_per_hour for g in world.snap.groups}
    cost = sum(price[n["nodeGroup"]] for n in plan.get("newNodes", [])) + sum(
        price[g] for g in run.later
    )
    lost = sorted(promised - started, key=str)
    held = run.decision.held
    return {
        "promised": len(promised),
        "promised_not_started": len(lost),
        "gangs_started": len(started),
        "gangs": len(gangs),
        "groups_started": len(run.result.started),
        "empty_nodes": len(run.empty),
        "empty_cost": round(
            sum(price[_group_of(n)] for n in run.empty if _group_of(n) in price), 6
        ),
        "cost_per_started_gang": round(cost / len(started), 4) if started else None,
        "pods_placed": len(run.result.placement),
        "seconds": round(time.perf_counter() - start, 3),
        "later_nodes": len(run.later),
        "later_cost": round(sum(price[g] for g in run.later), 6),
        "not_started": [
            f"{k}: {held[k] if k in held else run.result.outcomes[k].reason}" for k in lost[:10]
        ],
        "profile": strategy,
    }
