"""docs/results.md from the JSON the benchmark suite and the simulator write: tables, plots, and where they came from.

`python -m benchmarks results --bench DIR --simulate DIR [DIR ...] --out docs/results.md` reads `DIR/results.json`
(`python -m benchmarks run`) and each `DIR/simulate.json` with its `timing.json` (`python -m benchmarks simulate`),
and writes the page and its PNG plots (under `img/results/` beside the page). The page holds only what the JSON
holds: the same inputs give the same bytes. The machine and commit of each input are read from its `environment`
(benchmarks/provenance.py); an input without one says "not recorded".
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .report import case_table, headline_table, model_headline, plot_results
from .sim.report import plot as plot_simulation
from .sim.report import table as simulation_table

IMG_DIR = "img/results"
BASELINES = ("ca", "ca-atomic", "karpenter")


@dataclass(frozen=True, slots=True)
class Inputs:
    """The result files a page is made from: one suite run and any number of simulator runs."""

    bench: dict[str, Any] | None
    simulations: tuple[
        tuple[dict[str, Any], dict[str, Any]], ...
    ]  # (simulate.json, timing.json) per run


def load(bench: Path | None, simulations: list[Path]) -> Inputs:
    """Read `bench/results.json` and each `dir/simulate.json` + `dir/timing.json` (timing optional)."""
    doc = orjson.loads((bench / "results.json").read_bytes()) if bench is not None else None
    sims = []
    for d in simulations:
        timing_path = d / "timing.json"
        timing = orjson.loads(timing_path.read_bytes()) if timing_path.exists() else {}
        sims.append((orjson.loads((d / "simulate.json").read_bytes()), timing))
    return Inputs(doc, tuple(sims))


def _commit(env: dict[str, Any] | None) -> str:
    c = (env or {}).get("commit")
    if not c:
        return "not recorded"
    return f"`{c['sha'][:12]}`" + (" (uncommitted changes)" if c.get("dirty") else "")


def _machine(env: dict[str, Any] | None) -> str:
    if not env:
        return "not recorded"
    cpu = env.get("cpu_model") or env.get("machine", "?")
    return f"{cpu}, {env.get('cpus', '?')} cores; Python {env.get('python', '?')}, OR-Tools {env.get('ortools', '?')}"


def _bench_command(doc: dict[str, Any]) -> str:
    """The suite's command without where it wrote its files and its progress bar."""
    words, out, skip = doc.get("command", "").split(), [], False
    for w in words:
        if skip:
            skip = False
        elif w == "--out":
            skip = True
        elif w != "--no-progress":
            out.append(w)
    return " ".join(out) or "python -m benchmarks run"


def _sim_label(sim: dict[str, Any]) -> str:
    t = sim["trace"]
    hours = f", first {t['first_hours']} h" if t.get("first_hours") else ""
    return f"{t['kind']} trace{hours}, seed {t['seed']}, {t['failures']:.0%} launch failures"


def provenance_table(inputs: Inputs) -> str:
    """One row per input: what ran, on which commit and machine."""
    rows = ["| result | command | commit | machine |", "|---|---|---|---|"]
    if inputs.bench is not None:
        d = inputs.bench
        rows.append(
            f"| benchmark suite `{d['suite']}` | `{_bench_command(d)}` | {_commit(d.get('environment'))} | "
            f"{_machine(d.get('environment'))} |"
        )
    for sim, timing in inputs.simulations:
        t = sim["trace"]
        cmd = (
            f"python -m benchmarks simulate --trace {t['kind']} --seed {t['seed']} --failures {t['failures']:g}"
            + (f" --hours {t['first_hours']}" if t.get("first_hours") else "")
        )
        env = timing.get("environment")
        rows.append(
            f"| simulator, {_sim_label(sim)} | `{cmd}` | {_commit(env)} | {_machine(env)} |"
        )
    return "\n".join(rows)


def bench_section(doc: dict[str, Any], img: str) -> list[str]:
    """The suite's plans on paper, what the scheduler model starts, per backlog, and its plots."""
    checks = doc["checks"]
    out = [
        "## Plans on paper: the benchmark suite",
        "",
        f"Suite `{doc['suite']}`: {len(doc['cases'])} backlogs, gangscale `--time-limit "
        f"{doc['config']['time_limit']:g} --relative-gap {doc['config']['relative_gap']:g}`. Every plan is "
        "scored by one evaluator (`benchmarks/evaluate.py`); *stranded nodes* are bought nodes whose pods belong "
        "to gangs that still cannot reach `minCount`. `gangscale` is observe mode (the controller's default: the "
        "plan checked against the kube-scheduler model); `gangscale-off` is the solver's plan alone, the plan "
        "gate mode applies. Method and baselines: [benchmarks.md](benchmarks.md).",
        "",
        headline_table(doc),
        "",
        f"Property checks (`benchmarks/report.py`): {checks['checked']} checked, {len(checks['failed'])} failed.",
        "",
    ]
    out += [
        f"- {f['case']} vs {f['policy']}: {f['property']} ({f['detail']})" for f in checks["failed"]
    ]
    model = model_headline(doc)
    if model.count("\n") > 1:
        out += [
            "",
            "### What really starts: every policy's nodes through the kube-scheduler model",
            "",
            "Gate mode holds its gangs behind `gangscale.io/capacity` and releases each pod narrowed to its "
            "planned node (`benchmarks/gatemode.py`); observe mode promises only what the model starts "
            "([scheduling.md](scheduling.md)).",
            "",
            model,
        ]
    out += [
        "",
        "### Per backlog",
        "",
        case_table(doc),
        "",
        f"![Whole gangs satisfied]({img}/gangs.png)",
        "",
        f"![Cost against a proven lower bound]({img}/cost_ratio.png)",
        "",
    ]
    if model.count("\n") > 1:
        out += [
            f"![What the kube-scheduler model does with each policy's nodes]({img}/model_started_empty.png)",
            "",
        ]
    return out


