"""CLI flags and subcommands of the live-cluster layer.

Import-light on purpose: `gangscale plan --cluster FILE` never loads the
`kubernetes` package (almost a second of start-up); the commands import it
only when they run.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import argtypes

# = lister.DEFAULT_MAX_ITEMS; repeated here so the parser imports no client
MAX_LIST_ITEMS = 200_000


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 10**9:
        raise argparse.ArgumentTypeError(f"{text} is not between 1 and 1000000000")
    return value


def add_kube_flags(p: argparse.ArgumentParser) -> None:
    """kubectl's --kubeconfig, --context and -n/--namespace."""
    g = p.add_argument_group("live cluster (read-only)")
    g.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)",
    )
    g.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    g.add_argument(
        "-n", "--namespace", help="read the gangs of this namespace only (default: all namespaces)"
    )
    g.add_argument(
        "--request-timeout",
        type=argtypes.seconds,
        default=30.0,
        metavar="SECONDS",
        help="timeout of one API request (default 30)",
    )
    g.add_argument(
        "--max-list-items",
        type=_positive_int,
        default=MAX_LIST_ITEMS,
        metavar="N",
        help=f"stop with an error when one resource lists more than N objects (default {MAX_LIST_ITEMS})",
    )


def add_kube_commands(sub: Any) -> None:
    """`gangscale dump` and `gangscale check`."""
    _add_dump(sub)
    _add_check(sub)


def _add_dump(sub: Any) -> None:
    d = sub.add_parser(
        "dump", help="write the live cluster as the file `plan --cluster` reads (for bug reports)"
    )
    add_kube_flags(d)
    d.add_argument(
        "-o", "--output", choices=("json", "yaml"), default="json", help="format (default json)"
    )
    d.add_argument("--output-file", metavar="FILE", help="write here instead of stdout")
    d.add_argument(
        "--no-redact",
        action="store_true",
        help="keep env values, commands, volumes and annotations (default: drop them)",
    )


def _add_check(sub: Any) -> None:
    c = sub.add_parser(
        "check", help="check the cluster's prerequisites for gang-aware scaling (read-only)"
    )
    add_kube_flags(c)
    c.add_argument(
        "-o", "--output", choices=("table", "json"), default="table", help="format (default table)"
    )
    c.add_argument(
        "--nodegroups",
        metavar="FILE",
        help="node-group catalog: also name the groups Cluster Autoscaler scales as well",
    )
    c.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="controller config (config/deploy/config.yaml): report the spending limits it puts in "
        "force (default: the built-in defaults)",
    )
    _add_check_cloud(c)


def _add_check_cloud(c: argparse.ArgumentParser) -> None:
    """`check`'s optional cloud flags: the IAM policy and (aws-eks) the scheduler's scoring."""
    a = c.add_argument_group(
        "cloud (optional): also check that the IAM policy lets gangscale scale its groups "
        "and (aws-eks) how the cluster's scheduler scores nodes"
    )
    a.add_argument(
        "--provider",
        choices=("aws-asg", "aws-eks", "aws-fleet"),
        default=None,
        help="discover this provider's node groups; report the ones the IAM policy would not let "
        "gangscale scale and the ones Cluster Autoscaler also manages; aws-eks: also the cluster's "
        "scheduler scoring strategy, and for GPUs under LeastAllocated the `aws eks "
        "update-cluster-config` call that sets MostAllocated with a GPU weight",
    )
    a.add_argument(
        "--cluster-name", default=None, help="the cluster name of the discovery and IAM tags"
    )
    a.add_argument(
        "--node-group-auto-discovery",
        action="append",
        default=None,
        metavar="asg:tag=KEY[=VALUE],...",
        help="discover the groups carrying all these tags, as Cluster Autoscaler's flag (repeatable; "
        "default: gangscale.io/cluster=<cluster>, or gangscale.io/enabled with gangscale.io/<cluster>)",
    )
    a.add_argument(
        "--region", default=None, help="AWS region (default: AWS_REGION / the AWS config)"
    )
    a.add_argument(
        "--aws-endpoint-url", default=None, metavar="URL", help="send AWS calls here (tests, moto)"
    )


def cmd_dump(args: argparse.Namespace) -> int:
    from .commands import dump

    return dump(args)


def cmd_check(args: argparse.Namespace) -> int:
    from .commands import check

    return check(args)


def read_live_objects(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[str]]:
    """Objects and read warnings of the live cluster, for `plan` without --cluster."""
    from .commands import read_live

    return read_live(args)
