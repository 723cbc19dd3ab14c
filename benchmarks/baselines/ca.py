"""Cluster Autoscaler's scale-up, as its code does it (kubernetes/autoscaler, cluster-autoscaler/).

One autoscaler loop, repeated until no expansion option is left:

1. `filterOutSchedulable` (core/podlistprocessor): pending pods, higher
   priority first, are packed onto the free capacity of existing and upcoming
   nodes by the scheduler simulation; pods that fit are not scaled for. The
   simulation's predicate checker looks for a node round-robin from the node
   after the last one it used (`lastIndex`), and skips a pod when a similar
   pod of the same controller already failed in this pass.
2. `ScaleUpOrchestrator.ScaleUp` (core/scaleup/orchestrator): per node group
   with room left, `SchedulablePodGroups` keeps the equivalence groups whose
   exemplar passes the predicates on the group's template node; the
   `BinpackingNodeEstimator` (estimator/binpacking_estimator.go) orders them
   by `cpu/node_cpu + mem/node_mem` descending (decreasing_pod_orderer.go) and
   packs them first-fit onto the template nodes it has added, opening a new
   one when a pod fits none, until the node-group capacity or
   `--max-nodes-per-scaleup` (1000) stops it.
3. The `least-waste` expander (expander/waste) picks the option with the
   smallest wasted CPU fraction + wasted memory fraction of the nodes'
   capacity (GPUs are not scored); ties go to the random fallback.
4. The chosen group grows by the estimate, capped at its max size; with
   `--balance-similar-node-groups` (on here: the EKS recommendation) the
   nodes are spread over groups of the same instance type in other zones.

Nothing here knows PodGroups: CA's snapshot does not read them.

`ca-atomic` adds ProvisioningRequests of class `best-effort-atomic-scale-up`
(provisioningrequest/besteffortatomic): each gang is one request for all its
pending pods. The `WrapperOrchestrator` alternates one request and one
regular scale-up per loop. A request first checks whether its pods fit the
existing capacity (then it is provisioned without a scale-up); otherwise the
orchestrator runs with `allOrNothing`: an option counts only if *all* the
request's remaining pods fit one node group (and its similar groups) within
its max size, else the request is left for a later loop. A failed request is
retried after the others (backoff) until nothing changes.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..world import Placed, World
from .nodes import Nodes

# Labels CA's node-group comparator ignores when deciding that groups are "similar".
_IGNORED_LABELS = {
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
    "topology.ebs.csi.aws.com/zone",
    "kubernetes.io/hostname",
    "gangscale.io/node-group",
}


@dataclass(slots=True)
class CAOptions:
    balance_similar_node_groups: bool = True
    max_nodes_per_scaleup: int = 1000
    seed: int = 0
    max_loops: int = 100_000


@dataclass(slots=True)
class _Option:
    group: int
    node_count: int
    pods: int
    cpu: int
    mem: int


class _CA:
    def __init__(self, world: World, opts: CAOptions) -> None:
        self.w = world
        self.opts = opts
        self.nodes = Nodes(world)
        self.left = world.group_headroom.copy()  # nodes each group may still add
        self.rng = random.Random(opts.seed)
        self.last = 0  # the predicate checker's round-robin lastIndex
        self.loops = 0
        self.scale_ups = 0
        # pods in the order CA's podlistprocessor packs them: priority, then listing order
        self.order = sorted(range(len(world.pods)), key=lambda p: -world.pods[p].priority)
        self.similar = self._similar_groups() if opts.balance_similar_node_groups else None
        self.cpu_i, self.mem_i = world.cpu, world.mem

    # ------------------------------------------------------------ simulation

    def _similar_groups(self) -> list[list[int]]:
        w = self.w
        keys = []
        for g in range(len(w.group_names)):
            labels = tuple(
                sorted((k, v) for k, v in w.group_labels[g].items() if k not in _IGNORED_LABELS)
            )
            keys.append((w.group_itype[g], tuple(w.group_alloc[g]), labels, w.group_taints[g]))
        return [[h for h in range(len(keys)) if keys[h] == keys[g]] for g in range(len(keys))]

    def _rr_place(self, run: list[int], lo: int, hi: int, log: list | None) -> int:
        """Place identical pods one by one, each on the next fitting node after the last used (round-robin)."""
        nodes, w = self.nodes, self.w
        s = int(w.pod_shape[run[0]])
        cand = (np.flatnonzero(nodes.fits_mask(s, lo, hi)) + lo).tolist()
        if not cand:
            return 0
        req = w.shape_req[s]
        i = bisect_left(cand, self.last) % len(cand)
        placed = 0
        for p in run:
            if not cand:
                break
            j = cand[i]
            nodes.place(j, p)
            if log is not None:
                log.append((j, p))
            placed += 1
            self.last = j + 1
            if (nodes.free[j] >= req).all():
                i = (i + 1) % len(cand)
            else:
                cand.pop(i)
                if cand:
                    i %= len(cand)
        return placed

    def filter_out_schedulable(
        self, pods: list[int], lo: int, hi: int, log: list | None = None
    ) -> list[int]:
        """Pack pods onto nodes [lo, hi); returns those still unschedulable (in order)."""
        if hi <= lo or not pods:
            return list(pods)
        w = self.w
        rest: list[int] = []
        failed: set[tuple[int, int]] = set()
        i = 0
        while i < len(pods):
            key = (int(w.pod_gang[pods[i]]), int(w.pod_shape[pods[i]]))
            j = i + 1
            while (
                j < len(pods)
                and int(w.pod_gang[pods[j]]) == key[0]
                and int(w.pod_shape[pods[j]]) == key[1]
            ):
                j += 1
            run = pods[i:j]
            if key in failed:
                rest.extend(run)
            else:
                n = self._rr_place(run, lo, hi, log)
                if n < len(run):
                    failed.add(key)
                    rest.extend(run[n:])
            i = j
        return rest

    # -------------------------------------------------------------- scale-up

    def _capacity(self, g: int) -> int:
        if self.similar is None:
            return int(self.left[g])
        return int(sum(self.left[h] for h in self.similar[g]))

    def _estimate(self, g: int, counts: Counter, limit: int, record: bool = False):
        """BinpackingNodeEstimator on group g's template; returns (nodes, pods, cpu, mem[, packing])."""
        w = self.w
        alloc = w.group_alloc[g]
        shapes = [s for s in counts if w.shape_fits_group(s, g)]
        if not shapes:
            return 0, 0, 0, 0, []

        def score(s: int) -> float:
            r = w.shape_req[s]
            sc = 0.0
            if self.cpu_i >= 0 and alloc[self.cpu_i] > 0:
                sc += r[self.cpu_i] / alloc[self.cpu_i]
            if self.mem_i >= 0 and alloc[self.mem_i] > 0:
                sc += r[self.mem_i] / alloc[self.mem_i]
            return sc

        shapes.sort(key=lambda s: -score(s))
        R = len(w.resources)
        free = np.zeros((0, R), dtype=np.int64)
        packing: list[Counter] = []
        placed = cpu = mem = 0
        for s in shapes:
            n = counts[s]
            req = w.shape_req[s]
            pos = req > 0
            took = 0
            if len(free):  # first fit on the nodes already added by this estimate
                fit = (free[:, pos] // req[pos]).min(axis=1) if pos.any() else np.full(len(free), n)
                before = np.cumsum(fit) - fit
                take = np.clip(n - before, 0, fit)
                took = int(take.sum())
                if took:
                    free -= take[:, None] * req
                    if record:
                        for j in np.flatnonzero(take):
                            packing[j][s] += int(take[j])
            left = n - took
            if left and len(free) < limit:
                per = w.per_node(s, alloc)
                if per > 0:
                    add = min(math.ceil(left / per), limit - len(free))
                    fill = [per] * add
                    if add * per > left:
                        fill[-1] = left - (add - 1) * per
                    rows = (
                        np.repeat(alloc[None, :], add, axis=0)
                        - np.array(fill, dtype=np.int64)[:, None] * req
                    )
                    free = np.concatenate([free, rows])
                    if record:
                        packing.extend(Counter({s: f}) for f in fill)
                    left -= sum(fill)
            got = n - left
            placed += got
            if self.cpu_i >= 0:
                cpu += got * int(req[self.cpu_i])
            if self.mem_i >= 0:
                mem += got * int(req[self.mem_i])
        return len(free), placed, cpu, mem, packing

    def _least_waste(self, options: list[_Option]) -> _Option:
        w = self.w
        best: list[_Option] = []
        best_score = None
        for o in options:
            cap_cpu, cap_mem = (int(x) * o.node_count for x in w.group_capacity[o.group])
            score = (cap_cpu - o.cpu) / cap_cpu + (cap_mem - o.mem) / cap_mem
            if best_score is None or score < best_score:
                best, best_score = [o], score
            elif score == best_score:
                best.append(o)
        return best[0] if len(best) == 1 else self.rng.choice(best)

    def _balance(self, g: int, count: int) -> list[int]:
        """Groups to add nodes to: g alone, or spread over its similar groups smallest first."""
        if self.similar is None:
            return [g] * min(count, int(self.left[g]))
        sizes = {
            h: int(self.w.group_headroom[h] - self.left[h])
            for h in self.similar[g]
            if self.left[h] > 0
        }
        out = []
        for _ in range(count):
            if not sizes:
                break
            h = min(sizes, key=lambda x: (sizes[x], self.w.group_names[x]))
            out.append(h)
            sizes[h] += 1
            if self.left[h] - out.count(h) <= 0:
                del sizes[h]
        return out

    def scale_up(self, pods: list[int], all_or_nothing: bool) -> tuple[_Option, list[int]] | None:
        """One ScaleUp call: returns the chosen option and the indices of the nodes added."""
        w = self.w
        counts = Counter(int(w.pod_shape[p]) for p in pods)
        options = []
        for g in range(len(w.group_names)):
            if self.left[g] <= 0:
                continue
            limit = min(self.opts.max_nodes_per_scaleup, self._capacity(g))
            nodes, placed, cpu, mem, _ = self._estimate(g, counts, limit)
            if not placed or not nodes:
                continue
            if all_or_nothing and placed < len(pods):
                continue
            options.append(_Option(g, nodes, placed, cpu, mem))
        if not options:
            return None
        best = self._least_waste(options)
        groups = self._balance(best.group, best.node_count)
        if len(groups) < best.node_count and all_or_nothing:
            return None
        added = []
        for h in groups:
            added.append(self.nodes.add(h))
            self.left[h] -= 1
        self.scale_ups += 1
        return best, added

    # ------------------------------------------------------------------ runs

    def run_regular(self, pods: list[int]) -> list[int]:
        pending = self.filter_out_schedulable(pods, 0, self.nodes.n)
        while pending and self.loops < self.opts.max_loops:
            self.loops += 1
            lo = self.nodes.n
            if self.scale_up(pending, False) is None:
                break
            pending = self.filter_out_schedulable(pending, lo, self.nodes.n)
        return pending

    def provision_atomic(self, pods: list[int]) -> bool:
        """One best-effort-atomic ProvisioningRequest for `pods`; commits on success."""
        log: list[tuple[int, int]] = []
        last = self.last
        rest = self.filter_out_schedulable(pods, 0, self.nodes.n, log)
        if not rest:
            return True  # capacity found: Provisioned=True without a scale-up
        res = self.scale_up(rest, True)
        if res is None:
            for j, p in reversed(log):
                self.nodes.unplace(j, p)
            self.last = last
            return False
        best, added = res
        w = self.w
        # the scheduler binds the pods where the estimate packed them
        *_, packing = self._estimate(
            best.group, Counter(int(w.pod_shape[p]) for p in rest), len(added), record=True
        )
        by_shape: dict[int, list[int]] = {}
        for p in rest:
            by_shape.setdefault(int(w.pod_shape[p]), []).append(p)
        for j, content in zip(added, packing, strict=False):
            for s, cnt in content.items():
                for _ in range(cnt):
                    self.nodes.place(j, by_shape[s].pop())
        return True


def plan_ca(world: World, opts: CAOptions | None = None) -> Placed:
    ca = _CA(world, opts or CAOptions())
    pending = ca.run_regular(ca.order)
    return ca.nodes.to_placed(
        {"loops": ca.loops, "scaleUps": ca.scale_ups, "unschedulable": len(pending)}
    )


def plan_ca_atomic(world: World, opts: CAOptions | None = None) -> Placed:
    ca = _CA(world, opts or CAOptions())
    w = world
    requests: list[list[int]] = []  # one ProvisioningRequest per gang, oldest first
    by_gang: dict[int, list[int]] = {}
    regular: list[int] = []
    for p in ca.order:
        g = int(w.pod_gang[p])
        if w.gangs[g].policy == "gang":
            by_gang.setdefault(g, []).append(p)
        else:
            regular.append(p)
    for g in sorted(by_gang, key=lambda g: (w.gangs[g].created, g)):
        requests.append(by_gang[g])

    pending = ca.filter_out_schedulable(regular, 0, ca.nodes.n)
    reg_stalled = not pending
    fails = 0
    provisioned = 0
    turn_regular = False  # the wrapper starts with ProvisioningRequests
    while (requests and fails < len(requests)) or not reg_stalled:
        if ca.loops >= ca.opts.max_loops:
            break
        ca.loops += 1
        pr_ready = bool(requests) and fails < len(requests)
        if pr_ready and (reg_stalled or not turn_regular):
            turn_regular = True
            pr = requests.pop(0)
            lo = ca.nodes.n
            if ca.provision_atomic(pr):
                provisioned += 1
                fails = 0
                if pending:  # new nodes' spare room is seen by the next loop's filter
                    pending = ca.filter_out_schedulable(pending, lo, ca.nodes.n)
            else:
                requests.append(pr)
                fails += 1
        else:
            turn_regular = False
            lo = ca.nodes.n
            if not pending or ca.scale_up(pending, False) is None:
                reg_stalled = True
                continue
            pending = ca.filter_out_schedulable(pending, lo, ca.nodes.n)
            fails = 0  # new capacity: failed requests get another try
    return ca.nodes.to_placed(
        {
            "loops": ca.loops,
            "scaleUps": ca.scale_ups,
            "provisioned": provisioned,
            "requestsLeft": len(requests),
            "unschedulable": len(pending),
        }
    )
