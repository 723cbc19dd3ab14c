"""kube-scheduler's node scores, in its integer arithmetic.

Every function here returns what the upstream plugin returns for one node, on the scale
0..MAX_NODE_SCORE, with Go's int64 truncating division where upstream divides integers.
Sources (kubernetes/kubernetes, pkg/scheduler/framework/plugins/noderesources/):
- least_allocated.go `leastRequestedScore`: ((capacity - requested) * 100) / capacity, 0 when
  capacity is 0 or requested exceeds it; `leastResourceScorer`: sum(score * weight) / sum(weight).
- most_allocated.go `mostRequestedScore`: (requested * 100) / capacity, requested clamped to capacity.
- requested_to_capacity_ratio.go: a broken-linear function of utilization (0..100); shape scores
  (0..10) are scaled by MaxNodeScore / MaxCustomPriorityScore = 10; resources scoring 0 do not count
  in the weight sum; the average is rounded (math.Round).
- resource_allocation.go `score`: a resource the node does not have (allocatable 0) is skipped, and
  an extended (scalar) resource the pod does not request is skipped -- a cpu-only pod's score never
  looks at GPUs, whatever their weight.
- balanced_allocation.go `balancedResourceScorer`: fractions requested/allocatable (capped at 1),
  std = |f1 - f2| / 2 for two resources, the population standard deviation for more, 0 for fewer;
  score = int64((1 - std) * 100). It uses real requests (useRequested) and skips best-effort pods.
- pkg/scheduler/util/pod_resources.go (non_zero.go in older trees): for scoring, a pod requesting no
  cpu counts 100m and no memory 200Mi (DefaultMilliCPURequest, DefaultMemoryRequest).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..resources import CPU, MEMORY

MAX_NODE_SCORE = 100
MAX_CUSTOM_PRIORITY_SCORE = 10
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
NATIVE = frozenset({CPU, MEMORY, "ephemeral-storage", "pods"})


def is_scalar(resource: str) -> bool:
    """Extended / hugepages / attachable resources: upstream's IsScalarResourceName."""
    return resource not in NATIVE


def non_zero(resource: str, amount: int) -> int:
    """The request scoring counts: the defaults for a pod that requests no cpu or memory."""
    if amount == 0 and resource == CPU:
        return DEFAULT_MILLI_CPU_REQUEST
    if amount == 0 and resource == MEMORY:
        return DEFAULT_MEMORY_REQUEST
    return amount


def least_requested(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def most_requested(requested: int, capacity: int) -> int:
    if capacity == 0:
        return 0
    return min(requested, capacity) * MAX_NODE_SCORE // capacity


def broken_linear(shape: Sequence[tuple[int, int]], x: int) -> int:
    """helper.BuildBrokenLinearFunction: linear between points, flat outside (points sorted by x)."""
    for i, (px, py) in enumerate(shape):
        if x <= px:
            if i == 0:
                return py
            qx, qy = shape[i - 1]
            num, den = (py - qy) * (x - qx), px - qx
            return qy + (abs(num) // den) * (
                1 if num >= 0 else -1
            )  # Go's division truncates toward zero
    return shape[-1][1]


def rtcr_resource(shape: Sequence[tuple[int, int]], requested: int, capacity: int) -> int:
    """One resource under RequestedToCapacityRatio (shape already scaled to 0..100)."""
    if capacity == 0 or requested > capacity:
        return broken_linear(shape, 100)
    return broken_linear(shape, min(requested, capacity) * 100 // capacity if requested > 0 else 0)


def weighted(
    strategy: str, rows: Sequence[tuple[int, int, int]], shape: Sequence[tuple[int, int]] = ()
) -> int:
    """NodeResourcesFit's score from (requested incl. the pod, allocatable, weight) per scored resource."""
    total = weights = 0
    for requested, allocatable, weight in rows:
        if strategy == "LeastAllocated":
            s = least_requested(requested, allocatable)
        elif strategy == "MostAllocated":
            s = most_requested(requested, allocatable)
        else:
            s = rtcr_resource(shape, requested, allocatable)
            if s <= 0:
                continue
        total += s * weight
        weights += weight
    if weights == 0:
        return 0
    if strategy == "RequestedToCapacityRatio":
        return int(math.floor(total / weights + 0.5))  # math.Round on a non-negative value
    return total // weights


def fit_rows(
    resources: Sequence[tuple[str, int]],
    pod: Mapping[str, int],
    node_requested: Mapping[str, int],
    node_nonzero: Mapping[str, int],
    allocatable: Mapping[str, int],
) -> list[tuple[int, int, int]]:
    """(requested, allocatable, weight) rows NodeResourcesFit scores, with upstream's skips."""
    rows = []
    for name, weight in resources:
        alloc = allocatable.get(name, 0)
        if alloc == 0:
            continue
        want = pod.get(name, 0)
        if is_scalar(name) and want == 0:
            continue
        if name in (CPU, MEMORY):
            req = node_nonzero.get(name, 0) + non_zero(name, want)
        else:
            req = node_requested.get(name, 0) + want
        rows.append((req, alloc, weight))
    return rows


def balanced(fractions: Sequence[float]) -> int:
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    else:
        std = 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def balanced_fractions(
    resources: Sequence[str],
    pod: Mapping[str, int],
    node_requested: Mapping[str, int],
    allocatable: Mapping[str, int],
) -> list[float] | None:
    """The fractions BalancedAllocation averages; None for a best-effort pod (the plugin skips it)."""
    if all(pod.get(r, 0) == 0 for r in resources):
        return None
    out = []
    for r in resources:
        alloc = allocatable.get(r, 0)
        want = pod.get(r, 0)
        if alloc == 0 or (is_scalar(r) and want == 0):
            continue
        out.append(min(1.0, (node_requested.get(r, 0) + want) / alloc))
    return out


def normalize_reverse(counts: Sequence[int]) -> list[int]:
    """helper.DefaultNormalizeScore(MaxNodeScore, reverse=true, ...), as TaintToleration uses it."""
    top = max(counts, default=0)
    if top == 0:
        return [MAX_NODE_SCORE] * len(counts)
    return [MAX_NODE_SCORE - MAX_NODE_SCORE * c // top for c in counts]
