"""The default budget against longer ones: does the plan leave gangs, pods or dollars that more time would win?

Three checks (docs/benchmarks.md, "The default budget"):

- `mixes`: seeded random mixes from the suite's own generator in three families -- ``small`` (a scarce gpu-mix
  of ~30-45 pods), ``scarce`` (an llm backlog of ~40 pods at half supply) and ``24-gang`` (an llm backlog
  calibrated to 24 gangs, 22-23 of them gang policy) -- each planned at the default budget and at
  `--time-limit 10`. Plans run in this process through `gangscale.cli.main` (input file in, plan file out), so a
  run's wall time covers reading, planning and writing the plan, without the interpreter's start (the controller
  plans in a long-lived process).
- `wide`: 300 distinct pod shapes in 60 five-pod gangs over 60 node groups, no existing nodes (the LP phases'
  worst case): the default, `--time-limit 2` and a 60 s reference plan.
- `backlogs`: suite backlogs (target-10k, elastic-10k, target-100k, gpumix-3k) as whole `gangscale plan`
  processes (`runner.run_gangscale`, the solver alone), the default against a 60 s plan.

Run: `python -m benchmarks.budget mixes --count 200 --out DIR` (or `wide`, `backlogs`); each writes
`DIR/<check>.json` and prints a summary.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from gangscale.cli import main as gangscale_main
from gangscale.output import render

from .generate import BacklogSpec, write_backlog
from .runner import RunConfig, run_gangscale
from .suite import STANDARD

FAMILIES = ("small", "scarce", "24-gang")
COST_TOLERANCE = 0.01  # "cost within 1% at the same placement"
BACKLOGS = ("target-10k", "elastic-10k", "target-100k", "gpumix-3k")


def mix_spec(family: str, seed: int) -> BacklogSpec:
    """One seeded mix of a family: tight maxSize (supply below demand), a dozen to two dozen gangs."""
    if family == "small":
        return BacklogSpec(f"small-{seed}", "gpu-mix", 30, 9, 0, 14, 0.5, seed)
    if family == "scarce":
        return BacklogSpec(f"scarce-{seed}", "llm", 40, 6, 0, 14, 0.5, seed)
    if family == "24-gang":
        return BacklogSpec(f"g24-{seed}", "llm", 80, 12, 0, 24, 0.6, seed)
    raise ValueError(f"unknown mix family {family!r}; expected one of {', '.join(FAMILIES)}")


def plan_in_process(
    cluster: Path,
    catalog: Path,
    out: Path,
    time_limit: float | None,
    relative_gap: float | None = None,
) -> dict:
    """`gangscale plan` through `gangscale.cli.main`: wall seconds (read, plan, write) and the plan's figures."""
    args = [
        "plan",
        "--cluster",
        str(cluster),
        "--nodegroups",
        str(catalog),
        "-o",
        "json",
        "--output-file",
        str(out),
    ]
    if time_limit is not None:
        args += ["--time-limit", f"{time_limit:g}"]
    if relative_gap is not None:
        args += ["--relative-gap", f"{relative_gap:g}"]
    start = time.perf_counter()
    code = gangscale_main(args)
    wall = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"gangscale plan failed ({code}) on {cluster}")
    return {"seconds": round(wall, 3), **figures(out)}


def figures(plan_path: Path) -> dict:
    """Gangs, pods placed, cost, bound, status and the solver's own account of its phases."""
    plan = orjson.loads(plan_path.read_bytes())
    sv = plan["solver"]
    return {
        "gangs": sv["gangsStarted"],
        "gangs_bound": sv["gangsUpperBound"],
        "pods": sum(g["placed"] for g in plan["gangs"]),
        "cost": plan["costPerHour"],
        "cost_bound": plan["lowerBoundPerHour"],
        "status": sv["status"],
        "greedy_only": sv["greedyOnly"],
        "solver_seconds": sv["seconds"],
        "gaps": sv.get("gaps"),
        "cut": [p["name"] for p in sv.get("phases", []) if p["cutShort"]],
    }


