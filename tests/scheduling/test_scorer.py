"""The fast path's scalar scorer gives, node by node, what the reference's numpy scores give.

`scorer.scorer` (one Python closure per shape, what `_recheck` calls for every node a placement changed) and the
numpy column form of a shape's refresh (`shapes._rows_state`) must equal `score_arrays.base_scores` (the vector
form the reference path scores with: NodeResourcesFit and BalancedAllocation, weighted) on every node. Seeded
random clusters cover the branches: resources a node lacks (allocatable 0), requests above capacity, pods with no
cpu or memory request (scoring's 100m / 200Mi defaults), extended resources requested or not, every strategy,
two, three or one balanced resources, and either plugin weighted 0.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from gangscale.model import Placement, Pod
from gangscale.scheduling import SimNode
from gangscale.scheduling.cluster import Cluster
from gangscale.scheduling.config import Profile
from gangscale.scheduling.score_arrays import base_scores
from gangscale.scheduling.shapes import _rows_state, new_shape

from .helpers import GI, GPU

PROFILES = {
    "least": Profile(),
    "most-gpu": Profile(strategy="MostAllocated", resources=(("cpu", 1), ("memory", 1), (GPU, 5))),
    "least-gpu-heavy-balance": Profile(
        resources=(("cpu", 3), ("memory", 1), (GPU, 2)),
        weights={"NodeResourcesFit": 2, "NodeResourcesBalancedAllocation": 3},
    ),
    "rtcr-three-balanced": Profile(
        strategy="RequestedToCapacityRatio",
        resources=(("cpu", 2), ("memory", 1), (GPU, 3)),
        shape=((0, 100), (50, 30), (100, 0)),
        balanced_resources=("cpu", "memory", GPU),
    ),
    "rtcr-rising": Profile(
        strategy="RequestedToCapacityRatio", shape=((0, 0), (30, 70), (100, 100))
    ),
    "one-balanced": Profile(strategy="MostAllocated", balanced_resources=("cpu",)),
    "no-fit-weight": Profile(weights={"NodeResourcesBalancedAllocation": 1}),
    "no-balance-weight": Profile(strategy="MostAllocated", weights={"NodeResourcesFit": 1}),
}


def _pod(rng: random.Random, name: str) -> Pod:
    req = {"pods": 1}
    cpu, mem = rng.choice((0, 100, 500, 2000, 9000)), rng.choice((0, 1, 4, 64)) * GI
    if cpu:
        req["cpu"] = cpu
    if mem:
        req["memory"] = mem
    if rng.random() < 0.4:
        req[GPU] = rng.choice((1, 2, 8))
    return Pod("ns", name, f"uid-{name}", req, Placement())


def _cluster(rng: random.Random, pods: list[Pod]) -> Cluster:
    nodes = []
    for j in range(40):
        alloc = {
            "cpu": rng.choice((0, 2000, 3920, 7910, 47810)),
            "memory": rng.choice((0, 8, 30, 180)) * GI,
            "pods": 110,
        }
        if rng.random() < 0.5:
            alloc[GPU] = rng.choice((0, 1, 4, 8))
        nodes.append(SimNode(f"n{j}", {"kubernetes.io/hostname": f"n{j}"}, (), alloc, "g", "new"))
    c = Cluster(nodes, pods, ())
    for k in range(rng.randint(0, 80)):  # loads anywhere, some past the node's allocatable
        c.place(rng.randrange(len(nodes)), _pod(rng, f"bound-{k}"))
    return c


@pytest.mark.filterwarnings("ignore:All-NaN slice")  # a node with none of the balanced resources: std 0 both ways
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_the_scalar_scorer_and_the_column_refresh_score_every_node_as_the_reference_does(profile):
    prof = PROFILES[profile]
    rng = random.Random(profile)
    for case in range(25):
        pods = [_pod(rng, f"p{case}-{k}") for k in range(4)]
        c = _cluster(rng, pods)
        rows = np.arange(len(c.nodes))
        for pod in pods:
            want = base_scores(c, rows, pod, prof).tolist()
            st = new_shape(c, pod, prof)
            assert st.score is not None
            got = [st.score(c.alloc_rows[j], *c.lists(j)) for j in rows.tolist()]
            assert got == want, (profile, case, pod.requests)
            assert _rows_state(c, st, rows)[1].tolist() == want, (profile, case, pod.requests)
