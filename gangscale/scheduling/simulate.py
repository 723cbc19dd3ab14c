"""What kube-scheduler would do with a set of nodes and pending gangs.

`simulate(nodes, gangs, ...)` pops queue entries in PrioritySort order (queue.py), runs the filters
(NodeUnschedulable, NodeResourcesFit incl. extended resources and the pods slot, NodeAffinity /
nodeSelector, TaintToleration) and the scores (scores.py) for one pod at a time, takes the best
node (ties broken uniformly at random with the seeded RNG: schedule_one.go `selectHost` samples a
reservoir, which is the same distribution; one draw per pod is cheaper), and applies each gang
API's admission as its scheduler does:

- 1.35 Workload (`GangScheduling`, KEP-4671): pods leave the queue one by one in PrioritySort
  order; each is assumed on its node and waits at Permit until minCount members are assumed; a
  gang that does not reach quorum holds its capacity until the Permit timeout, then all its assumed
  pods are rolled back (modelled as the end of a queue pass).
- scheduler-plugins coscheduling: the same Permit wait with minMember, but the queue keeps a
  group's pods together (coscheduling `Less`).
- 1.36+ PodGroup (v1alpha2 / v1beta1) and Volcano jobs: the whole group in one cycle, each member
  placed greedily; if minCount members fit they are all bound (elastic gangs take every member that
  fits), otherwise none is and no capacity is held. With a topology constraint, one cycle per domain
  (KEP-5732), and the best-scored domain where minCount fit is kept.
- basic groups and lone pods: every pod on its own.

Unplaced pods retry in later passes (the scheduler re-queues them when capacity frees), until a
pass binds nothing new.

Speed: pods without pod-to-pod rules (on a cluster where no placed pod has any) take an incremental
path: per shape (profile, placement, requests) the filters' verdict and the node's own scores are
kept per node, and a pod re-checks only the nodes placements changed since its shape was last used,
and of those only the ones its shape fitted or a pod left (adding a pod never makes a node fit: `_Shape`,
`_sync`); the window of percentageOfNodesToScore and the rotating start are taken on the kept arrays.
`fast=False` is the straightforward per-pod path (every node filtered and scored), and
tests/scheduling/test_fastpath.py checks both give identical results. `simulate_seeds` /
`simulate_iter` run several seeds over nodes and gangs built once; a run that met no tie (no random draw) is every
seed's run, so the other seeds take its result without running. Invariant: the same inputs and seed give the same
result; nodes and gangs are only read. A 1.36+ PodGroup with a topology constraint (gang policy) is placed in one domain, as
KEP-5732's placement cycle does (placement.py: the group cycle per domain, the best-scored feasible
one kept). Not modelled: preemption, preferred affinity, inter-pod scoring, DRA;
`percentageOfNodesToScore` is modelled (upstream's adaptive default; within a placement, over its nodes).
"""

from __future__ import annotations

import bisect
import copy
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..fit import label_keys, labels_match, term_matches, tolerates, tolerates_all
from ..model import (
    API_COSCHEDULING,
    API_PODGROUP_V1ALPHA2,
    API_PODGROUP_V1BETA1,
    API_VOLCANO,
    NO_RULES,
    Gang,
    GangKey,
    NodeGroup,
    Placement,
    Pod,
    Taint,
)
from ..resources import CPU, GPU, MEMORY
from ..snapshot import RESERVED_TAINT, NodeView
from .config import Profile, SchedulerConfig, default_config
from .placement import domains, placement_score
from .queue import COSCHEDULING, Entry, coscheduling_key, group_key, job_key, pod_key
from .scores import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    MAX_NODE_SCORE,
    broken_linear,
    is_scalar,
)
from .topology import domain_spread_ok, keep_placed

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
MIN_FEASIBLE_NODES = 100  # schedule_one.go minFeasibleNodesToFind
MIN_FEASIBLE_PERCENT = 5  # minFeasibleNodesPercentageToFind
BASE_PERCENT = 50  # basePercentageOfNodesToScore

MODE_POD, MODE_PERMIT, MODE_GROUP = "pod", "permit", "group"


def gang_mode(g: Gang) -> str:
    """How the gang's scheduler admits it (see the module docstring)."""
    if g.policy != "gang":
        return MODE_POD
    if g.api in (API_PODGROUP_V1ALPHA2, API_PODGROUP_V1BETA1, API_VOLCANO):
        return MODE_GROUP
    return MODE_PERMIT


def pinned_names(pl: Placement) -> frozenset[str] | None:
    """The node names a placement's required affinity allows when every term names them (`metadata.name In`,
    as gate mode narrows a released pod: KEP-3521), else None. Filters need look at no other node."""
    if not pl.affinity:
        return None
    names: set[str] = set()
    for term in pl.affinity:
        if not term:
            continue  # an empty term matches no node
        named = [r for r in term if r.key == "metadata.name" and r.operator == "In"]
        if not named:
            return None
        allowed = set(named[0].values)
        for r in named[1:]:
            allowed &= set(r.values)
        names |= allowed
    return frozenset(names)


@dataclass(slots=True)
class SimNode:
    """A node the scheduler sees: existing, upcoming (bought, not yet registered) or new (planned)."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: dict[str, int]
    node_group: str | None = None
    kind: str = "existing"  # existing | upcoming | new
    unschedulable: bool = False
    # DaemonSet pods on an arriving (upcoming or new) node: bound before any queued pod, as the DaemonSet controller
    # creates them when the node registers and they tolerate its not-ready taints (gangscale.daemonsets)
    daemon_pods: tuple[Pod, ...] = ()


def nodes_from_views(views: Iterable[NodeView], bound: Iterable[Pod] = ()) -> list[SimNode]:
    """Snapshot nodes as the scheduler sees them: allocatable = free + what bound pods request (and, on an upcoming
    node, what its DaemonSet pods request: they are bound on it first).

    The planner-only reservation taint is dropped: the real scheduler never sees it.
    """
    used: dict[str, dict[str, int]] = {}
    for p in bound:
        if p.node_name:
            u = used.setdefault(p.node_name, {})
            for k, x in p.requests.items():
                u[k] = u.get(k, 0) + x
    out = []
    for v in views:
        u = used.get(v.name)
        if v.daemon_pods:
            u = dict(u or {})
            for p in v.daemon_pods:
                for k, x in p.requests.items():
                    u[k] = u.get(k, 0) + x
        if (
            u is None
        ):  # no bound pod: the free capacity itself (the same keys and values as the general case)
            alloc = {k: x if x > 0 else 0 for k, x in v.free.items()}
        else:
            alloc = {k: max(0, v.free.get(k, 0)) + u.get(k, 0) for k in set(v.free) | set(u)}
        taints = (
            v.taints
            if not any(t.key == RESERVED_TAINT for t in v.taints)
            else tuple(t for t in v.taints if t.key != RESERVED_TAINT)
        )
        out.append(
            SimNode(
                v.name,
                dict(v.labels),
                tuple(taints),
                alloc,
                v.node_group,
                "upcoming" if v.upcoming else "existing",
                daemon_pods=v.daemon_pods,
            )
        )
    return out


def planned_nodes(
    groups: Sequence[NodeGroup],
    names: Sequence[str],
    daemons: Mapping[str, Sequence[Pod]] | None = None,
) -> list[SimNode]:
    """One new node per entry of `names` (node-group names, e.g. a plan's `newNodes[].nodeGroup`). `daemons`: per
    group, the DaemonSet pods its new nodes run, when `groups` carry allocatable net of them (a snapshot's): the
    node gets them back, bound (None: `groups` as they are, no daemon pods)."""
    by_name = {g.name: g for g in groups}
    out = []
    for i, gname in enumerate(names):
        out.append(
            arriving_node(
                by_name[gname], f"{gname}/new-{i + 1}", tuple((daemons or {}).get(gname, ()))
            )
        )
    return out


def arriving_node(
    g: NodeGroup, name: str, daemon_pods: tuple[Pod, ...] = (), net: bool = True
) -> SimNode:
    """A new node `name` of group `g` with its DaemonSet pods bound. `net`: `g.allocatable` is already less the daemon
    pods' requests (a snapshot's groups), so they are added back to make the node's allocatable."""
    labels = {**g.labels, "kubernetes.io/hostname": name, "metadata.name": name}
    alloc = dict(g.allocatable)
    if net:
        for p in daemon_pods:
            for k, x in p.requests.items():
                alloc[k] = alloc.get(k, 0) + x
    return SimNode(name, labels, tuple(g.taints), alloc, g.name, "new", daemon_pods=daemon_pods)


@dataclass(slots=True, eq=False)
class GangOutcome:
    key: GangKey
    started: bool
    placed: int  # members the scheduler binds
    need: int  # members still needed for quorum (minCount - bound); 1 for basic groups
    why: str | Callable[[], str] = (
        ""  # the reason, or how to word it (worded on first read: most are never read)
    )

    @property
    def reason(self) -> str:
        """Why not started (empty when started)."""
        if callable(self.why):
            self.why = self.why()
        return self.why

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GangOutcome) and (
            self.key,
            self.started,
            self.placed,
            self.need,
            self.reason,
        ) == (other.key, other.started, other.placed, other.need, other.reason)


class _NodePods(Mapping[str, list[str]]):
    """Node name -> the keys of the pods on it (bound first, then placed), for the nodes holding any: read from
    the run's final state on demand (observe mode asks about a few new nodes of thousands; no run changes that
    state once its result exists)."""

    __slots__ = ("_c",)

    def __init__(self, c: _Cluster) -> None:
        self._c = c

    def __getitem__(self, name: str) -> list[str]:
        j = self._c.index.get(name)
        if j is None or _holds_none(self._c, j):
            raise KeyError(name)
        daemons = {id(p) for p in self._c.nodes[j].daemon_pods}
        return [p.key for p in self._c.pods_on[j] if id(p) not in daemons]

    def __iter__(self) -> Iterator[str]:
        return (n.name for j, n in enumerate(self._c.nodes) if not _holds_none(self._c, j))

    def __len__(self) -> int:
        return sum(1 for j in range(len(self._c.nodes)) if not _holds_none(self._c, j))


def _holds_none(c: _Cluster, j: int) -> bool:
    """Node j holds no pod besides its DaemonSet pods (those are bound first and never taken off)."""
    return len(c.pods_on[j]) <= len(c.nodes[j].daemon_pods)


@dataclass(slots=True)
class SimResult:
    placement: dict[str, str]  # pod key -> node name
    outcomes: dict[GangKey, GangOutcome]
    empty_nodes: list[str]  # upcoming and new nodes no pod lands on
    node_pods: Mapping[str, list[str]] = field(default_factory=dict)
    profiles: list[str] = field(default_factory=list)  # Profile.describe() of every profile used

    @property
    def started(self) -> set[GangKey]:
        return {k for k, o in self.outcomes.items() if o.started}


