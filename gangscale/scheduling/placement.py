"""Topology-aware workload scheduling (KEP-5732, kube-scheduler 1.36+ alpha): a PodGroup with a topology
constraint is placed in one domain, chosen among all of them.

Upstream (kubernetes/enhancements keps/sig-scheduling/5732-topology-aware-workload-scheduling, "Scheduling
Algorithm Phases"; kubernetes.io docs/concepts/scheduling-eviction/topology-aware-scheduling): the
`TopologyPlacement` plugin generates one candidate placement per distinct value of the PodGroup's
`spec.schedulingConstraints.topology[].key` node label (nodes without the label are in none); for each, the
ordinary pod-by-pod group cycle runs on that placement's nodes only, and the placement is feasible when
minCount members fit; feasible placements are scored by `NodeResourcesFit` (MostAllocated over all the
placement's nodes, whatever the per-pod strategy, with the profile's resource weights) and
`PodGroupPodsCount` (how many of the group's pods it takes), weight 1 each; the best one is bound. The field
is kept by kube-apiserver only with the `TopologyAwareWorkloadScheduling` gate on (KEP-5732, "Upgrade /
Downgrade"), so a PodGroup that carries it comes from a cluster that runs the feature.

This module holds the pure parts (the domains, a placement's score); `simulate.py` runs the cycles.
Invariant: domains are listed in sorted label-value order, and scores are integers (MaxNodeScore 100 each).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import Profile
from .scores import MAX_NODE_SCORE, is_scalar

PLACEMENT_WEIGHTS = (
    ("NodeResourcesFit", 1),
    ("PodGroupPodsCount", 1),
)  # the placementScore defaults


def domains(
    labels: Sequence[dict[str, str]], keys: tuple[str, ...]
) -> list[tuple[tuple[str, ...], np.ndarray]]:
    """TopologyPlacement: one (domain value, node mask) per distinct value of `keys` over the nodes that have them
    all, in sorted value order."""
    by_value: dict[tuple[str, ...], list[int]] = {}
    for j, lab in enumerate(labels):
        vals = tuple(lab.get(k) for k in keys)
        if all(v is not None for v in vals):
            by_value.setdefault(vals, []).append(j)  # type: ignore[arg-type]
    out = []
    for value in sorted(by_value):
        mask = np.zeros(len(labels), dtype=bool)
        mask[by_value[value]] = True
        out.append((value, mask))
    return out


def placement_score(
    alloc: np.ndarray,
    used: np.ndarray,
    mask: np.ndarray,
    res_index: dict[str, int],
    requested: np.ndarray,
    prof: Profile,
    placed: int,
    total: int,
) -> int:
    """`NodeResourcesFit` (MostAllocated: requested / allocatable summed over the placement's nodes, per resource,
    weighted by the profile's resources; a scalar resource the group does not request is not scored) plus
    `PodGroupPodsCount` (the share of the group's pods placed), each on 0..MaxNodeScore, weight 1 each."""
    a = alloc[mask].sum(axis=0)
    u = used[mask].sum(axis=0)
    total_w = score = 0
    for name, weight in prof.resources:
        i = res_index.get(name)
        if i is None or a[i] <= 0 or (is_scalar(name) and requested[i] == 0):
            continue
        score += weight * (min(int(u[i]), int(a[i])) * MAX_NODE_SCORE // int(a[i]))
        total_w += weight
    fit = score // total_w if total_w else 0
    count = placed * MAX_NODE_SCORE // total if total else 0
    return PLACEMENT_WEIGHTS[0][1] * fit + PLACEMENT_WEIGHTS[1][1] * count
