"""The scale-down's node writes: the disruption taint on, the taint off, and a fresh read of a node's pods.

Each taint write is one JSON patch guarded by a `test` of the node's resourceVersion (read just before), so a
taint another writer added meanwhile (the node lifecycle controller's `node.kubernetes.io/unreachable`) is never
lost: a conflict is read again and retried once, as Cluster Autoscaler retries its taint update on a conflict
(cluster-autoscaler/utils/taints/taints.go, `addTaintToSpec` under `MarkToBeDeleted`). Failures come back as one
sentence, never raised.
"""

from __future__ import annotations

from typing import Any

from .client import KubeClient
from .errors import KubeError
from .refs import NODES, PODS

ATTEMPTS = 2  # a resourceVersion conflict is read again once


class NodeTainter:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def set_taint(self, node: str, taint: dict[str, str], present: bool) -> str | None:
        """Add (`present`) or remove the taint with `taint["key"]` on the node; None when done or already so (a node
        that is gone is done), else why not."""
        err = ""
        for _ in range(ATTEMPTS):
            try:
                obj = self.client.get(NODES.path(name=node))
            except KubeError as exc:
                return None if exc.status == 404 else str(exc)
            taints = [t for t in (obj.get("spec") or {}).get("taints") or [] if isinstance(t, dict)]
            kept = [t for t in taints if t.get("key") != taint["key"]]
            want = kept + [dict(taint)] if present else kept
            if want == taints:
                return None
            ops = [
                {
                    "op": "test",
                    "path": "/metadata/resourceVersion",
                    "value": obj["metadata"]["resourceVersion"],
                },
                {"op": "add", "path": "/spec/taints", "value": want},
            ]
            try:
                self.client.json_patch(NODES.path(name=node), ops)
                return None
            except KubeError as exc:
                if exc.status == 404:
                    return None
                err = str(exc)
                if exc.status not in (409, 422):  # 422: the resourceVersion test failed; read again
                    return err
        return err

    def pods_on(self, node: str) -> list[dict[str, Any]] | None:
        """The pods bound to `node`, read now from the API server (fieldSelector spec.nodeName); None when unread."""
        try:
            out = self.client.get(PODS.path(), {"fieldSelector": f"spec.nodeName={node}"})
        except KubeError:
            return None
        items = out.get("items")
        return [p for p in items if isinstance(p, dict)] if isinstance(items, list) else None