def num_feasible_to_find(n: int, percentage: int) -> int:
    """schedule_one.go `numFeasibleNodesToFind`: how many feasible nodes the scheduler scores."""
    if n < MIN_FEASIBLE_NODES or percentage >= 100:
        return n
    pct = percentage or max(MIN_FEASIBLE_PERCENT, BASE_PERCENT - n // 125)
    return max(MIN_FEASIBLE_NODES, n * pct // 100)


def _columns(nodes: Iterable[SimNode], pod_res: frozenset[str]) -> list[str]:
    """The resource columns of a cluster's arrays: every resource a node has or a pod requests, cpu and memory."""
    return sorted({r for n in nodes for r in n.allocatable} | pod_res | {CPU, MEMORY})


class _Cluster:
    """Nodes as integer arrays; placing and removing pods updates free / requested / non-zero requested."""

    def __init__(self, nodes: Sequence[SimNode], pods: Iterable[Pod], bound: Iterable[Pod]) -> None:
        self.nodes = list(nodes)
        self.pod_res = frozenset(r for p in pods for r in p.requests)
        self.res = _columns(self.nodes, self.pod_res)
        self.ri = {r: i for i, r in enumerate(self.res)}
        N, R = len(self.nodes), len(self.res)
        self.alloc_rows: list[list[int]] = [
            [0] * R for _ in self.nodes
        ]  # filled as rows, then one array
        for row, n in zip(self.alloc_rows, self.nodes):
            for r, v in n.allocatable.items():
                row[self.ri[r]] = v
        self.alloc = np.array(self.alloc_rows, dtype=np.int64).reshape(N, R)
        self.index = {n.name: j for j, n in enumerate(self.nodes)}
        self.all = np.arange(N)
        self._compat: dict[
            Placement, np.ndarray
        ] = {}  # these three depend on the nodes only: shared by fresh()
        self._prefer: dict[Placement, np.ndarray] = {}
        self._vecs: dict[tuple, np.ndarray] = {}
        self._domains: dict[tuple[str, ...], list[tuple[tuple[str, ...], np.ndarray]]] = {}
        self._no_prefer: np.ndarray | None = None
        self._class_of: dict[
            tuple, tuple[np.ndarray, list[int]]
        ] = {}  # `_classes`: nodes only, shared by fresh()
        # id(pod) -> `_vecs_of(pod)` (`place`, `remove`), shared by fresh()
        self._pod_vecs: dict[int, tuple[Pod, list[tuple[int, int]], int, int, bool, bool]] = {}
        # id(pod) -> (pod, a number per (placement, requests)): `_Engine._select_fast`'s shape key without hashing the
        # placement again in every seed's run (pods only: shared by fresh() and subset())
        self._shape_ids: dict[int, tuple[Pod, int]] = {}
        self._shape_nums: dict[tuple, int] = {}
        self._start = self._bound_state(
            [(j, p) for p in bound if (j := self.index.get(p.node_name or "")) is not None]
            + [(j, p) for j, n in enumerate(self.nodes) for p in n.daemon_pods]
        )
        self._reset()

    def _bound_state(self, bound: list[tuple[int, Pod]]) -> tuple:
        """The bound pods' used / nz / pods_on / anti / spread state (and used / nz as row lists), summed once per
        cluster (every seed run starts from it: `_reset` copies the arrays and shares the rows until a run changes
        one). The same integers and list orders as adding them one by one with `place`."""
        N, R = self.alloc.shape
        used = np.zeros((N, R), dtype=np.int64)
        nz = np.zeros((N, 2), dtype=np.int64)
        pods_on: list[list[Pod]] = [[] for _ in self.nodes]
        anti: Counter[int] = Counter()
        spread: list[tuple[Pod, int]] = []
        alike: dict[
            tuple, tuple[Pod, list[int]]
        ] = {}  # pods by request set: one vector sum per set
        for j, p in bound:
            key = tuple(p.requests.items())
            hit = alike.get(key)
            if hit is None:
                alike[key] = (p, [j])
            else:
                hit[1].append(j)
            pods_on[j].append(p)
            if p.rules.spread or p.rules.domain_spread:
                spread.append((p, j))
            if p.rules.anti_affinity:
                anti[j] += 1
        for p, js in alike.values():
            np.add.at(used, js, self.vec(p))
            np.add.at(nz, js, self.nz_vec(p))
        return used, nz, pods_on, anti, spread, used.tolist(), nz.tolist()

    def _reset(self) -> None:
        used, nz, pods_on, anti, spread, urows, nzrows = self._start
        self._used = used.copy()
        self._nz = nz.copy()  # non-zero requested cpu, memory (scoring)
        # the same rows as Python lists: `place` writes these, the arrays get the rows in `_stale` on their next read.
        # These and `pods_on` share the bound state's rows until `_own` copies one (most runs touch a few nodes)
        self._urows: list[list[int]] = list(urows)
        self._nzrows: list[list[int]] = list(nzrows)
        self._stale: set[int] = set()
        self.pods_on: list[list[Pod]] = list(pods_on)
        self._owned: set[int] = set()  # nodes whose rows and pod list this run has copied (`_own`)
        self.anti_nodes: Counter[int] = Counter(
            anti
        )  # nodes holding pods with required anti-affinity (symmetry)
        self.spread_pods: list[tuple[Pod, int]] = list(
            spread
        )  # placed pods with DoNotSchedule spread, and their node
        self.log: list[
            int
        ] = []  # every node a pod was placed on or removed since the bound state (shape caches sync from it)
        self.removals = (
            0  # pods taken off nodes so far: while it stands still, free capacity only shrinks
        )
        self.rlog: list[
            int
        ] = []  # the node of every removal, in order (`_sync`: which nodes may fit a shape again)

    @property
    def used(self) -> np.ndarray:
        """What the pods on each node request, per resource (`res`); read-only to callers."""
        if self._stale:
            self._flush()
        return self._used

    @property
    def nz(self) -> np.ndarray:
        """Non-zero requested cpu and memory per node (scoring); read-only to callers."""
        if self._stale:
            self._flush()
        return self._nz

    def _flush(self) -> None:
        """Copy the rows placements changed since the last read into the arrays (one numpy write for all of them:
        a placement costs a few Python additions, not two numpy row updates)."""
        rows = list(self._stale)
        self._used[rows] = [self._urows[j] for j in rows]
        self._nz[rows] = [self._nzrows[j] for j in rows]
        self._stale.clear()

    def lists(self, j: int) -> tuple[list[int], list[int]]:
        """Node j's `used` and `nz` rows as Python lists (the per-node re-checks' input; always current)."""
        return self._urows[j], self._nzrows[j]

    def subset(self, nodes: Sequence[SimNode], keep: Sequence[int]) -> _Cluster:
        """The cluster over `nodes` = `self.nodes[keep]` (in that order), with only the bound pods on them: the
        arrays, bound state and filter verdicts (all per node) taken from this one rather than built again. The
        caller checks that the resource columns stay the same (`_columns`)."""
        other = copy.copy(self)
        other.nodes = list(nodes)
        other.alloc_rows = [self.alloc_rows[j] for j in keep]
        other.alloc = self.alloc[np.asarray(keep, dtype=np.intp)].reshape(len(keep), len(self.res))
        other.index = {n.name: j for j, n in enumerate(other.nodes)}
        other.all = np.arange(len(keep))
        sel = np.asarray(keep, dtype=np.intp)
        other._compat = {k: v[sel] for k, v in self._compat.items()}
        other._prefer, other._domains, other._no_prefer, other._class_of = {}, {}, None, {}
        used, nz, pods_on, anti, spread, urows, nzrows = self._start
        pos = {old: new for new, old in enumerate(keep)}
        other._start = (
            used[sel],
            nz[sel],
            [pods_on[j] for j in keep],
            Counter({pos[j]: x for j, x in anti.items() if j in pos}),
            [(p, pos[j]) for p, j in spread if j in pos],
            [urows[j] for j in keep],
            [nzrows[j] for j in keep],
        )
        other._reset()
        return other

    def fresh(self) -> _Cluster:
        """The same nodes with only the bound pods on them, sharing the per-node caches (another seed's run)."""
        other = copy.copy(self)
        other._reset()
        return other

    def vec(self, pod: Pod) -> np.ndarray:
        """The pod's requests over `res` (memoised per request set; callers never write to it)."""
        key = tuple(pod.requests.items())
        v = self._vecs.get(key)
        if v is None:
            v = np.zeros(len(self.res), dtype=np.int64)
            for r, x in pod.requests.items():
                v[self.ri[r]] = x
            v.flags.writeable = False
            self._vecs[key] = v
        return v

    def nz_vec(self, pod: Pod) -> np.ndarray:
        """`nonzero(pod)` as a row of `nz` (memoised like `vec`)."""
        key = ("nz", *pod.requests.items())
        v = self._vecs.get(key)
        if v is None:
            v = np.array(self.nonzero(pod), dtype=np.int64)
            v.flags.writeable = False
            self._vecs[key] = v
        return v

    @staticmethod
    def nonzero(pod: Pod) -> tuple[int, int]:
        cpu, mem = pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)
        return (cpu or DEFAULT_MILLI_CPU_REQUEST, mem or DEFAULT_MEMORY_REQUEST)

    def _vecs_of(self, pod: Pod) -> tuple[Pod, list[tuple[int, int]], int, int, bool, bool]:
        """The pod's non-zero requests as (column, amount), `nonzero(pod)`, and whether it has DoNotSchedule spread /
        required anti-affinity (memoised per pod: `place`, `remove`)."""
        hit = self._pod_vecs.get(id(pod))
        if (
            hit is None or hit[0] is not pod
        ):  # the entry holds the pod: its id is never reused while memoised
            req = [(i, x) for i, x in enumerate(self.vec(pod).tolist()) if x]
            hit = self._pod_vecs[id(pod)] = (
                pod,
                req,
                *self.nonzero(pod),
                bool(pod.rules.spread or pod.rules.domain_spread),
                bool(pod.rules.anti_affinity),
            )
        return hit

    def _own(self, j: int) -> None:
        """Copy node j's rows and pod list before this run's first change to them (the bound state's are shared)."""
        self._owned.add(j)
        self._urows[j] = list(self._urows[j])
        self._nzrows[j] = list(self._nzrows[j])
        self.pods_on[j] = list(self.pods_on[j])

    def place(self, j: int, pod: Pod) -> None:
        self.log.append(j)
        self._stale.add(j)
        if j not in self._owned:
            self._own(j)
        hit = self._pod_vecs.get(id(pod))
        if hit is None or hit[0] is not pod:
            hit = self._vecs_of(pod)
        _, req, nzc, nzm, spread, anti = hit
        u, nzr = self._urows[j], self._nzrows[j]
        for i, x in req:
            u[i] += x
        nzr[0] += nzc
        nzr[1] += nzm
        self.pods_on[j].append(pod)
        if spread:
            self.spread_pods.append((pod, j))
        if anti:
            self.anti_nodes[j] += 1

    def remove(self, j: int, pod: Pod) -> None:
        self.log.append(j)
        self.rlog.append(j)
        self._stale.add(j)
        if j not in self._owned:
            self._own(j)
        self.removals += 1
        _, req, nzc, nzm, spread, anti = self._vecs_of(pod)
        u, nzr = self._urows[j], self._nzrows[j]
        for i, x in req:
            u[i] -= x
        nzr[0] -= nzc
        nzr[1] -= nzm
        self.pods_on[j].remove(pod)
        if spread:
            self.spread_pods.remove((pod, j))
        if anti:
            self.anti_nodes[j] -= 1
            if not self.anti_nodes[j]:
                del self.anti_nodes[j]

    def shape_id(self, pod: Pod) -> int:
        """The number of the pod's (placement, requests) class, the same for every seed's run on these pods."""
        hit = self._shape_ids.get(id(pod))
        if (
            hit is None or hit[0] is not pod
        ):  # the entry holds the pod: its id is never reused while memoised
            key = (pod.placement, tuple(pod.requests.items()))
            num = self._shape_nums.setdefault(key, len(self._shape_nums))
            hit = self._shape_ids[id(pod)] = (pod, num)
        return hit[1]

    def rows(self, pl: Placement) -> Iterable[int]:
        """The nodes a placement's filters need to look at: those it names (`pinned_names`), else every node."""
        names = pinned_names(pl)
        if names is None:
            return range(len(self.nodes))
        return sorted(j for name in names if (j := self.index.get(name)) is not None)

    def _classes(self, keys: tuple[str, ...], taints: bool) -> tuple[np.ndarray, list[int]]:
        """Nodes alike on these labels (and taints and cordon, with `taints`) are alike to a filter or score that
        reads only those: each node's class index, and the first node of each class (memoised per cluster)."""
        key = (keys, taints)
        hit = self._class_of.get(key)
        if hit is None:
            ids: dict[tuple, int] = {}
            first: list[int] = []
            of = np.empty(len(self.nodes), dtype=np.intp)
            for j, n in enumerate(self.nodes):
                sig = (
                    (tuple(n.labels.get(k) for k in keys), n.taints, n.unschedulable)
                    if taints
                    else tuple(n.labels.get(k) for k in keys)
                )
                c = ids.get(sig)
                if c is None:
                    c = ids[sig] = len(first)
                    first.append(j)
                of[j] = c
            hit = self._class_of[key] = (of, first)
        return hit

    def _per_class(
        self,
        pl: Placement,
        keys: tuple[str, ...],
        taints: bool,
        test: Callable[[SimNode], int],
        dtype: type,
    ) -> np.ndarray:
        """`test` of every node the placement's filters look at (`rows`), evaluated once per class of alike nodes."""
        names = pinned_names(pl)
        if names is not None:  # a few named nodes: each on its own
            out = np.zeros(len(self.nodes), dtype=dtype)
            for j in self.rows(pl):
                out[j] = test(self.nodes[j])
            return out
        of, first = self._classes(keys, taints)
        return np.array([test(self.nodes[j]) for j in first], dtype=dtype)[of]

    def compat(self, pl: Placement, profile: Profile) -> np.ndarray:
        """NodeUnschedulable, NodeAffinity/nodeSelector and TaintToleration filters (resources aside)."""
        hit = self._compat.get(pl)
        if hit is None:

            def ok(n: SimNode) -> bool:
                if (
                    "NodeUnschedulable" in profile.filters
                    and n.unschedulable
                    and not any(
                        tolerates(t, Taint(UNSCHEDULABLE_TAINT, "", "NoSchedule"))
                        for t in pl.tolerations
                    )
                ):
                    return False
                if "NodeAffinity" in profile.filters and not labels_match(pl, n.labels):
                    return False
                return "TaintToleration" not in profile.filters or tolerates_all(
                    pl.tolerations, n.taints
                )

            # nodes alike on the labels the placement reads, taints and cordon are alike to the filters
            hit = self._compat[pl] = self._per_class(
                pl, tuple(sorted(label_keys(pl))), True, ok, bool
            )
        return hit

    def affinity_nodes(self, pl: Placement) -> np.ndarray:
        """PodTopologySpread's eligible nodes: nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore (the defaults)."""
        key = ("affinity", pl)
        hit = self._compat.get(key)  # type: ignore[call-overload]
        if hit is None:
            hit = self._per_class(
                pl, tuple(sorted(label_keys(pl))), False, lambda n: labels_match(pl, n.labels), bool
            )
            self._compat[key] = hit  # type: ignore[index]
        return hit

    def prefer_counts(self, pl: Placement) -> np.ndarray:
        """TaintToleration score input: PreferNoSchedule taints the pod does not tolerate, per node."""
        hit = self._prefer.get(pl)
        if hit is None:

            def count(n: SimNode) -> int:  # a node the pod cannot go to never reaches the score
                return sum(
                    1
                    for t in n.taints
                    if t.effect == "PreferNoSchedule"
                    and not any(
                        tolerates(x, t)
                        for x in pl.tolerations
                        if x.effect in (None, "PreferNoSchedule")
                    )
                )

            hit = self._per_class(pl, (), True, count, np.int64)
            if not hit.any():  # the common case: one shared array of zeros, not one per placement
                if self._no_prefer is None:
                    self._no_prefer = np.zeros(len(self.nodes), dtype=np.int64)
                    self._no_prefer.flags.writeable = False
                hit = self._no_prefer
            self._prefer[pl] = hit
        return hit

    def domains(self, keys: tuple[str, ...]) -> list[tuple[tuple[str, ...], np.ndarray]]:
        """TopologyPlacement's candidate placements for these keys (memoised: they depend on the nodes only)."""
        hit = self._domains.get(keys)
        if hit is None:
            hit = self._domains[keys] = domains([n.labels for n in self.nodes], keys)
        return hit

    def fits(self, req: np.ndarray) -> np.ndarray:
        need = req > 0
        return ((self.alloc[:, need] - self.used[:, need]) >= req[need]).all(axis=1)


def _pod_rules_ok(c: _Cluster, pod: Pod, mask: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """The per-node pod rules gangscale admits (ingest refuses the rest), as their filter plugins check them:
    NodePorts (a hostPort taken on the node), InterPodAffinity (the pod's required anti-affinity on the
    hostname, and existing pods' anti-affinity against it: symmetry) and PodTopologySpread
    (DoNotSchedule on the hostname: matching pods on the node + self - the minimum over the nodes the
    pod's node affinity allows, taints ignored as by default <= maxSkew; on any other key: topology.py). Sources: pkg/scheduler/framework/plugins/{nodeports,interpodaffinity,
    podtopologyspread}/filtering.go."""
    ok = np.ones(len(c.nodes), dtype=bool)
    rules = pod.rules
    check = (
        set(np.flatnonzero(mask).tolist()) if (rules.anti_affinity or rules.host_ports) else set()
    )
    check |= {j for j in c.anti_nodes if mask[j]}
    for j in check:
        others = c.pods_on[j]
        if rules.host_ports and any(
            set(q.rules.host_ports) & set(rules.host_ports) for q in others
        ):
            ok[j] = False
        elif any(term_matches(t, q) for t in rules.anti_affinity for q in others):
            ok[j] = False
        elif any(term_matches(t, pod) for q in others for t in q.rules.anti_affinity):
            ok[j] = False
    for term, skew in rules.spread:
        counts = np.array(
            [
                sum(1 for q in c.pods_on[j] if term_matches(term, q)) if eligible[j] else 0
                for j in range(len(c.nodes))
            ],
            dtype=np.int64,
        )
        if not eligible.any():
            break
        low = int(counts[eligible].min())
        ok &= counts + int(term_matches(term, pod)) - low <= skew
    if rules.domain_spread:  # zones and other keys (topology.py)
        ok &= domain_spread_ok(c.nodes, c.pods_on, pod)
    for (
        q,
        jq,
    ) in c.spread_pods:  # the final state keeps placed pods' spread too (see docs/scheduling.md)
        if q.rules.domain_spread:
            keep_placed(c.nodes, c.pods_on, q, jq, pod, ok)
        if ok[jq] and mask[jq] and _breaks_spread(c, q, jq, pod):
            ok[jq] = False
    return ok


def _breaks_spread(c: _Cluster, q: Pod, jq: int, pod: Pod) -> bool:
    """Would `pod` on q's node put q's DoNotSchedule spread over maxSkew (checked on the final state)?"""
    for term, skew in q.rules.spread:
        if not term_matches(term, pod):
            continue
        elig = c.affinity_nodes(q.placement)
        counts = np.array(
            [
                sum(1 for x in c.pods_on[j] if term_matches(term, x)) if elig[j] else 0
                for j in range(len(c.nodes))
            ],
            dtype=np.int64,
        )
        counts[jq] += 1
        if elig.any() and counts[jq] - int(counts[elig].min()) > skew:
            return True
    return False


# ------------------------------------------------------------------------------------------ scores


def _fit_scores(
    c: _Cluster, cand: np.ndarray, pod: Pod, req: np.ndarray, prof: Profile
) -> np.ndarray:
    total = np.zeros(len(cand), dtype=np.int64)
    wsum = np.zeros(len(cand), dtype=np.int64)
    nzc, nzm = c.nonzero(pod)
    for name, weight in prof.resources:
        i = c.ri.get(name)
        if i is None or (is_scalar(name) and req[i] == 0):
            continue  # the node has none of it / a scalar resource the pod does not request
        a = c.alloc[cand, i]
        if name == CPU:
            q = c.nz[cand, 0] + nzc
        elif name == MEMORY:
            q = c.nz[cand, 1] + nzm
        else:
            q = c.used[cand, i] + req[i]
        have = a > 0
        safe = np.where(have, a, 1)
        if prof.strategy == "LeastAllocated":
            s = np.where(q > a, 0, (safe - q) * MAX_NODE_SCORE // safe)
        elif prof.strategy == "MostAllocated":
            s = np.minimum(q, a) * MAX_NODE_SCORE // safe
        else:
            util = np.where(q >= a, 100, np.where(q > 0, np.minimum(q, a) * 100 // safe, 0))
            s = _broken_linear(prof.shape, util)
            have = have & (s > 0)
        total += np.where(have, s * weight, 0)
        wsum += np.where(have, weight, 0)
    one = np.maximum(wsum, 1)
    if prof.strategy == "RequestedToCapacityRatio":
        return np.where(wsum > 0, (2 * total + one) // (2 * one), 0)
    return np.where(wsum > 0, total // one, 0)


def _broken_linear(shape: Sequence[tuple[int, int]], u: np.ndarray) -> np.ndarray:
    out = np.full(u.shape, shape[-1][1], dtype=np.int64)
    for i in range(len(shape) - 1, -1, -1):
        px, py = shape[i]
        if i == 0:
            val = np.full(u.shape, py, dtype=np.int64)
        else:
            qx, qy = shape[i - 1]
            num = (py - qy) * (u - qx)
            val = qy + np.sign(num) * (np.abs(num) // (px - qx))
        out = np.where(u <= px, val, out)
    return out


def _balanced_scores(c: _Cluster, cand: np.ndarray, req: np.ndarray, prof: Profile) -> np.ndarray:
    cols = []
    for name in prof.balanced_resources:
        i = c.ri.get(name)
        if i is None or (is_scalar(name) and req[i] == 0):
            continue
        cols.append(i)
    if not cols or all(req[i] == 0 for i in cols):
        return np.zeros(len(cand), dtype=np.int64)  # best-effort pod: the plugin skips it
    a = c.alloc[np.ix_(cand, cols)]
    q = c.used[np.ix_(cand, cols)] + req[cols]
    have = a > 0
    f = np.where(have, np.minimum(1.0, q / np.where(have, a, 1)), np.nan)
    n = have.sum(axis=1)
    with np.errstate(invalid="ignore", all="ignore"):
        two = np.abs(np.nanmax(f, axis=1) - np.nanmin(f, axis=1)) / 2
        mean = np.nansum(f, axis=1) / np.maximum(n, 1)
        many = np.sqrt(np.nansum((f - mean[:, None]) ** 2, axis=1) / np.maximum(n, 1))
    std = np.where(n == 2, two, np.where(n > 2, many, 0.0))
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def _taint_scores(c: _Cluster, cand: np.ndarray, pl: Placement) -> np.ndarray:
    counts = c.prefer_counts(pl)[cand]
    top = int(counts.max()) if len(counts) else 0
    if top == 0:
        return np.full(len(cand), MAX_NODE_SCORE, dtype=np.int64)
    return MAX_NODE_SCORE - MAX_NODE_SCORE * counts // top


def _base_scores(c: _Cluster, cand: np.ndarray, pod: Pod, prof: Profile) -> np.ndarray:
    """NodeResourcesFit and BalancedAllocation, weighted: each node's own (the taint score is normalised over the candidates)."""
    req = c.vec(pod)
    total = np.zeros(len(cand), dtype=np.int64)
    if prof.weight("NodeResourcesFit"):
        total += prof.weight("NodeResourcesFit") * _fit_scores(c, cand, pod, req, prof)
    if prof.weight("NodeResourcesBalancedAllocation"):
        total += prof.weight("NodeResourcesBalancedAllocation") * _balanced_scores(
            c, cand, req, prof
        )
    return total


def score_nodes(c: _Cluster, cand: np.ndarray, pod: Pod, prof: Profile) -> np.ndarray:
    """Weighted sum of the modelled score plugins over the candidate nodes."""
    total = _base_scores(c, cand, pod, prof)
    if prof.weight("TaintToleration"):
        total += prof.weight("TaintToleration") * _taint_scores(c, cand, pod.placement)
    return total


# ------------------------------------------------------------------------- the incremental fast path

FULL_REFRESH = 64  # nodes to re-check (changed, and feasible or allowed by the filters) past which a shape's arrays are
# recomputed in numpy over those nodes rather than node by node in Python: a feasible node costs ~1.5 us in Python,
# a numpy pass ~80 us plus ~0.15 us a node and the best nodes' recount
_NO_SCORE = np.iinfo(np.int64).min  # below any base score: `_best` sets the infeasible nodes to it
MANY_CHANGES = 400  # log entries past which a shape's catch-up marks the changed nodes in numpy rather than a set
FEW_NODES = (
    8  # a shape the filters allow on this few nodes is computed node by node, never over every node
)


@dataclass(slots=True)
class _Shape:
    """One (profile, placement, requests) class: every node's feasibility and base score, current up to `cursor`.

    A placement changes one node, so pods of a shape seen before re-check only the nodes in the cluster's
    change log since then. The scalar re-check below is the per-node form of `_fit_scores` /
    `_balanced_scores` (same integer and float operations, so the same numbers; tests/scheduling/
    test_fastpath.py compares the two paths on random clusters)."""

    pod: Pod
    prof: Profile
    feas: np.ndarray  # bool per node: the filters pass
    base: np.ndarray  # int64 per node: `_base_scores` (valid where feas)
    compat: np.ndarray
    crows: (
        np.ndarray
    )  # the nodes `compat` allows: the only ones whose `feas` and `base` are ever computed
    need: list[tuple[int, int]]  # (resource index, request) NodeResourcesFit checks
    fit: list[
        tuple[int, int, int, int]
    ]  # (resource index, weight, source 0 cpu-nz / 1 mem-nz / 2 used, added)
    bal: list[tuple[int, int]]  # (resource index, request) BalancedAllocation averages
    wfit: int
    wbal: int
    cursor: int
    failed_at: int = (
        -1
    )  # the cluster's `removals` when no node passed the filters (monotone until a removal)
    prefer: np.ndarray | None = (
        None  # PreferNoSchedule taints not tolerated per node, when TaintToleration weighs any
    )
    wtaint: int = 0
    score: Scorer | None = None  # `_scorer(self)`
    rows: list[int] | None = (
        None  # at most FEW_NODES nodes pass the filters: checked one by one, no arrays kept
    )
    # the feasible nodes in node order, as a Python list (the window's bisections and reads are list operations, not
    # numpy calls): `_recheck` inserts and deletes the nodes whose verdict flips; None after a numpy refresh flipped any
    idx: list[int] | None = None
    idx_a: np.ndarray | None = (
        None  # `idx` as an array (a window that is scored), dropped whenever `idx` changes
    )
    compat_l: list[bool] = field(
        default_factory=list
    )  # `compat` and `feas` as Python lists: `_recheck` reads them
    feas_l: list[bool] = field(
        default_factory=list
    )  # node by node, and a list item is cheaper than a numpy one
    # the best base score over the feasible nodes and the nodes that have it, in node order (`tops_ok`: current;
    # `_recheck` keeps them so node by node, a numpy refresh leaves them to `_best` to recompute)
    top: int = 0
    tops: list[int] = field(default_factory=list)
    tops_ok: bool = False
    cols: _Cols | None = None  # `_cols(self)`: the column form a numpy refresh uses
    rcursor: int = 0  # the cluster's `rlog` up to here was seen at the last sync


def _new_shape(c: _Cluster, pod: Pod, prof: Profile) -> _Shape:
    req = c.vec(pod)
    nzc, nzm = c.nonzero(pod)
    fit = []
    for name, weight in prof.resources:
        i = c.ri.get(name)
        if i is None or (is_scalar(name) and req[i] == 0):
            continue
        src = 0 if name == CPU else 1 if name == MEMORY else 2
        fit.append((i, weight, src, nzc if src == 0 else nzm if src == 1 else int(req[i])))
    bal = [
        (i, int(req[i]))
        for name in prof.balanced_resources
        if (i := c.ri.get(name)) is not None and not (is_scalar(name) and req[i] == 0)
    ]
    if all(r == 0 for _, r in bal):
        bal = []  # best-effort pod (or nothing to balance): the plugin scores 0
    check = "NodeResourcesFit" in prof.filters
    compat = c.compat(pod.placement, prof)
    st = _Shape(
        pod,
        prof,
        np.empty(0, dtype=bool),
        np.empty(0, dtype=np.int64),
        compat,
        compat.nonzero()[0],
        [(i, int(r)) for i, r in enumerate(req.tolist()) if r > 0] if check else [],
        fit,
        bal,
        prof.weight("NodeResourcesFit"),
        prof.weight("NodeResourcesBalancedAllocation"),
        0,
    )
    st.score = _scorer(st)
    st.cols = _cols(c, st)
    st.compat_l = st.compat.tolist()
    if len(st.crows) <= FEW_NODES:  # e.g. a pod gate mode narrowed to its node
        st.rows = st.crows.tolist()
    w = prof.weight("TaintToleration")
    prefer = c.prefer_counts(pod.placement)
    if w and prefer.any():
        st.prefer, st.wtaint = prefer, w
    if st.rows is None:
        _refresh_all(c, st)
    return st


def _refresh_all(c: _Cluster, st: _Shape) -> None:
    """The shape's feasibility and base score on every node the filters allow (elsewhere: infeasible, never read)."""
    n = len(c.nodes)
    st.feas, st.base = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    feas, base = _rows_state(c, st, st.crows)
    st.feas[st.crows], st.base[st.crows] = feas, base
    st.feas_l, st.idx, st.idx_a, st.tops_ok = st.feas.tolist(), None, None, False
    st.cursor, st.rcursor = len(c.log), len(c.rlog)


def _rows_state(c: _Cluster, st: _Shape, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """NodeResourcesFit's filter and the base score on these nodes, in numpy (the vector form of `_recheck`)."""
    if st.cols is not None:
        return _rows_state_cols(c, st, st.cols, rows)
    req = c.vec(st.pod)
    if st.need:
        cols = [i for i, _ in st.need]
        feas = ((c.alloc[np.ix_(rows, cols)] - c.used[np.ix_(rows, cols)]) >= req[cols]).all(axis=1)
    else:
        feas = np.ones(len(rows), dtype=bool)
    if (
        len(st.bal) == 2 and st.wbal
    ):  # the default (cpu, memory): the two-resource formula without NaN reductions
        base = _fit_scores(c, rows, st.pod, req, st.prof) * st.wfit if st.wfit else 0
        return feas, base + st.wbal * _balanced_pair(c, st.bal, rows)
    return feas, _base_scores(c, rows, st.pod, st.prof)


@dataclass(slots=True, frozen=True)
class _Cols:
    """A LeastAllocated / MostAllocated shape's filter and score inputs as column arrays (`_rows_state_cols`): the
    resource columns, requests and weights of `_Shape.need` / `fit` / `bal`, so a refresh gathers each source once
    and works on (nodes x resources) arrays, a few numpy calls whatever the number of resources."""

    need: (
        np.ndarray | None
    )  # per resource column: the request NodeResourcesFit checks, _ANY where it checks none
    fcols: np.ndarray  # `fit`'s resource columns
    qcols: (
        np.ndarray
    )  # where `fit`'s requested amount comes from: nz columns 0-1, then `used` columns from 2 on
    adds: np.ndarray
    weights: np.ndarray
    from_used: bool  # some `fit` column reads `used` (a scalar resource): the source is nz and used side by side
    bcols: np.ndarray  # `bal`'s two columns (empty: no balance score)
    breq: np.ndarray
    least: bool


_ANY = np.iinfo(np.int64).min  # a lower bound no free amount is below: the column is not checked


def _cols(c: _Cluster, st: _Shape) -> _Cols | None:
    """`_Cols` for a shape `_scorer` gives the bound closure (LeastAllocated / MostAllocated, 0 or 2 balanced
    resources), else None (the generic `_base_scores`)."""
    if st.prof.strategy not in ("LeastAllocated", "MostAllocated") or len(st.bal) not in (0, 2):
        return None
    need = np.full(len(c.res), _ANY, dtype=np.int64)
    for i, r in st.need:
        need[i] = r
    return _Cols(
        need if st.need else None,
        np.array([f[0] for f in st.fit], dtype=np.intp),
        np.array([src if src < 2 else 2 + i for i, _, src, _ in st.fit], dtype=np.intp),
        np.array([f[3] for f in st.fit], dtype=np.int64),
        np.array([f[1] for f in st.fit], dtype=np.int64),
        any(f[2] == 2 for f in st.fit),
        np.array([i for i, _ in st.bal], dtype=np.intp),
        np.array([r for _, r in st.bal], dtype=np.int64),
        st.prof.strategy == "LeastAllocated",
    )


def _rows_state_cols(
    c: _Cluster, st: _Shape, k: _Cols, rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`_rows_state` for a `_Cols` shape: the same integer and float operations as `_fit_scores` and
    `_balanced_pair` (so the same numbers), per (node, resource) element instead of per resource."""
    a = c.alloc[rows]
    u = c.used[rows]
    feas = (a - u >= k.need).all(axis=1) if k.need is not None else np.ones(len(rows), dtype=bool)
    base: np.ndarray | int = 0
    if st.wfit and len(k.fcols):
        cap = a[:, k.fcols]
        nz = c.nz[rows]
        q = (np.concatenate((nz, u), axis=1) if k.from_used else nz)[:, k.qcols] + k.adds
        have = cap > 0
        safe = np.where(have, cap, 1)
        s = (
            np.where(q > cap, 0, (safe - q) * MAX_NODE_SCORE // safe)
            if k.least
            else np.minimum(q, cap) * MAX_NODE_SCORE // safe
        )
        total = (np.where(have, s, 0) * k.weights).sum(axis=1)
        wsum = (have * k.weights).sum(axis=1)
        base = st.wfit * np.where(wsum > 0, total // np.maximum(wsum, 1), 0)
    if st.wbal and len(k.bcols):
        ab = a[:, k.bcols]
        have = ab > 0
        f = np.minimum(1.0, (u[:, k.bcols] + k.breq) / np.where(have, ab, 1))
        std = np.where(have.all(axis=1), np.abs(f[:, 0] - f[:, 1]) / 2, 0.0)
        base = base + st.wbal * ((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    if isinstance(base, int):
        base = np.full(len(rows), base, dtype=np.int64)
    return feas, base


def _balanced_pair(
    c: _Cluster, bal: list[tuple[int, int]], rows: np.ndarray | None = None
) -> np.ndarray:
    """`_balanced_scores` over every node (or these rows) for two balanced resources: |f1 - f2| / 2 where the node
    has both."""
    (i0, r0), (i1, r1) = bal
    sel = slice(None) if rows is None else rows
    a0, a1 = c.alloc[sel, i0], c.alloc[sel, i1]
    f0 = np.minimum(1.0, (c.used[sel, i0] + r0) / np.where(a0 > 0, a0, 1))
    f1 = np.minimum(1.0, (c.used[sel, i1] + r1) / np.where(a1 > 0, a1, 1))
    std = np.where((a0 > 0) & (a1 > 0), np.abs(f0 - f1) / 2, 0.0)
    return ((1 - std) * MAX_NODE_SCORE).astype(np.int64)


def _sync(c: _Cluster, st: _Shape) -> None:
    """Bring the shape up to date with the nodes placements changed since its last use.

    Adding a pod never makes a node fit: a node the shape did not fit at its last sync, and no pod has left since,
    still does not (and its score is never read), so it is not looked at again; only the feasible nodes and those a
    pod left (`_Cluster.rlog`) are."""
    n = len(c.log)
    if st.cursor == n or st.rows is not None:
        return
    freed = (
        set(c.rlog[st.rcursor :]) if st.rcursor < len(c.rlog) else None
    )  # nodes a pod left since the last sync
    if (
        n - st.cursor == 1
    ):  # the common case: one placement since the shape's last pod (a gang's next member)
        _recheck(c, st, (c.log[-1],), freed)
    elif n - st.cursor > len(c.nodes):
        if st.idx_a is None:
            st.idx_a = np.flatnonzero(st.feas)
        _refresh_rows(c, st, _with_freed(st, st.idx_a, freed))
    elif (
        n - st.cursor > MANY_CHANGES
    ):  # the changed nodes as a mask: cheaper than a set of that many
        changed = np.zeros(len(c.nodes), dtype=bool)
        changed[c.log[st.cursor :]] = True
        _catch_up(c, st, _with_freed(st, np.flatnonzero(changed & st.feas), freed), freed)
    else:
        dirty = set(c.log[st.cursor :])
        if len(dirty) > FULL_REFRESH:
            rows = np.fromiter(dirty, dtype=np.intp, count=len(dirty))
            _catch_up(c, st, _with_freed(st, rows[st.feas[rows]], freed), freed)
        else:
            _recheck(c, st, dirty, freed)
    st.cursor, st.rcursor = n, len(c.rlog)


def _catch_up(c: _Cluster, st: _Shape, rows: np.ndarray, freed: set[int] | None) -> None:
    """Re-check these nodes: in numpy past FULL_REFRESH of them, else one by one."""
    if len(rows) > FULL_REFRESH:
        _refresh_rows(c, st, rows)
    else:
        _recheck(c, st, rows.tolist(), freed)


def _with_freed(st: _Shape, rows: np.ndarray, freed: set[int] | None) -> np.ndarray:
    """`rows` (feasible nodes) and the nodes of `freed` the filters allow that the shape does not fit (yet)."""
    if not freed:
        return rows
    more = [j for j in freed if st.compat_l[j] and not st.feas_l[j]]
    return np.concatenate((rows, np.array(more, dtype=np.intp))) if more else rows


def _refresh_rows(c: _Cluster, st: _Shape, rows: np.ndarray) -> None:
    """The shape's arrays on these nodes (all of them the filters allow), recomputed in numpy."""
    if not len(rows):
        return
    st.tops_ok = False
    feas, st.base[rows] = _rows_state(c, st, rows)
    if not np.array_equal(st.feas[rows], feas):
        st.feas[rows] = feas
        st.idx = st.idx_a = None
        for j, ok in zip(rows.tolist(), feas.tolist()):
            st.feas_l[j] = ok


def _window_ties(st: _Shape, ia: np.ndarray, start: int, m: int, k: int, p: int) -> np.ndarray:
    """The best-scored nodes of the window (`ia`: the `m` feasible nodes, the window the `k` from position `p`, round
    the ring; all of them when m <= k) in scan order from `start`, scored from the shape's kept base scores."""
    if m > k:
        win = ia[p : p + k] if p + k <= m else np.concatenate((ia[p:], ia[: k - (m - p)]))
    else:
        win = ia  # in node order; the ties are rotated to start at `start` below, as the scan meets them
    scores = st.base[win]
    if (
        st.prefer is not None
    ):  # TaintToleration, normalised over the window (the same for every node without)
        counts = st.prefer[win]
        top = int(counts.max())
        if top:
            scores = scores + st.wtaint * (MAX_NODE_SCORE - MAX_NODE_SCORE * counts // top)
    ties = win[scores == scores.max()]
    if m <= k and len(ties) > 1:
        q = int(ties.searchsorted(start))
        if 0 < q < len(ties):
            ties = np.concatenate((ties[q:], ties[:q]))
    return ties


def _set_idx(st: _Shape) -> list[int]:
    """`_Shape.idx` rebuilt from `feas` (after a numpy refresh flipped a verdict)."""
    st.idx = np.flatnonzero(st.feas).tolist()
    return st.idx


def _best(st: _Shape) -> list[int]:
    """The shape's best-scored feasible nodes, recomputed when a refresh dropped them (at least one node is feasible;
    the infeasible ones are set below every score, so one pass over all nodes needs no index of the feasible ones)."""
    if not st.tops_ok:
        scores = np.where(st.feas, st.base, _NO_SCORE)
        top = scores.max()
        st.top, st.tops, st.tops_ok = int(top), np.flatnonzero(scores == top).tolist(), True
    return st.tops


def _recheck(c: _Cluster, st: _Shape, dirty: Iterable[int], freed: set[int] | None) -> None:
    """The shape's feasibility and base score on these nodes, one by one (the scalar form of `_refresh_all`).
    Of the nodes the shape does not fit, only those in `freed` (a pod left them since the last sync) are
    re-checked (see `_sync`)."""
    compat, feas, feas_l, base, need, alloc, score = (
        st.compat_l,
        st.feas,
        st.feas_l,
        st.base,
        st.need,
        c.alloc_rows,
        st.score,
    )
    urows, nzrows = c._urows, c._nzrows  # `_Cluster.lists`, read in place
    tops = st.tops if st.tops_ok else None
    top = st.top
    idx = st.idx
    for j in dirty:
        if not feas_l[j] and (freed is None or j not in freed or not compat[j]):
            continue  # does not fit, and no pod left it (or the filters refuse it): its verdict stands
        a = alloc[j]
        u = urows[j]
        ok = True
        for i, r in need:
            if a[i] - u[i] < r:
                ok = False
                break
        if ok != feas_l[j]:
            feas_l[j] = feas[j] = ok
            st.idx_a = None
            if (
                idx is not None
            ):  # the node joins or leaves the feasible list at its place in node order
                if ok:
                    idx.insert(bisect.bisect_left(idx, j), j)
                else:
                    del idx[bisect.bisect_left(idx, j)]
        if ok:
            base[j] = s = score(a, u, nzrows[j])
        if (
            tops is not None
        ):  # the node leaves the best set, then rejoins it, or starts a new one, by its score
            k = bisect.bisect_left(tops, j)
            if k < len(tops) and tops[k] == j:
                del tops[k]
            if ok:
                if s > top:
                    top, tops = s, [j]
                    st.top, st.tops = top, tops
                elif s == top:
                    tops.insert(k, j)  # `k`: where j is (was) in node order
    if tops is not None and not tops:
        st.tops_ok = False  # the best nodes all fell: the new best is elsewhere


Scorer = Callable[[list[int], list[int], list[int]], int]


def _scorer(st: _Shape) -> Scorer:
    """`_score_one` for this shape; LeastAllocated / MostAllocated with two balanced resources (the default
    profile's form) gets a closure with the constants bound, the same arithmetic without the generic loops."""
    if st.prof.strategy not in ("LeastAllocated", "MostAllocated") or len(st.bal) not in (0, 2):
        return lambda a, u, nz: _score_one(st, a, u, nz)
    fit, wfit, least = st.fit, st.wfit, st.prof.strategy == "LeastAllocated"
    wbal = st.wbal if st.bal else 0
    (i0, r0), (i1, r1) = st.bal or ((0, 0), (0, 0))
    if wfit and least and len(fit) == 2 and fit[0][2] == 0 and fit[1][2] == 1:
        return _least_pair(fit, wfit, wbal, i0, r0, i1, r1)

    def score(a: list[int], u: list[int], nz: list[int]) -> int:
        total = 0
        if wfit:
            t = w = 0
            for i, weight, src, add in fit:
                cap = a[i]
                if cap > 0:
                    q = (nz[src] if src < 2 else u[i]) + add
                    t += weight * (
                        (0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap)
                        if least
                        else (q if q < cap else cap) * MAX_NODE_SCORE // cap
                    )
                    w += weight
            if w:
                total = wfit * (t // w)
        if wbal:
            a0, a1 = a[i0], a[i1]
            if a0 > 0 and a1 > 0:
                f0, f1 = (u[i0] + r0) / a0, (u[i1] + r1) / a1
                total += wbal * int(
                    (1 - abs((f0 if f0 < 1.0 else 1.0) - (f1 if f1 < 1.0 else 1.0)) / 2)
                    * MAX_NODE_SCORE
                )
            else:
                total += wbal * MAX_NODE_SCORE  # fewer than two fractions: std 0
        return total

    return score


def _least_pair(
    fit: list[tuple[int, int, int, int]], wfit: int, wbal: int, i0: int, r0: int, i1: int, r1: int
) -> Scorer:
    """`_scorer`'s closure for LeastAllocated on cpu and memory (the default profile): the fit loop written out for
    its two resources (the non-zero requested cpu and memory columns), the same operations in the same order."""
    (fc, wc, _, addc), (fm, wm, _, addm) = fit

    def score(a: list[int], u: list[int], nz: list[int]) -> int:
        t = w = total = 0
        cap = a[fc]
        if cap > 0:
            q = nz[0] + addc
            t = wc * (0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap)
            w = wc
        cap = a[fm]
        if cap > 0:
            q = nz[1] + addm
            t += wm * (0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap)
            w += wm
        if w:
            total = wfit * (t // w)
        if wbal:
            a0, a1 = a[i0], a[i1]
            if a0 > 0 and a1 > 0:
                f0, f1 = (u[i0] + r0) / a0, (u[i1] + r1) / a1
                total += wbal * int(
                    (1 - abs((f0 if f0 < 1.0 else 1.0) - (f1 if f1 < 1.0 else 1.0)) / 2)
                    * MAX_NODE_SCORE
                )
            else:
                total += wbal * MAX_NODE_SCORE  # fewer than two fractions: std 0
        return total

    return score


def _score_one(st: _Shape, a: list[int], u: list[int], nz: list[int]) -> int:
    """`_base_scores` for one node, in Python integers (and the same float steps for the balance)."""
    total = 0
    if st.wfit:
        total += st.wfit * _fit_one(st, a, u, nz)
    if st.wbal and st.bal:
        fr = [min(1.0, (u[i] + r) / a[i]) for i, r in st.bal if a[i] > 0]
        if len(fr) == 2:
            std = abs(max(fr) - min(fr)) / 2
        elif len(fr) > 2:
            mean = sum(fr) / len(fr)
            std = math.sqrt(sum((f - mean) ** 2 for f in fr) / len(fr))
        else:
            std = 0.0
        total += st.wbal * int((1 - std) * MAX_NODE_SCORE)
    return total


def _fit_one(st: _Shape, a: list[int], u: list[int], nz: list[int]) -> int:
    strategy = st.prof.strategy
    total = wsum = 0
    for i, weight, src, add in st.fit:
        cap = a[i]
        if cap <= 0:
            continue
        q = (nz[src] if src < 2 else u[i]) + add
        if strategy == "LeastAllocated":
            s = 0 if q > cap else (cap - q) * MAX_NODE_SCORE // cap
        elif strategy == "MostAllocated":
            s = min(q, cap) * MAX_NODE_SCORE // cap
        else:
            s = broken_linear(
                st.prof.shape, 100 if q >= cap else min(q, cap) * 100 // cap if q > 0 else 0
            )
            if s <= 0:
                continue
        total += s * weight
        wsum += weight
    if not wsum:
        return 0
    if strategy == "RequestedToCapacityRatio":
        return (2 * total + wsum) // (2 * wsum)
    return total // wsum


# ------------------------------------------------------------------------------------- the engine


class _Engine:
    def __init__(
        self,
        cluster: _Cluster,
        config: SchedulerConfig,
        seed: int,
        fast: bool = True,
        stable_ties: bool = False,
    ) -> None:
        self.c = cluster
        self.stable_ties = stable_ties
        self.config = config
        self.rng = random.Random(seed)
        self.ties = 0  # choices the seed decided (a tie of several nodes or domains): none, and every seed runs alike
        self.used_profiles: dict[str, Profile] = {}
        self.next_start = 0  # schedule_one.go nextStartNodeIndex
        self.fast = fast
        self.shapes: dict[tuple, _Shape] = {}
        self.pod_shape: dict[int, _Shape] = {}  # id(pod) -> its shape (the gangs outlive the run)
        self._profiles: dict[str, Profile] = {}
        self.allowed: np.ndarray | None = (
            None  # a topology placement's nodes (placement.py): the only ones seen
        )
        self.allowed_n = 0
        self._ks: dict[tuple[int, int], int] = {}

    def profile(self, pod: Pod) -> Profile:
        prof = self._profiles.get(pod.scheduler_name)
        if prof is None:
            prof = self._profiles[pod.scheduler_name] = (
                self.config.profile(pod.scheduler_name) or self.config.default
            )
        self.used_profiles[prof.scheduler_name] = prof
        return prof

    def feasible(self, pod: Pod, prof: Profile) -> np.ndarray:
        mask = self.c.compat(pod.placement, prof)
        if "NodeResourcesFit" in prof.filters:
            mask = mask & self.c.fits(self.c.vec(pod))
        if pod.rules or self.c.anti_nodes or self.c.spread_pods:
            mask = mask & _pod_rules_ok(self.c, pod, mask, self.c.affinity_nodes(pod.placement))
        return mask

    def select(self, pod: Pod) -> int | None:
        """One scheduling cycle's node choice (filters, percentageOfNodesToScore, scores, selectHost).

        Pods without pod-to-pod rules, on a cluster where no placed pod has any, take the incremental path;
        the rest (and `fast=False`, the reference the tests compare against) filter and score every node."""
        prof = self.profile(pod)
        if (
            self.fast
            and (pod.rules is NO_RULES or not pod.rules)
            and not (self.c.anti_nodes or self.c.spread_pods)
        ):
            return self._select_fast(pod, prof)
        mask = self.feasible(pod, prof)
        if self.allowed is not None:
            mask = mask & self.allowed
        n = len(mask)
        if n == 0 or not mask.any():
            return None
        start = self.next_start % n
        order = np.roll(np.arange(n), -start)
        feas = order[mask[order]]
        k = num_feasible_to_find(
            self.allowed_n if self.allowed is not None else n, prof.percentage_of_nodes_to_score
        )
        if len(feas) > k:
            last = feas[k - 1]
            processed = int((last - start) % n) + 1
            feas = feas[:k]
        else:
            processed = n
        self.next_start = (start + processed) % n
        if len(feas) == 1:
            return int(feas[0])
        scores = score_nodes(self.c, feas, pod, prof)
        return self._pick(feas[scores == scores.max()])

    def _select_fast(self, pod: Pod, prof: Profile) -> int | None:
        st = self.pod_shape.get(id(pod))
        if st is None:
            key = (prof.scheduler_name, self.c.shape_id(pod))
            st = self.shapes.get(key)
            if st is None:
                st = self.shapes[key] = _new_shape(self.c, pod, prof)
            else:
                _sync(self.c, st)
            self.pod_shape[id(pod)] = st
        elif st.failed_at == self.c.removals:
            return None  # no node fitted it, and since then pods were only added
        else:
            _sync(self.c, st)
        if st.rows is not None:
            return self._select_few(st)
        allowed = self.allowed
        ia: np.ndarray | None = None
        seq: Sequence[
            int
        ]  # the feasible nodes in node order: `idx`, or `ia` in a topology placement (an array there:
        if (
            allowed is None
        ):  # a placement's nodes change with each domain, so no list is kept for it)
            idx = seq = st.idx if st.idx is not None else _set_idx(st)
        else:
            idx, ia = [], np.flatnonzero(st.feas & allowed)
            seq = ia
        m, n = len(seq), len(st.feas)
        if m == 0:
            if allowed is None:
                st.failed_at = self.c.removals
            return None
        start = self.next_start % n
        k = self._k(self.allowed_n if allowed is not None else n, prof.percentage_of_nodes_to_score)
        if m > k:  # the window: the k feasible nodes from the start on, round the ring
            p = bisect.bisect_left(idx, start) if ia is None else int(ia.searchsorted(start))
            p = 0 if p == m else p
            last = int(seq[p + k - 1] if p + k <= m else seq[k - (m - p) - 1])
            self.next_start = (start + (last - start) % n + 1) % n
            if k == 1:
                return last
        else:  # every feasible node is scored, the scan goes round once: the start stays where it is
            p = 0
            if m == 1:
                return int(seq[0])
        if st.prefer is None and allowed is None:
            ties_l = self._best_in_window(st, idx, start, m, k, p)
            if ties_l:
                return self._pick(ties_l)
        if ia is None:  # the window is scored: `idx` as an array
            if st.idx_a is None:
                st.idx_a = np.flatnonzero(st.feas)
            ia = st.idx_a
        return self._pick(_window_ties(st, ia, start, m, k, p))

    def _best_in_window(
        self, st: _Shape, idx: list[int], start: int, m: int, k: int, p: int
    ) -> list[int] | None:
        """The window's ties in scan order when the window holds a node with the best score over every feasible
        node (then its best nodes are exactly the best set's members inside it), from the shape's kept best set
        (`_best`) by bisection, without scoring the window. None: it holds none (the caller scores it)."""
        tops = _best(st)
        if m <= k:  # the whole ring: the best set itself, from the start on
            q = bisect.bisect_left(tops, start)
            return tops[q:] + tops[:q] if 0 < q < len(tops) else tops
        if p + k <= m:
            return tops[
                bisect.bisect_left(tops, idx[p]) : bisect.bisect_right(tops, idx[p + k - 1])
            ]
        first = tops[
            bisect.bisect_left(tops, idx[p]) :
        ]  # the window wraps: idx[p:] then idx[:k - (m - p)]
        return first + tops[: bisect.bisect_right(tops, idx[k - (m - p) - 1])]

    def _k(self, n: int, percentage: int) -> int:
        """`num_feasible_to_find`, memoised per engine (asked once per pod)."""
        hit = self._ks.get((n, percentage))
        if hit is None:
            hit = self._ks[(n, percentage)] = num_feasible_to_find(n, percentage)
        return hit

    def _select_few(self, st: _Shape) -> int | None:
        """`_select_fast` for a shape at most FEW_NODES nodes pass the filters of: those nodes checked and scored
        one by one. They all fit in the window (num_feasible_to_find is at least min(n, 100)), so the scan covers
        every node and the rotating start stays where it is; the candidates are taken from it, as upstream does."""
        c = self.c
        feas = [
            j
            for j in st.rows or ()
            if (self.allowed is None or self.allowed[j])
            and all(c.alloc_rows[j][i] - c.lists(j)[0][i] >= r for i, r in st.need)
        ]
        if not feas:
            if (
                self.allowed is None
            ):  # a topology placement's miss says nothing of the other placements
                st.failed_at = c.removals
            return None
        start = self.next_start % len(c.nodes)
        p = next((k for k, j in enumerate(feas) if j >= start), len(feas))
        win = feas[p:] + feas[:p]
        if len(win) == 1:
            return win[0]
        assert st.score is not None
        scores = [st.score(c.alloc_rows[j], *c.lists(j)) for j in win]
        if st.prefer is not None:  # TaintToleration, normalised over the window
            counts = [int(st.prefer[j]) for j in win]
            top = max(counts)
            if top:
                scores = [
                    s + st.wtaint * (MAX_NODE_SCORE - MAX_NODE_SCORE * n // top)
                    for s, n in zip(scores, counts)
                ]
        best = max(scores)
        return self._pick(np.array([j for j, s in zip(win, scores) if s == best]))

    def _pick(self, ties: np.ndarray) -> int:
        """selectHost: a uniformly random node among the best (upstream samples a reservoir; one draw is the same
        distribution, and the seed fixes it). `stable_ties`: one `random()` per tie whatever its size, the same
        uniform choice, but the seed's stream of draws does not shift when a node joins or leaves a tie
        (`randrange` consumes a number of bits that depends on the size): observe mode drops the nodes a run left
        empty, and the next run then makes the same choices elsewhere instead of a new random history."""
        if len(ties) == 1:
            return int(ties[0])
        self.ties += 1
        if self.stable_ties:
            return int(ties[int(self.rng.random() * len(ties))])
        return int(ties[self.rng.randrange(len(ties))])


def _entries(gangs: Sequence[Gang], queue_sort: str) -> list[Entry]:
    """The queue in `queue_sort`'s order (queue.py): a pod per entry, or a whole group for a group cycle."""
    out = []
    for gi, g in enumerate(gangs):
        mode = gang_mode(g)
        if mode == MODE_GROUP:
            out.append(Entry(job_key(g) if g.api == API_VOLCANO else group_key(g, queue_sort), gi))
            continue
        for p in g.pending:
            if queue_sort == COSCHEDULING:
                key = coscheduling_key(p, g if g.api == API_COSCHEDULING else None)
            else:
                key = pod_key(p)
            out.append(Entry(key, gi, p))
    return sorted(out)


def _skip_reason(g: Gang) -> str | None:
    if g.invalid:
        return g.invalid
    if not g.exists:
        return f"pods point at {g.api} {g.namespace}/{g.name}, which does not exist"
    if g.policy == "gang" and len(g.pending) + g.bound < g.min_count:
        return f"{len(g.pending) + g.bound} of minCount {g.min_count} pods exist; the scheduler waits for the rest"
    return None


@dataclass(slots=True)
class _Run:
    """One simulation's working state: where committed pods are, which gangs started, first failures."""

    gangs: list[Gang]
    cluster: _Cluster
    eng: _Engine
    where: dict[str, int] = field(default_factory=dict)  # committed pod key -> node index
    placed: set[int] = field(
        default_factory=set
    )  # id() of the pods in `where` (the gangs hold them: ids stay theirs)
    started: set[int] = field(default_factory=set)
    failed: dict[int, Pod] = field(default_factory=dict)
    committed: list[int] = field(default_factory=list)
    members: dict[int, list[Pod]] = field(
        default_factory=dict
    )  # a group entry's pods in queue order (`_queue`'s memo)

    def need(self, gi: int) -> int:
        g = self.gangs[gi]
        return max(0, g.min_count - g.bound) if g.policy == "gang" else 1


def simulate(
    nodes: Sequence[SimNode],
    gangs: Sequence[Gang],
    *,
    bound: Iterable[Pod] = (),
    config: SchedulerConfig | None = None,
    seed: int = 0,
    max_passes: int = 4,
    fast: bool = True,
    stable_ties: bool = False,
) -> SimResult:
    """Place `gangs`' pending pods on `nodes` as kube-scheduler would; see the module docstring.

    `fast=False` filters and scores every node for every pod (the reference the fast path is tested against)."""
    return simulate_seeds(
        nodes,
        gangs,
        (seed,),
        bound=bound,
        config=config,
        max_passes=max_passes,
        fast=fast,
        stable_ties=stable_ties,
    )[0]


def simulate_seeds(
    nodes: Sequence[SimNode],
    gangs: Sequence[Gang],
    seeds: Sequence[int],
    *,
    bound: Iterable[Pod] = (),
    config: SchedulerConfig | None = None,
    max_passes: int = 4,
    fast: bool = True,
    stable_ties: bool = False,
) -> list[SimResult]:
    """`simulate` under each seed, in order; what depends on the nodes and gangs only is built once."""
    return list(
        simulate_iter(
            nodes,
            gangs,
            seeds,
            bound=bound,
            config=config,
            max_passes=max_passes,
            fast=fast,
            stable_ties=stable_ties,
        )
    )


def simulate_iter(
    nodes: Sequence[SimNode],
    gangs: Sequence[Gang],
    seeds: Sequence[int],
    *,
    bound: Iterable[Pod] = (),
    config: SchedulerConfig | None = None,
    max_passes: int = 4,
    fast: bool = True,
    stable_ties: bool = False,
    memo: dict | None = None,
) -> Iterator[SimResult]:
    """`simulate_seeds` one seed at a time, so a caller can stop once a seed has answered its question.

    `memo`: the caller's, for calls with the same gangs (the same objects) and the same `bound` object (observe
    mode's runs as it drops nodes): the queue is built once, and when `nodes` are some of the last call's nodes
    in the same order (the same objects, the same resource columns), the cluster is cut from the last one's
    (`_Cluster.subset`) rather than built again. The same results as without it.

    The seed only breaks ties (`_Engine._pick`, a topology placement's best domains): when the first seed's run met
    none, every seed makes the same choices in the same order, so the others get a copy of its result unrun."""
    config = config or default_config()
    gangs = list(gangs)
    skipped, entries, members = _queue(gangs, memo, config.queue_sort)
    cluster = _cluster_for(nodes, gangs, skipped, bound, memo)
    first: SimResult | None = None
    for i, seed in enumerate(seeds):
        if first is not None:
            yield _same_run(first)
            continue
        c = cluster if i == 0 else cluster.fresh()
        eng = _Engine(c, config, seed, fast, stable_ties)
        res = _run(c, eng, gangs, skipped, entries, max_passes, members)
        if i == 0 and eng.ties == 0:
            first = res
        yield res


def _same_run(res: SimResult) -> SimResult:
    """Another seed's result of a run no seed decided: equal to `res`, its containers its own (`node_pods` is
    read-only)."""
    return SimResult(
        dict(res.placement),
        dict(res.outcomes),
        list(res.empty_nodes),
        res.node_pods,
        list(res.profiles),
    )


def _queue(
    gangs: list[Gang], memo: dict | None, queue_sort: str
) -> tuple[dict[int, str], list[Entry], dict[int, list[Pod]]]:
    """The gangs the scheduler skips (and why), the queue's entries and the group entries' pods in queue order (filled
    by the runs as they meet them: it depends on the gangs and the queue sort only), from `memo` when it holds
    these gangs under this queue sort."""
    hit = memo.get("queue") if memo is not None else None
    if (
        hit is not None
        and hit[4] == queue_sort
        and len(hit[0]) == len(gangs)
        and all(a is b for a, b in zip(hit[0], gangs))
    ):
        return hit[1], hit[2], hit[3]
    skipped = {gi: r for gi, g in enumerate(gangs) if (r := _skip_reason(g))}
    entries = [e for e in _entries(gangs, queue_sort) if e.gang_index not in skipped]
    members: dict[int, list[Pod]] = {}
    if memo is not None:
        memo["queue"] = (tuple(gangs), skipped, entries, members, queue_sort)
    return skipped, entries, members


def _cluster_for(
    nodes: Sequence[SimNode],
    gangs: list[Gang],
    skipped: dict[int, str],
    bound: Iterable[Pod],
    memo: dict | None,
) -> _Cluster:
    """The cluster over `nodes`: cut from the memo's last one when `nodes` are a subsequence of its nodes (and
    the bound pods the same object, the resource columns the same), else built."""
    hit = memo.get("cluster") if memo is not None else None
    if hit is not None and hit[0] is bound:
        last: _Cluster = hit[1]
        keep = _subsequence(last.nodes, nodes)
        if keep is not None and _columns(nodes, last.pod_res) == last.res:
            return last.subset(nodes, keep)
    live = [g for gi, g in enumerate(gangs) if gi not in skipped]
    cluster = _Cluster(nodes, (p for g in live for p in g.pending), bound)
    if memo is not None:
        memo["cluster"] = (bound, cluster)
    return cluster


def _subsequence(whole: Sequence[SimNode], part: Sequence[SimNode]) -> list[int] | None:
    """The indices of `part`'s nodes in `whole` when `part` is `whole` with some nodes left out (the same
    objects, the same order), else None."""
    keep: list[int] = []
    j = 0
    for n in part:
        while j < len(whole) and whole[j] is not n:
            j += 1
        if j == len(whole):
            return None
        keep.append(j)
        j += 1
    return keep


def _run(
    cluster: _Cluster,
    eng: _Engine,
    gangs: list[Gang],
    skipped: dict[int, str],
    entries: list[Entry],
    max_passes: int,
    members: dict[int, list[Pod]],
) -> SimResult:
    """One seed's queue passes: schedule every entry, time out Permit waits, re-queue the failures."""
    run = _Run(gangs, cluster, eng, committed=[0] * len(gangs), members=members)
    for _ in range(max_passes):
        before = len(run.where)
        assumed: dict[int, list[tuple[Pod, int]]] = {}
        retry: list[
            Entry
        ] = []  # re-queued in the order they failed (the queue timestamp is the re-queue time)
        for e in entries:
            _schedule_entry(run, e, assumed, retry)
        rolled = _permit_timeout(run, assumed, entries, retry)
        if len(run.where) == before and not rolled:
            break
        entries = _requeue(run, retry)
    return _result(
        cluster, eng, gangs, run.where, run.started, run.failed, skipped, run.committed, run.need
    )


def _schedule_entry(
    run: _Run, e: Entry, assumed: dict[int, list[tuple[Pod, int]]], retry: list[Entry]
) -> None:
    """One queue entry (a pod, or a whole gang): select nodes, then commit, hold (Permit) or undo."""
    gi, g = e.gang_index, run.gangs[e.gang_index]
    if e.pod is not None:
        pods = [e.pod]
    elif (pods := run.members.get(gi)) is None:
        pods = run.members[gi] = sorted(g.pending, key=pod_key)
    if e.pod is None and g.topology_keys:
        got = _place_in_domain(run, gi, pods)
    else:
        got = _select_all(run, gi, pods)
    if (
        e.pod is not None
        and not got
        or e.pod is None
        and len(got) + run.committed[gi] < len(g.pending)
    ):
        retry.append(e)
    if not got:
        return
    mode = gang_mode(g)
    if mode == MODE_PERMIT:
        got = assumed.setdefault(gi, []) + got
        assumed[gi] = got
    if mode == MODE_POD or gi in run.started or run.committed[gi] + len(got) >= run.need(gi):
        run.started.add(gi)
        for p, j in got:
            run.where[p.key] = j
            run.placed.add(id(p))
        run.committed[gi] += len(got)
        assumed.pop(gi, None)
    elif mode == MODE_GROUP:
        for p, j in got:
            run.cluster.remove(j, p)


def _select_all(run: _Run, gi: int, pods: Sequence[Pod]) -> list[tuple[Pod, int]]:
    """Each pod not yet committed, greedily, in order: placed on its node (the caller commits or undoes)."""
    got: list[tuple[Pod, int]] = []
    for p in pods:
        if id(p) in run.placed:
            continue
        j = run.eng.select(p)
        if j is None:
            run.failed.setdefault(gi, p)
            continue
        run.cluster.place(j, p)
        got.append((p, j))
    return got


def _place_in_domain(run: _Run, gi: int, pods: Sequence[Pod]) -> list[tuple[Pod, int]]:
    """KEP-5732's placement cycle (placement.py): the group cycle once per topology domain, on that domain's nodes
    only; of the domains where the gang reaches quorum, the best-scored one is kept (ties drawn with the seeded RNG,
    as Go's map order would), the rest undone. A gang already started stays in its domain."""
    c, eng, g = run.cluster, run.eng, run.gangs[gi]
    home = [j for p in g.pending if (j := run.where.get(p.key)) is not None]
    req = sum((c.vec(p) for p in pods), np.zeros(len(c.res), dtype=np.int64))
    if not pods:
        return []
    prof = eng.profile(pods[0])
    feasible: list[tuple[int, list[tuple[Pod, int]]]] = []
    for _, mask in c.domains(g.topology_keys):
        if home and not mask[home].all():
            continue
        eng.allowed, eng.allowed_n = mask, int(mask.sum())
        try:
            got = _select_all(run, gi, pods)
        finally:
            eng.allowed = None
        if run.committed[gi] + len(got) >= run.need(gi):
            placed = run.committed[gi] + len(got)
            feasible.append(
                (
                    placement_score(c.alloc, c.used, mask, c.ri, req, prof, placed, len(g.pending)),
                    got,
                )
            )
        for p, j in reversed(got):
            c.remove(j, p)
    if not feasible:
        return []
    top = max(score for score, _ in feasible)
    best = [got for score, got in feasible if score == top]
    if len(best) > 1:
        eng.ties += 1
        got = best[eng.rng.randrange(len(best))]
    else:
        got = best[0]
    for p, j in got:
        c.place(j, p)
    return got


def _permit_timeout(
    run: _Run, assumed: dict[int, list[tuple[Pod, int]]], entries: list[Entry], retry: list[Entry]
) -> bool:
    """Gangs still held at Permit never reached quorum: release their pods and re-queue them."""
    rolled = False
    entry_of = {id(e.pod): e for e in entries if e.pod is not None} if assumed else {}
    for gi, held in assumed.items():
        for p, j in held:
            run.cluster.remove(j, p)
            retry.append(entry_of[id(p)])
        run.failed.setdefault(gi, held[0][0])
        rolled = True
    return rolled


def _requeue(run: _Run, retry: list[Entry]) -> list[Entry]:
    """The next pass's queue: each failed entry once, priority first, then re-queue order (stable sort)."""
    seen: set[int] = set()
    entries = []
    for (
        e
    ) in retry:  # a pod failing twice in a pass (never) or a rolled-back one that also failed: once
        if id(e) not in seen and (e.pod is None or e.pod.key not in run.where):
            seen.add(id(e))
            entries.append(e)
    entries.sort(key=lambda e: e.key.neg_priority)
    return entries


# --------------------------------------------------------------------------------------- reasons


def _shape(pod: Pod) -> str:
    scalars = [
        (r, v) for r, v in sorted(pod.requests.items()) if is_scalar(r) and v and r != "pods"
    ]
    if scalars:
        r, v = scalars[0]
        return f"{v}-GPU" if r == GPU else f"{v} {r}"
    return f"{pod.requests.get(CPU, 0)}m-cpu"


def _groups_of(c: _Cluster, idx: Iterable[int]) -> str:
    names = sorted({c.nodes[j].node_group or c.nodes[j].name for j in idx})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _why(
    c: _Cluster,
    eng: _Engine,
    gangs: Sequence[Gang],
    gi: int,
    pod: Pod,
    placed: int,
    need: int,
    empty: set[int],
    owner_on: Sequence[Sequence[int]],
) -> str:
    """Why gang `gi` did not start; `owner_on[j]`: the gang index of each pod on node j (-1: not committed)."""
    g = gangs[gi]
    prof = eng.profile(pod)
    req = c.vec(pod)
    compat = c.compat(pod.placement, prof)
    big = (c.alloc[:, req > 0] >= req[req > 0]).all(axis=1)
    if not compat.any():
        return f"no node passes the scheduler's filters for pod {pod.key} (nodeSelector, affinity, taints)"
    cand = np.flatnonzero(compat & big)
    if len(cand) == 0:
        return f"no node the pod may use has the allocatable pod {pod.key} requests"
    takers: Counter[int] = Counter()
    for j in cand.tolist():
        for t in owner_on[j]:
            if t >= 0 and t != gi:
                takers[t] += 1
    have = (
        f"only {placed} of {need} members needed fit" if g.policy == "gang" else "it does not fit"
    )
    if not takers:
        return f"{have}: the {len(cand)} nodes ({_groups_of(c, cand)}) it fits on are full"
    t, _ = takers.most_common(1)[0]
    tg = gangs[t]
    tpod = next(p for j in cand.tolist() for p, o in zip(c.pods_on[j], owner_on[j]) if o == t)
    tprof = eng.profile(tpod)
    tok = c.compat(tpod.placement, tprof) & c.fits(c.vec(tpod))
    spare = [j for j in empty if tok[j]]
    if spare:
        res = next(
            (r for r, v in sorted(tpod.requests.items()) if is_scalar(r) and v and r != "pods"),
            None,
        )
        hint = ""
        if tprof.strategy == "LeastAllocated":
            hint = (
                f"; MostAllocated with a {'GPU' if res == GPU else res} weight avoids it"
                if res
                else "; MostAllocated avoids it"
            )
        return (
            f"{have}: the scheduler would place {tg.namespace}'s {_shape(tpod)} pods ({tg.name}) on the "
            f"{_groups_of(c, cand)} nodes this gang needs, while {len(spare)} "
            f"{_groups_of(c, spare)} node(s) they fit stay empty{hint}"
        )
    older = tg.created and g.created and tg.created < g.created
    who = (
        "higher-priority"
        if tg.scheduler_priority > g.scheduler_priority
        else "older"
        if older
        else "earlier-queued"
    )
    return f"{have}: {who} gang {tg.key} takes this capacity first ({_groups_of(c, cand)})"


def _result(
    c: _Cluster,
    eng: _Engine,
    gangs: Sequence[Gang],
    where: dict[str, int],
    started: set[int],
    failed: dict[int, Pod],
    skipped: dict[int, str],
    committed: list[int],
    need,
) -> SimResult:
    empty = {j for j, n in enumerate(c.nodes) if n.kind != "existing" and _holds_none(c, j)}
    owners: list[
        list[list[int]]
    ] = []  # built on the first reason asked for; the run's state no longer changes

    def why(gi: int, pod: Pod) -> Callable[[], str]:
        def word() -> str:
            if not owners:
                owner = {p.key: i for i, g in enumerate(gangs) for p in g.pending if p.key in where}
                owners.append([[owner.get(p.key, -1) for p in pods] for pods in c.pods_on])
            why = _why(c, eng, gangs, gi, pod, committed[gi], need(gi), empty, owners[0])
            if gangs[gi].topology_keys and gang_mode(gangs[gi]) == MODE_GROUP:
                keys = "/".join(gangs[gi].topology_keys)
                why = f"no single {keys} domain holds {need(gi)} members (the scheduler places it in one: KEP-5732); {why}"
            return why

        return word

    outcomes = {}
    for gi, g in enumerate(gangs):
        if gi in skipped:
            outcomes[g.key] = GangOutcome(g.key, False, 0, need(gi), skipped[gi])
            continue
        ok = gi in started
        reason: str | Callable[[], str] = "" if ok else why(gi, failed.get(gi) or g.pending[0])
        outcomes[g.key] = GangOutcome(g.key, ok, committed[gi], need(gi), reason)
    return SimResult(
        placement={k: c.nodes[j].name for k, j in where.items()},
        outcomes=outcomes,
        empty_nodes=[c.nodes[j].name for j in sorted(empty)],
        node_pods=_NodePods(c),
        profiles=[p.describe() for p in eng.used_profiles.values()],
    )
