"""The benchmark's scheduler-model columns on a hand-checkable backlog (benchmarks/evaluate.py `model_run`)."""

from __future__ import annotations

from benchmarks.evaluate import model_run
from benchmarks.world import Placed
from tests.bench.helpers import group, pod, podgroup, world


def test_a_plan_whose_nodes_the_scheduler_misuses_starts_fewer_gangs_under_least_allocated(tmp_path):
    objs = [pod("infer", "2", "8Gi", gpus=1, created="2026-03-02T08:00:00Z"),
            podgroup("train", 1, created="2026-03-02T09:00:00Z"),
            pod("train-0", "8", "32Gi", gpus=4, group="train", created="2026-03-02T09:00:00Z")]
    w = world(tmp_path, objs, [group("xl", "g5.xlarge", 2, gpu=True), group("x12", "g5.12xlarge", 2, gpu=True)])
    placed = Placed(new_nodes=[("xl", ["default/infer"]), ("x12", ["default/train-0"])])
    least = model_run(w, placed, "LeastAllocated")
    assert (least["gangs_started"], least["empty_nodes"]) == (0, 1)
    assert least["cost_per_started_gang"] is None
    most = model_run(w, placed, "MostAllocated")
    assert (most["gangs_started"], most["empty_nodes"]) == (1, 0)
    price = float(w.group_price[w.group_index["xl"]] + w.group_price[w.group_index["x12"]])
    assert abs(most["cost_per_started_gang"] - price) < 1e-3
