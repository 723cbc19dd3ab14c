"""Run a trace under each policy and write the run's artifacts: simulate.json, simulate.md and PNG plots.

Invariant: simulate.json holds only what the seed determines (no wall times), so the same seed
writes the same bytes; wall times go to timing.json and the markdown. The simulator's checks (`checks`,
`week_target`) are computed here from the results, never tuned: they pass or fail as the run comes out.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from gangscale.output import render

from ..provenance import environment
from .engine import Engine
from .policies import POLICIES
from .trace import WEEK_GANGS, make_trace

GC_THRESHOLD = (50_000, 20, 100)  # `few_collections`
# the target: a simulated week of 5,000 gangs runs in under 10 minutes on one machine
WEEK_SECONDS = 600
# the order policies are handed to the worker processes: the longest first (by CPU seconds over the week the
# gangscale policies take several times what the baselines take), so the last to start is a short one and the wall
# time is close to the larger of the slowest policy and the mean per process
SLOW_RANK = {"gangscale-observe": 0, "gangscale-gate": 1, "karpenter": 2, "ca": 3, "ca-atomic": 4}
COLORS = {
    "gangscale-observe": "#1b7837",
    "gangscale-gate": "#7fbf7b",
    "ca": "#b2182b",
    "ca-atomic": "#ef8a62",
    "karpenter": "#2166ac",
}


@dataclass(slots=True)
class SimConfig:
    trace: str = "hour"
    seed: int = 0
    failures: float = 0.1
    gangs: int | None = None
    hours: int | None = None
    policies: tuple[str, ...] = POLICIES
    out: Path = Path("bench-out/simulate")
    progress: bool = False
    plots: bool = True
    jobs: int = 1  # policies run in parallel processes


class Progress:
    """A one-line progress bar on stderr: policy, simulated time, wall seconds."""

    def __init__(self, enabled: bool, horizon: int) -> None:
        self.enabled = enabled
        self.horizon = horizon
        self.label = ""
        self.start = time.monotonic()
        self.last = 0.0

    def __call__(self, t: int) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < 0.2:
            return
        self.last = now
        done = min(1.0, t / self.horizon)
        bar = "#" * int(done * 30)
        sys.stderr.write(
            f"\r{self.label:18s} [{bar:30s}] {done:4.0%} sim {t / 3600:6.1f} h  {now - self.start:5.0f} s"
        )
        sys.stderr.flush()

    def end(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def checks(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The simulator's properties, for each gangscale policy against the baselines run."""
    out: dict[str, Any] = {}
    base = [p for p in results if not p.startswith("gangscale")]
    for p in (p for p in results if p.startswith("gangscale")):
        r = results[p]
        c: dict[str, Any] = {
            "no_stranded_past_deadline": r["stranded_node_hours_past_deadline"] == 0
        }
        if "ca" in results:
            ca95, own95 = (
                results["ca"]["time_to_start_seconds"]["p95"],
                r["time_to_start_seconds"]["p95"],
            )
            c["p95_at_most_half_of_ca"] = (
                own95 is not None and ca95 is not None and 2 * own95 <= ca95
            )
        own = r["dollars_per_started_gang"]
        c["dollars_per_started_gang_at_most_every_baseline"] = own is not None and all(
            results[b]["dollars_per_started_gang"] is None
            or own <= results[b]["dollars_per_started_gang"]
            for b in base
        )
        waste = r["wasted_dollars_per_started_gang"]
        c["wasted_dollars_per_started_gang_at_most_every_baseline"] = waste is not None and all(
            results[b]["wasted_dollars_per_started_gang"] is None
            or waste <= results[b]["wasted_dollars_per_started_gang"]
            for b in base
        )
        out[p] = c
    return out


def _one(
    trace, policy: str, seed: int, bar: Progress | None
) -> tuple[dict[str, Any], float, float]:
    """One policy over the trace: its result, wall seconds and CPU seconds (of this process)."""
    logging.getLogger("gangscale").setLevel(logging.ERROR)
    t, c = time.monotonic(), time.process_time()
    with few_collections():
        result = Engine(trace, policy, seed=seed, progress=bar).run()
    return result, round(time.monotonic() - t, 1), round(time.process_time() - c, 1)


