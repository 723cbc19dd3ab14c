"""Gate mode: which gangs' pods leave the `gangscale.io/capacity` scheduling gate this pass, in which order.

Invariant: pure functions of the cluster, the plan and the snapshot it was made from. A gang gate
mode holds is released only when (1) the plan starts it (`fits-existing` or `scale-up`), (2) every
pod the plan placed for it is on a registered, Ready, schedulable node (a live node of the
snapshot, never an upcoming or a new one), and (3) the scheduler model (`gangscale.scheduling.
simulate`, on the live nodes with the pods already in the scheduler's queue, under every seed of
`SEEDS`) starts it, keeps every gang that started without it started, and, where its pods land on
a node the plan gave to a gang still held (or that arrived for one: a node reserved for it), leaves
that gang room to start on the nodes it may count on (live and upcoming nodes not reserved for a
third gang, less the room the plan gave the other gangs still held, and the new nodes the plan buys
for it). A gang's own reserved nodes are its capacity: the plan places its pods there, the scheduler
model sees them without the planner-only reservation taint, as kube-scheduler does, and a pod the
plan put on a node still on its way counts as placed on one of the gang's own Ready nodes the plan
left empty, where it fits (the solver sees no difference between the two; the gate does). Held
gangs are tried in `release_order` (priority, then the biggest per-pod GPU / extended-resource
request first, among GPU gangs the one with the fewest node groups to go to, then the biggest pod by
cpu or memory), so a big-GPU gang is released before the small pods that could take its nodes, an
H100-only gang before an any-8-GPU gang that could take its H100 nodes, big CPU pods before the
small ones LeastAllocated would spread over their nodes, and a small gang whose pods would land on a
still-held big gang's nodes waits until that one has bound. Only the pods the plan placed leave the gate (an
elastic gang's extra members stay gated). Deferred and infeasible gangs stay gated.

Gangs carrying the gate that gate mode does not hold (`gateMode: off`, or not opted in) are
released at once: the gate is gangscale's, and nobody else lifts it. The gate's state lives in the
pods, so no record is kept: a restarted controller re-derives everything from the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..fit import placement_allows
from ..ingest import CAPACITY_GATE
from ..model import Gang, GangKey, Pod
from ..plan import Plan
from ..resources import CPU, MEMORY
from ..scheduling import SchedulerConfig, SimResult, nodes_from_views, planned_nodes, simulate
from ..scheduling.scores import is_scalar
from ..snapshot import RESERVED_TAINT, ClusterSnapshot, NodeView

GATE_MODE_KEY = "gangscale.io/gate-mode"  # namespace label, or annotation on the group object (lone pod)
# the admission webhook's opt-in namespace label (docs/webhook.md): a namespace whose pods the webhook gates is one
# gate mode holds, unless its own gate-mode label says otherwise (else every webhook gate would be lifted at once)
WEBHOOK_GATE_LABEL, WEBHOOK_GATE_ON = "gangscale.io/capacity-gate", "enabled"
SEEDS = (0, 1, 2)  # score ties are random in kube-scheduler: a release must hold under each
STARTING = ("fits-existing", "scale-up")
CAPACITY_READY, NOT_HELD = "capacity-ready", "not-held"


@dataclass(frozen=True, slots=True)
class Lift:
    """Remove the gate from these pods of one gang now."""

    gang: Gang
    pods: tuple[Pod, ...]
    why: str  # CAPACITY_READY | NOT_HELD
    message: str


@dataclass(frozen=True, slots=True)
class GateDecision:
    lifts: tuple[Lift, ...]  # in release order
    held: Mapping[GangKey, str]  # gangs that stay gated, with the reason


def gated(pod: Pod) -> bool:
    """Held by gangscale's gate (a pending pod carries no other gate: ingest)."""
    return CAPACITY_GATE in pod.scheduling_gates


