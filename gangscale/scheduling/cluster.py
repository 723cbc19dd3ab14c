"""The cluster state one simulation run changes: nodes as integer arrays and the pods on each node.

Invariant: for every node, `used` is the sum of the requests of the pods in `pods_on` (bound pods,
DaemonSet pods, then the run's placements), and `nz` the sum of their non-zero requested cpu and
memory (scoring's defaults); `place` and `remove` keep them so. The per-node caches (filter verdicts
per placement, PreferNoSchedule counts, label classes, topology domains) depend on the nodes only
and are shared by every seed's run (`fresh`) and by cuts to fewer nodes (`subset`).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..fit import label_keys, labels_match, tolerates, tolerates_all
from ..model import Placement, Pod, Taint
from ..resources import CPU, MEMORY
from .config import Profile
from .nodes import UNSCHEDULABLE_TAINT, SimNode, pinned_names
from .placement import domains
from .scores import DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST


def columns(nodes: Iterable[SimNode], pod_res: frozenset[str]) -> list[str]:
    """The resource columns of a cluster's arrays: every resource a node has or a pod requests, cpu and memory."""
    return sorted({r for n in nodes for r in n.allocatable} | pod_res | {CPU, MEMORY})


class Cluster:
    """Nodes as integer arrays; placing and removing pods updates free / requested / non-zero requested."""

    def __init__(self, nodes: Sequence[SimNode], pods: Iterable[Pod], bound: Iterable[Pod]) -> None:
        self.nodes = list(nodes)
        self.pod_res = frozenset(r for p in pods for r in p.requests)
        self.res = columns(self.nodes, self.pod_res)
        self.ri = {r: i for i, r in enumerate(self.res)}
        N, R = len(self.nodes), len(self.res)
        # filled as rows, then one array
        self.alloc_rows: list[list[int]] = [[0] * R for _ in self.nodes]
        for row, n in zip(self.alloc_rows, self.nodes, strict=True):
            for r, v in n.allocatable.items():
                row[self.ri[r]] = v
        self.alloc = np.array(self.alloc_rows, dtype=np.int64).reshape(N, R)
        self.index = {n.name: j for j, n in enumerate(self.nodes)}
        self.all = np.arange(N)
        # these three depend on the nodes only: shared by fresh()
        self._compat: dict[Placement, np.ndarray] = {}
        self._prefer: dict[Placement, np.ndarray] = {}
        self._vecs: dict[tuple, np.ndarray] = {}
        self._domains: dict[tuple[str, ...], list[tuple[tuple[str, ...], np.ndarray]]] = {}
        self._no_prefer: np.ndarray | None = None
        # `_classes`: nodes only, shared by fresh()
        self._class_of: dict[tuple, tuple[np.ndarray, list[int]]] = {}
        # id(pod) -> `_vecs_of(pod)` (`place`, `remove`), shared by fresh()
        self._pod_vecs: dict[int, tuple[Pod, list[tuple[int, int]], int, int, bool, bool]] = {}
        # id(pod) -> (pod, a number per (placement, requests)): `fastpath._shape_of`'s shape key without hashing the
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
        # pods by request set: one vector sum per set
        alike: dict[tuple, tuple[Pod, list[int]]] = {}
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
        # nodes holding pods with required anti-affinity (symmetry)
        self.anti_nodes: Counter[int] = Counter(anti)
        # placed pods with DoNotSchedule spread, and their node
        self.spread_pods: list[tuple[Pod, int]] = list(spread)
        # every node a pod was placed on or removed since the bound state (shape caches sync from it)
        self.log: list[int] = []
        # pods taken off nodes so far: while it stands still, free capacity only shrinks
        self.removals = 0
        # the node of every removal, in order (`sync`: which nodes may fit a shape again)
        self.rlog: list[int] = []

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

    def subset(self, nodes: Sequence[SimNode], keep: Sequence[int]) -> Cluster:
        """The cluster over `nodes` = `self.nodes[keep]` (in that order), with only the bound pods on them: the
        arrays, bound state and filter verdicts (all per node) taken from this one rather than built again. The
        caller checks that the resource columns stay the same (`columns`)."""
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

    def fresh(self) -> Cluster:
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
        # the entry holds the pod: its id is never reused while memoised
        if hit is None or hit[0] is not pod:
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
        # the entry holds the pod: its id is never reused while memoised
        if hit is None or hit[0] is not pod:
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
            out: np.ndarray = np.zeros(len(self.nodes), dtype=dtype)
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


class NodePods(Mapping[str, list[str]]):
    """Node name -> the keys of the pods on it (bound first, then placed), for the nodes holding any: read from
    the run's final state on demand (observe mode asks about a few new nodes of thousands; no run changes that
    state once its result exists)."""

    __slots__ = ("_c",)

    def __init__(self, c: Cluster) -> None:
        self._c = c

    def __getitem__(self, name: str) -> list[str]:
        j = self._c.index.get(name)
        if j is None or holds_none(self._c, j):
            raise KeyError(name)
        daemons = {id(p) for p in self._c.nodes[j].daemon_pods}
        return [p.key for p in self._c.pods_on[j] if id(p) not in daemons]

    def __iter__(self) -> Iterator[str]:
        return (n.name for j, n in enumerate(self._c.nodes) if not holds_none(self._c, j))

    def __len__(self) -> int:
        return sum(1 for j in range(len(self._c.nodes)) if not holds_none(self._c, j))


def holds_none(c: Cluster, j: int) -> bool:
    """Node j holds no pod besides its DaemonSet pods (those are bound first and never taken off)."""
    return len(c.pods_on[j]) <= len(c.nodes[j].daemon_pods)
