"""The --quick suite end to end: artifacts, and gangscale never worse than a baseline."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from benchmarks.cli import main as bench_main
from benchmarks.report import POLICY_ORDER


@pytest.mark.slow
def test_quick_suite_runs_and_gangscale_is_never_worse(tmp_path):
    code = bench_main(["run", "--quick", "--out", str(tmp_path), "--no-progress", "--time-limit", "2",
                       "--bound-seconds", "1", "--check"])
    doc = orjson.loads((tmp_path / "results.json").read_bytes())
    for name in ("results.md", "cost_ratio.png", "time.png", "gangs.png", "stranded.png", "model_started_empty.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert doc["cases"] and {c["name"] for c in doc["cases"]} == {"q-llm", "q-gpumix", "q-cpumpi", "q-mixed", "q-busy", "q-elastic"}
    for case in doc["cases"]:
        assert set(case["metrics"]) == set(POLICY_ORDER)
        assert case["spec"]["daemonsets"] and case["stats"]["daemonsets"] == 6  # the EKS GPU cluster's set
        bought = case["metrics"]["gangscale-off"]
        assert (bought["notes"]["daemonset_cost"] > 0) == (bought["new_nodes"] > 0)
        observe = case["metrics"]["gangscale"]
        assert observe["stranded_nodes"] == 0
        for strategy in ("LeastAllocated", "MostAllocated"):  # observe mode: promised ⊆ started, no empty node
            r = observe["model"][strategy]
            assert (r["promised_not_started"], r["empty_nodes"]) == (0, 0), (case["name"], strategy, r)
        gate = case["metrics"]["gangscale-gate"]  # gate mode: every promised gang starts, no bought node stays empty
        for strategy in ("LeastAllocated", "MostAllocated"):
            r = gate["model"][strategy]
            assert (r["promised_not_started"], r["empty_nodes"]) == (0, 0), (case["name"], strategy, r)
            assert r["gangs_started"] == r["promised"] >= observe["model"][strategy]["gangs_started"]
        gs = case["metrics"]["gangscale-off"]  # the solver's own selection, compared on paper
        assert gs["stranded_nodes"] == 0
        real = gs["model"]["LeastAllocated"]["gangs_started"] >= gs["gangs_satisfied"]  # the solver's plan happens
        for pol in ("gangscale", "gangscale-gate"):  # issue 9: at most 3% over the solver's plan of the same gangs
            m = case["metrics"][pol]
            later = max((r.get("later_cost", 0.0) for r in m["model"].values()), default=0.0)
            if sorted(m["satisfied"]) == sorted(gs["satisfied"]) and (real or pol == "gangscale-gate"):
                assert m["cost"] + (later if pol == "gangscale-gate" else 0.0) <= 1.03 * gs["cost"] + 1e-6, (
                    case["name"], pol)
        for name, m in case["metrics"].items():
            assert m["violation_count"] == 0, (case["name"], name, m["violations"])
            assert gs["gangs_satisfied"] >= m["gangs_satisfied"], (case["name"], name)
            if gs["gangs_satisfied"] == m["gangs_satisfied"] and gs["useful_pods"] <= m["useful_pods"]:
                assert gs["cost"] <= m["cost"] + 1e-6, (case["name"], name)
            assert m["lower_bound"] is not None and m["lower_bound"] <= m["cost"] + 1e-6
    assert doc["checks"]["all_ok"] and code == 0
    md = (tmp_path / "results.md").read_text()
    assert "| gangscale |" in md and "| karpenter |" in md and "DaemonSets' share $/h" in md


def test_observe_mode_is_timed_once_at_100k_and_as_often_as_the_default_elsewhere_unless_the_run_says():
    from benchmarks.runner import RunConfig, _observe_runs
    from benchmarks.suite import STANDARD

    by_name = {c.spec.name: c for c in STANDARD}
    cfg = RunConfig(out=Path("unused"))
    assert _observe_runs(by_name["target-100k"], cfg) == 1  # ~4 min a run; issue 11 times the default there
    assert _observe_runs(by_name["target-10k"], cfg) == 5  # issue 9's "at most 2 s more" is a median of 5
    assert _observe_runs(by_name["target-100k"], RunConfig(out=Path("unused"), timing_runs=3)) == 3


def test_the_same_selection_cost_check_fails_a_plan_over_3_percent_dearer_and_ignores_other_selections():
    """Issue 9: where observe or gate mode satisfies the gangs the solver's own plan satisfies, it may cost at most
    3% more (gate mode with the nodes its later passes buy); a different selection is not compared."""
    from benchmarks.evaluate import Metrics
    from benchmarks.report import _same_selection_rows

    def metrics(policy: str, cost: float, satisfied: list[int], later: float = 0.0, started: int = 2) -> Metrics:
        model = {"LeastAllocated": {"later_cost": later, "gangs_started": started}}
        return Metrics(policy, 3, len(satisfied), 3, len(satisfied), 9, 9, 9, 3, cost, 0, 0.0, 0,
                       satisfied=satisfied, model=model)

    off = metrics("gangscale-off", 100.0, [0, 1])
    rows = _same_selection_rows("c", {"gangscale-off": off, "gangscale": metrics("gangscale", 102.9, [1, 0]),
                                      "gangscale-gate": metrics("gangscale-gate", 100.0, [0, 1], later=3.5)})
    assert [(r["policy"], r["ok"]) for r in rows] == [("gangscale", True), ("gangscale-gate", False)]
    assert rows[1]["property"].endswith("(LeastAllocated)") and rows[1]["detail"] == "$103.50 vs $100.00"
    assert _same_selection_rows("c", {"gangscale-off": off, "gangscale": metrics("gangscale", 200.0, [0])}) == []
    # the solver's plan starts one of its two gangs in the model: observe mode's dearer nodes are not compared
    unreal = {"gangscale-off": metrics("gangscale-off", 100.0, [0, 1], started=1),
              "gangscale": metrics("gangscale", 115.0, [0, 1]), "gangscale-gate": metrics("gangscale-gate", 100.0, [0, 1])}
    assert [(r["policy"], r["ok"]) for r in _same_selection_rows("c", unreal)] == [("gangscale-gate", True)]