def namespace_labels(objects: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Labels of the listed Namespace objects, by name (malformed ones read as unlabelled)."""
    out: dict[str, dict[str, str]] = {}
    for o in objects:
        if isinstance(o, Mapping) and o.get("kind") == "Namespace" and isinstance(o.get("metadata"), Mapping):
            meta = o["metadata"]
            labels = meta.get("labels")
            if isinstance(meta.get("name"), str):
                out[meta["name"]] = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    return out


def _flag(value: str | None) -> bool | None:
    v = (value or "").strip().lower()
    return True if v == "true" else False if v == "false" else None


def holds(gang: Gang, mode: str, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether gate mode holds this gang: `off` never; else the gang's annotation, the namespace's gate-mode label,
    the webhook's opt-in label, the mode."""
    if mode == "off":
        return False
    own = _flag(gang.annotations.get(GATE_MODE_KEY))
    if own is None:  # podless groups: the pods carry it
        own = next((f for p in gang.pending if (f := _flag(p.annotations.get(GATE_MODE_KEY))) is not None), None)
    if own is not None:
        return own
    labels = ns_labels.get(gang.namespace, {})
    ns = _flag(labels.get(GATE_MODE_KEY))
    if ns is None and labels.get(WEBHOOK_GATE_LABEL) == WEBHOOK_GATE_ON:
        ns = True
    return ns if ns is not None else mode == "all"


def _scalars(p: Pod) -> list[int]:
    return [v for r, v in p.requests.items() if is_scalar(r) and v > 0]


MEMORY_PER_CPU = 4 << 30  # a pod's size counts a CPU as 4 GiB of memory (general-purpose instances' ratio)


def _pod_size(p: Pod) -> int:
    """The larger of a pod's cpu and memory request, in bytes (a CPU counted as `MEMORY_PER_CPU`)."""
    return max(p.requests.get(CPU, 0) * MEMORY_PER_CPU // 1000, p.requests.get(MEMORY, 0))


def release_key(g: Gang, choices: int = 0) -> tuple:
    """Priority first; then the biggest per-pod GPU (extended resource) request; among GPU gangs, the one with the
    fewest places to go (`choices`, node groups and nodes: an H100-only gang before an any-8-GPU one, which would
    take its nodes); then the biggest pod by cpu or memory (`_pod_size`: LeastAllocated spreads each released gang
    over the emptiest nodes, so small pods released first cut the free room into pieces that bigger pods released
    later no longer fit; biggest first is first-fit decreasing); then the fewest places; then the gang's total
    GPU request; then age."""
    biggest = max((max(_scalars(p), default=0) for p in g.pending), default=0)
    size = max((_pod_size(p) for p in g.pending), default=0)
    total = sum(sum(_scalars(p)) for p in g.pending)
    created = g.created or min((p.created for p in g.pending), default="")
    return (-g.effective_priority, -biggest, choices if biggest else 0, -size, choices, -total, created,
            str(g.gang_key))


def release_order(gangs: Iterable[Gang], choices: Callable[[Gang], int] | None = None) -> list[Gang]:
    """The order in which held gangs are considered for release (`choices`: see `placement_choices`)."""
    return sorted(gangs, key=lambda g: release_key(g, choices(g) if choices else 0))


def _biggest_pod(g: Gang) -> Pod | None:
    return max(g.pending, key=lambda p: (max(_scalars(p), default=0), sum(_scalars(p)), p.key), default=None)


def placement_choices(snap: ClusterSnapshot) -> Callable[[Gang], int]:
    """How many places a gang's biggest pod may go: node groups and nodes whose labels and taints its selectors,
    affinity and tolerations allow, with the GPUs / extended resources it requests (a node's: free now)."""
    places = [(n.labels, n.taints, n.allocatable) for n in snap.groups]
    places += [(v.labels, v.taints, v.free) for v in snap.nodes]
    memo: dict[tuple, int] = {}

    def count(g: Gang) -> int:
        p = _biggest_pod(g)
        if p is None:
            return 0
        scalars = tuple(sorted((r, v) for r, v in p.requests.items() if is_scalar(r) and v > 0))
        key = (p.placement, scalars)
        if key not in memo:
            memo[key] = sum(1 for labels, taints, alloc in places if placement_allows(p.placement, labels, taints)
                            and all(alloc.get(r, 0) >= v for r, v in scalars))
        return memo[key]

    return count


@dataclass(slots=True)
class _World:
    """What a release is checked against: live nodes, bound pods, the plan's node claims, the model's runs."""

    gangs: Sequence[Gang]
    snap: ClusterSnapshot
    config: SchedulerConfig | None
    where: dict[str, str]  # pod key -> the node the plan put it on
    new_groups: list[str]  # the plan's new nodes' groups, in order (named as `planned_nodes` names them)
    claims: dict[str, set[GangKey]] = field(default_factory=dict)
    released: dict[GangKey, set[str]] = field(default_factory=dict)
    baseline: dict[int, SimResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        gang_of = {p.key: g.gang_key for g in self.gangs for p in g.pending}
        for pod_key, node in self.where.items():
            if pod_key in gang_of:
                self.claims.setdefault(node, set()).add(gang_of[pod_key])
        for v in self.snap.nodes:  # a node that arrived for a gang is its capacity, whatever this plan did with it
            if v.reserved_for is not None and not v.upcoming:
                self.claims.setdefault(v.name, set()).add(v.reserved_for)

    def run(self, extra: Mapping[GangKey, set[str]], seed: int) -> SimResult:
        """The scheduler on the live nodes, with the ungated pods and those `extra` releases queued."""
        nodes = nodes_from_views([v for v in self.snap.nodes if not v.upcoming], self.snap.bound)
        queue = []
        for g in self.gangs:
            out = extra.get(g.gang_key, set())
            pending = [p for p in g.pending if not gated(p) or p.key in out]
            if pending:
                queue.append(replace(g, pending=pending))
        return simulate(nodes, queue, bound=self.snap.bound, config=self.config, seed=seed)

    def base(self, seed: int) -> SimResult:
        if seed not in self.baseline:
            self.baseline[seed] = self.run(self.released, seed)
        return self.baseline[seed]

    def still_fits(self, held: Gang, after: SimResult, seed: int, others: Iterable[Gang] = ()) -> bool:
        """Whether `held`'s planned pods still start on the nodes it may count on (live and upcoming ones not
        reserved for another gang, and the new nodes the plan buys for it), once the pods of `after` are bound
        where the scheduler put them. Nodes bought for other gangs are not its to fall back on: counting them
        let a release take a node that had arrived for a held gang, which then waited for (and was bought)
        one more. Nor is the room the plan gave the other gangs still held (`others`): their planned pods count
        as bound where the plan put them, else a release could push `held` onto a third gang's room, and that
        gang, checked alone, onto a fourth's, until the last one no longer fits anywhere."""
        mine = {p.key for p in held.pending}
        pods = {p.key: p for g in self.gangs for p in g.pending if p.key not in mine}
        bound = list(self.snap.bound) + [replace(pods[k], node_name=n) for k, n in after.placement.items() if k in pods]
        bound += [replace(p, node_name=self.where[p.key]) for o in others if o.gang_key != held.gang_key
                  for p in o.pending if p.key in self.where and p.key not in after.placement]
        known = {g.name for g in self.snap.groups}
        own = {self.where[k] for k in mine if k in self.where}
        views = [v for v in self.snap.nodes if v.reserved_for in (None, held.gang_key)]
        nodes = nodes_from_views(views, self.snap.bound) + [n for n in planned_nodes(
            self.snap.groups, [name for name in self.new_groups if name in known]) if n.name in own]
        planned = [p for p in held.pending if p.key in self.where]
        res = simulate(nodes, [replace(held, pending=planned)], bound=bound, config=self.config, seed=seed)
        return held.gang_key in res.started


def _conflict(w: _World, g: Gang, pods: Sequence[Pod], still_held: Mapping[GangKey, Gang]) -> str | None:
    """Why releasing `pods` now would not land as the plan put them (None: it would)."""
    extra = {**w.released, g.gang_key: w.released.get(g.gang_key, set()) | {p.key for p in pods}}
    runs = {}
    for seed in SEEDS:
        res = runs[seed] = w.run(extra, seed)
        out = res.outcomes.get(g.gang_key)
        if out is None or not out.started:
            return f"the scheduler would not start it on the Ready nodes yet: {out.reason if out else 'not queued'}"
        lost = sorted(str(k) for k in w.base(seed).started - res.started)
        if lost:
            return f"releasing it now would keep {lost[0]} from starting"
        for victim, node in _trespassed(w, g, pods, res, still_held):
            others = [o for k, o in still_held.items() if k != g.gang_key]
            if not w.still_fits(still_held[victim], res, seed, others):
                return (f"the scheduler would put its pods on node {node}, which the plan keeps for {victim}, "
                        "and that gang would no longer fit; it waits until that gang has bound")
    w.released = extra
    w.baseline = runs
    return None


def _trespassed(w: _World, g: Gang, pods: Sequence[Pod], res: SimResult, still_held: Mapping[GangKey, Gang]
                ) -> list[tuple[GangKey, str]]:
    """Still-held gangs whose planned nodes the released pods land on (nodes not planned for `g` too)."""
    out: dict[GangKey, str] = {}
    for p in pods:
        node = res.placement.get(p.key, "")
        claimed = w.claims.get(node, set())
        if g.gang_key not in claimed:
            for k in sorted(claimed & still_held.keys(), key=str):
                out.setdefault(k, node)
    return sorted(out.items(), key=lambda kv: str(kv[0]))


def _placement(plan: Plan, snap: ClusterSnapshot) -> tuple[dict[str, str], set[str]]:
    """Pod key -> the node the plan put it on (new nodes named as `planned_nodes` names them), and the live nodes."""
    where = {p: node for node, pods in plan.existing_nodes.items() for p in pods}
    for i, n in enumerate(plan.new_nodes):
        where.update({p: f"{n.node_group}/new-{i + 1}" for p in n.pods})
    return where, {v.name for v in snap.nodes if not v.upcoming}


_Spare = list[tuple[NodeView, dict[str, int]]]  # a gang's own Ready nodes, with the room its planned pods leave


def _spare_own_nodes(held: Sequence[Gang], where: Mapping[str, str], snap: ClusterSnapshot) -> dict[GangKey, _Spare]:
    """Per held gang, the Ready nodes that arrived for it (reserved for it) that no released pod is planned on."""
    gated_pods = {p.key for g in held for p in g.pending if gated(p)}
    used = {node for pod, node in where.items() if pod not in gated_pods}
    spare: dict[GangKey, _Spare] = {}
    for v in snap.nodes:
        if v.reserved_for is not None and not v.upcoming and v.name not in used:
            spare.setdefault(v.reserved_for, []).append((v, dict(v.free)))
    for g in held:
        for v, free in spare.get(g.gang_key, []):
            for p in g.pending:  # its own pods the plan already put there take their room
                if where.get(p.key) == v.name:
                    for r, n in p.requests.items():
                        free[r] = free.get(r, 0) - n
    return spare


def _fits(p: Pod, v: NodeView, free: Mapping[str, int]) -> bool:
    taints = [t for t in v.taints if t.key != RESERVED_TAINT]  # its own reservation: the pod's gang owns it
    return placement_allows(p.placement, v.labels, taints) and all(free.get(r, 0) >= n for r, n in p.requests.items())


def _on_own_nodes(held: Sequence[Gang], where: dict[str, str], live: set[str], snap: ClusterSnapshot) -> dict[str, str]:
    """`where`, with each held gang's pods that the plan put on nodes not yet Ready moved to the Ready nodes that
    arrived for that gang (reserved for it), where they fit. Those nodes are its capacity: the solver sees no
    difference between them and a node on its way, but the gate does; and observe mode's repair may have put a
    still-gated pod of another gang there (the scheduler model ignores reservations), which only the gate lets
    through, so such a node counts as free for its own gang."""
    spare = _spare_own_nodes(held, where, snap)
    out = dict(where)
    for g in held:
        own = spare.get(g.gang_key, [])
        for p in (p for p in g.pending if own and p.key in where and where[p.key] not in live):
            found = next(((v, free) for v, free in own if _fits(p, v, free)), None)
            if found is not None:
                for r, n in p.requests.items():
                    found[1][r] = found[1].get(r, 0) - n
                out[p.key] = found[0].name
    return out


def _ready(g: Gang, plan_decision: tuple[str, str] | None, where: Mapping[str, str], live: set[str]
           ) -> tuple[list[Pod], str]:
    """The gated pods to release once the checks pass, or why the gang's capacity is not Ready."""
    if plan_decision is None or plan_decision[0] not in STARTING:
        decision, reason = plan_decision or ("not planned", "the plan does not list it")
        return [], f"{decision}: {reason}"
    planned = [p for p in g.pending if p.key in where]
    if not planned:
        return [], "the plan places none of its pods"
    waiting = [p for p in planned if where[p.key] not in live]
    if waiting:
        return [], (f"waiting for its capacity: {len(waiting)} of the {len(planned)} pods the plan placed are on "
                    "nodes not yet registered, Ready and schedulable")
    return [p for p in planned if gated(p)], ""


def decide(gangs: Sequence[Gang], plan: Plan, snap: ClusterSnapshot, holding: Callable[[Gang], bool], *,
           config: SchedulerConfig | None = None) -> GateDecision:
    """The gates to lift this pass (see the module docstring); `gangs` as ingested, not as the policy planned them."""
    mine = [g for g in gangs if any(gated(p) for p in g.pending)]
    lifts = [Lift(g, tuple(p for p in g.pending if gated(p)), NOT_HELD, "gate mode does not hold this gang")
             for g in mine if not holding(g)]
    held_gangs = release_order((g for g in mine if holding(g)), placement_choices(snap))
    decisions = {GangKey(r.namespace, r.name, r.api): (r.decision, r.reason) for r in plan.gangs}
    where, live = _placement(plan, snap)
    where = _on_own_nodes(held_gangs, where, live, snap)
    world = _World(gangs, snap, config, where, [n.node_group for n in plan.new_nodes])
    still_held = {g.gang_key: g for g in held_gangs}
    held: dict[GangKey, str] = {}
    for g in held_gangs:
        pods, why = _ready(g, decisions.get(g.key), where, live)
        if not pods:
            if why:
                held[g.gang_key] = why
            continue
        why = _conflict(world, g, pods, still_held) or ""
        if why:
            held[g.gang_key] = why
            continue
        still_held.pop(g.gang_key)
        lifts.append(Lift(g, tuple(pods), CAPACITY_READY,
                          f"its capacity is Ready: {len(pods)} pod(s) go to the nodes the plan placed them on"))
    return GateDecision(tuple(lifts), held)


def remove_gate_patch(gates: Sequence[str], gate: str = CAPACITY_GATE) -> list[dict[str, Any]]:
    """The JSON patch removing `gate` (KEP-3521: gates can only be removed after creation); the test op makes
    a patch built from a stale read fail instead of removing someone else's gate."""
    i = list(gates).index(gate)
    return [{"op": "test", "path": f"/spec/schedulingGates/{i}/name", "value": gate},
            {"op": "remove", "path": f"/spec/schedulingGates/{i}"}]
