"""The --quick suite end to end: artifacts, and gangscale never worse than a baseline."""

from __future__ import annotations

from pathlib import Path

import orjson

from benchmarks.cli import main as bench_main
from benchmarks.report import POLICY_ORDER


def test_quick_suite_runs_and_gangscale_is_never_worse(tmp_path):
    code = bench_main(["run", "--quick", "--out", str(tmp_path), "--no-progress", "--time-limit", "2",
                       "--bound-seconds", "1", "--check"])
    doc = orjson.loads((tmp_path / "results.json").read_bytes())
    for name in ("results.md", "cost_ratio.png", "time.png", "gangs.png", "stranded.png", "model_started_empty.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert doc["cases"] and {c["name"] for c in doc["cases"]} == {"q-llm", "q-gpumix", "q-cpumpi", "q-mixed", "q-busy", "q-elastic"}
    for case in doc["cases"]:
        assert set(case["metrics"]) == set(POLICY_ORDER)
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
        for name, m in case["metrics"].items():
            assert m["violation_count"] == 0, (case["name"], name, m["violations"])
            assert gs["gangs_satisfied"] >= m["gangs_satisfied"], (case["name"], name)
            if gs["gangs_satisfied"] == m["gangs_satisfied"] and gs["useful_pods"] <= m["useful_pods"]:
                assert gs["cost"] <= m["cost"] + 1e-6, (case["name"], name)
            assert m["lower_bound"] is not None and m["lower_bound"] <= m["cost"] + 1e-6
    assert doc["checks"]["all_ok"] and code == 0
    md = (tmp_path / "results.md").read_text()
    assert "| gangscale |" in md and "| karpenter |" in md


def test_observe_mode_is_timed_once_at_100k_and_as_often_as_the_default_elsewhere_unless_the_run_says():
    from benchmarks.runner import RunConfig, _observe_runs
    from benchmarks.suite import STANDARD

    by_name = {c.spec.name: c for c in STANDARD}
    cfg = RunConfig(out=Path("unused"))
    assert _observe_runs(by_name["target-100k"], cfg) == 1  # ~4 min a run; issue 11 times the default there
    assert _observe_runs(by_name["target-10k"], cfg) == 5  # issue 9's "at most 2 s more" is a median of 5
    assert _observe_runs(by_name["target-100k"], RunConfig(out=Path("unused"), timing_runs=3)) == 3
