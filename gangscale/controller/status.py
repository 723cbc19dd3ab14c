"""`gangscale status`: every gang the controller knows, and (`gangscale status nodegroups`) every node group.

Read-only. The gang rows are the records the leader last saved (records holding capacity, and timed-out
or cancelled ones kept for audit), then every other gang of its last plan with the plan's decision as its
state (infeasible, below-quorum, invalid, ...), read from the status ConfigMap the leader publishes after
each pass (published.py). So `status` shows the controller's view even when it is not running. `--state`
keeps the rows in the given states. The node-group view is that ConfigMap's: target, ready and upcoming
nodes, min and max size, and a backoff still running. Times are shown relative to now and as UTC
timestamps, never as epoch floats.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from typing import Any

import orjson

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.refs import CONFIGMAPS
from ..loader import InputError
from ..rfc3339 import format_time
from .lifecycle import Record
from .published import REFRESH_SECONDS, STATUS_CONFIGMAP
from .records import read_layout

STALE_SECONDS = 5 * REFRESH_SECONDS  # a leader rewrites the status at least every REFRESH_SECONDS


def iso(epoch: float) -> str | None:
    return format_time(epoch) if epoch > 0 else None


def human(seconds: float) -> str:
    """kubectl's AGE style: 45s, 12m, 3h, 2d."""
    s = int(abs(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def read_records(client: KubeClient, namespace: str, name: str) -> list[Record]:
    """The saved records (one ConfigMap per gang, or the single ConfigMap's records.json an older controller wrote
    and the leader has not migrated yet); none saved is none, an unreadable one a one-sentence InputError."""
    try:
        layout = read_layout(client, namespace, name)
    except KubeError as exc:
        raise InputError(f"cannot read the records in ConfigMaps of {namespace}: {exc}") from None
    if layout.legacy_error:
        raise InputError(
            f"ConfigMap {namespace}/{name}: records.json is not the controller's records: "
            f"{layout.legacy_error}"
        )
    if layout.unreadable:
        raise InputError(
            f"ConfigMap {namespace}/{layout.unreadable[0].name}: record.json is not a controller record"
        )
    return list(layout.current.values())


def read_published(
    client: KubeClient, namespace: str, name: str = STATUS_CONFIGMAP
) -> dict[str, Any] | None:
    """The leader's published status (gangs, nodeGroups, updated, leader); None when it has published none."""
    try:
        cm = client.get(CONFIGMAPS.path(namespace, name))
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise InputError(f"cannot read ConfigMap {namespace}/{name}: {exc}") from None
    data = cm.get("data") or {}
    try:
        info = orjson.loads(data.get("pass.json", "{}"))
        out = {
            "gangs": orjson.loads(data.get("gangs.json", "[]")),
            "nodeGroups": orjson.loads(data.get("nodegroups.json", "[]")),
            "updated": data.get("updated"),
            "leader": info.get("leader"),
            "mode": info.get("mode"),
            "gangsOmitted": int(info.get("gangsOmitted", 0)),
        }
        if not isinstance(out["gangs"], list) or not isinstance(out["nodeGroups"], list):
            raise TypeError("gangs.json and nodegroups.json must be lists")
    except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(
            f"ConfigMap {namespace}/{name} is not the controller's published status: {exc}"
        ) from None
    return out


def _record_row(r: Record, now: float) -> dict[str, Any]:
    return {
        "namespace": r.namespace,
        "name": r.name,
        "api": r.api,
        "state": r.state.value,
        "since": iso(r.since),
        "ageSeconds": round(max(0.0, now - r.since), 3),
        "nodesRequested": sum(r.requested.values()),
        "requested": dict(sorted(r.requested.items())),
        # the registered nodes of `requested` that arrived for the gang (reserved for it while it waits)
        "nodesArrived": sum(len(v) for v in r.nodes.values()),
        "arrived": {g: sorted(v) for g, v in sorted(r.nodes.items()) if v},
        "deadline": iso(r.deadline),
        "reason": r.reason,
    }


def _plan_row(g: dict[str, Any]) -> dict[str, Any]:
    """A gang of the last plan with no record: the plan's decision is its state."""
    return {
        "namespace": g.get("namespace", ""),
        "name": g.get("name", ""),
        "api": g.get("api", ""),
        "state": g.get("decision", ""),
        "since": None,
        "ageSeconds": None,
        "nodesRequested": 0,
        "requested": {},
        "nodesArrived": 0,
        "arrived": {},
        "deadline": None,
        "reason": g.get("reason", ""),
    }


def status_document(
    records: list[Record],
    now: float,
    source: str,
    namespace: str | None = None,
    published: dict[str, Any] | None = None,
    states: frozenset[str] | None = None,
) -> dict[str, Any]:
    """The JSON/YAML form: the records oldest state first, then the last plan's other gangs by namespace and name.

    A row of a gang the last plan listed also carries the plan's `decision`, `minCount`, `pending` and `placed`."""
    planned = {
        (g.get("namespace"), g.get("name"), g.get("api")): g
        for g in (published or {}).get("gangs", [])
        if isinstance(g, dict)
    }
    rows = []
    for r in sorted(records, key=lambda r: (r.since, r.gang)):
        rows.append(
            {**_record_row(r, now), **_plan_fields(planned.pop((r.namespace, r.name, r.api), None))}
        )
    for key in sorted(planned, key=str):
        rows.append({**_plan_row(planned[key]), **_plan_fields(planned[key])})
    rows = [
        row
        for row in rows
        if (not namespace or row["namespace"] == namespace)
        and (not states or row["state"] in states or row.get("decision") in states)
    ]
    doc: dict[str, Any] = {"source": source, "gangs": rows}
    if published is not None:
        doc["published"] = {k: published[k] for k in ("updated", "leader", "mode", "gangsOmitted")}
    return doc


def _plan_fields(g: dict[str, Any] | None) -> dict[str, Any]:
    if g is None:
        return {}
    return {
        "decision": g.get("decision"),
        "minCount": g.get("minCount"),
        "pending": g.get("pending"),
        "placed": g.get("placed"),
    }


def node_group_document(published: dict[str, Any] | None, source: str) -> dict[str, Any]:
    """The node-group view: one entry per group the leader last discovered."""
    if published is None:
        return {"source": source, "updated": None, "nodeGroups": []}
    return {
        "source": source,
        "updated": published["updated"],
        "leader": published["leader"],
        "nodeGroups": published["nodeGroups"],
    }


def render_node_groups(doc: dict[str, Any], fmt: str, now: float) -> str:
    head = ["NODE GROUP", "TARGET", "READY", "UPCOMING", "MIN", "MAX", "BACKOFF"]
    rows = [head]
    for g in doc["nodeGroups"]:
        backoff = "-"
        if g.get("backoffUntil"):
            left = _epoch(g["backoffUntil"]) - now
            backoff = f"for {human(left)}" if left > 0 else "-"
        rows.append(
            [
                str(g["name"]),
                *(str(g.get(k, "")) for k in ("target", "ready", "upcoming", "minSize", "maxSize")),
                backoff,
            ]
        )
    if fmt == "markdown":
        return _markdown(head, rows[1:])
    if len(rows) == 1:
        return f"no node-group status in {doc['source']} (the leader writes it after each pass)\n"
    return _columns(rows)


def _epoch(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _columns(rows: list[list[str]]) -> str:
    """Aligned columns, the last one unpadded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "   " + row[-1] + "\n"
        for row in rows
    )


def render_text(doc: dict[str, Any], fmt: str, now: float) -> str:
    head = ["GANG", "API", "STATE", "AGE", "NODES", "DEADLINE", "REASON"]
    rows = [head]
    for g in doc["gangs"]:
        nodes = (
            f"{g['nodesRequested']} ({', '.join(f'{k}={v}' for k, v in g['requested'].items())})"
            if g["nodesRequested"]
            else "0"
        )
        if g["nodesArrived"]:
            nodes += f", {g['nodesArrived']} arrived"
        deadline = "-"
        if g["deadline"]:
            left = _epoch(g["deadline"]) - now
            deadline = f"in {human(left)}" if left > 0 else f"{human(left)} ago"
        age = human(g["ageSeconds"]) if g["ageSeconds"] is not None else "-"
        rows.append(
            [
                f"{g['namespace']}/{g['name']}",
                g["api"],
                g["state"],
                age,
                nodes,
                deadline,
                g["reason"],
            ]
        )
    if fmt == "markdown":
        return _markdown(head, rows[1:])
    if len(rows) == 1:
        return f"no gang records in {doc['source']}\n"
    return _columns(rows)


def _warn_if_stale(published: dict[str, Any] | None, now: float) -> None:
    """One stderr line when no leader has written the status for a while: the plan rows may be old."""
    if published is None or not published.get("updated"):
        return
    try:
        age = now - _epoch(published["updated"])
    except (TypeError, ValueError):
        return
    if age > STALE_SECONDS:
        print(
            f"gangscale: warning: the published status is {human(age)} old (updated {published['updated']}): "
            "no leader has written it since; is the controller running?",
            file=sys.stderr,
        )


def cmd_status(args: argparse.Namespace) -> int:
    from ..kube.client import connect
    from ..kube.errors import KubeConfigError
    from ..output import emit, output_format, render

    now = time.time()
    try:
        client = connect(args.kubeconfig, args.context, timeout=args.request_timeout)
    except KubeConfigError as exc:
        raise InputError(str(exc)) from None
    view = getattr(args, "view", None) or "gangs"
    with client:
        published = read_published(client, args.state_namespace, args.status_configmap)
        records = (
            read_records(client, args.state_namespace, args.state_configmap)
            if view == "gangs"
            else []
        )
    fmt = output_format(args.output, args.output_file)
    _warn_if_stale(published, now)
    if view == "nodegroups":
        doc = node_group_document(
            published, f"ConfigMap {args.state_namespace}/{args.status_configmap}"
        )
        emit(render(doc, fmt, lambda f: render_node_groups(doc, f, now)), args.output_file)
        return 0
    states = frozenset(s for v in args.state or () for s in v.split(",") if s) or None
    source = f"ConfigMap {args.state_namespace}/{args.state_configmap}"
    doc = status_document(records, now, source, args.namespace, published, states)
    emit(render(doc, fmt, lambda f: render_text(doc, f, now)), args.output_file)
    return 0
