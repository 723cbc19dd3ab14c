"""`gangscale plan --provider ... [--execute]`: plan against a cloud's discovered groups, apply once.

CLI glue only (imported by `cli.py` when `--provider` or `--execute` is given): discover the groups
(their target sizes are the cloud's desired capacity), match registered Nodes
to their group through spec.providerID, plan, then apply the scale-up with
`gangscale.apply` (which the controller uses too). Re-running on the same
cluster file adds nothing twice: nodes asked for but not yet registered count
as capacity on its way. With `--scheduler-model observe` and no `--scheduler-config`, aws-eks
plans against the cluster's own scoring strategy (DescribeCluster; `providers.cluster_scheduler`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from typing import Any

from cloud_adapters import PROVIDERS, CloudError, NodeGroupProvider

from .apply import ExecutionReport, apply_plan, match_node_groups
from .ingest import DEFAULT_NODE_GROUP_LABEL, ingest
from .loader import InputError
from .output import emit, output_format, render_plan
from .plan import Plan
from .planner import SolveOptions, make_plan
from .providers import cluster_scheduler, open_provider
from .realize import OFF, SchedulerModel, scheduler_model_from
from .snapshot import ClusterSnapshot, build_snapshot

EXIT_CLOUD_ERROR = 3


def plan_from_cloud(
    objects: Iterable[Any],
    provider: NodeGroupProvider,
    *,
    solve: SolveOptions | None = None,
    node_group_label: str | None = None,
    execute: bool = False,
    warnings: list[str] | None = None,
    plan_unadmitted: bool = False,
    scheduler: SchedulerModel = OFF,
    scheduler_file: bool = False,
    prepare: Callable[[ClusterSnapshot], ClusterSnapshot] | None = None,
) -> tuple[Plan, ExecutionReport | None]:
    """Discover, match nodes, plan, and (when `execute`) apply. CloudErrors from discovery propagate.

    `scheduler_file`: the user named the scheduler's configuration, which wins over the cluster's own. `prepare`:
    the snapshot as the plan's mode sees it (`--mode gate`: cli.gate_mode_prepare)."""
    discovery = provider.discover()
    scheduler, notes = cluster_scheduler(provider, scheduler, scheduler_file)
    cluster = ingest(
        objects,
        node_group_label=node_group_label or DEFAULT_NODE_GROUP_LABEL,
        plan_unadmitted=plan_unadmitted,
    )
    report = ExecutionReport(provider.name)
    cluster, report.nodes_matched = match_node_groups(cluster, provider)
    snap = build_snapshot(
        cluster, discovery.groups, [*(warnings or []), *discovery.warnings, *notes]
    )
    plan = make_plan(prepare(snap) if prepare else snap, solve, scheduler)
    if not execute:
        return plan, None
    return plan, apply_plan(plan, provider, {g.name: g for g in discovery.groups}, cluster, report)


def check_args(args: argparse.Namespace) -> None:
    """Flag combinations the cloud path needs, checked before the cluster is read."""
    name = args.provider
    if not name:
        raise InputError("--execute needs --provider (one of " + ", ".join(PROVIDERS) + ")")
    if name.startswith("aws-") and not args.cluster_name:
        raise InputError(
            f"--provider {name} needs --cluster-name (discovery tag k8s.io/cluster-autoscaler/<name>)"
        )
    if name == "simulated" and not args.nodegroups:
        raise InputError(
            "--provider simulated is seeded from a node-group catalog: pass --nodegroups"
        )


def run_from_args(
    args: argparse.Namespace, objects: list[Any], warnings: list[str], solve: SolveOptions
) -> int:
    """`gangscale plan --provider ... [--execute]`: exit 0, 2 on bad input, 3 on a cloud error."""
    from .plan_modes import gate_mode_prepare, resolve_plan_mode

    check_args(args)
    resolve_plan_mode(args)
    name = args.provider
    warnings = list(warnings)
    if name.startswith("aws-") and args.nodegroups:
        warnings.append(
            f"--nodegroups {args.nodegroups} ignored: node groups come from {name} discovery"
        )
    scheduler_file = getattr(args, "scheduler_config", None)
    model = scheduler_model_from(
        scheduler_file, getattr(args, "scheduler_model", "off")
    )  # a bad file: exit 2
    try:
        provider, seed_warnings = open_provider(
            name,
            cluster_name=args.cluster_name,
            region=args.region,
            endpoint_url=args.aws_endpoint_url,
            catalog=args.nodegroups if name == "simulated" else None,
            simulated_state=getattr(args, "simulated_state", None),
            auto_discovery=getattr(args, "node_group_auto_discovery", None) or (),
        )
    except ValueError as exc:
        raise InputError(str(exc)) from None
    except CloudError as exc:
        print(f"gangscale: {name}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_CLOUD_ERROR
    try:
        plan, report = plan_from_cloud(
            objects,
            provider,
            solve=solve,
            node_group_label=args.node_group_label,
            execute=bool(args.execute),
            warnings=[*seed_warnings, *warnings],
            plan_unadmitted=bool(getattr(args, "plan_unadmitted", False)),
            scheduler=model,
            scheduler_file=bool(scheduler_file),
            prepare=gate_mode_prepare(args, objects),
        )
        plan.mode = args.mode.value
    except CloudError as exc:
        print(f"gangscale: {name}: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_CLOUD_ERROR
    finally:
        provider.close()
    emit(render_plan(plan, output_format(args.output, args.output_file), report), args.output_file)
    if report is not None and report.failed:
        print(f"gangscale: {name}: {_one_line(report.first_error())}", file=sys.stderr)
        return EXIT_CLOUD_ERROR
    return 0


def _one_line(text: str, limit: int = 400) -> str:
    """Cloud messages can span lines (HTML error pages); the CLI's error is always one line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
