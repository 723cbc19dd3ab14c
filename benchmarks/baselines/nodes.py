"""A growable table of nodes (existing, upcoming and bought) with their free capacity and pods."""

from __future__ import annotations

import numpy as np

from ..world import Placed, World


class Nodes:
    def __init__(self, world: World) -> None:
        self.w = world
        n = len(world.node_names)
        size = max(16, n * 2)
        R = len(world.resources)
        self.free = np.zeros((size, R), dtype=np.int64)
        self.free[:n] = world.node_free
        self.sig = np.zeros(size, dtype=np.int64)
        self.sig[:n] = world.node_sig
        self.group = np.full(size, -1, dtype=np.int64)
        self.group[:n] = world.node_group
        self.new = np.zeros(size, dtype=bool)
        self.pods: list[list[int]] = [[] for _ in range(size)]
        self.n = n
        self.n_existing = n
        self.node_of = np.full(len(world.pods), -1, dtype=np.int64)

    def _grow(self) -> None:
        size = self.free.shape[0] * 2
        for name in ("free", "sig", "group", "new"):
            old = getattr(self, name)
            new = np.zeros((size,) + old.shape[1:], dtype=old.dtype)
            if name == "group":
                new[:] = -1
            new[: old.shape[0]] = old
            setattr(self, name, new)
        self.pods.extend([] for _ in range(size - len(self.pods)))

    def add(self, g: int) -> int:
        """Buy one node of group g; returns its index."""
        if self.n >= self.free.shape[0]:
            self._grow()
        j = self.n
        self.n += 1
        self.free[j] = self.w.group_alloc[g]
        self.sig[j] = self.w.group_sig[g]
        self.group[j] = g
        self.new[j] = True
        return j

    def place(self, j: int, pod: int) -> None:
        self.free[j] -= self.w.shape_req[self.w.pod_shape[pod]]
        self.pods[j].append(pod)
        self.node_of[pod] = j

    def unplace(self, j: int, pod: int) -> None:
        self.free[j] += self.w.shape_req[self.w.pod_shape[pod]]
        self.pods[j].remove(pod)
        self.node_of[pod] = -1

    def truncate(self, n: int) -> None:
        """Forget bought nodes from index n on (they must be empty)."""
        for j in range(n, self.n):
            assert not self.pods[j]
            self.new[j] = False
            self.group[j] = -1
        self.n = n

    def fits_mask(self, s: int, lo: int, hi: int) -> np.ndarray:
        req = self.w.shape_req[s]
        ok = self.w.compat[s, self.sig[lo:hi]]
        return ok & (self.free[lo:hi] >= req).all(axis=1)

    def to_placed(self, notes: dict | None = None) -> Placed:
        w = self.w
        out = Placed(notes=dict(notes or {}))
        for j in range(self.n):
            keys = [w.pods[p].key for p in self.pods[j]]
            if self.new[j]:
                out.new_nodes.append((w.group_names[self.group[j]], keys))
            elif keys:
                out.existing[w.node_names[j]] = keys
        return out
