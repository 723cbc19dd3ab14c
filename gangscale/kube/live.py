"""One read of the live cluster for `plan` and `dump`: discovery, then one LIST each.

A plan needs one consistent view, not a stream, so this lists (paginated)
and returns; the controller keeps the same view up to date with `ClusterCache`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .client import KubeClient
from .discovery import GangApis, ServerInfo, choose_gang_apis, describe, discover
from .errors import KubeError
from .lister import DEFAULT_MAX_ITEMS, DEFAULT_PAGE_SIZE, list_all
from .refs import DAEMONSETS, NODES, PODS
from .scope import in_scope


@dataclass(slots=True)
class LiveCluster:
    objects: list[dict[str, Any]]  # raw dicts with apiVersion/kind, ready for ingest()
    server: ServerInfo
    apis: GangApis
    warnings: list[str] = field(default_factory=list)


def read_cluster(
    client: KubeClient,
    namespace: str | None = None,
    *,
    page_size: int = DEFAULT_PAGE_SIZE,
    max_items: int = DEFAULT_MAX_ITEMS,
) -> LiveCluster:
    """Nodes, all pods (once, for the whole cluster) and every served gang API, each list bounded by `max_items`."""
    info = discover(client)
    apis = choose_gang_apis(info)
    live = LiveCluster([], info, apis, list(info.warnings))
    if not apis.refs:
        live.warnings.append(
            "the cluster serves no gang API (scheduling.k8s.io PodGroup/Workload, scheduler-plugins or Volcano "
            "PodGroup): every pending pod is planned as its own group; run `gangscale check`"
        )
    for name in apis.unread:
        live.warnings.append(
            f"{name} is served but gangscale reads only {describe(apis)}: its gangs are not planned"
        )

    nodes = list_all(client, NODES, page_size=page_size, max_items=max_items)
    live.objects += nodes.items
    live.warnings += nodes.skipped
    try:
        pods = list_all(client, PODS, page_size=page_size, max_items=max_items)
    except KubeError as exc:
        if exc.status != 403 or not namespace:
            raise
        pods = list_all(client, PODS, namespace, page_size=page_size, max_items=max_items)
        live.warnings.append(
            f"cannot list pods of all namespaces ({exc.reason or 'Forbidden'}): free node capacity ignores pods "
            f"of namespaces other than {namespace}, so the plan may buy too little"
        )
    live.objects += pods.items
    live.warnings += pods.skipped
    _read_daemonsets(client, live, page_size, max_items)
    for ref in [*apis.refs, *apis.inputs]:
        try:
            result = list_all(client, ref, namespace, page_size=page_size, max_items=max_items)
        except KubeError as exc:
            if exc.status == 0:
                raise
            live.warnings.append(
                f"cannot list {ref.label}: {exc}; pods of these groups show as waiting for their group"
            )
            continue
        live.objects += result.items
        live.warnings += result.skipped
    live.objects = [o for o in live.objects if in_scope(o, namespace)]
    return live


def _read_daemonsets(client: KubeClient, live: LiveCluster, page_size: int, max_items: int) -> None:
    """Every namespace's DaemonSets (they run on every new node); one that cannot be listed is a warning."""
    try:
        result = list_all(client, DAEMONSETS, page_size=page_size, max_items=max_items)
    except KubeError as exc:
        if exc.status == 0:
            raise
        live.warnings.append(daemonsets_unread(str(exc)))
        return
    live.objects += result.items
    live.warnings += result.skipped


def daemonsets_unread(why: str) -> str:
    """The warning when DaemonSets cannot be listed (RBAC forbids it, or the server does not serve apps/v1)."""
    return (
        f"cannot list {DAEMONSETS.label}: {why}; the plan assumes no DaemonSet pod runs on the new nodes it buys, "
        "so they may hold less than planned"
    )
