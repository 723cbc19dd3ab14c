"""One backlog as arrays every policy and the evaluator share.

Built from gangscale's own `ClusterSnapshot` (the same ingest, the same free
capacity, the same node-group templates), with gangscale.fit deciding
selectors, affinity and taints. Resources are integer vectors over the
resources the pending pods request; compatibility is a boolean table from pod
*shape* (requests + placement rules) to node *signature* (the labels the pods
refer to + taints), so no policy re-implements the scheduler's filters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gangscale.catalog import load_catalog
from gangscale.fit import label_keys, placement_allows
from gangscale.ingest import ingest
from gangscale.instance_types import load_instance_types
from gangscale.loader import read_objects
from gangscale.model import Gang, Placement, Pod
from gangscale.resources import CPU, MEMORY, PODS, vectorizer
from gangscale.snapshot import ClusterSnapshot, build_snapshot


@dataclass(slots=True)
class Placed:
    """What a policy decided: pods on existing (or upcoming) nodes, and new nodes with their pods."""

    existing: dict[str, list[str]] = field(default_factory=dict)  # node name -> pod keys
    new_nodes: list[tuple[str, list[str]]] = field(default_factory=list)  # (node group, pod keys)
    notes: dict = field(default_factory=dict)


@dataclass(slots=True)
class GangRef:
    gang: Gang
    policy: str
    need: int  # members to place for quorum (min_count - bound), gang policy only
    topology_keys: tuple[str, ...]
    pods: list[int]  # indices into World.pods
    created: str


@dataclass(slots=True)
class World:
    snap: ClusterSnapshot
    resources: list[str]
    pods: list[Pod]  # pending pods of solvable gangs, gang by gang, in file order
    pod_gang: np.ndarray  # pod -> gang index
    pod_shape: np.ndarray  # pod -> shape index
    pod_index: dict[str, int]
    gangs: list[GangRef]
    shape_req: np.ndarray  # shapes x R
    shape_placement: list[Placement]
    # nodes that take pods now or soon (snapshot order: existing, then upcoming)
    node_names: list[str]
    node_index: dict[str, int]
    node_free: np.ndarray  # N x R
    node_sig: np.ndarray  # N
    node_group: np.ndarray  # N, index into groups or -1
    node_upcoming: np.ndarray  # N bool
    node_labels: list[dict[str, str]]
    # node groups (every catalog entry; headroom may be 0)
    group_names: list[str]
    group_index: dict[str, int]
    group_alloc: np.ndarray  # G x R
    group_capacity: (
        np.ndarray
    )  # G x 2 (cpu millicores, memory bytes): the instance's capacity, not allocatable
    group_price: np.ndarray  # G, dollars per hour
    group_headroom: np.ndarray  # G
    group_sig: np.ndarray  # G
    group_labels: list[dict[str, str]]
    group_taints: list[tuple]
    group_itype: list[str]
    compat: np.ndarray  # shapes x signatures
    sig_count: int

    @property
    def cpu(self) -> int:
        return self.resources.index(CPU) if CPU in self.resources else -1

    @property
    def mem(self) -> int:
        return self.resources.index(MEMORY) if MEMORY in self.resources else -1

    def shape_fits_group(self, s: int, g: int) -> bool:
        return bool(self.compat[s, self.group_sig[g]]) and bool(
            (self.shape_req[s] <= self.group_alloc[g]).all()
        )

    def per_node(self, s: int, cap: np.ndarray) -> int:
        req = self.shape_req[s]
        pos = req > 0
        if not pos.any():
            return 1 << 30
        return int((cap[pos] // req[pos]).min())


def load_world(cluster: str | Path, catalog: str | Path) -> World:
    groups, warnings = load_catalog(catalog)
    snap = build_snapshot(ingest(read_objects(cluster)), groups, warnings)
    return build_world(snap)


def _relevant_keys(placements: list[Placement], topo: set[str]) -> set[str]:
    keys = set(topo)
    for p in placements:
        keys |= label_keys(p)
    return keys


def build_world(snap: ClusterSnapshot) -> World:
    solvable = snap.solvable
    resources = sorted(
        {PODS, CPU, MEMORY} | {r for g in solvable for p in g.pending for r in p.requests}
    )
    R = len(resources)
    vec = vectorizer(resources)

    pods: list[Pod] = []
    pod_gang: list[int] = []
    pod_shape: list[int] = []
    shapes: dict[tuple, int] = {}
    shape_req: list[tuple[int, ...]] = []
    shape_placement: list[Placement] = []
    gangs: list[GangRef] = []
    topo: set[str] = set()
    for gi, g in enumerate(solvable):
        idx = []
        for p in g.pending:
            key = (vec(p.requests), p.placement)
            s = shapes.get(key)
            if s is None:
                s = shapes[key] = len(shape_req)
                shape_req.append(key[0])
                shape_placement.append(p.placement)
            idx.append(len(pods))
            pods.append(p)
            pod_gang.append(gi)
            pod_shape.append(s)
        need = max(0, g.min_count - g.bound) if g.policy == "gang" else 0
        gangs.append(GangRef(g, g.policy, need, tuple(g.topology_keys), idx, g.created))
        topo.update(g.topology_keys)

    relevant = _relevant_keys(shape_placement, topo)
    sigs: dict[tuple, int] = {}
    sig_rules: list[tuple[dict[str, str], tuple]] = []

    def sig_of(labels: dict[str, str], taints: tuple) -> int:
        # the few relevant keys looked up, not every label filtered: the same sorted pairs (keys are unique)
        lab = tuple(sorted((k, labels[k]) for k in relevant if k in labels))
        key = (lab, taints)
        s = sigs.get(key)
        if s is None:
            s = sigs[key] = len(sig_rules)
            sig_rules.append((dict(lab), taints))
        return s

    gindex = {g.name: i for i, g in enumerate(snap.groups)}
    itypes = load_instance_types()
    node_names, node_free, node_sig, node_group, node_up, node_labels = [], [], [], [], [], []
    for n in snap.nodes:
        node_names.append(n.name)
        node_free.append(tuple([x if x > 0 else 0 for x in vec(n.free)]))  # each entry clamped at 0
        node_sig.append(sig_of(n.labels, tuple(n.taints)))
        node_group.append(gindex.get(n.node_group, -1) if n.node_group else -1)
        node_up.append(n.upcoming)
        node_labels.append(n.labels)
    group_alloc, group_cap, group_sig = [], [], []
    for group in snap.groups:
        group_alloc.append(vec(group.allocatable))
        it = itypes.get(group.instance_type)
        if it is not None:
            group_cap.append((it.vcpu * 1000, it.memory_mib * 2**20))
        else:
            group_cap.append((group.allocatable.get(CPU, 0), group.allocatable.get(MEMORY, 0)))
        group_sig.append(sig_of(group.labels, tuple(group.taints)))

    compat = np.zeros((len(shape_req), len(sig_rules)), dtype=bool)
    for s, pl in enumerate(shape_placement):
        for k, (labels, taints) in enumerate(sig_rules):
            compat[s, k] = placement_allows(pl, labels, taints)

    def arr(rows: list, width: int) -> np.ndarray:
        return np.array(rows, dtype=np.int64).reshape(len(rows), width)

    return World(
        snap=snap,
        resources=resources,
        pods=pods,
        pod_gang=np.array(pod_gang, dtype=np.int64),
        pod_shape=np.array(pod_shape, dtype=np.int64),
        pod_index={p.key: i for i, p in enumerate(pods)},
        gangs=gangs,
        shape_req=arr(shape_req, R),
        shape_placement=shape_placement,
        node_names=node_names,
        node_index={n: i for i, n in enumerate(node_names)},
        node_free=arr(node_free, R),
        node_sig=np.array(node_sig, dtype=np.int64),
        node_group=np.array(node_group, dtype=np.int64),
        node_upcoming=np.array(node_up, dtype=bool),
        node_labels=node_labels,
        group_names=[g.name for g in snap.groups],
        group_index=gindex,
        group_alloc=arr(group_alloc, R),
        group_capacity=arr(group_cap, 2),
        group_price=np.array([g.price_per_hour for g in snap.groups], dtype=float),
        group_headroom=np.array([g.headroom for g in snap.groups], dtype=np.int64),
        group_sig=np.array(group_sig, dtype=np.int64),
        group_labels=[dict(g.labels) for g in snap.groups],
        group_taints=[tuple(g.taints) for g in snap.groups],
        group_itype=[g.instance_type for g in snap.groups],
        compat=compat,
        sig_count=len(sig_rules),
    )