@contextmanager
def few_collections() -> Iterator[None]:
    """CPython's cyclic collector at GC_THRESHOLD while a policy runs, its own thresholds again after.

    A simulated day allocates millions of short-lived objects (reads, snapshots, plans, model runs) and leaves
    few cycles: at the default thresholds (700, 10, 10) a day of observe mode runs thousands of young and about a
    thousand middle collections, each walking objects that mostly live on. At GC_THRESHOLD it runs a few dozen and
    one, and collects the same garbage later, for 10-15% less CPU. Results do not depend on when garbage is
    collected."""
    old = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def run(cfg: SimConfig) -> dict[str, Any]:
    """Every policy over the same trace; writes the artifacts and returns the document (with wall times)."""
    logging.getLogger("gangscale").setLevel(
        logging.ERROR
    )  # the controller's own log lines, thousands a week
    start = time.monotonic()
    trace = make_trace(cfg.trace, cfg.seed, cfg.gangs, cfg.failures, cfg.hours)
    bar = Progress(cfg.progress, trace.horizon)
    results, seconds, cpu = {}, {}, {}
    if (
        cfg.jobs > 1
    ):  # one process per policy; results are gathered in policy order, so the JSON is the same
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=cfg.jobs) as pool:
            order = sorted(cfg.policies, key=lambda p: SLOW_RANK.get(p, len(SLOW_RANK)))
            futures = {p: pool.submit(_one, trace, p, cfg.seed, None) for p in order}
            for p in cfg.policies:
                results[p], seconds[p], cpu[p] = futures[p].result()
                if cfg.progress:
                    sys.stderr.write(f"{p}: done ({seconds[p]:.0f} s)\n")
    else:
        for p in cfg.policies:
            bar.label = p
            results[p], seconds[p], cpu[p] = _one(trace, p, cfg.seed, bar)
        bar.end()
    doc = {
        "trace": trace.summary(),
        "policies": list(cfg.policies),
        "results": results,
        "checks": checks(results),
    }
    cfg.out.mkdir(parents=True, exist_ok=True)
    (cfg.out / "simulate.json").write_text(render(doc, "json"))
    if cfg.plots:
        plot(doc, cfg.out)
    wall = round(
        time.monotonic() - start, 1
    )  # the whole run, plots included: with --jobs, less than the policies' sum
    timing = {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "total": round(sum(seconds.values()), 1),
        "wall": wall,
        "cpu_total": round(sum(cpu.values()), 1),
        "jobs": cfg.jobs,
        "plots": cfg.plots,
        "environment": environment(),
    }  # the machine and commit: here, not in simulate.json (same seed, same bytes)
    (cfg.out / "timing.json").write_bytes(orjson.dumps(timing))
    (cfg.out / "simulate.md").write_text(markdown(doc, seconds, timing))
    return {**doc, "seconds": seconds, "cpu_seconds": cpu, "wall": wall}


def week_target(doc: dict[str, Any], wall: float) -> str | None:
    """The target "a simulated week of 5,000 gangs runs in under 10 minutes": met or missed by this run's wall
    time (plots included), when the run is that week (every policy); None for any other run."""
    t = doc["trace"]
    if (
        t["kind"] != "week"
        or t["gangs"] != WEEK_GANGS
        or t.get("first_hours") is not None
        or sorted(doc["policies"]) != sorted(POLICIES)
    ):
        return None
    return (
        f"the week of {WEEK_GANGS:,} gangs, every policy, in under {WEEK_SECONDS} s: {wall:.0f} s, "
        + ("met" if wall < WEEK_SECONDS else "missed")
    )


def _h(s: int | None) -> str:
    if s is None:
        return "-"
    return f"{s}s" if s < 120 else (f"{s / 60:.1f}m" if s < 7200 else f"{s / 3600:.1f}h")


def _parts(r: dict[str, Any]) -> str:
    b = r["bill_dollars"]
    return f"{b['booting']:,.0f} / {b['idle']:,.0f} / {b['running_pods']:,.0f}"


def _end(r: dict[str, Any]) -> str:
    """When the run ended: drained (nothing running or billed), or cut at the drain's cap with what was left."""
    end = _h(r["end_seconds"])
    left = f"{r['gangs_running_at_end']} gangs running, {r['instances_billed_at_end']} instances billed"
    return end if r["drained"] else f"{end} (cap: {left})"


def _gpu_hours_for_no_gang(r: dict[str, Any]) -> str:
    """The GPU-hours of instances that never ran a pod; "n/a" in a result written before the simulator counted it."""
    v = r.get("gpu_hours_for_no_gang")
    return "n/a" if v is None else f"{v:.0f}"


