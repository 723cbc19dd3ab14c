"""`python -m benchmarks ...` (also `gangscale bench ...`).

run [--quick] [--out DIR] [--only NAME ...]   run a suite, write results.{json,md} and PNG plots
generate NAME [--out DIR] [--yaml]             write one suite backlog's cluster and catalog files
list [--quick]                                 the suite's backlogs
baseline POLICY --cluster F --nodegroups F     one baseline's decisions, as JSON, for a cluster file
simulate [--trace hour|week|scarce] [--seed N] [--failures P] [--policies ...] [--out DIR]
                                               a simulated hour or week under each policy (docs/simulate.md)
results --bench DIR --simulate DIR ... [--out docs/results.md]
                                               docs/results.md and its plots from those runs' JSON
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import orjson

from gangscale import argtypes
from gangscale.output import render


def build_parser() -> argparse.ArgumentParser:
    prog = os.environ.get(
        "GANGSCALE_BENCH_PROG", "python -m benchmarks"
    )  # `gangscale bench` sets it
    parser = argparse.ArgumentParser(prog=prog, description="gangscale benchmark suite")
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the standard (or --quick) suite and write the artifacts")
    r.add_argument("--quick", action="store_true", help="the reduced CI smoke suite")
    r.add_argument(
        "--out", type=Path, default=None, help="output directory (default bench-out[/quick])"
    )
    r.add_argument("--only", nargs="*", default=(), metavar="NAME", help="run only these backlogs")
    r.add_argument(
        "--time-limit",
        type=argtypes.seconds,
        default=2.0,
        help="gangscale plan --time-limit (default 2)",
    )
    r.add_argument(
        "--relative-gap",
        type=argtypes.fraction,
        default=0.01,
        help="gangscale plan --relative-gap (default 0.01)",
    )
    r.add_argument(
        "--bound-seconds",
        type=argtypes.seconds,
        default=3.0,
        help="CP-SAT seconds per lower bound (default 3)",
    )
    r.add_argument(
        "--timing-runs",
        type=argtypes.int_in(1, 1000),
        default=None,
        help="override the repeat count of timed backlogs",
    )
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--check", action="store_true", help="exit 1 when a property check fails")
    r.add_argument(
        "--daemonsets",
        choices=["on", "off"],
        default=None,
        help="the EKS GPU cluster's DaemonSets in every backlog (default: on, as the suites set it); "
        "off measures the backlogs without them",
    )
    g = sub.add_parser("generate", help="write one backlog of the suite")
    g.add_argument("name", help="the backlog's name (`list` shows them)")
    g.add_argument(
        "--out",
        type=Path,
        default=Path("bench-out/backlogs"),
        help="output directory (default bench-out/backlogs)",
    )
    g.add_argument("--yaml", action="store_true", help="also write cluster.yaml")
    ls = sub.add_parser("list", help="list the suite's backlogs")
    ls.add_argument("--quick", action="store_true", help="list the reduced CI smoke suite")
    w = sub.add_parser(
        "webhook", help="admission latency per review over HTTPS (p50/p99) on a large catalog"
    )
    w.add_argument(
        "--groups", type=argtypes.int_in(1, 100000), default=1000, help="node groups (default 1000)"
    )
    w.add_argument(
        "--reviews",
        type=argtypes.int_in(10, 1000000),
        default=2000,
        help="reviews sent (default 2000)",
    )
    w.add_argument(
        "--distinct", action="store_true", help="no two node groups alike (the rules' worst case)"
    )
    b = sub.add_parser("baseline", help="print one baseline's decisions for a cluster file")
    b.add_argument(
        "policy", choices=["ca", "ca-atomic", "karpenter"], help="the baseline autoscaler to model"
    )
    b.add_argument(
        "--cluster", required=True, help="cluster file, as `gangscale plan --cluster` reads"
    )
    b.add_argument(
        "--nodegroups",
        required=True,
        help="node-group catalog, as `gangscale plan --nodegroups` reads",
    )
    s = sub.add_parser(
        "simulate",
        help="a simulated hour or week of arrivals, launches and failures under each policy",
    )
    s.add_argument(
        "--trace",
        choices=["hour", "week", "scarce"],
        default="hour",
        help="the trace (default hour)",
    )
    s.add_argument(
        "--seed",
        type=argtypes.int_in(0, 2**31 - 1),
        default=0,
        help="trace and cloud seed (default 0)",
    )
    s.add_argument(
        "--failures",
        type=argtypes.fraction,
        default=0.1,
        help="probability that one launch fails, e.g. 0, 0.1, 0.3 (default 0.1)",
    )
    s.add_argument(
        "--gangs",
        type=argtypes.int_in(1, 1_000_000),
        default=None,
        help="gangs in the trace (default: hour 40, week 5000)",
    )
    s.add_argument(
        "--hours",
        type=argtypes.int_in(1, 24 * 7),
        default=None,
        help="only the trace's first HOURS of arrivals (the horizon one hour later, then the drain)",
    )
    s.add_argument(
        "--policies",
        nargs="+",
        default=None,
        metavar="POLICY",
        help="any of gangscale-observe gangscale-gate ca ca-atomic karpenter (default: all), or the "
        "benchmark-only gangscale-oracle[-<k>x|-<T>s] (docs/simulate.md, Keeping empty nodes)",
    )
    s.add_argument("--out", type=Path, default=Path("bench-out/simulate"), help="output directory")
    s.add_argument(
        "--progress",
        action="store_true",
        help="show the progress bar even when stderr is not a TTY",
    )
    s.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    s.add_argument(
        "--jobs",
        type=argtypes.int_in(1, 64),
        default=None,
        help="policies simulated in parallel processes (default: one per CPU, at most one per policy)",
    )
    s.add_argument(
        "--controller-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="a ControllerConfig file (docs/controller.md) whose settings the gangscale policies run with, "
        "e.g. emptyNodeGraceSeconds (mode and gateMode are the policy's)",
    )
    res = sub.add_parser(
        "results", help="write docs/results.md and its plots from suite and simulator JSON"
    )
    res.add_argument(
        "--bench",
        type=Path,
        default=None,
        metavar="DIR",
        help="a suite run's directory (results.json)",
    )
    res.add_argument(
        "--simulate",
        type=Path,
        nargs="*",
        default=[],
        metavar="DIR",
        help="simulator runs' directories (simulate.json, timing.json)",
    )
    res.add_argument(
        "--out",
        type=Path,
        default=Path("docs/results.md"),
        help="the page (default docs/results.md)",
    )
    res.add_argument("--no-plots", action="store_true", help="the page only")
    return parser


def _results(args: argparse.Namespace) -> int:
    from .results import load, write

    if args.bench is None and not args.simulate:
        print("results: give --bench DIR and/or --simulate DIR ...", file=sys.stderr)
        return 2
    try:
        inputs = load(args.bench, list(args.simulate))
    except (OSError, ValueError) as exc:
        print(f"results: {exc}", file=sys.stderr)
        return 2
    for path in write(inputs, args.out, plots=not args.no_plots):
        print(path)
    return 0


def _controller_config(path: Path | None) -> str | None:
    """The file's settings as the JSON the gangscale policies read (`policies.controller_overrides`), or None after
    one line on stderr naming what is wrong: the file is checked as `gangscale run --config` checks it."""
    from gangscale.controller.config import load_config
    from gangscale.loader import InputError

    from .sim.policies import POLICY_KEYS

    try:
        settings = load_config(path).model_dump(mode="json", by_alias=True, exclude_unset=True)
    except InputError as exc:
        print(f"--controller-config: {exc}", file=sys.stderr)
        return None
    fixed = [k for k in POLICY_KEYS[2:] if k in settings]
    if fixed:
        print(
            f"--controller-config: {path}: {fixed[0]} is set by the policy (gangscale-observe or gangscale-gate); "
            "remove it",
            file=sys.stderr,
        )
        return None
    return orjson.dumps({k: v for k, v in settings.items() if k not in POLICY_KEYS}).decode()


def _simulate(args: argparse.Namespace) -> int:
    from .sim.oracle import ORACLE, parse_oracle
    from .sim.policies import CONTROLLER_CONFIG_ENV, POLICIES
    from .sim.report import SimConfig, run, table

    policies = tuple(args.policies or POLICIES)
    unknown = [p for p in policies if p not in POLICIES and parse_oracle(p) is None]
    if unknown:
        print(
            f"unknown policy {unknown[0]!r}; expected any of {', '.join(POLICIES)} "
            f"or {ORACLE}[-<k>x|-<T>s]",
            file=sys.stderr,
        )
        return 2
    if args.controller_config is not None:
        overrides = _controller_config(args.controller_config)
        if overrides is None:
            return 2
        # read by the policies, in this process and its workers
        os.environ[CONTROLLER_CONFIG_ENV] = overrides
        print(f"gangscale policies' controller settings: {overrides}")
    cfg = SimConfig(
        trace=args.trace,
        seed=args.seed,
        failures=args.failures,
        gangs=args.gangs,
        hours=args.hours,
        policies=policies,
        out=args.out,
        progress=args.progress or sys.stderr.isatty(),
        plots=not args.no_plots,
        jobs=args.jobs or max(1, min(len(policies), os.cpu_count() or 1)),
    )
    doc = run(cfg)
    sys.stdout.write(table(doc))
    print(
        f"wrote {cfg.out}/simulate.json, simulate.md{' and plots' if cfg.plots else ''} in "
        f"{doc['wall']:.0f} s (CPU {sum(doc['cpu_seconds'].values()):.0f} s)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "run":
        from .runner import RunConfig, run_suite

        suite = "quick" if args.quick else "standard"
        cfg = RunConfig(
            suite=suite,
            out=args.out or Path("bench-out" if suite == "standard" else "bench-out/quick"),
            time_limit=args.time_limit,
            relative_gap=args.relative_gap,
            bound_seconds=args.bound_seconds,
            only=tuple(args.only),
            timing_runs=args.timing_runs,
            progress=not args.no_progress,
            daemonsets=None if args.daemonsets is None else args.daemonsets == "on",
        )
        run_suite(cfg)
        doc = orjson.loads((cfg.out / "results.json").read_bytes())
        checks = doc["checks"]
        print(
            f"wrote {cfg.out}/results.json, results.md and plots in {doc['seconds']:.0f} s; "
            f"{checks['checked']} property checks, {len(checks['failed'])} failed"
        )
        for f in checks["failed"]:
            print(f"  FAILED {f['case']} vs {f['policy']}: {f['property']} ({f['detail']})")
        return 1 if args.check and not checks["all_ok"] else 0
    if args.command == "webhook":
        from .webhook import run as run_webhook

        print(orjson.dumps(run_webhook(args.groups, args.reviews, args.distinct)).decode())
        return 0
    if args.command == "generate":
        from .generate import write_backlog
        from .suite import SUITES

        cases = {c.spec.name: c for suite in SUITES.values() for c in suite}
        if args.name not in cases:
            print(
                f"unknown backlog {args.name!r}; see `python -m benchmarks list`", file=sys.stderr
            )
            return 2
        b = write_backlog(cases[args.name].spec, args.out, yaml_too=args.yaml)
        print(
            f"{b.cluster} ({b.pending_pods} pending pods, {b.gangs} gangs, {b.existing_nodes} nodes)\n{b.catalog}"
        )
        return 0
    if args.command == "list":
        from .suite import SUITES

        for c in SUITES["quick" if args.quick else "standard"]:
            s = c.spec
            print(
                f"{s.name:14s} {s.family:8s} pods={s.pods:<7d} node-groups={s.node_groups:<3d} nodes={s.nodes:<5d} "
                f"gangs={s.gangs or '-'} supply={s.supply:g} timing-runs={c.timing_runs}"
            )
        return 0
    if args.command == "simulate":
        return _simulate(args)
    if args.command == "results":
        return _results(args)
    if args.command == "baseline":
        from .baselines import BASELINES
        from .world import load_world

        placed = BASELINES[args.policy](load_world(args.cluster, args.nodegroups))
        out = {
            "existingNodes": placed.existing,
            "newNodes": [{"nodeGroup": g, "pods": pods} for g, pods in placed.new_nodes],
            "notes": placed.notes,
        }
        sys.stdout.write(render(out, "json"))
        return 0
    return 2  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
