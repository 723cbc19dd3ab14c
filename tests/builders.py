"""Small constructors for Kubernetes objects and catalogs used across the planner tests."""

from __future__ import annotations

from typing import Any

from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.planner import make_plan
from gangscale.plan import Plan
from gangscale.snapshot import ClusterSnapshot, build_snapshot
from gangscale.solver.params import SolveOptions

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}
GPU_TOL = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def pod(name: str, ns: str = "default", *, cpu: str = "1", mem: str = "1Gi", gpu: int = 0, node: str | None = None,
        group: str | None = None, workload: dict | None = None, cosched: str | None = None, volcano: str | None = None,
        selector: dict | None = None, tolerations: list | None = None, affinity: list | None = None,
        priority: int | None = None, phase: str | None = None, extra: dict | None = None, **spec_extra: Any) -> dict:
    req: dict[str, Any] = {"cpu": cpu, "memory": mem}
    if gpu:
        req["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": req}}]}
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    if workload:
        spec["workloadRef"] = workload
    if cosched:
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": cosched}
    if volcano:
        meta["annotations"] = {"scheduling.k8s.io/group-name": volcano}
    if selector:
        spec["nodeSelector"] = selector
    if tolerations is not None:
        spec["tolerations"] = tolerations
    elif gpu:
        spec["tolerations"] = [GPU_TOL]
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": term} for term in affinity]}}}
    if priority is not None:
        spec["priority"] = priority
    if node:
        spec["nodeName"] = node
    spec.update(spec_extra)
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
           "status": {"phase": phase or ("Running" if node else "Pending")}}
    if extra:
        obj.update(extra)
    return obj


def podgroup(name: str, ns: str = "default", *, min_count: int | None = 1, policy: str = "gang",
             version: str = "v1alpha2", topology: list[str] | None = None, priority: int | None = None) -> dict:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}} if policy == "gang" else {"basic": {}}}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": k} for k in topology]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": f"scheduling.k8s.io/{version}", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}


def node(name: str, *, cpu: str = "8", mem: str = "32Gi", pods: str = "110", gpu: int = 0, group: str | None = None,
         labels: dict | None = None, taints: list | None = None, ready: bool = True, unschedulable: bool = False) -> dict:
    alloc: dict[str, Any] = {"cpu": cpu, "memory": mem, "pods": pods}
    if gpu:
        alloc["nvidia.com/gpu"] = str(gpu)
    lab = dict(labels or {})
    if group:
        lab["gangscale.io/node-group"] = group
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": lab}, "spec": spec,
            "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def group(name: str, *, cpu: str = "8", mem: str = "32Gi", pods: str = "110", gpu: int = 0, price: float = 1.0,
          max_size: int = 10, current: int = 0, labels: dict | None = None, taints: list | None = None,
          itype: str = "custom.large") -> dict:
    alloc: dict[str, Any] = {"cpu": cpu, "memory": mem, "pods": pods}
    if gpu:
        alloc["nvidia.com/gpu"] = str(gpu)
    return {"name": name, "instanceType": itype, "pricePerHour": price, "minSize": 0, "maxSize": max_size,
            "currentSize": current, "allocatable": alloc, "labels": labels or {}, "taints": taints or []}


def snapshot(objects: list[dict], catalog: list[dict]) -> ClusterSnapshot:
    groups, warnings = parse_catalog(catalog)
    return build_snapshot(ingest(objects), groups, warnings)


def plan_for(objects: list[dict], catalog: list[dict], time_limit: float = 10.0, scheduler=None) -> Plan:
    """`scheduler`: a `gangscale.realize.SchedulerModel` (None: observe mode with the upstream defaults)."""
    return make_plan(snapshot(objects, catalog), SolveOptions(time_limit=time_limit), scheduler)


def plan_when_cp_sat_gets_no_time(monkeypatch, objects: list[dict], catalog: list[dict]) -> Plan:
    """The default budget's plan (solver alone) as on a loaded machine: the budget is gone after the greedy, so
    CP-SAT must not run (the test fails if it does) and the greedy's repaired plan is what comes back."""
    import pytest

    from gangscale import planner
    from gangscale.solver import cpsat

    monkeypatch.setattr(cpsat, "solve_model", lambda *a, **k: pytest.fail("no time was left for CP-SAT"))
    monkeypatch.setattr(planner, "FINISH_RESERVE", 50.0)
    return make_plan(snapshot(objects, catalog), SolveOptions(), planner.OFF)


def gang(plan: Plan, name: str, ns: str = "default"):
    for g in plan.gangs:
        if g.name == name and g.namespace == ns:
            return g
    raise KeyError(f"{ns}/{name} not in plan: {[(g.namespace, g.name) for g in plan.gangs]}")


# A KubeSchedulerConfiguration of the profile docs/scheduling.md recommends for GPU batch clusters.
MOST_GPU = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
        resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}, {name: nvidia.com/gpu, weight: 5}]
"""
