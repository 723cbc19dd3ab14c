"""Small constructors for the scheduler-model tests: model objects, not Kubernetes JSON."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from gangscale.model import API_NONE, API_PODGROUP_V1ALPHA2, Gang, Placement, Pod, Taint, Toleration
from gangscale.scheduling import SimNode

GI = 2**30
GPU = "nvidia.com/gpu"
GPU_TAINT = Taint(GPU, "true", "NoSchedule")
GPU_TOL = Toleration(GPU, "Exists", "", "NoSchedule")


def node(name: str, cpu: int, mem_gi: int, gpu: int = 0, *, group: str | None = None, kind: str = "new",
         labels: dict | None = None, taints: tuple = ()) -> SimNode:
    alloc = {"cpu": cpu, "memory": mem_gi * GI, "pods": 110}
    if gpu:
        alloc[GPU] = gpu
        taints = taints or (GPU_TAINT,)
    return SimNode(name, {"kubernetes.io/hostname": name, **(labels or {})}, taints, alloc, group or name, kind)


def mkpod(name: str, cpu: int, mem_gi: int, gpu: int = 0, *, ns: str = "team-a", created: str = "2025-01-01T00:00:00Z",
          priority: int = 0, selector: tuple = (), scheduler: str = "default-scheduler") -> Pod:
    req = {"cpu": cpu, "memory": mem_gi * GI, "pods": 1}
    if gpu:
        req[GPU] = gpu
    tol = (GPU_TOL,) if gpu else ()
    return Pod(ns, name, f"uid-{name}", req, Placement(node_selector=selector, tolerations=tol), priority=priority,
               created=created, scheduler_name=scheduler)


def gang(name: str, pods: list[Pod], *, min_count: int | None = None, api: str = API_PODGROUP_V1ALPHA2,
         created: str = "2025-01-01T00:00:00Z", ns: str = "team-a") -> Gang:
    policy: Literal["gang", "basic"] = "gang" if min_count is not None else "basic"
    members = tuple(replace(p, group_key=(ns, name), group_api=api) for p in pods)
    return Gang(ns, name, api, policy, min_count or 1, None, pending=members, created=created)


def lone(p: Pod) -> Gang:
    return Gang(p.namespace, p.name, API_NONE, "basic", 1, None, pending=(p,), created=p.created)
