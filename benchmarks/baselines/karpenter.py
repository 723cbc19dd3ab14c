"""Karpenter's provisioning scheduler, as kubernetes-sigs/karpenter does it.

`pkg/controllers/provisioning/scheduling`: the batch of provisionable pods is
sorted by CPU then memory requests, descending (queue.go,
`byCPUAndMemoryDescending`; ties by creation time and UID). Each pod, in
turn (scheduler.go `add`):

1. goes to the first existing or in-flight node it fits (initialized nodes
   first, then by name);
2. else to an in-flight NodeClaim of this batch, trying those with the fewest
   pods first; adding a pod narrows the claim's instance-type options to the
   types that satisfy every pod's requirements and can hold the claim's
   summed requests (nodeclaim.go `Add`);
3. else to a new NodeClaim from the first NodePool (by weight, then name)
   whose taints it tolerates and one of whose instance types fits it.

No gang awareness: a pod is never held back for its group. When the batch is
done every NodeClaim launches as one CreateFleet request over its remaining
options, and EC2's `lowest-price` allocation picks the cheapest offering
still available. Here a node group is one offering (an instance type in one
zone, its max size the capacity EC2 has), and NodePools are the catalog's
groups by taint set. A claim whose offerings are all exhausted fails to
launch (insufficient capacity); its pods go back to the next provisioning
round, which sees the launched nodes as in-flight capacity and marks the
exhausted offerings unavailable. Rounds repeat until one makes no progress.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from ..world import Placed, World
from .nodes import Nodes


@dataclass(slots=True)
class KarpenterOptions:
    max_rounds: int = 50


class _Claims:
    """The in-flight NodeClaims of one scheduling round, as arrays."""

    def __init__(self, R: int, G: int) -> None:
        self.cnt = np.zeros(64, dtype=np.int64)
        self.used = np.zeros((64, R), dtype=np.int64)
        self.opts = np.zeros((64, G), dtype=bool)
        self.hi = np.zeros((64, R), dtype=np.int64)  # elementwise max allocatable over the options
        self.pods: list[list[int]] = []
        self.n = 0

    def new(self, used: np.ndarray, opts: np.ndarray, hi: np.ndarray, pod: int) -> None:
        if self.n == len(self.cnt):
            for name in ("cnt", "used", "opts", "hi"):
                old = getattr(self, name)
                new = np.zeros((len(old) * 2,) + old.shape[1:], dtype=old.dtype)
                new[: len(old)] = old
                setattr(self, name, new)
        c = self.n
        self.n += 1
        self.cnt[c] = 1
        self.used[c] = used
        self.opts[c] = opts
        self.hi[c] = hi
        self.pods.append([pod])


class _Karpenter:
    def __init__(self, world: World, opts: KarpenterOptions) -> None:
        self.w = world
        self.opts = opts
        self.nodes = Nodes(world)
        self.left = world.group_headroom.copy()  # available capacity per offering
        G = len(world.group_names)
        # NodePools: groups with the same taints, ordered by name ("default" pool = untainted first)
        pools: dict[tuple, list[int]] = {}
        for g in range(G):
            pools.setdefault(world.group_taints[g], []).append(g)
        self.pools = [
            np.isin(np.arange(G), gs) for _, gs in sorted(pools.items(), key=lambda kv: str(kv[0]))
        ]
        # shape -> offerings whose labels/taints allow it and whose allocatable holds it
        S = len(world.shape_req)
        self.shape_ok = np.zeros((S, G), dtype=bool)
        for s in range(S):
            self.shape_ok[s] = world.compat[s, world.group_sig] & (
                world.shape_req[s] <= world.group_alloc
            ).all(axis=1)
        self.rounds = 0
        self.failed_launches = 0

    def _existing_order(self) -> np.ndarray:
        """Initialized nodes first, then by name (in-flight/launched-this-run nodes are uninitialized)."""
        w, n = self.w, self.nodes
        init = [j for j in range(n.n) if not n.new[j] and not w.node_upcoming[j]]
        rest = [j for j in range(n.n) if n.new[j] or w.node_upcoming[j]]

        def name(j: int) -> str:
            return w.node_names[j] if j < len(w.node_names) else f"~{j:09d}"

        return np.array(sorted(init, key=name) + sorted(rest, key=name), dtype=np.int64)

    def _round(self, pods: list[int]) -> tuple[list[int], int]:
        """One provisioning round over `pods`; returns (pods left, pods placed)."""
        w, nodes = self.w, self.nodes
        order = self._existing_order()
        R, G = len(w.resources), len(w.group_names)
        claims = _Claims(R, G)
        avail = self.left > 0
        # per shape, a position in `order` before which no node fits it (nodes only fill up in a round)
        cursor: dict[int, int] = {}
        # per shape, a heap of (pods, claim) over the claims that may still take it, and how many claims
        # existed when it was last brought up to date (claims only fill up and narrow in a round)
        heaps: dict[int, tuple[list[tuple[int, int]], int]] = {}

        def first_existing(s: int, req: np.ndarray) -> int:
            k = cursor.get(s, 0)
            while k < len(order):
                blk = order[k : k + 256]
                hit = np.flatnonzero(
                    w.compat[s, nodes.sig[blk]] & (nodes.free[blk] >= req).all(axis=1)
                )
                if len(hit):
                    cursor[s] = k + int(hit[0])
                    return int(blk[hit[0]])
                k += 256
            cursor[s] = len(order)
            return -1

        placed = 0
        failed: list[int] = []
        i = 0
        while i < len(pods):
            # a run of identical pods: a claim that cannot take one of them cannot take any later one
            # (claims only grow and narrow), so the claims are visited through a heap keyed like
            # Karpenter's sort (fewest pods first, then creation order) and dropped once they refuse
            s = int(w.pod_shape[pods[i]])
            j = i + 1
            while j < len(pods) and int(w.pod_shape[pods[j]]) == s:
                j += 1
            run = pods[i:j]
            i = j
            req = w.shape_req[s]
            ok_g = self.shape_ok[s]
            # the shape's heap from earlier runs of this round, plus the claims created since
            heap, seen = heaps.get(s, ([], 0))
            if claims.n > seen:
                n = claims.n
                cand = (
                    np.flatnonzero(
                        (claims.used[seen:n] + req <= claims.hi[seen:n]).all(axis=1)
                        & (claims.opts[seen:n] & ok_g).any(axis=1)
                    )
                    + seen
                )
                for c in cand.tolist():
                    heapq.heappush(heap, (int(claims.cnt[c]), c))
            heaps[s] = (heap, claims.n)
            for p in run:
                # 1. existing and in-flight nodes, in Karpenter's order
                j_node = first_existing(s, req)
                if j_node >= 0:
                    nodes.place(j_node, p)
                    placed += 1
                    continue
                # 2. in-flight NodeClaims, fewest pods first
                done = False
                while heap:
                    cnt, c = heap[0]
                    if cnt != claims.cnt[c]:  # other shapes added pods since: re-key lazily
                        heapq.heapreplace(heap, (int(claims.cnt[c]), c))
                        continue
                    new_used = claims.used[c] + req
                    keep = claims.opts[c] & ok_g & (w.group_alloc >= new_used).all(axis=1)
                    if not keep.any():
                        heapq.heappop(heap)
                        continue
                    claims.opts[c] = keep
                    claims.used[c] = new_used
                    claims.hi[c] = w.group_alloc[keep].max(axis=0)
                    claims.cnt[c] += 1
                    claims.pods[c].append(p)
                    heapq.heapreplace(heap, (cnt + 1, c))
                    done = True
                    break
                if done:
                    continue
                # 3. a new NodeClaim from the first NodePool that can take the pod
                for pool in self.pools:
                    keep = pool & avail & ok_g
                    if keep.any():
                        claims.new(req, keep, w.group_alloc[keep].max(axis=0), p)
                        heapq.heappush(heap, (1, claims.n - 1))
                        heaps[s] = (heap, claims.n)
                        break
                else:
                    failed.append(p)
        # launch: CreateFleet per claim, lowest price among the offerings still available
        for c in range(claims.n):
            options = np.flatnonzero(claims.opts[c] & (self.left > 0))
            if not len(options):
                self.failed_launches += 1
                failed.extend(claims.pods[c])
                continue
            g = int(options[np.lexsort((options, w.group_price[options]))[0]])
            self.left[g] -= 1
            j = nodes.add(g)
            for p in claims.pods[c]:
                nodes.place(j, p)
                placed += 1
        return failed, placed

    def run(self) -> list[int]:
        w = self.w
        pods = sorted(range(len(w.pods)), key=self._sort_key)
        while pods and self.rounds < self.opts.max_rounds:
            self.rounds += 1
            pods, placed = self._round(pods)
            if not placed:
                break
        return pods

    def _sort_key(self, p: int):
        w = self.w
        req = w.shape_req[w.pod_shape[p]]
        cpu = int(req[w.cpu]) if w.cpu >= 0 else 0
        mem = int(req[w.mem]) if w.mem >= 0 else 0
        pod = w.pods[p]
        return (-cpu, -mem, pod.created, pod.uid, p)


def plan_karpenter(world: World, opts: KarpenterOptions | None = None) -> Placed:
    k = _Karpenter(world, opts or KarpenterOptions())
    left = k.run()
    return k.nodes.to_placed(
        {"rounds": k.rounds, "failedLaunches": k.failed_launches, "unschedulable": len(left)}
    )
