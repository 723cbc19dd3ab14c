"""`python -m benchmarks results`: docs/results.md and its plots from suite and simulator JSON, the same bytes from
the same files, every figure read from them, and the commit and machine each came from.

The fixture (tests/fixtures/results) is a trimmed real run: two backlogs of the quick suite, two policies of two
hour-trace seeds; the second seed's timing.json has no environment, as a run that did not record one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.cli import main

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "results"


def generate(out: Path, *, plots: bool = True) -> Path:
    page = out / "results.md"
    argv = ["results", "--bench", str(FIXTURE / "bench"), "--simulate", str(FIXTURE / "sim-0"),
            str(FIXTURE / "sim-1"), "--out", str(page)]
    assert main([*argv, *([] if plots else ["--no-plots"])]) == 0
    return page


def sims() -> list[dict]:
    return [json.loads((FIXTURE / d / "simulate.json").read_text()) for d in ("sim-0", "sim-1")]


@pytest.mark.slow
def test_the_same_json_gives_the_same_page_and_the_same_plots(tmp_path):
    first, second = generate(tmp_path / "a"), generate(tmp_path / "b")
    assert first.read_bytes() == second.read_bytes()
    plots = sorted(p.relative_to(first.parent) for p in first.parent.rglob("*.png"))
    assert plots, "the page shows plots"
    assert plots == sorted(p.relative_to(second.parent) for p in second.parent.rglob("*.png"))
    for rel in plots:
        assert (first.parent / rel).read_bytes() == (second.parent / rel).read_bytes(), rel


@pytest.mark.slow
def test_every_plot_the_page_links_exists_and_no_other_is_left(tmp_path):
    page = generate(tmp_path)
    linked = set(re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()))
    on_disk = {p.relative_to(page.parent).as_posix() for p in page.parent.rglob("*.png")}
    assert linked == on_disk


def test_the_page_names_the_commit_and_machine_of_each_input_and_says_when_one_was_not_recorded(tmp_path):
    text = generate(tmp_path, plots=False).read_text()
    bench = json.loads((FIXTURE / "bench" / "results.json").read_text())
    rows = [line for line in text.splitlines() if line.startswith(("| benchmark suite", "| simulator"))]
    assert len(rows) == 3
    assert bench["environment"]["commit"]["sha"][:12] in rows[0] and "Example CPU @ 2.00GHz, 2 cores" in rows[0]
    assert "--out" not in rows[0] and "--no-progress" not in rows[0]
    assert "fedcba987654` (uncommitted changes)" in rows[1]
    assert rows[2].count("not recorded") == 2


def test_the_pooled_row_is_all_dollars_over_all_started_gangs_and_the_mean_of_each_runs_percentiles(tmp_path):
    text = generate(tmp_path, plots=False).read_text()
    for policy in ("gangscale-gate", "karpenter"):
        rs = [s["results"][policy] for s in sims()]
        started = sum(r["started"] for r in rs)
        per_gang = sum(r["dollars"] for r in rs) / started
        p95 = sum(r["time_to_start_seconds"]["p95"] for r in rs) / len(rs) / 60
        row = next(line for line in text.splitlines() if line.startswith(f"| {policy} | 2 |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == f"{started}/{sum(r['gangs'] for r in rs)}"
        assert cells[4] == f"{p95:.1f}"
        assert cells[5] == f"{per_gang:,.2f}"


def test_each_runs_own_table_shows_its_dollars_per_started_gang(tmp_path):
    text = generate(tmp_path, plots=False).read_text()
    for sim in sims():
        section = text.split(f"### hour trace, seed {sim['trace']['seed']},")[1].split("###")[0]
        for policy, r in sim["results"].items():
            assert f"| {policy} | {r['started']}/{r['gangs']} |" in section
            assert f"| {r['dollars_per_started_gang']:,.2f} |" in section


def test_no_inputs_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["results", "--out", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("missing", ["bench", "sim"])
def test_a_directory_without_its_json_is_one_line_and_exit_2(tmp_path, capsys, missing):
    flag = "--bench" if missing == "bench" else "--simulate"
    assert main(["results", flag, str(tmp_path), "--out", str(tmp_path / "r.md")]) == 2
    assert "results:" in capsys.readouterr().err
