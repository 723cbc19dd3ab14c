"""Gate mode: which gangs' pods leave the `gangscale.io/capacity` scheduling gate this pass, and on which node.

Invariant: pure functions of the cluster, the plan and the snapshot it was made from. A gang gate
mode holds is released only when (1) the plan starts it (`fits-existing` or `scale-up`), (2) every
pod the plan placed for it is on a registered, Ready, schedulable node (a live node of the
snapshot, never an upcoming or a new one), and (3) each of those pods still has room on a Ready
node. A held gang's own Ready nodes (the ones that arrived for it, reserved for it) come first: the
pods the plan put on a node still on its way, then those it put on other Ready nodes, move onto them
where they fit (`_own_first`), so no node bought for a gang stays empty while the gang runs
elsewhere. Otherwise a pod goes on the node the plan put it on, else another
Ready node its selectors, tolerations and the gang's topology allow and no other gang reserved
(`_assign`). Room is what bound pods leave, less the pods already in the scheduler's queue where
the scheduler model puts them (the most any seed of `SEEDS` puts on a node: ungated pods go where
the scheduler puts them, gangscale cannot narrow them) and less the room the plan gives the gangs
still held. Each released pod is *narrowed* to its node in the same patch that removes the gate
(KEP-3521's mutable scheduling directives: `narrow_ops`), so the scheduler has one feasible node
per pod and its queue order and scoring no longer decide where gang pods go. Only the pods the
plan placed leave the gate (an elastic gang's extra members stay gated). Deferred and infeasible
gangs stay gated. A narrowed pod whose node dies before it binds is `stranded`: the controller
deletes it so its owner recreates it, gated again.

The plan the controller makes in gate mode is made on `scheduled_first`'s snapshot: the scheduler's
queue (pods without our gate) placed first where the model puts it on the Ready nodes under every
seed, so nothing is bought for a pod the scheduler puts on a node the cluster has. Those model runs
are a deterministic function of the queue, the Ready nodes, the bound pods and the scheduler's
configuration: a caller-owned `QueueMemo` keeps the last few by those inputs, so a pass's plan and
its release (and a pass whose inputs did not change) run them once, with the same answers.

Gangs carrying the gate that gate mode does not hold (`gateMode: off`, or not opted in) are
released at once, not narrowed: the gate is gangscale's, and nobody else lifts it. The gate's
state lives in the pods, so no record is kept: a restarted controller re-derives everything from
the cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..fit import label_keys, placement_allows
from ..ingest import CAPACITY_GATE
from ..model import Gang, GangKey, Node, Placement, Pod, Requirement
from ..plan import Plan
from ..scheduling import SchedulerConfig, SimResult, nodes_from_views, simulate_seeds
from ..snapshot import RESERVED_TAINT, ClusterSnapshot, NodeView, PreDecision

# namespace label, or annotation on the group object (lone pod)
GATE_MODE_KEY = "gangscale.io/gate-mode"
# the admission webhook's opt-in namespace label (docs/webhook.md): a namespace whose pods the webhook gates is one
# gate mode holds, unless its own gate-mode label says otherwise (else every webhook gate would be lifted at once)
WEBHOOK_GATE_LABEL, WEBHOOK_GATE_ON = "gangscale.io/capacity-gate", "enabled"
SEEDS = (0, 1, 2)  # score ties are random in kube-scheduler: a release must hold under each
STARTING = ("fits-existing", "scale-up")
CAPACITY_READY, NOT_HELD = "capacity-ready", "not-held"
NARROWED_KEY = "gangscale.io/narrowed-to"  # pod annotation: the node gate mode narrowed it to
NODE_NAME_FIELD = "metadata.name"  # the one field matchFields may name
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


@dataclass(frozen=True, slots=True)
class Lift:
    """Remove the gate from these pods of one gang now."""

    gang: Gang
    pods: tuple[Pod, ...]
    why: str  # CAPACITY_READY | NOT_HELD
    message: str
    nodes: tuple[
        str, ...
    ] = ()  # CAPACITY_READY: the node each pod is narrowed to (same order as `pods`)


@dataclass(frozen=True, slots=True)
class GateDecision:
    lifts: tuple[Lift, ...]  # in release order
    held: Mapping[GangKey, str]  # gangs that stay gated, with the reason


def gated(pod: Pod) -> bool:
    """Held by gangscale's gate (a pending pod carries no other gate: ingest)."""
    return CAPACITY_GATE in pod.scheduling_gates


