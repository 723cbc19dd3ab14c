"""Cluster files (kubectl get -o json shape) for the execute tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def podgroup(name: str, min_count: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def pod(name: str, group: str | None, *, cpu: str = "8", mem: str = "32Gi", gpu: int = 0,
        node: str | None = None, tolerate_gpu: bool = True) -> dict[str, Any]:
    req: dict[str, Any] = {"cpu": cpu, "memory": mem}
    if gpu:
        req["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": req}}],
                            "tolerations": [GPU_TOLERATION] if tolerate_gpu else []}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


def node(name: str, provider_id: str, *, gpu: int = 4, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}},
            "spec": {"providerID": provider_id,
                     "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "47", "memory": "180Gi", "pods": "700", "nvidia.com/gpu": str(gpu)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def gpu_gang(name: str, members: int, gpus: int = 4) -> list[dict[str, Any]]:
    return [podgroup(name, members)] + [pod(f"{name}-{i}", name, gpu=gpus) for i in range(members)]


def write(path: Path, objects: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return str(path)
