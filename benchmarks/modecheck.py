"""Gate mode, observe mode, Cluster Autoscaler and Karpenter through the project's own scheduler model.

`python -m benchmarks.modecheck [--only NAME ...] [--seeds 0 1 2] [--out FILE]`: for each backlog of the
suite named (standard or quick), and for each scoring strategy of `MODEL_PROFILES` (LeastAllocated, MostAllocated),

- gate mode: its own plan (`gatemode.gate_plan`), released gang by gang (`gatemode.gate_model_run`);
- observe mode: the plan made against that profile (`make_plan` with the scheduler model), run through the
  model with the gangs it promises (`evaluate.model_run`);
- `ca`, `ca-atomic`, `karpenter`: the baselines' nodes, run through the model the same way;

each under every tie-break seed given (kube-scheduler breaks score ties at random: `selectHost`). Each row
holds the model's columns (`gangs_started`, `empty_nodes`, `promised_not_started`, `cost_per_started_gang`),
so the checks read off it: gate mode starts every gang it promises and leaves no bought node empty; observe
mode's misses are `promised_not_started`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

from gangscale.api import SolveOptions, make_plan
from gangscale.realize import scheduler_model_from

from .baselines import BASELINES
from .evaluate import MODEL_PROFILES, MOST_ALLOCATED_FILE, model_run, placed_from_plan
from .evaluate import promised_gangs as observe_promised
from .gatemode import gate_model_run, gate_plan
from .generate import write_backlog
from .suite import SUITES, Case
from .world import World, load_world

DEFAULT_BACKLOGS = ("llm-1k", "mixed-1k", "gpumix-3k", "target-10k", "elastic-10k")
COMPARED = ("ca", "ca-atomic", "karpenter")
# the suite's `gangscale plan --time-limit` and `--relative-gap` (runner.RunConfig)
TIME_LIMIT = 2.0
RELATIVE_GAP = 0.01


def solve_options(case: Case) -> SolveOptions:
    """The suite's solver flags for `case` (as `runner.run_case` sets them): the shipped defaults where the case
    times them, else its own or the suite's time limit."""
    if case.default_flags:
        return SolveOptions()
    limit = case.time_limit if case.time_limit is not None else TIME_LIMIT
    return SolveOptions(time_limit=limit, relative_gap=RELATIVE_GAP)


def observe_plan(world: World, strategy: str, options: SolveOptions, tmp: Path) -> dict:
    """Observe mode's plan against `strategy` (MostAllocated read from a KubeSchedulerConfiguration file, as
    `gangscale plan --scheduler-config` reads it; LeastAllocated is upstream's default profile)."""
    path = None
    if strategy == "MostAllocated":
        path = tmp / "scheduler-most.yaml"
        path.write_text(MOST_ALLOCATED_FILE)
    model = scheduler_model_from(str(path) if path else None, "observe")
    return make_plan(world.snap, options, model).to_dict()


def check_backlog(name: str, seeds: tuple[int, ...], tmp: Path) -> list[dict]:
    """One row per (strategy, policy, seed) of backlog `name`."""
    case = next(c for suite in SUITES.values() for c in suite if c.spec.name == name)
    backlog = write_backlog(case.spec, tmp)
    world = load_world(backlog.cluster, backlog.catalog)
    options = solve_options(case)
    baselines = {b: BASELINES[b](world) for b in COMPARED}
    rows = []
    for strategy in MODEL_PROFILES:
        gate = gate_plan(world, strategy, options)
        observe = observe_plan(world, strategy, options, tmp)
        for seed in seeds:
            runs = {
                "gate": gate_model_run(world, gate, strategy, seed),
                "observe": model_run(
                    world,
                    placed_from_plan(observe),
                    strategy,
                    seed,
                    promised=observe_promised(observe),
                ),
                **{b: model_run(world, p, strategy, seed) for b, p in baselines.items()},
            }
            for policy, run in runs.items():
                rows.append(
                    {"backlog": name, "strategy": strategy, "seed": seed, "policy": policy, **run}
                )
            print(_line(name, strategy, seed, runs), file=sys.stderr, flush=True)
    return rows


def _line(name: str, strategy: str, seed: int, runs: dict[str, dict]) -> str:
    cells = " ".join(
        f"{p}={r['gangs_started']}/{r.get('promised', '-')}/e{r['empty_nodes']}"
        for p, r in runs.items()
    )
    return f"{name} {strategy} seed {seed}: {cells}"


def _span(values: list) -> str:
    """`a` when every seed agrees, else `min–max` (money to the cent)."""
    lo, hi = min(values), max(values)
    text = (lambda v: f"{v:.2f}") if any(isinstance(v, float) for v in values) else str
    return text(lo) if lo == hi else f"{text(lo)}–{text(hi)}"


def _col(runs: list[dict], key: str) -> str:
    return _span([r[key] or 0 for r in runs])


def _promise(runs: list[dict]) -> str:
    """`started / promised, missed, empty` over the seeds."""
    return (
        f"{_col(runs, 'gangs_started')} / {_col(runs, 'promised')}, "
        f"{_col(runs, 'promised_not_started')}, {_col(runs, 'empty_nodes')}"
    )


def table(rows: list[dict]) -> str:
    """The rows as one markdown line per (backlog, strategy): gangs started per policy (min–max over the seeds), gate
    mode's and observe mode's promises and misses, the bought nodes left empty, $/h per started gang."""
    cells: dict[tuple[str, str], dict[str, list[dict]]] = {}
    for r in rows:
        cells.setdefault((r["backlog"], r["strategy"]), {}).setdefault(r["policy"], []).append(r)
    out = [
        "| backlog | scoring | gate: started / promised, missed, empty | observe: started / promised, missed, "
        "empty | CA (empty) | CA atomic | Karpenter (empty) | $/h per started gang: gate, observe, CA, Karpenter |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (backlog, strategy), by in cells.items():
        money = ", ".join(
            _col(by[p], "cost_per_started_gang") for p in ("gate", "observe", "ca", "karpenter")
        )
        out.append(
            f"| {backlog} | {strategy} | {_promise(by['gate'])} | {_promise(by['observe'])} | "
            f"{_col(by['ca'], 'gangs_started')} ({_col(by['ca'], 'empty_nodes')}) | "
            f"{_col(by['ca-atomic'], 'gangs_started')} | "
            f"{_col(by['karpenter'], 'gangs_started')} ({_col(by['karpenter'], 'empty_nodes')}) | {money} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.modecheck", description=__doc__)
    ap.add_argument("--only", nargs="*", default=list(DEFAULT_BACKLOGS), metavar="NAME")
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1, 2], metavar="SEED")
    ap.add_argument("--out", default="modecheck.json", metavar="FILE", help="rows as JSON")
    ap.add_argument(
        "--table", nargs="*", metavar="FILE", help="print the markdown table of these rows and exit"
    )
    args = ap.parse_args(argv)
    if args.table:
        print(table([r for f in args.table for r in orjson.loads(Path(f).read_bytes())]))
        return 0
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="modecheck-") as tmp:
        for name in args.only:
            start = time.perf_counter()
            rows += check_backlog(name, tuple(args.seeds), Path(tmp))
            print(f"{name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
            Path(args.out).write_bytes(orjson.dumps(rows))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
