"""benchmarks/modecheck.py: gate mode, observe mode and the baselines through the scheduler model, on a quick backlog."""

from __future__ import annotations

from benchmarks.modecheck import check_backlog, table


def test_gate_mode_starts_every_gang_it_promises_and_leaves_no_bought_node_empty_beside_the_baselines(tmp_path):
    rows = check_backlog("q-gpumix", (0, 1), tmp_path)
    assert {(r["strategy"], r["seed"]) for r in rows} == {(s, n) for s in ("LeastAllocated", "MostAllocated")
                                                          for n in (0, 1)}
    assert {r["policy"] for r in rows} == {"gate", "observe", "ca", "ca-atomic", "karpenter"}
    for r in rows:
        if r["policy"] == "gate":
            assert r["promised"] > 0 and r["promised_not_started"] == 0 and r["empty_nodes"] == 0, r
        if r["policy"] in ("gate", "observe"):
            assert r["gangs_started"] >= r["promised"] - r["promised_not_started"]
    lines = table(rows).splitlines()
    assert len(lines) == 2 + 2 and lines[2].startswith("| q-gpumix | LeastAllocated |")
