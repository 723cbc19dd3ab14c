"""`gangscale dump`: the cluster file `gangscale plan --cluster` reads, safe to attach to a bug report.

Redaction keeps everything the planner reads (requests, selectors, affinity,
tolerations, taints, labels, the gang links) and drops what often holds
secrets or bulk: env values, commands, volumes, managed fields, and every
annotation except the ones the planner reads (`KEPT_ANNOTATIONS`, and
`gangscale.io/*`): annotations carry tokens (Vault agent), last-applied
configurations, and whatever else tools put there. `--no-redact` keeps
objects as the server returned them.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from typing import Any

from ..ingest import VOLCANO_ANNOTATIONS
from ..output import render
from .live import LiveCluster

_CONTAINER_DROP = (
    "env",
    "envFrom",
    "command",
    "args",
    "volumeMounts",
    "volumeDevices",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "workingDir",
)
_SPEC_DROP = ("volumes", "imagePullSecrets", "hostAliases")
REDACTED_ANNOTATION = "gangscale.io/redacted"
# The annotations ingest() reads: Volcano's gang link. gangscale.io/* (the controller's
# per-gang settings, e.g. a provisioning deadline) is kept by prefix.
KEPT_ANNOTATIONS = frozenset(VOLCANO_ANNOTATIONS)
KEPT_ANNOTATION_PREFIXES = ("gangscale.io/",)


def _kept_annotation(key: object) -> bool:
    return isinstance(key, str) and (
        key in KEPT_ANNOTATIONS or key.startswith(KEPT_ANNOTATION_PREFIXES)
    )


def redact(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy without secrets or bulk the planner never reads."""
    out = dict(obj)
    meta = dict(out.get("metadata") or {})
    meta.pop("managedFields", None)
    if isinstance(meta.get("annotations"), dict):
        meta["annotations"] = {k: v for k, v in meta["annotations"].items() if _kept_annotation(k)}
    out["metadata"] = meta
    if out.get("kind") == "Pod" and isinstance(out.get("spec"), dict):
        out["spec"] = _redact_pod_spec(out["spec"])
    elif out.get("kind") == "DaemonSet" and isinstance(out.get("spec"), dict):
        template = out["spec"].get("template")
        if isinstance(template, dict):
            template = dict(template)
            tmeta = template.get("metadata")
            if isinstance(tmeta, dict) and isinstance(tmeta.get("annotations"), dict):
                template["metadata"] = {
                    **tmeta,
                    "annotations": {
                        k: v for k, v in tmeta["annotations"].items() if _kept_annotation(k)
                    },
                }
            if isinstance(template.get("spec"), dict):
                template["spec"] = _redact_pod_spec(template["spec"])
            out["spec"] = {**out["spec"], "template": template}
    else:
        return out
    meta.setdefault("annotations", {})
    if isinstance(meta["annotations"], dict):
        meta["annotations"] = {**meta["annotations"], REDACTED_ANNOTATION: "true"}
    return out


def _redact_pod_spec(raw: dict[str, Any]) -> dict[str, Any]:
    """A pod spec (a Pod's, a DaemonSet's template) without volumes, pull secrets and the containers' env and
    commands."""
    spec = {k: v for k, v in raw.items() if k not in _SPEC_DROP}
    for key in ("containers", "initContainers", "ephemeralContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [
                {k: v for k, v in c.items() if k not in _CONTAINER_DROP}
                if isinstance(c, dict)
                else c
                for c in spec[key]
            ]
    return spec


def dump_document(live: LiveCluster, *, redacted: bool = True) -> dict[str, Any]:
    """A `kind: List` that `loader.read_objects()` reads back, objects in a stable order."""
    objs: Iterable[dict[str, Any]] = live.objects
    if redacted:
        objs = (redact(o) for o in objs)
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {},
        "items": list(objs),
    }


def dump_header(live: LiveCluster, host: str, context: str | None) -> list[str]:
    """Comment lines for a YAML dump: where and when it was taken, what was read."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"gangscale dump of {host} (context {context or '-'}) at {now}",
        f"server {live.server.git_version or '?'}; gang APIs read: "
        + (", ".join(r.label for r in live.apis.refs) or "none"),
    ]
    lines += [f"warning: {w}" for w in live.warnings]
    return lines


def render_dump(doc: dict[str, Any], fmt: str, header: list[str] | None = None) -> bytes:
    """JSON, or YAML with the header as comments (`output.render`)."""
    return render(doc, "yaml" if fmt == "yaml" else "json", header=header or []).encode()
