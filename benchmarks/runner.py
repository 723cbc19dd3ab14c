"""Run a suite: generate backlogs, plan each with every policy, evaluate, write the artifacts.

gangscale runs as the real `gangscale plan` process (JSON cluster file in,
plan JSON out); its wall time is that of the whole process and its peak RSS
the process's own high-water mark since exec (`benchmarks/measure.py`). Baselines run in a forked child of the runner
after the backlog is loaded once, so their time and peak RSS cover planning
only (the cluster is already parsed). Every policy's output then goes through
the same evaluator and the same lower-bound computation.
"""

from __future__ import annotations

import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson

from gangscale.api import PlacementBound, SolveOptions
from gangscale.output import render

from . import provenance
from .baselines import BASELINES
from .evaluate import (
    MODEL_PROFILES,
    MOST_ALLOCATED_FILE,
    Metrics,
    evaluate,
    model_run,
    placed_from_plan,
    promised_gangs,
)
from .gatemode import gate_model_run, gate_plan
from .generate import write_backlog
from .measure import MARK
from .suite import SUITES, Case
from .world import World, load_world

POLICIES = ("gangscale", *BASELINES)


@dataclass(slots=True)
class RunConfig:
    suite: str = "standard"
    out: Path = Path("bench-out")
    time_limit: float = 2.0  # `gangscale plan --time-limit`
    relative_gap: float = 0.01  # `gangscale plan --relative-gap`
    bound_seconds: float = 3.0  # CP-SAT time for each policy's lower bound
    only: tuple[str, ...] = ()
    timing_runs: int | None = None  # override the cases' repeat counts
    progress: bool = True
    model_max_pods: int = 20000  # run the scheduler model on backlogs up to this many pending pods
    # override the cases' `BacklogSpec.daemonsets` (None: as the suite sets it)
    daemonsets: bool | None = None


@dataclass(slots=True)
class CaseResult:
    case: Case
    stats: dict
    metrics: dict[str, Metrics] = field(default_factory=dict)
    gangscale_runs: list[dict] = field(default_factory=list)
    yaml_runs: list[dict] = field(default_factory=list)
    # the reference run at the case's long_time_limit
    long_runs: list[dict] = field(default_factory=list)
    # observe mode planned against MostAllocated (--scheduler-config), and the solver alone (--scheduler-model off)
    variant_runs: dict[str, dict] = field(default_factory=dict)
    # the solver alone as `gangscale plan` runs without flags (the CLI's default is --scheduler-model off): timed
    # as often as observe mode on the timed backlogs (the targets time it), once elsewhere; variant_runs["off"] is
    # its median
    off_runs: list[dict] = field(default_factory=list)
    load_seconds: float = 0.0

    def to_dict(self) -> dict:
        runs = self.gangscale_runs
        return {
            "name": self.case.spec.name,
            "spec": self.case.spec.to_dict(),
            "stats": self.stats,
            "targets": {"seconds": self.case.target_seconds, "peak_mb": self.case.target_mb},
            "time_limit": self.case.time_limit,
            "gangscale_runs": runs,
            "gangscale_median_seconds": statistics.median(r["seconds"] for r in runs)
            if runs
            else None,
            "gangscale_max_peak_mb": max(r["peak_mb"] for r in runs) if runs else None,
            "yaml_runs": self.yaml_runs,
            "long_runs": self.long_runs,
            "variant_runs": self.variant_runs,
            "off_runs": self.off_runs,
            "default_flags": self.case.default_flags,
            "load_seconds": round(self.load_seconds, 3),
            "metrics": {k: m.to_dict() for k, m in self.metrics.items()},
        }


# ------------------------------------------------------------------ policies


def _wait(proc: subprocess.Popen) -> tuple[int, float]:
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024.0


