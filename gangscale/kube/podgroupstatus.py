"""Writing one condition on a PodGroup's `status` subresource without touching anyone else's.

Invariant: gangscale's writes change only its own condition entry. Where `status.conditions`
is a list-map keyed by `type` (the native scheduling.k8s.io PodGroup, `+listType=map`),
that is a server-side apply under field manager `gangscale` whose body holds that one entry,
with `force=true`: force takes over only the fields in the body, so the scheduler's
conditions (other `type` keys, other managers) are never owned, changed or removed.
Where the list is atomic (a CRD without `x-kubernetes-list-type: map`, such as Volcano's
PodGroup), an apply would own and replace the whole list, so the entry is written with a
JSON patch that adds or replaces only its index, guarded by a `test` of that index's type.
Failures (403, 404, 422, a stale index) come back as one sentence, never raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .client import KubeClient
from .errors import KubeError
from .refs import ResourceRef

FIELD_MANAGER = "gangscale"


def status_path(api: str, plural: str, namespace: str, name: str) -> str:
    """The `status` subresource URL of a namespaced object of `api` ("group/version")."""
    group, _, version = api.rpartition("/")
    return ResourceRef(group, version, plural, "").path(namespace, name) + "/status"


def entry_patch(obj: Mapping[str, Any], cond: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch ops setting only the entry of `cond`'s type in `obj`'s status.conditions."""
    status = obj.get("status")
    if not isinstance(status, Mapping):
        return [{"op": "add", "path": "/status", "value": {"conditions": [dict(cond)]}}]
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return [{"op": "add", "path": "/status/conditions", "value": [dict(cond)]}]
    for i, c in enumerate(conditions):
        if isinstance(c, Mapping) and c.get("type") == cond["type"]:
            return [
                {"op": "test", "path": f"/status/conditions/{i}/type", "value": cond["type"]},
                {"op": "replace", "path": f"/status/conditions/{i}", "value": dict(cond)},
            ]
    return [{"op": "add", "path": "/status/conditions/-", "value": dict(cond)}]


class ConditionWriter:
    """Sets gangscale's condition on PodGroups; `written` counts successful writes."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.written = 0

    def write(self, obj: Mapping[str, Any], cond: Mapping[str, Any], mode: str) -> str | None:
        """Write `cond` on `obj` ("apply" or "patch", see the module doc); None when done, else why not."""
        meta = obj.get("metadata") or {}
        api, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
        path = status_path(
            api, "podgroups", str(meta.get("namespace") or ""), str(meta.get("name") or "")
        )
        try:
            if mode == "apply":
                body = {
                    "apiVersion": api,
                    "kind": kind,
                    "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace")},
                    "status": {"conditions": [dict(cond)]},
                }
                self.client.apply(path, body, field_manager=FIELD_MANAGER, force=True)
            else:
                self.client.json_patch(
                    path, entry_patch(obj, cond), {"fieldManager": FIELD_MANAGER}
                )
        except KubeError as exc:
            return str(exc)
        self.written += 1
        return None
