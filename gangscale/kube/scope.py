"""What `-n NAMESPACE` keeps: that namespace's objects, and capacity used elsewhere."""

from __future__ import annotations

from typing import Any


def as_dict(raw: Any) -> dict[str, Any]:
    """`raw` when it is a mapping, else an empty one: malformed fields read as absent."""
    return raw if isinstance(raw, dict) else {}


def in_scope(obj: dict[str, Any], namespace: str | None) -> bool:
    """Objects of `namespace`, cluster-scoped objects, pods bound to a node anywhere, and every DaemonSet.

    Bound pods of other namespaces still use node capacity; without them the
    planner would see free room that is not there. Their gangs are not listed
    (their groups are not read), so nothing is planned for them. DaemonSets of
    every namespace run on the new nodes a plan buys (gangscale.daemonsets).
    """
    if namespace is None:
        return True
    meta = as_dict(obj.get("metadata"))
    ns = meta.get("namespace")
    if not ns or ns == namespace or obj.get("kind") == "DaemonSet":
        return True
    if obj.get("kind") != "Pod":
        return False
    spec, status = as_dict(obj.get("spec")), as_dict(obj.get("status"))
    return bool(spec.get("nodeName")) and status.get("phase") not in ("Succeeded", "Failed")
