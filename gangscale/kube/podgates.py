"""Removing a scheduling gate from a live pod: one JSON patch per pod (KEP-3521 Pod Scheduling Readiness).

Gates can only be removed after a pod is created, never added, so this is the one pod write
gangscale makes. Failures come back as one sentence, never raised: a pod deleted meanwhile is
done, and a patch built from a stale read (its `test` op fails) is retried next pass from a fresh one.
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