def table(doc: dict[str, Any]) -> str:
    rows = [
        "| policy | started | never | TTS p50 | p95 | p99 | $ | $/started gang | wasted $/started gang | "
        "stranded node-h | past deadline node-h | given back | GPU-h bought / used / for no gang | cloud calls | "
        "$ booting / idle / running pods | run ends |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["policies"]:
        r = doc["results"][p]
        q = r["time_to_start_seconds"]
        rows.append(
            f"| {p} | {r['started']}/{r['gangs']} | {r['never_started']} | {_h(q['p50'])} | {_h(q['p95'])} | "
            f"{_h(q['p99'])} | {r['dollars']:,.0f} | {r['dollars_per_started_gang'] or 0:,.2f} | "
            f"{r['wasted_dollars_per_started_gang'] or 0:,.2f} | {r['stranded_node_hours']:.1f} | "
            f"{r['stranded_node_hours_past_deadline']:.2f} | "
            f"{r['nodes_given_back_at_deadlines']} | {r['gpu_hours_bought']:.0f} / {r['gpu_hours_used']:.0f} / "
            f"{_gpu_hours_for_no_gang(r)} | "
            f"{r['cloud_calls_total']} ({r['cloud_mutations']} writes) | {_parts(r)} | {_end(r)} |"
        )
    return "\n".join(rows) + "\n"


def markdown(
    doc: dict[str, Any], seconds: dict[str, float], timing: dict[str, Any] | None = None
) -> str:
    t = doc["trace"]
    lines = [
        f"# Simulated {t['kind']}: {t['gangs']} gangs, seed {t['seed']}, {t['failures']:.0%} launch failures",
        "",
        f"Families {t['families']}; {t['pods']} pods, {t['gpus']} GPUs asked; outages "
        f"{[o['group'] for o in t['outages']]}; {len(t['restarts'])} controller restarts. "
        f"Arrivals end at the {_h(t['horizon_seconds'])} horizon; the run goes on until nothing runs and "
        "nothing is billed (or the drain's cap), and every figure is of the whole run. "
        "TTS: gang time-to-start (a gang never started counts with its wait until the end). "
        "Definitions: docs/simulate.md.",
        "",
        table(doc),
        "Checks (each gangscale policy against the baselines run):",
        "",
    ]
    for p, c in doc["checks"].items():
        lines.append(f"- {p}: " + ", ".join(f"{k} {'PASS' if v else 'FAIL'}" for k, v in c.items()))
    lines += [
        "",
        "Wall time per policy (this machine, shared): "
        + ", ".join(f"{p} {s:.0f} s" for p, s in seconds.items()),
    ]
    if timing is not None:
        lines.append(
            f"The whole run: {timing['wall']:.0f} s wall, {timing['cpu_total']:.0f} CPU s in "
            f"{timing['jobs']} process{'es' if timing['jobs'] > 1 else ''}, "
            f"{'plots included' if timing.get('plots') else 'no plots'}"
        )
        target = week_target(doc, timing["wall"])
        if target:
            lines.append(f"Target: {target}")
    return "\n".join([*lines, ""])


def plot(doc: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    panels: list[tuple[str, str, Callable[[dict], float]]] = [
        ("nodes.png", "Ready nodes", lambda s: s["nodes"]),
        ("running_pods.png", "running pods", lambda s: s["running_pods"]),
        ("cost.png", "cumulative cost ($)", lambda s: s["dollars"]),
        ("stranded.png", "stranded node-hours (cumulative)", lambda s: s["stranded_node_hours"]),
    ]
    for fname, ylabel, f in panels:
        fig, ax = plt.subplots(figsize=(9, 4.5), dpi=100)
        for p in doc["policies"]:
            series = doc["results"][p]["series"]
            ax.plot(
                [s["t"] / 3600 for s in series],
                [f(s) for s in series],
                label=p,
                color=COLORS.get(p),
                linewidth=1.1,
                drawstyle="steps-post",
            )
        ax.set_xlabel("simulated hours")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.25)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / fname)
        plt.close(fig)
        paths.append(out / fname)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for p in doc["policies"]:
        waits = doc["results"][p]["waits"]
        n = len(waits)
        ax.step(
            [max(w, 1) / 60 for w in waits],
            [(i + 1) / n for i in range(n)],
            where="post",
            label=p,
            color=COLORS.get(p),
        )
    ax.set_xscale("log")
    ax.set_xlabel("gang time-to-start (minutes, log)")
    ax.set_ylabel("fraction of gangs")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "time_to_start_cdf.png")
    plt.close(fig)
    paths.append(out / "time_to_start_cdf.png")
    return paths