def compare(short: dict, long: dict) -> dict:
    """Did the shorter budget match the longer one: same gangs, same pods, cost within 1% at that placement."""
    same_gangs = short["gangs"] >= long["gangs"]
    same_pods = same_gangs and (short["gangs"] > long["gangs"] or short["pods"] >= long["pods"])
    same_placement = (short["gangs"], short["pods"]) == (long["gangs"], long["pods"])
    cheap = same_pods and (
        not same_placement or short["cost"] <= long["cost"] * (1 + COST_TOLERANCE) + 1e-9
    )
    return {"same_gangs": same_gangs, "same_pods": same_pods, "cost_within": cheap}


def run_mixes(count: int, out: Path, long_limit: float = 10.0) -> dict:
    """`count` mixes (the families in turn, seed = index), each at the default budget and at `long_limit`."""
    rows = []
    for i in range(count):
        family = FAMILIES[i % len(FAMILIES)]
        b = write_backlog(mix_spec(family, i), out / "mixes")
        default = plan_in_process(b.cluster, b.catalog, b.cluster.parent / "default.json", None)
        long = plan_in_process(b.cluster, b.catalog, b.cluster.parent / "long.json", long_limit)
        rows.append(
            {
                "name": b.spec.name,
                "family": family,
                "pods": b.pending_pods,
                "gangs": b.gangs,
                "default": default,
                "long": long,
                **compare(default, long),
            }
        )
    return {
        "count": count,
        "long_time_limit": long_limit,
        "summary": summarize_mixes(rows),
        "rows": rows,
    }


def summarize_mixes(rows: list[dict]) -> dict:
    walls = sorted(r["default"]["seconds"] for r in rows)
    return {
        "same_gangs": sum(r["same_gangs"] for r in rows),
        "same_pods": sum(r["same_pods"] for r in rows),
        "cost_within_1pct": sum(r["cost_within"] for r in rows),
        "runs": len(rows),
        "default_median_seconds": statistics.median(walls) if walls else None,
        "default_p90_seconds": walls[int(0.9 * (len(walls) - 1))] if walls else None,
        "default_max_seconds": walls[-1] if walls else None,
        "long_median_seconds": statistics.median(r["long"]["seconds"] for r in rows)
        if rows
        else None,
        "default_ran_cp_sat": sum(not r["default"]["greedy_only"] for r in rows),
    }


