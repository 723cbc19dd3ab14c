"""Hand-worked scores, each against the upstream plugin's documented formula (source cited per test)."""

from __future__ import annotations

import numpy as np

from gangscale.scheduling import strategy_config
from gangscale.scheduling.scores import (balanced, balanced_fractions, broken_linear, fit_rows, least_requested,
                                         most_requested, normalize_reverse, weighted)
from gangscale.scheduling.cluster import Cluster
from gangscale.scheduling.simulate import num_feasible_to_find, score_nodes

from .helpers import GI, GPU, mkpod, node


def test_least_allocated_is_the_weighted_mean_of_free_fractions_with_integer_division():
    # least_allocated.go: ((capacity - requested) * MaxNodeScore) / capacity per resource,
    # then sum(score * weight) / sum(weight), all int64 division.
    # cpu: (3000 - 1000) * 100 / 3000 = 66 (66.67 truncated); memory: (8Gi - 4Gi) * 100 / 8Gi = 50.
    rows = [(1000, 3000, 1), (4 * GI, 8 * GI, 1)]
    assert least_requested(1000, 3000) == 66
    assert weighted("LeastAllocated", rows) == (66 + 50) // 2 == 58


def test_least_allocated_scores_zero_when_requested_exceeds_capacity():
    # least_allocated.go leastRequestedScore: `if requested > capacity { return 0 }`.
    assert least_requested(5, 4) == 0 and least_requested(0, 0) == 0


def test_most_allocated_clamps_requested_to_capacity():
    # most_allocated.go mostRequestedScore: requested = capacity when it exceeds it (non-zero defaults).
    assert most_requested(1500, 1000) == 100
    assert most_requested(250, 1000) == 25


def test_a_pod_without_a_cpu_request_counts_100m_for_scoring():
    # pkg/scheduler/util: DefaultMilliCPURequest = 100, DefaultMemoryRequest = 200Mi, used for scoring only.
    pod = {"memory": 200 * 2**20}
    rows = fit_rows((("cpu", 1),), pod, {}, {}, {"cpu": 1000})
    assert rows == [(100, 1000, 1)]
    assert weighted("LeastAllocated", rows) == 90


def test_an_extended_resource_the_pod_does_not_request_is_left_out_of_the_score():
    # resource_allocation.go score(): `if podRequests[i] == 0 && schedutil.IsScalarResourceName(resource) { continue }`
    # so a cpu-only pod is scored on cpu alone, whatever the GPU weight.
    res = (("cpu", 1), (GPU, 5))
    cpu_only = fit_rows(res, {"cpu": 500}, {}, {}, {"cpu": 1000, GPU: 4})
    assert cpu_only == [(500, 1000, 1)]
    with_gpu = fit_rows(res, {"cpu": 500, GPU: 1}, {GPU: 2}, {}, {"cpu": 1000, GPU: 4})
    assert with_gpu == [(500, 1000, 1), (3, 4, 5)]
    assert weighted("MostAllocated", with_gpu) == (50 * 1 + 75 * 5) // 6 == 70


def test_balanced_allocation_is_one_minus_the_standard_deviation_of_the_fractions():
    # balanced_allocation.go: two resources: std = |f1 - f2| / 2; score = int64((1 - std) * MaxNodeScore).
    assert balanced([0.5, 0.25]) == 87  # std 0.125 -> 87.5 truncated
    # more than two: sqrt(sum((f - mean)^2) / n). fractions 0, 0.5, 1 -> std = sqrt(1/6) = 0.408 -> 59
    assert balanced([0.0, 0.5, 1.0]) == 59
    assert balanced([0.7]) == 100


def test_balanced_allocation_skips_a_best_effort_pod():
    # balanced_allocation.go PreScore: isBestEffortPod -> Skip (kubernetes#129138).
    assert balanced_fractions(("cpu", "memory"), {"pods": 1}, {}, {"cpu": 1000, "memory": GI}) is None


def test_requested_to_capacity_ratio_follows_the_shape_scaled_to_max_node_score():
    # requested_to_capacity_ratio.go: shape scores 0..10 scaled by MaxNodeScore / MaxCustomPriorityScore = 10;
    # helper.BuildBrokenLinearFunction interpolates linearly, flat outside the points.
    shape = ((0, 0), (100, 100))
    assert broken_linear(shape, 50) == 50
    assert broken_linear(((0, 100), (100, 0)), 33) == 67  # 100 + (-100 * 33) / 100, truncated toward zero
    assert weighted("RequestedToCapacityRatio", [(1, 4, 1), (1, 2, 1)], shape) == 38  # round((25 + 50) / 2)


def test_taint_toleration_reverses_the_normalised_count_of_intolerable_prefer_no_schedule_taints():
    # taint_toleration.go NormalizeScore: helper.DefaultNormalizeScore(MaxNodeScore, true, scores).
    assert normalize_reverse([0, 1, 2]) == [100, 50, 0]
    assert normalize_reverse([0, 0]) == [100, 100]


def test_the_vectorised_scores_agree_with_the_hand_worked_ones():
    nodes = [node("a", 3000, 8), node("b", 48000, 192, 4)]
    c = Cluster(nodes, [], [])
    p = mkpod("p", 1000, 4)
    prof = strategy_config("LeastAllocated").default
    got = score_nodes(c, np.arange(2), p, prof)
    fit_a = weighted("LeastAllocated", [(1000, 3000, 1), (4 * GI, 8 * GI, 1)])
    bal_a = balanced([1000 / 3000, 0.5])
    assert int(got[0]) == fit_a + bal_a + 3 * 100  # TaintToleration: no PreferNoSchedule taints -> 100 x3


def test_the_scheduler_scores_only_a_sample_of_feasible_nodes_in_large_clusters():
    # schedule_one.go numFeasibleNodesToFind: all below 100 nodes; adaptive 50 - n/125 percent, at least 5%
    # and at least 100 nodes.
    assert num_feasible_to_find(50, 0) == 50
    assert num_feasible_to_find(1000, 0) == 420
    assert num_feasible_to_find(10000, 0) == 500
    assert num_feasible_to_find(150, 0) == 100
    assert num_feasible_to_find(1000, 100) == 1000
