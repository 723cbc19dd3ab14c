"""The snapshot reduced to what the model needs: shapes, classes and bin kinds.

Identical pods collapse into *shapes* (same requests, placement rules and
topology keys) and, per gang, into *classes* with a count. Identical nodes
collapse into *bin kinds*: every existing node whose free capacity and
relevant labels/taints are the same is one kind with a multiplicity, and each
node group that can still grow is one kind with its headroom. The model then
counts pods and nodes instead of creating one variable per pod and node.

Per-node pod rules (hostname anti-affinity, hostname spread, hostPorts) enter
as extra resource dimensions (`fit.node_limits`): a member pod requests one
unit, a node offers the rule's cap less its bound members. Patterns, greedy,
CP-SAT and the bound then honour them with no code of their own.

Sizes follow what is pending, never the limits: a node group's headroom is
capped at the pending pods it could carry (every useful new node holds at
least one), so `maxSize: 1e9` builds no more than a group that fits the pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from ..fit import NodeLimits, label_keys, node_limits, placement_allows
from ..model import Gang, Placement, Pod
from ..resources import CPU, MEMORY, PODS, vectorizer
from ..snapshot import ClusterSnapshot, NodeView
from ..spread import SpreadBook, pin_gangs

MICRO = 1_000_000  # money inside the solver: micro-dollars per hour


@dataclass(frozen=True, slots=True)
class Shape:
    sid: int
    req: tuple[int, ...]
    placement: Placement
    topology_keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PodClass:
    cid: int
    gang: int  # index into Problem.gangs
    shape: int
    pods: list[Pod]  # in the order they should be placed

    @property
    def count(self) -> int:
        return len(self.pods)


@dataclass(frozen=True, slots=True)
class GangInfo:
    gid: int
    gang: Gang
    classes: list[int]
    need: int  # members still to place for quorum (0: basic or quorum already bound)
    is_gang: bool  # policy gang with something still to prove
    priority: int
    pending: int


@dataclass(frozen=True, slots=True)
class BinKind:
    kid: int
    cap: tuple[int, ...]
    cost: int  # micro-dollars per hour per node (0 for existing nodes)
    max_count: int  # multiplicity (existing) or headroom (node group)
    labels: dict[str, str]
    new: bool
    group: str | None  # node group name (new kinds, or existing nodes' group)
    taints: tuple = ()
    nodes: list[str] = field(default_factory=list)  # existing node names of this kind
    price: float = 0.0


def memory_per_cpu_octaves(resources: tuple[str, ...], rows: np.ndarray) -> np.ndarray | None:
    """log2 of (memory + 1) / (cpu + 1) over the last axis of `rows` (a request vector or a node's free capacity,
    one or many): where it lies between cpu-rich and memory-rich; None unless both resources are planned."""
    if CPU not in resources or MEMORY not in resources:
        return None
    c, m = resources.index(CPU), resources.index(MEMORY)
    return np.log2((rows[..., m] + 1.0) / (rows[..., c] + 1.0))


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, slots=True)
class Arrays:
    """What the greedy derives from a problem, computed once by `build_problem` and read-only (numpy arrays
    refuse writes): every greedy state, trial and explanation starts from these."""

    req: np.ndarray  # shapes x resources
    free: np.ndarray  # existing nodes x resources
    kind: np.ndarray  # existing nodes -> kind
    names: tuple[str, ...]  # existing node names, in the order of `free`
    compat_mask: np.ndarray  # shapes x kinds
    size: np.ndarray  # per shape: its largest share of any compatible bin (the placement order)
    new_compat: tuple[tuple[int, ...], ...]  # per shape: compatible kinds that are node groups
    # per topology-key tuple: (domain -> id, per kind the id of its domain, -1 where it lacks a key)
    domain_ids: dict[tuple[str, ...], tuple[dict[tuple[str, ...], int], np.ndarray]]
    shape_domains: tuple[
        frozenset[tuple[str, ...]], ...
    ]  # per shape: topology domains of its compatible kinds


@dataclass(frozen=True, slots=True)
class Problem:
    """Never changed once built (it and its parts are frozen): per-run caches live in the solver's own state."""

    resources: tuple[str, ...]
    shapes: tuple[Shape, ...]
    classes: tuple[PodClass, ...]
    gangs: tuple[GangInfo, ...]
    kinds: tuple[BinKind, ...]
    compat: tuple[tuple[int, ...], ...]  # shape -> compatible kind ids
    fit_count: dict[tuple[int, int], int]  # (shape, kind) -> pods of that shape on one empty bin
    arrays: Arrays
    # zone (non-hostname) topology spread: the deal `spread.pin_gangs` made
    spread: SpreadBook | None = None

    def domain(self, shape: int, kind: int) -> tuple[str, ...] | None:
        return _domain(self.shapes[shape], self.kinds[kind])

    def gang_domains(self, gid: int) -> list[tuple[str, ...] | None]:
        """The topology domains a gang may choose, sorted ([None]: it has no topology constraint)."""
        shapes = {self.classes[c].shape for c in self.gangs[gid].classes}
        if not any(self.shapes[s].topology_keys for s in shapes):
            return [None]
        return [*sorted(frozenset().union(*(self.arrays.shape_domains[s] for s in shapes)))]