def schedulable(pod: Pod) -> bool:
    """Whether the scheduler considers the pod at all: it carries no scheduling gate, gangscale's or another's (KEP-3521
    pod scheduling readiness: kube-scheduler's SchedulingGates PreEnqueue plugin keeps a pod with any
    `spec.schedulingGates` entry out of the scheduling queue, pkg/scheduler/framework/plugins/schedulinggates/
    scheduling_gates.go)."""
    return not pod.scheduling_gates


def released_node(pod: Pod) -> str | None:
    """The node gate mode released this unbound pod to: the one `NARROWED_KEY` names, once gangscale's gate is gone
    from it. Another gate still on it (Kueue's `kueue.x-k8s.io/admission`, any other) does not matter: the pod is
    not `schedulable` yet, but its one feasible node is that node whenever the other gate is lifted. None: not
    released by gate mode, still behind gangscale's gate, bound, or finished. The scale-down keeps the node for it
    (`scaledown.released_to`) and the recovery deletes it when the node is gone (`stranded`)."""
    node = pod.annotations.get(NARROWED_KEY)
    if not node or gated(pod) or pod.node_name or pod.terminal:
        return None
    return node


def namespace_labels(objects: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Labels of the listed Namespace objects, by name (malformed ones read as unlabelled)."""
    out: dict[str, dict[str, str]] = {}
    for o in objects:
        # (`type(o) is dict` first: the ABC check alone is slow on thousands of plain objects per pass)
        if (
            (type(o) is dict or isinstance(o, Mapping))
            and o.get("kind") == "Namespace"
            and isinstance(o.get("metadata"), Mapping)
        ):
            meta = o["metadata"]
            labels = meta.get("labels")
            if isinstance(meta.get("name"), str):
                out[meta["name"]] = (
                    {str(k): str(v) for k, v in labels.items()}
                    if isinstance(labels, Mapping)
                    else {}
                )
    return out


def _flag(value: str | None) -> bool | None:
    v = (value or "").strip().lower()
    return True if v == "true" else False if v == "false" else None


def holds(gang: Gang, mode: str, ns_labels: Mapping[str, Mapping[str, str]]) -> bool:
    """Whether gate mode holds this gang: `off` never; else the gang's annotation, the namespace's gate-mode label,
    the webhook's opt-in label, the mode (`all` and `opt-out`: every gang that does not say false)."""
    if mode == "off":
        return False
    own = _flag(gang.annotations.get(GATE_MODE_KEY))
    if own is None:  # podless groups: the pods carry it
        own = next(
            (f for p in gang.pending if (f := _flag(p.annotations.get(GATE_MODE_KEY))) is not None),
            None,
        )
    if own is not None:
        return own
    labels = ns_labels.get(gang.namespace, {})
    ns = _flag(labels.get(GATE_MODE_KEY))
    if ns is None and labels.get(WEBHOOK_GATE_LABEL) == WEBHOOK_GATE_ON:
        ns = True
    return ns if ns is not None else mode in ("all", "opt-out")


def release_order(gangs: Iterable[Gang]) -> list[Gang]:
    """The order held gangs are considered in: the scheduler's own (PrioritySort: priority, then age). Narrowed
    pods cannot take each other's nodes, so the order only decides who gets the room a Ready node has left when
    the pods the scheduler placed first took the room the plan meant for a gang (`_assign`)."""
    return sorted(
        gangs,
        key=lambda g: (
            -g.effective_priority,
            g.created or min((p.created for p in g.pending), default=""),
            str(g.key),
        ),
    )


# ------------------------------------------------------------------------------------------ narrowing (KEP-3521)


def narrowed(pl: Placement, node: str) -> Placement:
    """`pl` with its required node affinity narrowed to `node` as `narrow_ops` writes it: `metadata.name In [node]`
    added to every term (an empty term matches no node and stays as it is), or one such term when it has none."""
    req = Requirement(NODE_NAME_FIELD, "In", (node,))
    terms = tuple((*t, req) if t else t for t in pl.affinity) if pl.affinity else ((req,),)
    return replace(pl, affinity=terms)


def narrow_ops(spec: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    """JSON-patch ops narrowing a gated pod's required node affinity to `node` (matchFields metadata.name In).

    KEP-3521's mutable scheduling directives: while the stored pod has scheduling gates, required node affinity
    may be set when absent, and otherwise only narrowed: the same number of terms, each keeping its requirements
    and gaining new ones at the end; an empty term may gain none (it matches no node, so it needs none).
    kubernetes pkg/apis/core/validation/validation.go ValidatePodUpdate (`podIsGated :=
    len(oldPod.Spec.SchedulingGates) > 0`), validateNodeAffinityMutation, validateNodeSelectorTermHasOnlyAdditions.
    The nodeSelector is left as it is (both must hold)."""
    field = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    term = {"matchFields": [field]}
    affinity = spec.get("affinity")
    required = {REQUIRED: {"nodeSelectorTerms": [term]}}
    if not isinstance(affinity, Mapping):
        return [{"op": "add", "path": "/spec/affinity", "value": {"nodeAffinity": required}}]
    na = affinity.get("nodeAffinity")
    if not isinstance(na, Mapping):
        return [{"op": "add", "path": "/spec/affinity/nodeAffinity", "value": required}]
    base = f"/spec/affinity/nodeAffinity/{REQUIRED}"
    terms = (
        na.get(REQUIRED, {}).get("nodeSelectorTerms")
        if isinstance(na.get(REQUIRED), Mapping)
        else None
    )
    if not isinstance(terms, list) or not terms:
        return [{"op": "add", "path": base, "value": {"nodeSelectorTerms": [term]}}]
    ops: list[dict[str, Any]] = []
    for i, t in enumerate(terms):
        if not isinstance(t, Mapping) or not (t.get("matchExpressions") or t.get("matchFields")):
            continue
        if t.get("matchFields"):
            ops.append(
                {"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields/-", "value": field}
            )
        else:
            ops.append(
                {"op": "add", "path": f"{base}/nodeSelectorTerms/{i}/matchFields", "value": [field]}
            )
    return ops


def release_patch(
    obj: Mapping[str, Any], gate_names: Sequence[str], node: str | None
) -> list[dict[str, Any]]:
    """The one JSON patch releasing a pod (`obj`, as listed): narrowed to `node` (None: not narrowed) and our gate
    removed together. One patch, not two: the API server judges the narrowing against the stored pod's gates
    (see `narrow_ops`) and applies a patch whole or not at all, so a pod is never ungated without its narrowing.
    The `NARROWED_KEY` annotation names the node, for the recovery (`stranded`)."""
    ops = remove_gate_patch(gate_names)
    if node is None:
        return ops
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    note: dict[str, Any]
    if isinstance(meta.get("annotations"), Mapping):
        note = {
            "op": "add",
            "path": "/metadata/annotations/" + NARROWED_KEY.replace("~", "~0").replace("/", "~1"),
            "value": node,
        }
    else:
        note = {"op": "add", "path": "/metadata/annotations", "value": {NARROWED_KEY: node}}
    return [ops[0], note, *narrow_ops(spec, node), ops[1]]


def _placement(plan: Plan) -> dict[str, str]:
    """Pod key -> the node the plan put it on (new nodes named as `planned_nodes` names them)."""
    where = {p: node for node, pods in plan.existing_nodes.items() for p in pods}
    for i, n in enumerate(plan.new_nodes):
        where.update({p: f"{n.node_group}/new-{i + 1}" for p in n.pods})
    return where


_Spare = list[
    tuple[NodeView, dict[str, int]]
]  # a gang's own Ready nodes, with the room its planned pods leave


def _spare_own_nodes(
    held: Sequence[Gang], where: Mapping[str, str], snap: ClusterSnapshot
) -> dict[GangKey, _Spare]:
    """Per held gang, the Ready nodes that arrived for it (reserved for it) that no released pod is planned on."""
    gated_pods = {p.key for g in held for p in g.pending if gated(p)}
    used = {node for pod, node in where.items() if pod not in gated_pods}
    spare: dict[GangKey, _Spare] = {}
    for v in snap.nodes:
        if v.reserved_for is not None and not v.upcoming and v.name not in used:
            spare.setdefault(v.reserved_for, []).append((v, dict(v.free)))
    for g in held:
        for v, free in spare.get(g.key, []):
            for p in g.pending:  # its own pods the plan already put there take their room
                if where.get(p.key) == v.name:
                    for r, n in p.requests.items():
                        free[r] = free.get(r, 0) - n
    return spare


def _fits(p: Pod, v: NodeView, free: Mapping[str, int]) -> bool:
    taints = [
        t for t in v.taints if t.key != RESERVED_TAINT
    ]  # its own reservation: the pod's gang owns it
    return placement_allows(p.placement, v.labels, taints) and all(
        free.get(r, 0) >= n for r, n in p.requests.items()
    )


def _own_first(
    held: Sequence[Gang], where: Mapping[str, str], snap: ClusterSnapshot
) -> dict[str, str]:
    """`where`, with each held gang's pods moved onto the Ready nodes that arrived for that gang (reserved for it) and
    that the plan leaves empty, where they fit: first the pods the plan put on nodes not yet Ready, then the pods it
    put on other Ready nodes (those `_may_move` allows). A node bought for a gang is its first choice: the solver sees
    no difference between it and any other free node (both cost nothing), so a re-plan may put the gang on another
    free node and leave its own node empty and billing. Observe mode's repair may also have put a still-gated pod of
    another gang on such a node (the scheduler model ignores reservations), which only the gate lets through, so such
    a node counts as free for its own gang."""
    spare = _spare_own_nodes(held, where, snap)
    views = {v.name: v for v in snap.nodes if not v.upcoming}
    out = dict(where)
    for g in held:
        own = spare.get(g.key, [])
        if not own:
            continue
        mine = {v.name for v, _ in own}
        waiting = [p for p in g.pending if p.key in where and where[p.key] not in views]
        elsewhere = [
            p
            for p in g.pending
            if p.key in where and where[p.key] in views and where[p.key] not in mine
        ]
        for p in (*waiting, *elsewhere):
            at = views.get(where[p.key])
            found = next(
                (
                    (v, free)
                    for v, free in own
                    if _fits(p, v, free) and (at is None or _may_move(p, g, at, v))
                ),
                None,
            )
            if found is not None:
                _take(found[1], p.requests)
                out[p.key] = found[0].name
    return out


def _ready(
    g: Gang, plan_decision: tuple[str, str] | None, where: Mapping[str, str], live: set[str]
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
        return [], (
            f"waiting for its capacity: {len(waiting)} of the {len(planned)} pods the plan placed are on "
            "nodes not yet registered, Ready and schedulable"
        )
    return [p for p in planned if gated(p)], ""


def _take(free: dict[str, int], req: Mapping[str, int], sign: int = -1) -> None:
    for r, n in req.items():
        free[r] = free.get(r, 0) + sign * n


def _has_room(free: Mapping[str, int], req: Mapping[str, int]) -> bool:
    return all(free.get(r, 0) >= n for r, n in req.items())


@dataclass(slots=True)
class _Room:
    """Free room per Ready node: what bound pods leave, less the scheduler's queue where the model puts it (the most
    any seed puts on the node) and the room the plan gives the gated pods of the gangs still held."""

    views: dict[str, NodeView]
    free: dict[str, dict[str, int]]
    # `_may_move`'s nodes, per kind of pod and gang
    allowed: dict[tuple, list[str]] = field(default_factory=dict)
    # room given back so far (a rolled-back gang): until it changes, room only shrinks
    returned: int = 0
    # a kind of pod no node had room for, at `returned`
    full: dict[tuple, int] = field(default_factory=dict)

    def give(self, node: str, req: Mapping[str, int]) -> None:
        _take(self.free[node], req, +1)
        self.returned += 1

    def elsewhere(self, p: Pod, g: Gang, planned: str) -> str:
        """A Ready node other than `planned` with room for `p` that `_may_move` allows, or ''."""
        if p.rules:
            return ""
        at = self.views[planned]
        key = (p.placement, g.key, tuple(at.labels.get(k) for k in g.topology_keys))
        nodes = self.allowed.get(key)
        if nodes is None:
            keys = sorted(label_keys(p.placement) | set(g.topology_keys))
            verdict: dict[
                tuple, bool
            ] = {}  # nodes alike on these labels, taints and owner are alike to `_may_move`
            nodes = self.allowed[key] = []
            for n, v in self.views.items():
                sig = (tuple(v.labels.get(k) for k in keys), v.taints, v.reserved_for)
                if sig not in verdict:
                    verdict[sig] = _may_move(p, g, at, v)
                if verdict[sig]:
                    nodes.append(n)
        kind = (key, tuple(sorted(p.requests.items())))
        if self.full.get(kind) == self.returned:
            return ""
        node = next((n for n in nodes if _has_room(self.free[n], p.requests)), "")
        if not node:
            self.full[kind] = self.returned
        return node


def _queue(gangs: Sequence[Gang], holding: Callable[[Gang], bool]) -> list[Gang]:
    """The pods the scheduler has (or gets this pass): ungated ones, and the gated pods of gangs not held.
    (`holding` is asked once per gang with a gated pod, not once per pod: thousands of pods per pass.)"""
    out = []
    for g in gangs:
        held: bool | None = None
        pending = []
        for p in g.pending:
            if gated(p):
                if held is None:
                    held = holding(g)
                if held:
                    continue
            pending.append(p)
        if pending:
            out.append(replace(g, pending=tuple(pending)))
    return out


_Runs = tuple[list[SimResult], dict[str, Counter]]


class QueueMemo:
    """The last few `_queue_runs` answers, each under everything it reads (the queue, the Ready nodes, the bound
    pods, the scheduler's configuration, SEEDS), compared by value: a pass's plan (`scheduled_first`) and its
    release (`release`) model the same queue on the same nodes, and a pass whose inputs did not change models it
    again. A caller keeps one (the reconciler: one for its life); the answers are shared, so nobody changes them."""

    __slots__ = ("entries", "kept", "hits", "runs")

    def __init__(self, kept: int = 4) -> None:
        self.entries: list[tuple[tuple, _Runs]] = []
        self.kept = kept
        self.hits = 0  # answers reused
        self.runs = 0  # answers computed (each `simulate_seeds` over SEEDS)

    def get(self, key: tuple, compute: Callable[[], _Runs]) -> _Runs:
        for seen, runs in self.entries:
            if seen == key:
                self.hits += 1
                return runs
        runs = compute()
        self.runs += 1
        self.entries = [(key, runs), *self.entries][: self.kept]
        return runs


def _queue_runs(
    queue: Sequence[Gang],
    live: Sequence[NodeView],
    snap: ClusterSnapshot,
    config: SchedulerConfig | None,
    memo: QueueMemo | None = None,
) -> _Runs:
    """The scheduler's queue placed on the Ready nodes `live` under every seed of SEEDS, and per node the most any
    seed puts on it (score ties are random: room is kept for the queue wherever any seed puts it)."""
    if memo is not None:
        key = (tuple(queue), tuple(live), tuple(snap.bound), config, SEEDS)
        return memo.get(key, lambda: _queue_runs(queue, live, snap, config))
    results = simulate_seeds(
        nodes_from_views(live, snap.bound), queue, SEEDS, bound=snap.bound, config=config
    )
    requests = {p.key: p.requests for g in queue for p in g.pending}
    worst: dict[str, Counter] = {}
    for res in results:
        used: dict[str, Counter] = {}
        for pod, node in res.placement.items():
            used.setdefault(node, Counter()).update(requests[pod])
        for node, c in used.items():
            worst[node] = worst.get(node, Counter()) | c
    return results, worst


def _room(
    gangs: Sequence[Gang],
    snap: ClusterSnapshot,
    config: SchedulerConfig | None,
    where: Mapping[str, str],
    held: Sequence[Gang],
    holding: Callable[[Gang], bool],
    memo: QueueMemo | None = None,
) -> _Room:
    views = {v.name: v for v in snap.nodes if not v.upcoming}
    free = {name: dict(v.free) for name, v in views.items()}
    queue = _queue(gangs, holding)
    if queue and views:
        for node, c in _queue_runs(queue, list(views.values()), snap, config, memo)[1].items():
            _take(free[node], c)
    for g in held:
        for p in g.pending:
            if gated(p) and where.get(p.key) in free:
                _take(free[where[p.key]], p.requests)
    return _Room(views, free)


def _may_move(p: Pod, g: Gang, planned: NodeView, v: NodeView) -> bool:
    """Whether `p`, planned on `planned`, may be narrowed to `v` instead: a node not reserved for another gang that
    its selectors, affinity and tolerations allow, in the same domain of the gang's topology keys; never a pod with
    per-node pod rules (anti-affinity, spread, host ports: the plan placed it with them in mind)."""
    if p.rules or v.reserved_for not in (None, g.key):
        return False
    if any(v.labels.get(k) != planned.labels.get(k) for k in g.topology_keys):
        return False
    return placement_allows(p.placement, v.labels, [t for t in v.taints if t.key != RESERVED_TAINT])


def _assign(
    room: _Room, g: Gang, pods: Sequence[Pod], where: Mapping[str, str]
) -> tuple[dict[str, str], int]:
    """Each pod's node: where the plan put it while that node has room, else another Ready node with room
    (`_may_move`). Returns the assignment and how many pods found no room (then nothing is taken)."""
    for p in pods:
        room.give(where[p.key], p.requests)  # its own planned room, counted as a held gang's claim
    out: dict[str, str] = {}
    for p in pods:
        node = where[p.key]
        if not _has_room(room.free[node], p.requests):
            node = room.elsewhere(p, g, node)
        if node:
            out[p.key] = node
            _take(room.free[node], p.requests)
    if len(out) == len(pods):
        return out, 0
    by_key = {p.key: p for p in pods}
    for k, node in out.items():
        room.give(node, by_key[k].requests)
    for p in pods:
        _take(room.free[where[p.key]], p.requests)
    return {}, len(pods) - len(out)


def release(
    gangs: Sequence[Gang],
    where: Mapping[str, str],
    decisions: Mapping[GangKey, tuple[str, str]],
    snap: ClusterSnapshot,
    holding: Callable[[Gang], bool],
    *,
    config: SchedulerConfig | None = None,
    memo: QueueMemo | None = None,
) -> GateDecision:
    """The gates to lift this pass (the module docstring), given each pod's planned node as a live node's name
    where it has registered (`where`) and the plan's decision per gang. Shared with benchmarks/gatemode.py.
    The room (`_room`, the scheduler model's runs of the queue) is worked out only once a gang's capacity is Ready:
    most passes release nothing. `memo`: the caller's `QueueMemo`, the same answers as without it."""
    mine = [g for g in gangs if any(gated(p) for p in g.pending)]
    holds_it = [holding(g) for g in mine]  # (asked once per gang)
    lifts = [
        Lift(
            g,
            tuple(p for p in g.pending if gated(p)),
            NOT_HELD,
            "gate mode does not hold this gang",
        )
        for g, h in zip(mine, holds_it, strict=True)
        if not h
    ]
    held_gangs = release_order(g for g, h in zip(mine, holds_it, strict=True) if h)
    live = {v.name for v in snap.nodes if not v.upcoming}
    planned, where = where, _own_first(held_gangs, where, snap)
    room: _Room | None = None
    held: dict[GangKey, str] = {}
    for g in held_gangs:
        pods, why = _ready(g, decisions.get(g.key), where, live)
        if not pods:
            if why:
                held[g.key] = why
            continue
        if room is None:
            room = _room(gangs, snap, config, where, held_gangs, holding, memo)
        nodes, short = _assign(room, g, pods, where)
        if short:
            held[g.key] = (
                f"its capacity is Ready but {short} of its {len(pods)} pods no longer fit on it (pods "
                "the scheduler placed first took the room) nor on another Ready node: the next plan "
                "places them again"
            )
            continue
        moved = sum(1 for p in pods if nodes[p.key] != planned[p.key])
        lifts.append(
            Lift(
                g,
                tuple(pods),
                CAPACITY_READY,
                f"its capacity is Ready: {len(pods)} pod(s) narrowed to the nodes the plan placed them on"
                + (f" ({moved} to another Ready node with room)" if moved else ""),
                tuple(nodes[p.key] for p in pods),
            )
        )
    return GateDecision(tuple(lifts), held)


def decide(
    gangs: Sequence[Gang],
    plan: Plan,
    snap: ClusterSnapshot,
    holding: Callable[[Gang], bool],
    *,
    config: SchedulerConfig | None = None,
    memo: QueueMemo | None = None,
) -> GateDecision:
    """`release` on the controller's plan (new nodes named as `_placement` names them); `gangs` as ingested, not as
    the policy planned them."""
    decisions = {GangKey(r.namespace, r.name, r.api): (r.decision, r.reason) for r in plan.gangs}
    return release(gangs, _placement(plan), decisions, snap, holding, config=config, memo=memo)


# ------------------------------------------------------------------------------------------ the plan's input

SCHEDULED_FIRST = (
    "fits-existing",
    "it carries no scheduling gate, so the scheduler places it before any gated gang: "
    "on capacity the cluster has (the scheduler model, every seed)",
)


def all_narrowed(snap: ClusterSnapshot, holding: Callable[[Gang], bool]) -> bool:
    """Whether every pod the plan of `snap` places waits behind our gate in a gang gate mode holds: each is released
    narrowed to the node the plan gives it (`narrow_ops`), so the scheduler's queue order and scoring decide
    nothing of that plan (observe mode plans it with the solver alone)."""
    gangs = snap.solvable
    return bool(gangs) and all(all(gated(p) for p in g.pending) and holding(g) for g in gangs)


def scheduled_first(
    snap: ClusterSnapshot,
    holding: Callable[[Gang], bool],
    *,
    config: SchedulerConfig | None = None,
    memo: QueueMemo | None = None,
) -> ClusterSnapshot:
    """The snapshot gate mode plans on: the scheduler's queue (`_queue`: pods without our gate, and the gated pods
    of gangs gate mode does not hold) placed first where the scheduler model puts it on the Ready nodes, as the
    cluster's scheduler does the moment the pods exist, before any node of the plan arrives or any gate is lifted.
    A pod the model places under every seed of `SEEDS` is not planned for (its gang counts it as bound; a gang left
    with nothing to place is decided `SCHEDULED_FIRST`); each node loses the most any seed puts on it, as `_room`
    takes it at the release. Otherwise the plan buys nodes for pods the scheduler packs onto existing nodes
    (MostAllocated), which then stay empty, and gives gangs room the queue takes first. `snap` itself when gate
    mode holds no gated pod. `memo`: the caller's `QueueMemo` (the same answer as without it)."""
    gangs = snap.solvable
    live = [v for v in snap.nodes if not v.upcoming]
    queue = _queue(gangs, holding)
    if not queue or not live or not any(gated(p) and holding(g) for g in gangs for p in g.pending):
        return snap
    results, worst = _queue_runs(queue, live, snap, config, memo)
    settled = set(results[0].placement).intersection(*(r.placement for r in results[1:]))
    nodes = [
        replace(v, free={r: n - worst[v.name].get(r, 0) for r, n in v.free.items()})
        if v.name in worst
        else v
        for v in snap.nodes
    ]
    decided = dict(snap.decided)
    out = []
    for g in snap.gangs:
        left = [p for p in g.pending if p.key not in settled]
        if len(left) < len(g.pending) and g.key not in decided:
            if left:
                g = replace(g, pending=tuple(left), bound=g.bound + len(g.pending) - len(left))
            else:
                decided[g.key] = PreDecision(*SCHEDULED_FIRST)
        out.append(g)
    return replace(snap, nodes=nodes, gangs=out, decided=decided)


def remove_gate_patch(gates: Sequence[str], gate: str = CAPACITY_GATE) -> list[dict[str, Any]]:
    """The JSON patch removing `gate` (KEP-3521: gates can only be removed after creation); the test op makes
    a patch built from a stale read fail instead of removing someone else's gate."""
    i = list(gates).index(gate)
    return [
        {"op": "test", "path": f"/spec/schedulingGates/{i}/name", "value": gate},
        {"op": "remove", "path": f"/spec/schedulingGates/{i}"},
    ]


# ------------------------------------------------------------------------------------------ recovery


def stranded_due_at(first_seen: float, grace: float) -> float:
    """When a pod first seen `stranded` at `first_seen` is due for the recovery (deleted, or reported when it has no
    owner): `grace` (`narrowedNodeGraceSeconds`) later, so a kubelet blip does not count. The one reading of that
    time: the recovery (`decide`) acts at or after it, and the controller's wake-up (`wakes.next_due`) is it."""
    return first_seen + grace


def stranded(pods: Iterable[Pod], nodes: Iterable[Node]) -> list[tuple[Pod, str]]:
    """Pods gate mode released narrowed to a node (`released_node`) that are still unbound while that node is gone
    or not Ready (or cordoned): with one feasible node they can never schedule. Each with the reason, which names
    the other gates a pod still waits for (not `schedulable`)."""
    state = {n.name: n for n in nodes}
    out = []
    for p in pods:
        node = released_node(p)
        if node is None:
            continue
        n = state.get(node)
        why = (
            "is gone"
            if n is None
            else "is not Ready"
            if not n.ready
            else "is cordoned"
            if n.unschedulable
            else ""
        )
        if why:
            waits = (
                "" if schedulable(p) else f" (it also waits for {', '.join(p.scheduling_gates)})"
            )
            out.append((p, f"node {node}, the one node it was narrowed to, {why}{waits}"))
    return out
