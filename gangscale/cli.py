"""`gangscale ...`: kubectl-like flags, plans as table, markdown, JSON or YAML.

Exit codes: 0 a plan was made, 2 the input could not be read at all (file or
cluster); `check`: 1 when a prerequisite failed.

`plan` from files runs without the cyclic garbage collector: its full collections walked every
object of the input again and again (~0.3 s of a 10k-pod plan) to find almost nothing, since
refcounting frees what a plan drops. Run as a program (`gangscale plan`, `python -m gangscale plan`,
i.e. `main()` without arguments), such a `plan` ends its process once the plan is written and
flushed (`end_process`), without the interpreter's teardown: freeing every module and the parsed
input piece by piece is 0.05-0.1 s of a 10k-pod plan that the OS does at once. `main(argv)` with
arguments (tests, `benchmarks.measure`, any in-process caller) always returns.

Start-up: building the parser imports neither OR-Tools (nor the pandas it pulls in),
pydantic, the Kubernetes client nor boto3; each command imports what it uses when it
runs. `gangscale bench` runs `python -m benchmarks` in a child process: gangscale
imports nothing from `benchmarks` (which imports gangscale).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import NoReturn

from cloud_adapters.registry import PROVIDERS

from . import __version__, argtypes
from .ingest import DEFAULT_NODE_GROUP_LABEL
from .kube.flags import add_kube_commands, add_kube_flags, cmd_check, cmd_dump, read_live_objects
from .loader import InputError, read_objects
from .solver.params import AUTO_BASE_SECONDS, AUTO_SECONDS_PER_POD, SolveOptions

OUTPUTS = ("json", "yaml", "table", "markdown")


def add_solver_flags(p: argparse.ArgumentParser) -> None:
    d = SolveOptions()
    p.add_argument(
        "--time-limit",
        type=argtypes.time_limit,
        default=d.time_limit,
        metavar="SECONDS",
        help=f"wall-clock budget for planning (default auto: {AUTO_BASE_SECONDS:g} s + "
        f"{AUTO_SECONDS_PER_POD * 1e6:g} us per pending pod; it stops earlier once the gang and cost "
        "gaps are closed); a timeout still returns a valid plan",
    )
    p.add_argument(
        "--workers",
        type=argtypes.workers,
        default=0,
        help=f"CP-SAT workers, at most {argtypes.MAX_WORKERS} (default 0: one per core)",
    )
    p.add_argument(
        "--relative-gap",
        type=argtypes.fraction,
        default=d.relative_gap,
        help=f"stop once the cost is this close to the proven lower bound, 0 to 1 (default {d.relative_gap:g})",
    )
    p.add_argument(
        "--seed",
        type=argtypes.seed,
        default=0,
        help=f"solver random seed, 0 to {argtypes.MAX_SEED} (default 0)",
    )


def add_scheduler_flags(p: argparse.ArgumentParser) -> None:
    from .plan_modes import DEFAULT_MODE, MODES

    p.add_argument(
        "--mode",
        choices=MODES,
        default=None,
        help=f"plan as the controller does in this mode (default {DEFAULT_MODE.value}, the controller's): gate: "
        "gang pods wait behind gangscale.io/capacity, the scheduler's queue is placed first and the solver plans "
        "the gangs on what is left; observe: promise only what the scheduler model starts; off: the solver's "
        "plan as is (docs/plan.md)",
    )
    p.add_argument(
        "--scheduler-config",
        metavar="FILE",
        default=None,
        help="the cluster's KubeSchedulerConfiguration the plan is checked against (default: with "
        "--provider aws-eks the EKS cluster's scoring strategy, else upstream kube-scheduler "
        "defaults; docs/scheduling.md)",
    )
    p.add_argument(
        "--scheduler-model",
        choices=("observe", "off"),
        default=None,
        help="without --mode: observe is --mode observe, off is --mode off (the solver's plan as is); "
        "with --mode it must agree",
    )


def scheduler_model(args: argparse.Namespace):
    """The SchedulerModel the flags name; a bad --scheduler-config file is an InputError (exit 2). None for
    `off`: the plan path then never imports the scheduler model (~0.15 s at start)."""
    if getattr(args, "scheduler_model", "observe") == "off":
        return None  # as scheduler_model_from: `off` reads no --scheduler-config file
    from .realize import scheduler_model_from

    return scheduler_model_from(
        getattr(args, "scheduler_config", None), getattr(args, "scheduler_model", "observe")
    )


def solve_options(args: argparse.Namespace) -> SolveOptions:
    return SolveOptions(
        time_limit=args.time_limit,
        workers=args.workers,
        relative_gap=args.relative_gap,
        seed=args.seed,
    )


def add_cloud_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cloud (docs/cloud.md)")
    g.add_argument(
        "--provider",
        choices=PROVIDERS,
        default=None,
        help="discover the node groups from this cloud instead of --nodegroups",
    )
    g.add_argument(
        "--execute",
        action="store_true",
        help="apply the plan's scale-up once (needs --provider); exit 3 when a cloud call fails",
    )
    g.add_argument(
        "--region", default=None, help="AWS region (default: AWS_REGION / the AWS config)"
    )
    g.add_argument(
        "--cluster-name",
        default=None,
        help="cluster name of the discovery tag k8s.io/cluster-autoscaler/<name> (EKS: the cluster)",
    )
    g.add_argument(
        "--aws-endpoint-url", default=None, metavar="URL", help="send AWS calls here (tests, moto)"
    )
    g.add_argument(
        "--node-group-auto-discovery",
        action="append",
        default=None,
        metavar="asg:tag=KEY[=VALUE],...",
        help="discover the groups carrying all these tags, as Cluster Autoscaler's flag (repeatable; "
        "default: gangscale.io/cluster=<cluster>, or gangscale.io/enabled with gangscale.io/<cluster>)",
    )
    g.add_argument(
        "--simulated-state",
        default=None,
        metavar="FILE",
        help="simulated provider: keep its cloud state in this JSON file between runs",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gangscale", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--version",
        action="version",
        version=f"gangscale {__version__}",
        help="print gangscale's version and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    add_plan_command(sub)
    add_kube_commands(sub)
    from .controller.flags import add_run_command, add_status_command, add_ungate_command

    add_run_command(sub)
    from .webhook.command import add_webhook_command

    add_webhook_command(sub)
    add_status_command(sub)
    add_ungate_command(sub)
    sub.add_parser(
        "bench",
        add_help=False,  # listed for --help; main() hands `bench ...` to the benchmarks CLI
        help="the benchmark suite (`gangscale bench --help`: run, generate, list, baseline, simulate)",
    )
    return parser


def add_plan_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan", help="plan the node groups' scale-up for the pending gangs (dry run)"
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="kubectl get nodes,pods,podgroups,workloads -A -o json|yaml output ('-' for stdin); "
        "without it, the live cluster is read (read-only) via --kubeconfig/--context",
    )
    add_kube_flags(p)
    add_input_flags(p)
    p.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=None,
        help="output format (default: table on a terminal, json otherwise)",
    )
    p.add_argument("--output-file", metavar="FILE", help="write the plan here instead of stdout")
    add_solver_flags(p)
    add_scheduler_flags(p)
    add_cloud_flags(p)


def add_input_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--nodegroups",
        metavar="FILE",
        default=None,
        help="node-group catalog (YAML or JSON); optional with --provider (discovery replaces it; "
        "the simulated provider is seeded from it)",
    )
    p.add_argument(
        "--node-group-label",
        default=DEFAULT_NODE_GROUP_LABEL,
        help=f"node label naming a node's group (default {DEFAULT_NODE_GROUP_LABEL})",
    )
    p.add_argument(
        "--plan-unadmitted",
        action="store_true",
        help="plan capacity for Kueue workloads not admitted yet (default: report them "
        "waiting-for-admission; Kueue decides admission)",
    )


def cmd_plan(args: argparse.Namespace) -> int:
    if args.provider or args.execute:
        return _cmd_plan(args)
    was_enabled = gc.isenabled()
    gc.disable()  # see the module docstring; restored, so an in-process caller (tests) keeps its collector
    try:
        return _cmd_plan(args)
    finally:
        if was_enabled:
            gc.enable()


def _cmd_plan(args: argparse.Namespace) -> int:
    # the plan's clock: --time-limit covers reading the input and writing the plan
    args.started = time.perf_counter()
    from .plan_modes import resolve_plan_mode

    resolve_plan_mode(args)  # a contradiction is an InputError before anything is read
    cloud = bool(args.provider or args.execute)
    if cloud:
        from .cli_execute import check_args

        check_args(args)
    elif not args.nodegroups:
        raise InputError("--nodegroups is required unless --provider discovers the node groups")
    live_warnings: list[str] = []
    if args.cluster:
        objects = read_objects(args.cluster)
    else:  # no file: the live cluster, read-only
        objects, live_warnings = read_live_objects(args)
    if cloud:
        from .cli_execute import run_from_args

        return run_from_args(
            args, objects, live_warnings, replace(solve_options(args), started=args.started)
        )
    return plan_from_files(args, objects, live_warnings)


def plan_from_files(args: argparse.Namespace, objects: list, live_warnings: list[str]) -> int:
    """Catalog + cluster objects → plan → output. The planner (OR-Tools, pandas) is imported only here."""
    from .catalog import load_catalog
    from .ingest import ingest
    from .output import emit, output_format, render_plan
    from .plan_modes import gate_mode_prepare, resolve_plan_mode
    from .planner import make_plan
    from .snapshot import build_snapshot

    resolve_plan_mode(args)
    groups, warnings = load_catalog(args.nodegroups)
    cluster = ingest(
        objects, node_group_label=args.node_group_label, plan_unadmitted=args.plan_unadmitted
    )
    snap = build_snapshot(
        replace(cluster, warnings=[*live_warnings, *cluster.warnings]), groups, warnings
    )
    prepare = gate_mode_prepare(args, objects)
    plan = make_plan(
        prepare(snap) if prepare else snap,
        replace(solve_options(args), started=getattr(args, "started", None)),
        scheduler_model(args),
    )
    plan.mode = args.mode.value
    emit(render_plan(plan, output_format(args.output, args.output_file)), args.output_file)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from .controller.run import (
        cmd_run as run_controller,
    )  # imports kubernetes and the cloud: only when run

    return run_controller(args)


def cmd_webhook(args: argparse.Namespace) -> int:
    from .webhook.command import (
        cmd_webhook as serve_webhook,
    )  # pydantic, the catalog: only when it runs

    return serve_webhook(args)


def cmd_status(args: argparse.Namespace) -> int:
    from .controller.status import (
        cmd_status as status,
    )  # imports the Kubernetes client: only when run

    return status(args)


def cmd_ungate(args: argparse.Namespace) -> int:
    from .controller.ungate import (
        cmd_ungate as lift,
    )  # imports the Kubernetes client: only when run

    return lift(args)


COMMANDS = {
    "plan": cmd_plan,
    "dump": cmd_dump,
    "check": cmd_check,
    "run": cmd_run,
    "status": cmd_status,
    "webhook": cmd_webhook,
    "ungate": cmd_ungate,
}


def bench(argv: Sequence[str]) -> int:
    """`python -m benchmarks ...` as a child process with the same interpreter, streams and exit code."""
    import subprocess  # only here: with `locale`, `selectors` and `signal` it is ~10 ms of every other command

    env = {
        **os.environ,
        "GANGSCALE_BENCH_PROG": "gangscale bench",
    }  # its usage names the command typed
    try:
        return subprocess.call([sys.executable, "-m", "benchmarks", *argv], env=env)
    except KeyboardInterrupt:
        return 130


def end_process(code: int) -> NoReturn | None:
    """Exit now with `code`, skipping the interpreter's teardown (see the module docstring), once stdout and
    stderr are flushed; if flushing fails, return and let the usual exit report it. Only for a process whose
    work is done and that holds no threads, children or atexit work: a finished `plan` from files."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return None
    os._exit(code)


def _owns_nothing_else(args: argparse.Namespace) -> bool:
    """A `plan` without a cloud: no threads, clients or children outlive it (the collector is off there too)."""
    return args.command == "plan" and not (args.provider or args.execute)


def main(argv: Sequence[str] | None = None) -> int:
    program = argv is None  # the process' own entry point: a finished `plan` may end the process
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [
        "bench"
    ]:  # `gangscale bench ...` = `python -m benchmarks ...` (parses its own flags)
        return bench(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        code = COMMANDS[args.command](args)
    except InputError as exc:
        print(f"gangscale: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if program and _owns_nothing_else(args):
        end_process(code)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