def _referenced_label_keys(shapes: list[Shape]) -> set[str]:
    keys: set[str] = set()
    for s in shapes:
        keys |= label_keys(s.placement)
        keys.update(s.topology_keys)
    return keys


def build_problem(snap: ClusterSnapshot) -> Problem:
    """The snapshot as the solvers' problem: pods aggregated into shapes and per-gang classes, bins by kind."""
    # carriers of zone spread pinned to their dealt domains (spread.py)
    gangs_in, book = pin_gangs(snap)
    # per-node pod rules (anti-affinity, spread, hostPort) as pseudo-resources: see fit.node_limits
    limits = node_limits((p for g in gangs_in for p in g.pending), snap.bound)
    resources = sorted(
        {PODS} | {r for g in gangs_in for p in g.pending for r in p.requests} | set(limits.caps)
    )
    vec = vectorizer(resources)
    shapes, classes, gangs = _aggregate(gangs_in, vec, limits)
    kinds = _bin_kinds(snap, shapes, vec, limits)
    compat, fit_count = _compat(shapes, kinds, len(resources))
    kinds = _cap_headroom(kinds, compat, classes)
    compat_t = tuple(tuple(ks) for ks in compat)
    return Problem(
        tuple(resources),
        tuple(shapes),
        tuple(classes),
        tuple(gangs),
        tuple(kinds),
        compat_t,
        fit_count,
        _arrays(resources, shapes, kinds, compat_t),
        book,
    )


def _aggregate(
    gangs_in: list[Gang], vec: Callable[[Mapping[str, int]], tuple[int, ...]], limits: NodeLimits
) -> tuple[list[Shape], list[PodClass], list[GangInfo]]:
    """Pending pods grouped into shapes (requests with per-node limits, placement, topology keys), each gang's
    pods of one shape into a class (highest priority, then oldest, first), and each gang's quorum need."""
    shapes: list[Shape] = []
    shape_ids: dict[tuple, int] = {}
    classes: list[PodClass] = []
    gangs: list[GangInfo] = []
    for gi, g in enumerate(gangs_in):
        by_shape: dict[int, list[Pod]] = {}
        for pod in sorted(g.pending, key=lambda p: (-p.priority, p.created, p.name)):
            extra = limits.requests(pod)  # (none without per-node rules: no merged copy per pod)
            key = (
                vec({**pod.requests, **extra} if extra else pod.requests),
                pod.placement,
                g.topology_keys,
            )
            sid = shape_ids.get(key)
            if sid is None:
                sid = shape_ids[key] = len(shapes)
                shapes.append(Shape(sid, key[0], pod.placement, g.topology_keys))
            by_shape.setdefault(sid, []).append(pod)
        cids = []
        for sid, pods in by_shape.items():
            cids.append(len(classes))
            classes.append(PodClass(len(classes), gi, sid, pods))
        need = max(0, g.min_count - g.bound) if g.policy == "gang" else 0
        gangs.append(
            GangInfo(
                gi,
                g,
                cids,
                need,
                g.policy == "gang" and need > 0,
                g.effective_priority,
                len(g.pending),
            )
        )
    return shapes, classes, gangs


