"""`gangscale ...`: kubectl-like flags, plans as table, markdown, JSON or YAML.

Exit codes: 0 a plan was made, 2 the input could not be read at all.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import orjson
import yaml

from .catalog import load_catalog
from .ingest import DEFAULT_NODE_GROUP_LABEL, ingest
from .loader import InputError, read_objects
from .plan import Plan, render_markdown, render_table
from .planner import SolveOptions, make_plan
from .snapshot import build_snapshot

OUTPUTS = ("json", "yaml", "table", "markdown")


def add_solver_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS",
                   help="wall-clock budget for the solver (default 10); a timeout still returns a valid plan")
    p.add_argument("--workers", type=int, default=0, help="CP-SAT workers (default: one per core)")
    p.add_argument("--relative-gap", type=float, default=1e-4, help="stop once within this relative gap (default 1e-4)")
    p.add_argument("--seed", type=int, default=0, help="solver random seed (default 0)")


def solve_options(args: argparse.Namespace) -> SolveOptions:
    return SolveOptions(time_limit=args.time_limit, workers=args.workers, relative_gap=args.relative_gap,
                        seed=args.seed)


def render(plan: Plan, fmt: str) -> str:
    if fmt == "json":
        return orjson.dumps(plan.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(plan.to_dict(), sort_keys=False)
    if fmt == "markdown":
        return render_markdown(plan)
    return render_table(plan)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gangscale", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="plan the node groups' scale-up for the pending gangs (dry run)")
    p.add_argument("--cluster", metavar="FILE", required=True,
                   help="kubectl get nodes,pods,podgroups,workloads -A -o json|yaml output ('-' for stdin)")
    p.add_argument("--nodegroups", metavar="FILE", required=True, help="node-group catalog (YAML or JSON)")
    p.add_argument("--node-group-label", default=DEFAULT_NODE_GROUP_LABEL,
                   help=f"node label naming a node's group (default {DEFAULT_NODE_GROUP_LABEL})")
    p.add_argument("-o", "--output", choices=OUTPUTS, default=None,
                   help="output format (default: table on a terminal, json otherwise)")
    p.add_argument("--output-file", metavar="FILE", help="write the plan here instead of stdout")
    add_solver_flags(p)
    return parser


def cmd_plan(args: argparse.Namespace) -> int:
    objects = read_objects(args.cluster)
    groups, warnings = load_catalog(args.nodegroups)
    cluster = ingest(objects, node_group_label=args.node_group_label)
    snap = build_snapshot(cluster, groups, warnings)
    plan = make_plan(snap, solve_options(args))
    fmt = args.output or ("table" if sys.stdout.isatty() and not args.output_file else "json")
    text = render(plan, fmt)
    if args.output_file:
        with open(args.output_file, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


COMMANDS = {"plan": cmd_plan}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"gangscale: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