def wide_case(seed: int = 0) -> tuple[dict, dict]:
    """(cluster List, catalog) of 300 distinct pod shapes in 60 five-pod gangs over 60 node groups, no nodes."""
    rng = random.Random(f"gangscale-bench/wide/{seed}")
    cpus, ratios = (2, 4, 8, 16, 32, 48, 64, 96), (2, 4, 8)
    groups = []
    for i in range(60):
        c, ratio = cpus[i % len(cpus)], ratios[(i // len(cpus)) % len(ratios)]
        price = round((0.034 * c + 0.0045 * c * ratio) * rng.uniform(0.9, 1.15), 4)
        groups.append(
            {
                "name": f"g{i:02d}",
                "instanceType": f"custom.{c}x{ratio}",
                "pricePerHour": price,
                "minSize": 0,
                "maxSize": 40,
                "currentSize": 0,
                "allocatable": {"cpu": str(c), "memory": f"{c * ratio}Gi", "pods": "110"},
            }
        )
    items: list[dict] = []
    shapes: set[tuple[int, int]] = set()
    while len(shapes) < 300:
        shapes.add((rng.randint(1, 80) * 100, rng.randint(1, 64) * 256))
    ordered = sorted(shapes, key=lambda _: rng.random())
    for j in range(60):
        items.append(
            {
                "apiVersion": "scheduling.k8s.io/v1alpha2",
                "kind": "PodGroup",
                "metadata": {"name": f"pg{j}", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
            }
        )
        for k, (cpu, mem) in enumerate(ordered[5 * j : 5 * j + 5]):
            items.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{j}-{k}", "namespace": "default"},
                    "spec": {
                        "schedulingGroup": {"podGroupName": f"pg{j}"},
                        "containers": [
                            {
                                "name": "c",
                                "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}},
                            }
                        ],
                    },
                    "status": {"phase": "Pending"},
                }
            )
    return {"apiVersion": "v1", "kind": "List", "items": items}, {"nodeGroups": groups}


def run_wide(out: Path, runs: int = 3, reference: float = 60.0) -> dict:
    """The wide case: the default and `--time-limit 2` (median of `runs`), and one reference plan."""
    d = out / "wide"
    d.mkdir(parents=True, exist_ok=True)
    cluster, catalog = wide_case()
    (d / "cluster.json").write_bytes(orjson.dumps(cluster))
    (d / "nodegroups.yaml").write_text(render(catalog, "yaml"))
    result: dict = {}
    for name, limit in (("default", None), ("limit-2", 2.0)):
        result[name] = [
            plan_in_process(d / "cluster.json", d / "nodegroups.yaml", d / f"{name}.json", limit)
            for _ in range(runs)
        ]
    if reference:
        result["reference"] = plan_in_process(
            d / "cluster.json", d / "nodegroups.yaml", d / "reference.json", reference
        )
    result["summary"] = summarize_wide(result)
    return result


# seconds: the default and `--time-limit 2`, reading, planning and writing included
WIDE_WALL_TARGET = 2.5
WIDE_COST_TOLERANCE = 0.01  # the default within 1% of the reference plan's cost


def summarize_wide(result: dict) -> dict:
    """Median wall and cost per budget, and the targets: both within `WIDE_WALL_TARGET` s, the 2 s plan no dearer
    than the default, the default within `WIDE_COST_TOLERANCE` of the reference (the wall-time claims live here,
    not in the unit tests, which run the budget's logic on an injected clock)."""
    med = {
        name: {
            "seconds": statistics.median(r["seconds"] for r in result[name]),
            "cost": statistics.median(r["cost"] for r in result[name]),
        }
        for name in ("default", "limit-2")
    }
    out: dict = {
        **med,
        "walls_within_target": all(
            r["seconds"] <= WIDE_WALL_TARGET for name in med for r in result[name]
        ),
        "limit_2_no_dearer": med["limit-2"]["cost"] <= med["default"]["cost"] + 1e-6,
    }
    if "reference" in result:
        best = min(result["reference"]["cost"], med["default"]["cost"])
        out["default_within_1pct_of_best"] = med["default"]["cost"] <= best * (
            1 + WIDE_COST_TOLERANCE
        )
    return out


def run_backlogs(
    out: Path, names: Sequence[str] = BACKLOGS, reference: float = 60.0, runs: int = 1
) -> dict:
    """Each backlog as a whole process: the default (median of `runs`) against one plan at `reference` s."""
    cfg = RunConfig(out=out)
    by_name = {c.spec.name: c for c in STANDARD}
    result: dict = {}
    for name in names:
        b = write_backlog(by_name[name].spec, out / "backlogs")
        off = ("--scheduler-model", "off")
        plans = [
            run_gangscale(
                b.cluster, b.catalog, b.cluster.parent / "default.json", cfg, None, extra=off
            )
            | figures(b.cluster.parent / "default.json")
            for _ in range(runs)
        ]
        long = None
        if reference:
            long = run_gangscale(
                b.cluster, b.catalog, b.cluster.parent / "long.json", cfg, reference, 0.0, extra=off
            )
            long |= figures(b.cluster.parent / "long.json")
        result[name] = {"pods": b.pending_pods, "default": plans, "reference": long}
        print(name, orjson.dumps(result[name]).decode()[:400], flush=True)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.budget", description=__doc__.splitlines()[0]
    )
    p.add_argument("check", choices=("mixes", "wide", "backlogs"))
    p.add_argument("--out", type=Path, default=Path("bench-budget"))
    p.add_argument("--count", type=int, default=200, help="mixes: how many (the families in turn)")
    p.add_argument("--only", nargs="*", default=list(BACKLOGS), help="backlogs: which")
    p.add_argument(
        "--reference",
        type=float,
        default=60.0,
        help="wide, backlogs: the reference --time-limit (0: none)",
    )
    p.add_argument(
        "--runs", type=int, default=1, help="wide, backlogs: default-budget runs (median reported)"
    )
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.check == "mixes":
        result = run_mixes(args.count, args.out)
        print(orjson.dumps(result["summary"]).decode())
    elif args.check == "wide":
        result = run_wide(args.out, args.runs, args.reference)
        print(orjson.dumps(result["summary"]).decode())
    else:
        result = run_backlogs(args.out, args.only, args.reference, args.runs)
    (args.out / f"{args.check}.json").write_text(render(result, "json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
