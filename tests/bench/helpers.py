"""Tiny hand-checkable clusters for the baseline tests, written as real cluster/catalog files."""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from benchmarks.world import World, load_world

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOL = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def group(name: str, itype: str, max_size: int, *, zone: str = "us-east-1a", gpu: bool = False,
          current: int = 0) -> dict:
    g = {"name": name, "instanceType": itype, "zone": zone, "minSize": 0, "maxSize": max_size, "currentSize": current}
    if gpu:
        g["taints"] = [dict(GPU_TAINT)]
    return g


def podgroup(name: str, min_count: int, ns: str = "default", created: str = "2026-03-02T08:00:00Z") -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}


def pod(name: str, cpu: str, mem: str, *, gpus: int = 0, group: str | None = None, ns: str = "default",
        selector: dict | None = None, created: str = "2026-03-02T08:00:00Z") -> dict:
    req = {"cpu": cpu, "memory": mem}
    if gpus:
        req["nvidia.com/gpu"] = str(gpus)
    spec: dict = {"containers": [{"name": "c", "resources": {"requests": req, "limits": dict(req)}}]}
    if gpus:
        spec["tolerations"] = GPU_TOL
    if selector:
        spec["nodeSelector"] = selector
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "uid": name,
                                                            "creationTimestamp": created},
            "spec": spec, "status": {"phase": "Pending"}}


def write(tmp: Path, objects: list[dict], groups: list[dict]) -> tuple[Path, Path]:
    cluster = tmp / "cluster.json"
    catalog = tmp / "nodegroups.yaml"
    cluster.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    catalog.write_text(yaml.safe_dump({"nodeGroups": groups}))
    return cluster, catalog


def world(tmp: Path, objects: list[dict], groups: list[dict]) -> World:
    return load_world(*write(tmp, objects, groups))