def pooled_table(sims: list[dict[str, Any]]) -> str:
    """Per policy, over every simulator run given: gangs started, mean p50 / p95 time-to-start, $ per started gang
    (all dollars over all started gangs), node-hours stranded past a deadline."""
    policies = [p for p in sims[0]["policies"] if all(p in s["results"] for s in sims)]
    rows = [
        "| policy | runs | gangs started | mean p50 TTS (min) | mean p95 TTS (min) | $ per started gang | "
        "node-h past a deadline |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for p in policies:
        rs = [s["results"][p] for s in sims]
        started, gangs = sum(r["started"] for r in rs), sum(r["gangs"] for r in rs)
        p50 = [
            r["time_to_start_seconds"]["p50"]
            for r in rs
            if r["time_to_start_seconds"]["p50"] is not None
        ]
        p95 = [
            r["time_to_start_seconds"]["p95"]
            for r in rs
            if r["time_to_start_seconds"]["p95"] is not None
        ]
        per_gang = sum(r["dollars"] for r in rs) / started if started else None
        rows.append(
            f"| {p} | {len(rs)} | {started}/{gangs} | {_minutes(p50)} | {_minutes(p95)} | "
            f"{'n/a' if per_gang is None else f'{per_gang:,.2f}'} | "
            f"{sum(r['stranded_node_hours_past_deadline'] for r in rs):.2f} |"
        )
    return "\n".join(rows)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _minutes(seconds: list[int]) -> str:
    return f"{statistics.fmean(seconds) / 60:.1f}" if seconds else "n/a"


def simulation_section(
    sims: tuple[tuple[dict[str, Any], dict[str, Any]], ...], img: str
) -> list[str]:
    """Each run's table, the pooled table when there are several, and the first run's plots."""
    out = [
        "## Over time: the simulator",
        "",
        "The real controller against simulated time, cloud and kube-scheduler, and dynamic Cluster Autoscaler "
        "and Karpenter baselines, on the same seeded trace of arriving gangs; every run goes on until every "
        "started gang has finished and its nodes went back, so each policy pays for whole runs. TTS: gang "
        "time-to-start. Definitions: [simulate.md](simulate.md).",
        "",
    ]
    docs = [s for s, _ in sims]
    if len(docs) > 1:
        out += ["### Pooled over the runs below", "", pooled_table(docs), ""]
    for sim in docs:
        t = sim["trace"]
        out += [
            f"### {_sim_label(sim)}",
            "",
            f"{t['gangs']} gangs, {t['pods']} pods, {t['gpus']} GPUs asked; {_count(len(t['outages']), 'outage')}, "
            f"{_count(len(t['restarts']), 'controller restart')}.",
            "",
            simulation_table(sim).rstrip(),
            "",
        ]
    out += [
        f"![Gang time-to-start, {_sim_label(docs[0])}]({img}/time_to_start_cdf.png)",
        "",
        f"![Cumulative cost, {_sim_label(docs[0])}]({img}/cost.png)",
        "",
    ]
    return out


def render_page(inputs: Inputs, img: str = IMG_DIR) -> str:
    """The whole page as markdown; the plots it links are written by `write`."""
    out = [
        "# Results",
        "",
        "Generated by `python -m benchmarks results` from the JSON files the benchmark suite and the simulator "
        "write; regenerate it, do not edit it. Each table comes from the run named below, on the commit and "
        "machine recorded in that run's JSON. How to reproduce a run: [benchmarks.md](benchmarks.md), "
        "[simulate.md](simulate.md).",
        "",
        "## Where these numbers come from",
        "",
        provenance_table(inputs),
        "",
    ]
    if inputs.bench is not None:
        out += bench_section(inputs.bench, f"{img}/bench")
    if inputs.simulations:
        out += simulation_section(inputs.simulations, f"{img}/simulate")
    return "\n".join(out).rstrip() + "\n"


def write(inputs: Inputs, page: Path, plots: bool = True) -> list[Path]:
    """Write the page and (unless `plots` is false) its PNG plots under `img/results/` beside it."""
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render_page(inputs))
    written = [page]
    if not plots:
        return written
    if inputs.bench is not None:
        d = page.parent / IMG_DIR / "bench"
        d.mkdir(parents=True, exist_ok=True)
        written += plot_results(inputs.bench, d)
    if inputs.simulations:
        d = page.parent / IMG_DIR / "simulate"
        d.mkdir(parents=True, exist_ok=True)
        written += plot_simulation(inputs.simulations[0][0], d)
    return [page, *_drop_unlinked(page, written[1:])]


def _drop_unlinked(page: Path, plots: list[Path]) -> list[Path]:
    """Delete the plots the page does not show (the renderers draw more than it uses); the ones kept."""
    text = page.read_text()
    kept = []
    for path in plots:
        if path.relative_to(page.parent).as_posix() in text:
            kept.append(path)
        else:
            path.unlink()
    return kept