def _compat(
    shapes: list[Shape], kinds: list[BinKind], R: int
) -> tuple[list[list[int]], dict[tuple[int, int], int]]:
    """Per shape, the kinds it fits (requests, selectors and affinity, taints, topology keys present) and how many
    of its pods one empty bin of each holds. Kinds that look alike to placement (labels and taints) are judged
    once: a vector per shape over kinds, not a Python step per (shape, kind)."""
    caps = np.array([k.cap for k in kinds], dtype=np.int64).reshape(len(kinds), R)
    looks: dict[tuple, int] = {}
    look_of = np.array(
        [looks.setdefault((tuple(sorted(k.labels.items())), k.taints), len(looks)) for k in kinds],
        dtype=np.int64,
    )
    first = {v: i for i, v in reversed(list(enumerate(look_of.tolist())))}  # a kind of each look
    compat: list[list[int]] = []
    fit_count: dict[tuple[int, int], int] = {}
    for s in shapes:
        req = np.array(s.req, dtype=np.int64)
        pos = req > 0  # pods of the shape that fit each empty bin (none, if it requests nothing)
        fits = (
            (caps[:, pos] // req[pos]).min(axis=1)
            if pos.any()
            else np.zeros(len(kinds), dtype=np.int64)
        )
        allow = np.zeros(len(looks), dtype=bool)
        for look, i in first.items():
            k = kinds[i]
            allow[look] = all(key in k.labels for key in s.topology_keys) and placement_allows(
                s.placement, k.labels, k.taints
            )
        kids = (
            np.flatnonzero((fits > 0) & allow[look_of])
            if len(kinds)
            else np.zeros(0, dtype=np.int64)
        )
        compat.append(kids.tolist())
        fit_count.update(
            zip(((s.sid, kid) for kid in compat[-1]), fits[kids].tolist(), strict=True)
        )
    return compat, fit_count


def _arrays(
    resources: list[str],
    shapes: list[Shape],
    kinds: list[BinKind],
    compat: tuple[tuple[int, ...], ...],
) -> Arrays:
    R, nk = len(resources), len(kinds)
    req = np.array([s.req for s in shapes], dtype=np.int64).reshape(len(shapes), R)
    existing = [(k.kid, name) for k in kinds if not k.new for name in k.nodes]
    caps = np.array([k.cap for k in kinds], dtype=np.int64).reshape(nk, R)
    free = caps[[kid for kid, _ in existing]].reshape(len(existing), R)
    kind = np.array([kid for kid, _ in existing], dtype=np.int64)
    compat_mask = np.zeros((len(shapes), nk), dtype=bool)
    for s, ks in enumerate(compat):
        compat_mask[s, list(ks)] = True
    new_compat = tuple(tuple(kid for kid in ks if kinds[kid].new) for ks in compat)
    domain_ids = {
        keys: _domain_ids(kinds, keys)
        for keys in {s.topology_keys for s in shapes if s.topology_keys}
    }
    shape_domains = tuple(
        frozenset(_labels_at(kinds[kid], s.topology_keys) for kid in compat[s.sid])
        if s.topology_keys
        else frozenset()
        for s in shapes
    )
    return Arrays(
        _readonly(req),
        _readonly(free),
        _readonly(kind),
        tuple(name for _, name in existing),
        _readonly(compat_mask),
        _readonly(_sizes(req, caps, compat)),
        new_compat,
        domain_ids,
        shape_domains,
    )


def _sizes(req: np.ndarray, caps: np.ndarray, compat: tuple[tuple[int, ...], ...]) -> np.ndarray:
    """Per shape, its largest share of any compatible bin: big pods are placed first."""
    size = np.zeros(len(compat), dtype=float)
    capf = caps.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        for s, ks in enumerate(compat):
            if ks:
                c = capf[list(ks)]
                size[s] = np.where(c > 0, req[s].astype(float) / c, 0.0).max()
    return size


def _domain(shape: Shape, kind: BinKind) -> tuple[str, ...] | None:
    keys = shape.topology_keys
    return _labels_at(kind, keys) if keys else None


def _labels_at(kind: BinKind, keys: tuple[str, ...]) -> tuple[str, ...]:
    """The kind's values of these label keys: its topology domain (a compatible kind has every key)."""
    return tuple(kind.labels[k] for k in keys)


def _domain_ids(
    kinds: list[BinKind], keys: tuple[str, ...]
) -> tuple[dict[tuple[str, ...], int], np.ndarray]:
    """Per kind, the id of its domain for these keys (-1: it lacks a key): one pass over kinds."""
    seen: dict[tuple[str, ...], int] = {}
    ids = [
        seen.setdefault(_labels_at(k, keys), len(seen))
        if all(key in k.labels for key in keys)
        else -1
        for k in kinds
    ]
    return seen, _readonly(np.array(ids, dtype=np.int64))


def _cap_headroom(
    kinds: list[BinKind], compat: list[list[int]], classes: list[PodClass]
) -> list[BinKind]:
    """The kinds with a node group's headroom cut to the pending pods that fit it (it never needs more)."""
    pods_of_shape: dict[int, int] = {}
    for c in classes:
        pods_of_shape[c.shape] = pods_of_shape.get(c.shape, 0) + c.count
    could_use = [0] * len(kinds)
    for sid, kids in enumerate(compat):
        for kid in kids:
            could_use[kid] += pods_of_shape.get(sid, 0)
    return [
        replace(k, max_count=could_use[k.kid]) if k.new and could_use[k.kid] < k.max_count else k
        for k in kinds
    ]


def _bin_kinds(
    snap: ClusterSnapshot, shapes: list[Shape], vec, limits: NodeLimits
) -> list[BinKind]:
    relevant = _referenced_label_keys(shapes)
    kinds: list[BinKind] = []
    min_req = np.min(np.array([s.req for s in shapes]), axis=0) if shapes else None

    by_sig: dict[
        tuple, list[str]
    ] = {}  # existing nodes alike to the solver: one kind, built once they are all seen
    first: dict[tuple, tuple[NodeView, dict[str, str]]] = {}
    # Python ints: the per-node check below is per element
    least = min_req.tolist() if min_req is not None else None
    for n in snap.nodes:
        if limits.limits:
            free = vec(
                {
                    **{k: max(0, v) for k, v in n.free.items()},
                    **_less_daemons(limits.free_on(n.name), limits, n.daemon_pods),
                }
            )
        else:  # no per-node rule: the same tuple, each entry clamped at 0 after the vector is taken
            free = tuple([x if x > 0 else 0 for x in vec(n.free)])
        if least is not None and not all(f >= m for f, m in zip(free, least, strict=False)):
            continue  # not even the smallest pod fits: skip the node entirely
        labels = {k: v for k, v in n.labels.items() if k in relevant}
        sig = (free, tuple(sorted(labels.items())), n.taints, n.node_group)
        if sig not in by_sig:
            by_sig[sig], first[sig] = [], (n, labels)
        by_sig[sig].append(n.name)
    for kid, (sig, names) in enumerate(by_sig.items()):
        n, labels = first[sig]
        kinds.append(
            BinKind(kid, sig[0], 0, len(names), labels, False, n.node_group, n.taints, names)
        )
    for g in snap.groups:
        if g.headroom <= 0:
            continue
        kid = len(kinds)
        daemons = snap.daemons[g.name].pods if g.name in snap.daemons else ()
        kinds.append(
            BinKind(
                kid,
                vec({**g.allocatable, **_less_daemons(limits.caps, limits, daemons)}),
                round(g.price_per_hour * MICRO),
                g.headroom,
                dict(g.labels),
                True,
                g.name,
                g.taints,
                price=g.price_per_hour,
            )
        )
    return kinds


def _less_daemons(
    caps: dict[str, int], limits: NodeLimits, daemon_pods: tuple[Pod, ...]
) -> dict[str, int]:
    """A new or upcoming node's per-node limits less its DaemonSet pods' share: a daemon pod using a hostPort (or
    matched by an anti-affinity or spread term) takes its slot before any planned pod (gangscale.daemonsets)."""
    if not daemon_pods:
        return caps
    out = dict(caps)
    for lim in limits.limits:
        taken = sum(1 for p in daemon_pods if lim.member(p))
        if taken:
            out[lim.name] = max(0, out[lim.name] - taken)
    return out
