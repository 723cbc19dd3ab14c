"""Gate mode's pod writes (KEP-3521 Pod Scheduling Readiness): one JSON patch per released pod (the gate
removed and, while the stored pod is still gated, its node affinity narrowed), and deleting a released
pod whose one node died, so its owner recreates it.

Gates can only be removed after a pod is created, never added. Failures come back as one sentence,
never raised: a pod deleted meanwhile is done, and a patch built from a stale read (its `test` op
fails) is retried next pass from a fresh one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .client import KubeClient
from .errors import KubeError
from .refs import PODS


class PodGateLifter:
    def __init__(self, client: KubeClient) -> None:
        self.client = client

    def remove(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> str | None:
        """Apply the JSON patch `ops` to the pod; None when done (or the pod is gone), else why not."""
        try:
            self.client.json_patch(PODS.path(namespace, name), ops)
        except KubeError as exc:
            if exc.status == 404:
                return None
            return str(exc)
        return None

    def delete(self, namespace: str, name: str, uid: str) -> str | None:
        """Delete the pod if it is still the one read (`uid` precondition); None when done or already gone."""
        try:
            self.client.delete(
                PODS.path(namespace, name),
                body={"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}},
            )
        except KubeError as exc:
            if exc.status in (404, 409):
                return None  # gone, or replaced by a new pod of the same name: nothing of ours to delete
            return str(exc)
        return None
