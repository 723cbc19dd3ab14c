"""`gangscale status`: every gang the controller keeps a record of, read from its state ConfigMaps.

Read-only. The rows are what the leader last saved (records holding capacity, and timed-out or
cancelled ones kept for audit), so `status` shows the controller's view even when it is not
running. Times are shown relative to now and as UTC timestamps, never as epoch floats.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from typing import Any

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..loader import InputError
from .lifecycle import Record
from .records import read_layout

def iso(epoch: float) -> str | None:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if epoch > 0 else None


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
        raise InputError(f"ConfigMap {namespace}/{name}: records.json is not the controller's records: "
                         f"{layout.legacy_error}")
    if layout.unreadable:
        raise InputError(f"ConfigMap {namespace}/{layout.unreadable[0].name}: record.json is not a controller record")
    return list(layout.current.values())


def status_document(records: list[Record], now: float, source: str, namespace: str | None = None) -> dict[str, Any]:
    """The JSON/YAML form: one entry per gang, oldest state first."""
    rows = []
    for r in sorted(records, key=lambda r: (r.since, r.gang)):
        if namespace and r.namespace != namespace:
            continue
        rows.append({
            "namespace": r.namespace, "name": r.name, "api": r.api, "state": r.state.value,
            "since": iso(r.since), "ageSeconds": round(max(0.0, now - r.since), 3),
            "nodesRequested": sum(r.requested.values()), "requested": dict(sorted(r.requested.items())),
            # the registered nodes of `requested` that arrived for the gang (reserved for it while it waits)
            "nodesArrived": sum(len(v) for v in r.nodes.values()),
            "arrived": {g: sorted(v) for g, v in sorted(r.nodes.items()) if v},
            "deadline": iso(r.deadline), "reason": r.reason,
        })
    return {"source": source, "gangs": rows}


def render_text(doc: dict[str, Any], fmt: str, now: float) -> str:
    head = ["GANG", "API", "STATE", "AGE", "NODES", "DEADLINE", "REASON"]
    rows = [head]
    for g in doc["gangs"]:
        nodes = f"{g['nodesRequested']} ({', '.join(f'{k}={v}' for k, v in g['requested'].items())})" \
            if g["nodesRequested"] else "0"
        if g["nodesArrived"]:
            nodes += f", {g['nodesArrived']} arrived"
        deadline = "-"
        if g["deadline"]:
            left = datetime.strptime(g["deadline"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp() - now
            deadline = f"in {human(left)}" if left > 0 else f"{human(left)} ago"
        rows.append([f"{g['namespace']}/{g['name']}", g["api"], g["state"], human(g["ageSeconds"]), nodes,
                     deadline, g["reason"]])
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
        return "\n".join(lines) + "\n"
    if len(rows) == 1:
        return f"no gang records in {doc['source']}\n"
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    return "".join("   ".join(c.ljust(w) for c, w in zip(row, widths)) + "   " + row[-1] + "\n" for row in rows)


def cmd_status(args: argparse.Namespace) -> int:
    from ..kube.client import connect
    from ..kube.errors import KubeConfigError
    from ..output import emit, output_format, render

    now = time.time()
    try:
        client = connect(args.kubeconfig, args.context, timeout=args.request_timeout)
    except KubeConfigError as exc:
        raise InputError(str(exc)) from None
    with client:
        records = read_records(client, args.state_namespace, args.state_configmap)
    source = f"ConfigMap {args.state_namespace}/{args.state_configmap}"
    doc = status_document(records, now, source, args.namespace)
    fmt = output_format(args.output, args.output_file)
    emit(render(doc, fmt, lambda f: render_text(doc, f, now)), args.output_file)
    return 0
