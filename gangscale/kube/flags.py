"""CLI flags and subcommands of the live-cluster layer.

Import-light on purpose: `gangscale plan --cluster FILE` never loads the
`kubernetes` package (almost a second of start-up); the commands import it
only when they run.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import argtypes


def add_kube_flags(p: argparse.ArgumentParser) -> None:
    """kubectl's --kubeconfig, --context and -n/--namespace."""
    g = p.add_argument_group("live cluster (read-only)")
    g.add_argument("--kubeconfig", metavar="FILE",
                   help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
    g.add_argument("--context", help="kubeconfig context to use (default: the current context)")
    g.add_argument("-n", "--namespace", help="read the gangs of this namespace only (default: all namespaces)")
    g.add_argument("--request-timeout", type=argtypes.seconds, default=30.0, metavar="SECONDS",
                   help="timeout of one API request (default 30)")


def add_kube_commands(sub: Any) -> None:
    """`gangscale dump` and `gangscale check`."""
    d = sub.add_parser("dump", help="write the live cluster as the file `plan --cluster` reads (for bug reports)")
    add_kube_flags(d)
    d.add_argument("-o", "--output", choices=("json", "yaml"), default="json", help="format (default json)")
    d.add_argument("--output-file", metavar="FILE", help="write here instead of stdout")
    d.add_argument("--no-redact", action="store_true",
                   help="keep env values, commands, volumes and annotations (default: drop them)")
    c = sub.add_parser("check", help="check the cluster's prerequisites for gang-aware scaling (read-only)")
    add_kube_flags(c)
    c.add_argument("-o", "--output", choices=("table", "json"), default="table", help="format (default table)")
    c.add_argument("--nodegroups", metavar="FILE",
                   help="node-group catalog: also name the groups Cluster Autoscaler scales as well")


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
