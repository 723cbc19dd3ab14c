"""What pods of a set of shapes can use of one node's capacity, per resource: the capacity the cost and gang
relaxations count (`bound`), for all the shapes a relaxation covers and for its size classes.

Validity (`usable_per_node`). On one node of kind k take any packing of pods of the shapes; all fit k, else they
could not be there. For resources r, t let rho_rt = max over those shapes of req_r / req_t (0/0 counts as 0, q/0
with q > 0 as infinite). Each pod's req_r <= rho_rt req_t, so summed, load_r <= rho_rt load_t <= rho_rt C_t, and
load_r <= C_r: load_r <= min(C_r, min_t rho_rt C_t) =: U_r. Also load_r is a sum of whole requests, so a multiple
of g_r, the gcd of the shapes' req_r: U_r rounds down to one. Both steps only use that load_t <= C_t holds in
every packing, so they may repeat (`CLAMP_ROUNDS`), and C may be any such bound (raw capacity, or a U already
computed for a superset of the shapes). U is rounded up by `USABLE_MARGIN` against float error.

Size classes (`size_classes`). The argument holds for any set of shapes, so for the pods of a subset S on a node
too: their load is at most U computed for S alone. For S the shapes asking at least t of a resource (the large
pods), U_S is what large pods can fill: a node with 3.5 free cores gives 2-core pods 2, where with 250m pods
beside them it counts 3.5. A relaxation that holds large pods' load within U_S per node (summed over a pool)
stops counting fragments only small pods can fill as room for large ones.
"""

from __future__ import annotations

import numpy as np

USABLE_MARGIN = 1e-9  # relative, on each clamped capacity: float ratios never cut off a real load
CLAMP_ROUNDS = 2  # the ratio clamp and the rounding to whole requests, applied twice (each can enable the other)
# per resource, at most this many thresholds t (spread over its distinct requests)
SIZE_CLASSES = 12


class Usable:
    """`usable_per_node` built up shape by shape: the ratios rho and the gcds of the shapes added so far, per
    kind (rows of `cap`), so nested sets of shapes (`size_classes`) cost one pass over the shapes."""

    def __init__(self, cap: np.ndarray) -> None:
        K, R = cap.shape
        self.cap = cap
        # kinds x r x t: max req_r / req_t over the shapes added that fit
        self.rho = np.zeros((K, R, R))
        self.istep = np.zeros((K, R), dtype=np.int64)  # their gcd per resource (0: none yet)
        self.fits = np.zeros(K, dtype=bool)  # some shape added fits the kind

    def add(self, ireq: np.ndarray, on: np.ndarray) -> None:
        """One shape: its integer requests, and the kinds it fits (a boolean row per kind)."""
        req = ireq.astype(float)
        num, den = req[:, None], req[None, :]  # ratio[r, t] = req_r / req_t
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(den > 0, num / den, np.where(num > 0, np.inf, 0.0))
        self.rho[on] = np.maximum(self.rho[on], ratio)
        self.istep[on] = np.gcd(self.istep[on], ireq)
        self.fits |= on

    def usable(self) -> np.ndarray:
        """Per kind, per resource: U for the shapes added so far (0 on kinds none of them fits)."""
        rho, step = self.rho, self.istep.astype(float)
        usable = self.cap
        for _ in range(CLAMP_ROUNDS):  # each round's bound on load_t is a valid C_t for the next
            with np.errstate(invalid="ignore"):
                via = np.where(np.isinf(rho), np.inf, rho * usable[:, None, :]).min(axis=2)
            usable = np.minimum(usable, via * (1 + USABLE_MARGIN) + 1)
            usable = np.where(step > 0, np.floor(usable / np.maximum(step, 1.0)) * step, usable)
        usable[~self.fits] = 0.0
        return usable


def usable_per_node(cap: np.ndarray, ireq: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """Per kind (rows of `cap`: free capacity of an existing node, allocatable of a group's new node), what pods of
    the shapes (requests `ireq`; `fits`: kinds x shapes) can use at all of one node's capacity in each resource
    (the module's validity note). Example: free 60 cores and 2 GiB where the pods ask at most 1 GiB per core make
    2 usable cores, not 60; 1.9 free cores for 250m pods make 1.75."""
    if not len(ireq):
        return np.zeros_like(cap)
    acc = Usable(cap)
    # shape by shape: kinds x shapes x resources x resources would not fit at 100k pods
    for i in range(len(ireq)):
        acc.add(ireq[i], fits[:, i])
    return acc.usable()


def size_classes(
    usable: np.ndarray, ireq: np.ndarray, fits: np.ndarray, most: int = SIZE_CLASSES
) -> list[tuple[int, list[int], np.ndarray]]:
    """(resource r, S, U_S[:, r]) for nested size classes: S the shapes (row indices of `ireq`) asking at least t
    of r, for up to `most` thresholds t among their distinct requests of r, spread from the largest down; each
    with at least two shapes (one shape's room is its slot count, which the relaxations already hold). `usable`:
    U of all the shapes, per kind, the capacity each class's clamp starts from (any valid bound on the load is)."""
    out: list[tuple[int, list[int], np.ndarray]] = []
    for r in range(ireq.shape[1]):
        col = ireq[:, r]
        order = sorted((i for i in range(len(col)) if col[i] > 0), key=lambda i: -int(col[i]))
        values = sorted({int(col[i]) for i in order}, reverse=True)
        picked = (
            set(values)
            if len(values) <= most
            else {values[round(j * (len(values) - 1) / (most - 1))] for j in range(most)}
        )
        acc, j = Usable(usable), 0
        for t in values:
            while j < len(order) and col[order[j]] >= t:
                acc.add(ireq[order[j]], fits[:, order[j]])
                j += 1
            if t in picked and j >= 2:
                out.append((r, order[:j], acc.usable()[:, r]))
    return out
