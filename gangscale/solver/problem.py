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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..fit import NodeLimits, label_keys, node_limits, placement_allows
from ..model import Gang, Placement, Pod
from ..resources import PODS, vectorizer
from ..snapshot import ClusterSnapshot

MICRO = 1_000_000  # money inside the solver: micro-dollars per hour


@dataclass(slots=True)
class Shape:
    sid: int
    req: tuple[int, ...]
    placement: Placement
    topology_keys: tuple[str, ...]


@dataclass(slots=True)
class PodClass:
    cid: int
    gang: int  # index into Problem.gangs
    shape: int
    pods: list[Pod]  # in the order they should be placed

    @property
    def count(self) -> int:
        return len(self.pods)


@dataclass(slots=True)
class GangInfo:
    gid: int
    gang: Gang
    classes: list[int]
    need: int  # members still to place for quorum (0: basic or quorum already bound)
    is_gang: bool  # policy gang with something still to prove
    priority: int
    pending: int


@dataclass(slots=True)
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


@dataclass(slots=True)
class Problem:
    resources: list[str]
    shapes: list[Shape]
    classes: list[PodClass]
    gangs: list[GangInfo]
    kinds: list[BinKind]
    compat: list[list[int]]  # shape -> compatible kind ids
    fit_count: dict[tuple[int, int], int]  # (shape, kind) -> pods of that shape on one empty bin
    greedy_base: Any = None  # arrays the greedy derives once per problem (a Problem is never mutated)

    def domain(self, shape: int, kind: int) -> tuple[str, ...] | None:
        keys = self.shapes[shape].topology_keys
        if not keys:
            return None
        labels = self.kinds[kind].labels
        return tuple(labels[k] for k in keys)


def _referenced_label_keys(shapes: list[Shape]) -> set[str]:
    keys: set[str] = set()
    for s in shapes:
        keys |= label_keys(s.placement)
        keys.update(s.topology_keys)
    return keys


def build_problem(snap: ClusterSnapshot) -> Problem:
    gangs_in = snap.solvable
    # per-node pod rules (anti-affinity, spread, hostPort) as pseudo-resources: see fit.node_limits
    limits = node_limits((p for g in gangs_in for p in g.pending), snap.bound)
    resources = sorted({PODS} | {r for g in gangs_in for p in g.pending for r in p.requests} | set(limits.caps))
    vec = vectorizer(resources)

    shapes: list[Shape] = []
    shape_ids: dict[tuple, int] = {}
    classes: list[PodClass] = []
    gangs: list[GangInfo] = []
    for gi, g in enumerate(gangs_in):
        by_shape: dict[int, list[Pod]] = {}
        for pod in sorted(g.pending, key=lambda p: (-p.priority, p.created, p.name)):
            key = (vec({**pod.requests, **limits.requests(pod)}), pod.placement, g.topology_keys)
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
        gangs.append(GangInfo(gi, g, cids, need, g.policy == "gang" and need > 0, g.effective_priority, len(g.pending)))

    kinds = _bin_kinds(snap, shapes, vec, limits)
    compat: list[list[int]] = [[] for _ in shapes]
    fit_count: dict[tuple[int, int], int] = {}
    allow_cache: dict[tuple[Placement, int], bool] = {}
    caps = np.array([k.cap for k in kinds], dtype=np.int64).reshape(len(kinds), len(resources))
    for s in shapes:
        req = np.array(s.req, dtype=np.int64)
        pos = req > 0  # pods of the shape that fit each empty bin (none, if it requests nothing)
        fits = (caps[:, pos] // req[pos]).min(axis=1) if pos.any() else np.zeros(len(kinds), dtype=np.int64)
        for kid in np.flatnonzero(fits > 0).tolist():
            k = kinds[kid]
            if any(key not in k.labels for key in s.topology_keys):
                continue
            n = int(fits[kid])
            ck = (s.placement, k.kid)
            ok = allow_cache.get(ck)
            if ok is None:
                ok = allow_cache[ck] = placement_allows(s.placement, k.labels, k.taints)
            if ok:
                compat[s.sid].append(k.kid)
                fit_count[(s.sid, k.kid)] = n
    _cap_headroom(kinds, compat, classes)
    return Problem(resources, shapes, classes, gangs, kinds, compat, fit_count)


def _cap_headroom(kinds: list[BinKind], compat: list[list[int]], classes: list[PodClass]) -> None:
    """A node group never needs more new nodes than the pending pods that fit it."""
    pods_of_shape: dict[int, int] = {}
    for c in classes:
        pods_of_shape[c.shape] = pods_of_shape.get(c.shape, 0) + c.count
    could_use = [0] * len(kinds)
    for sid, kids in enumerate(compat):
        for kid in kids:
            could_use[kid] += pods_of_shape.get(sid, 0)
    for k in kinds:
        if k.new:
            k.max_count = min(k.max_count, could_use[k.kid])


def _bin_kinds(snap: ClusterSnapshot, shapes: list[Shape], vec, limits: NodeLimits) -> list[BinKind]:
    relevant = _referenced_label_keys(shapes)
    kinds: list[BinKind] = []
    min_req = np.min(np.array([s.req for s in shapes]), axis=0) if shapes else None

    by_sig: dict[tuple, int] = {}
    for n in snap.nodes:
        free = vec({**{k: max(0, v) for k, v in n.free.items()}, **limits.free_on(n.name)})
        if min_req is not None and not all(f >= m for f, m in zip(free, min_req)):
            continue  # not even the smallest pod fits: skip the node entirely
        labels = {k: v for k, v in n.labels.items() if k in relevant}
        sig = (free, tuple(sorted(labels.items())), n.taints, n.node_group)
        kid = by_sig.get(sig)
        if kid is None:
            kid = by_sig[sig] = len(kinds)
            kinds.append(BinKind(kid, free, 0, 0, labels, False, n.node_group, n.taints))
        kinds[kid].max_count += 1
        kinds[kid].nodes.append(n.name)
    for g in snap.groups:
        if g.headroom <= 0:
            continue
        kid = len(kinds)
        kinds.append(
            BinKind(kid, vec({**g.allocatable, **limits.caps}), round(g.price_per_hour * MICRO), g.headroom, dict(g.labels), True, g.name,
                    g.taints, price=g.price_per_hour)
        )
    return kinds
