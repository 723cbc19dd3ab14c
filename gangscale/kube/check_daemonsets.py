"""`gangscale check`: DaemonSets whose pods would not fit the new nodes of a node group.

A daemon pod the DaemonSet controller would run on a group's node (gangscale.daemonsets `should_run`) but whose
requests exceed the node's allocatable stays Pending on every node of that group, and one that fits alone but not
beside the other daemon pods is left Pending there too (kube-scheduler binds them in queue order). Either way the
agent does not run where its owner expects it, and the planner counts it nowhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..daemonsets import DaemonSet, daemons_on, describe
from ..ingest_daemonsets import parse_daemonset
from ..model import NodeGroup
from ..parse import ObjectError
from ..resources import fits
from .client import KubeClient
from .errors import KubeError
from .lister import list_all
from .refs import DAEMONSETS

OK, INFO, WARN = "ok", "info", "warn"  # check.py's verdicts


def read_daemonsets(objects: Sequence[dict[str, Any]]) -> tuple[list[DaemonSet], list[str]]:
    """The DaemonSets of listed objects, and a note per one that cannot be read."""
    out, bad = [], []
    for obj in objects:
        try:
            out.append(parse_daemonset(obj))
        except (ObjectError, KeyError, TypeError, ValueError) as exc:
            raw = obj.get("metadata")
            meta: dict[str, Any] = raw if isinstance(raw, dict) else {}
            bad.append(
                f"DaemonSet {meta.get('namespace', '?')}/{meta.get('name', '?')} cannot be read: {exc}"
            )
    return out, bad


def misfits(daemonsets: Sequence[DaemonSet], groups: Sequence[NodeGroup]) -> list[str]:
    """One line per (DaemonSet, group) where its pod would run on a new node but does not fit there."""
    lines = []
    for g in groups:
        d = daemons_on(daemonsets, g.labels, g.taints, g.allocatable)
        for ds in daemonsets:
            if (
                ds.key not in d.unfit
            ):  # `daemons_on` lists only the DaemonSets that run on the group's nodes
                continue
            if not fits(ds.pod.requests, g.allocatable):
                lines.append(
                    f"DaemonSet {ds.key} requests {describe(ds.pod.requests)}, more than node group "
                    f"{g.name}'s allocatable ({describe(g.allocatable)}): its pod would stay Pending on "
                    "every node of the group"
                )
            else:
                lines.append(
                    f"DaemonSet {ds.key} ({describe(ds.pod.requests)}) does not fit beside the other "
                    f"daemon pods of node group {g.name} ({describe(d.load)} of {describe(g.allocatable)}): "
                    "its pod would stay Pending there"
                )
    return lines


def check_daemonsets(
    client: KubeClient, groups: Sequence[NodeGroup] | None
) -> tuple[str, str, list[str]]:
    """(verdict, summary, detail) of the DaemonSets against the catalog's node groups (`--nodegroups`)."""
    try:
        listed = list_all(client, DAEMONSETS).items
    except KubeError as exc:
        if exc.status == 0:
            raise
        return (
            WARN,
            f"cannot list {DAEMONSETS.label}: {exc}",
            [
                "plans assume no DaemonSet pod runs on the nodes they buy, so those nodes may hold less than planned",
                "fix: grant get/list/watch on daemonsets.apps (config/deploy/rbac.yaml)",
            ],
        )
    daemonsets, bad = read_daemonsets(listed)
    if groups is None:
        return (
            INFO,
            f"{len(daemonsets)} DaemonSets read; give --nodegroups to check them against the node groups",
            bad,
        )
    lines = misfits(daemonsets, groups)
    if lines:
        return (
            WARN,
            f"{len(lines)} DaemonSet pod(s) would not fit the new nodes of their node group",
            [*lines, *bad],
        )
    return (
        OK,
        (
            f"every pod of the {len(daemonsets)} DaemonSets fits the new nodes of the {len(groups)} node groups "
            "it runs on; plans take their requests off those nodes"
        ),
        bad,
    )