def run_gangscale(
    cluster: Path,
    catalog: Path,
    plan_path: Path,
    cfg: RunConfig,
    time_limit: float | None,
    relative_gap: float | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    """One `gangscale plan` process; returns seconds, peak MB, the command and the plan's own gang and cost
    figures. `time_limit=None`: no solver flags at all (the shipped defaults)."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.measure",
        "plan",
        "--scheduler-model",
        "observe",  # `extra` may say off
        "--cluster",
        str(cluster),
        "--nodegroups",
        str(catalog),
        "-o",
        "json",
        "--output-file",
        str(plan_path),
    ]
    if time_limit is not None:
        gap = cfg.relative_gap if relative_gap is None else relative_gap
        cmd += ["--time-limit", f"{time_limit:g}", "--relative-gap", str(gap)]
    cmd += list(extra)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    code, peak = _wait(proc)
    seconds = time.perf_counter() - start
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if code != 0:
        raise RuntimeError(f"gangscale plan failed ({code}): {err.strip()[-2000:]}")
    own = [line[len(MARK) :] for line in err.splitlines() if line.startswith(MARK)]
    if own and own[-1].isdigit():
        # the process's own peak since exec (see benchmarks/measure.py)
        peak = int(own[-1]) / 1024.0
    shown = " ".join([sys.executable, "-m", "gangscale", *cmd[3:]])
    return {
        "seconds": round(seconds, 3),
        "peak_mb": round(peak, 1),
        "command": shown,
        **plan_figures(plan_path),
    }


def plan_figures(plan_path: Path) -> dict:
    """The plan's own account: gangs started, their upper bound, cost, cost gap, status, load average."""
    plan = orjson.loads(plan_path.read_bytes())
    sv = plan.get("solver", {})
    return {
        "gangs_started": sv.get("gangsStarted"),
        "gangs_upper_bound": sv.get("gangsUpperBound"),
        "cost": plan.get("costPerHour"),
        "cost_bound": plan.get("lowerBoundPerHour"),
        "gap": sv.get("gap"),
        "status": sv.get("status"),
        "load_avg": round(os.getloadavg()[0], 2),
    }


def run_baseline(world: World, name: str):
    """Run a baseline in a forked child: (Placed, seconds, peak MB of the child)."""
    r, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        try:
            os.close(r)
            start = time.perf_counter()
            placed = BASELINES[name](world)
            seconds = time.perf_counter() - start
            data = pickle.dumps((placed, seconds, None))
        except BaseException as exc:  # pragma: no cover - reported by the parent
            data = pickle.dumps((None, 0.0, f"{type(exc).__name__}: {exc}"))
        with os.fdopen(wfd, "wb") as fh:
            fh.write(data)
        os._exit(0)
    os.close(wfd)
    with os.fdopen(r, "rb") as fh:
        data = fh.read()
    _, _, usage = os.wait4(pid, 0)
    placed, seconds, error = pickle.loads(data)
    if error:
        raise RuntimeError(f"baseline {name} failed: {error}")
    return placed, seconds, usage.ru_maxrss / 1024.0


# ------------------------------------------------------------------- bounds


class Bounds:
    """Proven lower bounds on the hourly cost of placing a given set of pods (`gangscale.api.PlacementBound`)."""

    def __init__(self, world: World, seconds: float) -> None:
        self.bound = PlacementBound(world.snap, seconds)
        self.world = world

    def of(self, pods: list[int]) -> tuple[float, bool]:
        return self.bound.of(self.world.pods[p].key for p in pods)


def _ratio(cost: float, lb: float | None) -> float | None:
    if lb is None:
        return None
    if lb <= 1e-9:
        return 1.0 if cost <= 1e-9 else None
    return cost / lb


# ---------------------------------------------------------------------- run


def _case_steps(case: Case, cfg: RunConfig) -> int:
    runs = cfg.timing_runs if cfg.timing_runs is not None else case.timing_runs
    off = max(1, runs) if case.default_flags else 1
    return (
        1
        + _observe_runs(case, cfg)
        + case.yaml_runs
        + 1
        + off
        + 1
        + len(BASELINES)
        + 1
        + 1
        + (1 if case.long_time_limit and runs else 0)
    )


def _observe_runs(case: Case, cfg: RunConfig) -> int:
    """Timed observe-mode runs: the run's override, else the case's own count, else its timing runs."""
    if cfg.timing_runs is None and case.observe_runs is not None:
        return max(1, case.observe_runs)
    return max(1, cfg.timing_runs if cfg.timing_runs is not None else case.timing_runs)


def run_case(case: Case, cfg: RunConfig, advance=lambda msg: None) -> CaseResult:
    spec = case.spec
    data_dir = cfg.out / "backlogs"
    advance(f"{spec.name}: generating")
    backlog = write_backlog(spec, data_dir, yaml_too=case.yaml_runs > 0)
    stats = json.loads((backlog.cluster.parent / "spec.json").read_text())["stats"]
    res = CaseResult(case, stats)
    plan_path = backlog.cluster.parent / "plan.json"
    runs = cfg.timing_runs if cfg.timing_runs is not None else case.timing_runs
    limit: float | None = case.time_limit if case.time_limit is not None else cfg.time_limit
    if case.default_flags:
        limit = None  # the shipped defaults: no --time-limit / --relative-gap
    if case.long_time_limit is not None and runs:
        advance(f"{spec.name}: gangscale plan --time-limit {case.long_time_limit:g}")
        # the quality reference: the best the planner (the solver alone, as the CLI plans by default) finds in 60 s
        res.long_runs.append(
            run_gangscale(
                backlog.cluster,
                backlog.catalog,
                plan_path.with_name("plan-long.json"),
                cfg,
                case.long_time_limit,
                relative_gap=0.0,
                extra=("--scheduler-model", "off"),
            )
        )
    observe = _observe_runs(case, cfg)
    for i in range(observe):
        advance(f"{spec.name}: gangscale plan ({i + 1}/{observe})")
        res.gangscale_runs.append(
            run_gangscale(backlog.cluster, backlog.catalog, plan_path, cfg, limit)
        )
    for i in range(case.yaml_runs):
        advance(f"{spec.name}: gangscale plan on YAML ({i + 1}/{case.yaml_runs})")
        res.yaml_runs.append(
            run_gangscale(
                backlog.cluster.with_suffix(".yaml"),
                backlog.catalog,
                plan_path.with_name("plan-yaml.json"),
                cfg,
                limit,
            )
        )

    most = backlog.cluster.parent / "scheduler-most.yaml"
    most.write_text(MOST_ALLOCATED_FILE)
    variants = {
        "MostAllocated": ("--scheduler-config", str(most)),
        "off": ("--scheduler-model", "off"),
    }
    for tag, flags in variants.items():
        for i in range(max(1, runs) if tag == "off" and case.default_flags else 1):
            advance(f"{spec.name}: gangscale plan {' '.join(flags[:1])} {tag} ({i + 1})")
            run = run_gangscale(
                backlog.cluster,
                backlog.catalog,
                plan_path.with_name(f"plan-{tag}.json"),
                cfg,
                limit,
                extra=flags,
            )
            if tag == "off":
                res.off_runs.append(run)
            res.variant_runs[tag] = run
    if res.off_runs:
        res.variant_runs["off"] = sorted(res.off_runs, key=lambda r: r["seconds"])[
            len(res.off_runs) // 2
        ]
    advance(f"{spec.name}: loading")
    start = time.perf_counter()
    world = load_world(backlog.cluster, backlog.catalog)
    res.load_seconds = time.perf_counter() - start

    plan = orjson.loads(plan_path.read_bytes())
    m = evaluate(world, placed_from_plan(plan), "gangscale")
    m.seconds = statistics.median(r["seconds"] for r in res.gangscale_runs)
    m.peak_mb = max(r["peak_mb"] for r in res.gangscale_runs)
    res.metrics["gangscale"] = m
    placed_by = {}
    for name in BASELINES:
        advance(f"{spec.name}: {name}")
        placed, seconds, peak = run_baseline(world, name)
        placed_by[name] = placed
        bm = evaluate(world, placed, name)
        bm.seconds, bm.peak_mb = round(seconds, 3), round(peak, 1)
        res.metrics[name] = bm

    advance(f"{spec.name}: scheduler model")
    plans = {
        "LeastAllocated": plan,
        "MostAllocated": orjson.loads(plan_path.with_name("plan-MostAllocated.json").read_bytes()),
    }
    off_plan = orjson.loads(plan_path.with_name("plan-off.json").read_bytes())
    res.metrics["gangscale-off"] = evaluate(world, placed_from_plan(off_plan), "gangscale-off")
    res.metrics["gangscale-off"].seconds = res.variant_runs["off"]["seconds"]
    res.metrics["gangscale-off"].peak_mb = res.variant_runs["off"]["peak_mb"]
    # gate mode buys what the solver's plan buys (as `gangscale run` plans by default); on paper it is that plan
    res.metrics["gangscale-gate"] = evaluate(world, placed_from_plan(off_plan), "gangscale-gate")
    res.metrics["gangscale-gate"].seconds = res.variant_runs["off"]["seconds"]
    res.metrics["gangscale-gate"].peak_mb = res.variant_runs["off"]["peak_mb"]
    placements = {"gangscale-off": placed_from_plan(off_plan), **placed_by}
    if len(world.pods) <= cfg.model_max_pods:
        for name, met in res.metrics.items():
            for strategy in MODEL_PROFILES:
                if name == "gangscale":  # observe mode: the plan made against this profile
                    p = plans[strategy]
                    met.model[strategy] = model_run(
                        world, placed_from_plan(p), strategy, promised=promised_gangs(p)
                    )
                elif (
                    name == "gangscale-gate"
                ):  # gate mode's own plan, released gang by gang (benchmarks/gatemode.py)
                    gate = gate_plan(
                        world,
                        strategy,
                        SolveOptions()
                        if limit is None
                        else SolveOptions(time_limit=limit, relative_gap=cfg.relative_gap),
                    )
                    met.model[strategy] = gate_model_run(world, gate, strategy)
                else:
                    met.model[strategy] = model_run(world, placements[name], strategy)

    advance(f"{spec.name}: lower bounds")
    bounds = Bounds(world, cfg.bound_seconds)
    cache: dict[tuple[int, ...], tuple[float, bool]] = {}
    for name, met in res.metrics.items():
        key = tuple(met.placed_per_pod)
        if key not in cache:
            cache[key] = bounds.of(met.placed_per_pod)
        lb, proven = cache[key]
        if name == "gangscale":  # the plan's own bound covers the same pods: keep the tighter one
            lb = max(lb, float(plan.get("lowerBoundPerHour") or 0.0))
        met.lower_bound = round(lb, 6)
        met.notes["boundProven"] = proven
        met.cost_ratio = _ratio(met.cost, lb)
    return res


def run_suite(cfg: RunConfig) -> list[CaseResult]:
    cases = [c for c in SUITES[cfg.suite] if not cfg.only or c.spec.name in cfg.only]
    if cfg.daemonsets is not None:
        cases = [replace(c, spec=replace(c.spec, daemonsets=cfg.daemonsets)) for c in cases]
    if not cases:
        raise SystemExit(f"no case of suite {cfg.suite!r} matches {', '.join(cfg.only)}")
    cfg.out.mkdir(parents=True, exist_ok=True)
    results: list[CaseResult] = []
    start = time.perf_counter()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = [
        TextColumn("[bold]{task.description:<44}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, disable=not cfg.progress, transient=False) as progress:
        task = progress.add_task("starting", total=sum(_case_steps(c, cfg) for c in cases))

        def advance(msg: str) -> None:
            progress.update(task, description=msg)
            progress.advance(task)

        for case in cases:
            results.append(run_case(case, cfg, advance))
        progress.update(task, description="done", completed=progress.tasks[0].total)
    elapsed = time.perf_counter() - start
    write_artifacts(results, cfg, elapsed)
    return results


def write_artifacts(results: list[CaseResult], cfg: RunConfig, elapsed: float) -> None:
    from .report import check_properties, markdown_report, plot_results

    checks = check_properties(results)
    doc = {
        "suite": cfg.suite,
        "seconds": round(elapsed, 1),
        "environment": provenance.environment(),
        "config": {
            "time_limit": cfg.time_limit,
            "relative_gap": cfg.relative_gap,
            "bound_seconds": cfg.bound_seconds,
        },
        "command": " ".join(["python -m benchmarks", *sys.argv[1:]]) if sys.argv else "",
        "cases": [r.to_dict() for r in results],
        "checks": checks,
    }
    (cfg.out / "results.json").write_text(render(doc, "json"))
    (cfg.out / "results.md").write_text(markdown_report(doc))
    plot_results(doc, cfg.out)
