"""What `gangscale plan` (live), `dump` and `check` do with the cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from ..catalog import load_catalog
from ..output import emit, render
from .check import (
    EXIT_UNREACHABLE,
    WARN,
    CheckResult,
    check_ca_overlap,
    check_iam_scope,
    check_limits,
    run_checks,
)
from .check_scoring import check_scheduler_scoring, gpu_users
from .client import KubeClient, connect
from .dump import dump_document, dump_header, render_dump
from .errors import KubeConfigError, KubeError
from .lister import DEFAULT_MAX_ITEMS, list_all
from .live import read_cluster
from .refs import NODES, PODS


def _connect(args: argparse.Namespace) -> KubeClient:
    return connect(
        getattr(args, "kubeconfig", None),
        getattr(args, "context", None),
        timeout=getattr(args, "request_timeout", 30.0),
    )


def _max_items(args: argparse.Namespace) -> int:
    return int(getattr(args, "max_list_items", None) or DEFAULT_MAX_ITEMS)


def read_live(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    with _connect(args) as client:
        live = read_cluster(client, getattr(args, "namespace", None), max_items=_max_items(args))
    return live.objects, live.warnings


def dump(args: argparse.Namespace) -> int:
    with _connect(args) as client:
        live = read_cluster(client, args.namespace, max_items=_max_items(args))
        header = dump_header(live, client.display_host, client.context)
    data = render_dump(dump_document(live, redacted=not args.no_redact), args.output, header)
    emit(data, args.output_file)
    for w in live.warnings:
        print(f"gangscale: warning: {w}", file=sys.stderr)
    kinds: dict[str, int] = {}
    for o in live.objects:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    counts = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) or "no objects"
    print(f"gangscale: dumped {counts}", file=sys.stderr)
    return 0


def _nodes_and_pods(
    client: KubeClient, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and pods, to see whether GPUs are in use (the scheduler-scoring line); unreadable: none."""
    try:
        return (
            list_all(client, NODES, max_items=_max_items(args)).items,
            list_all(client, PODS, args.namespace, max_items=_max_items(args)).items,
        )
    except KubeError:
        return [], []


def _iam_scope(
    args: argparse.Namespace,
    nodes: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
) -> list[CheckResult]:
    """The IAM scope of the discovered groups, which of them Cluster Autoscaler also manages, and (aws-eks) the
    cluster's scheduler scoring strategy with what GPU gangs need (seen on the groups, `nodes` and `pods`)."""
    from cloud_adapters import CloudError, create_provider

    if not args.cluster_name:
        return [CheckResult("iam-scope", WARN, f"--provider {args.provider} needs --cluster-name")]
    try:
        provider, _ = create_provider(
            args.provider,
            cluster_name=args.cluster_name,
            region=args.region,
            endpoint_url=args.aws_endpoint_url,
            auto_discovery=getattr(args, "node_group_auto_discovery", None) or (),
        )
    except (CloudError, ValueError) as exc:
        return [CheckResult("iam-scope", WARN, f"cannot use --provider {args.provider}: {exc}")]
    try:
        scope = check_iam_scope(provider, args.cluster_name)
        overlap = check_ca_overlap(provider)  # discover() was just run by check_iam_scope
        region = args.region or getattr(getattr(provider, "clients", None), "region", "") or ""
        scoring = check_scheduler_scoring(
            provider.scheduler_scoring(),
            args.cluster_name,
            region,
            gpu_users(provider.discovered(), nodes, pods),
        )
        return [scope] + [r for r in (overlap, scoring) if r]
    finally:
        provider.close()


def check(args: argparse.Namespace) -> int:
    names, groups = None, None
    if args.nodegroups:
        groups, _ = load_catalog(args.nodegroups)
        names = [g.name for g in groups]
    try:
        client = _connect(args)
    except KubeConfigError as exc:
        print(f"gangscale: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    with client:
        report = run_checks(client, namespace=args.namespace, nodegroups=names, groups=groups)
        nodes, pods = (
            _nodes_and_pods(client, args)
            if getattr(args, "provider", None) == "aws-eks"
            else ([], [])
        )
    if getattr(args, "provider", None):
        report.results.extend(_iam_scope(args, nodes, pods))
    if not report.unreachable:
        from ..controller.config import load_config

        report.results.append(
            check_limits(load_config(getattr(args, "config", None)), getattr(args, "config", None))
        )
    if args.output == "json":
        sys.stdout.write(render(report.to_dict(), "json"))
    else:
        sys.stdout.write(report.render_text())
    return report.exit_code
