"""Seeded synthetic backlogs, written as the cluster and catalog files `gangscale plan` reads.

A backlog is a `kubectl get nodes,pods,podgroups -A -o json` style `List`
(existing nodes with bound pods, pending pods, their PodGroups in three API
flavours) plus a node-group catalog over real AWS instance types in three
zones. Allocatable and prices come from `config/aws-instance-types.yaml`
through gangscale's own catalog code, so the benchmark prices nodes exactly
as the planner does.

Families (the `family` of a `BacklogSpec`):

- ``llm``: LLM training gangs of 2-64 workers with 8 GPUs each (H100, A100 or
  "any 8-GPU node"), half of them with a CPU launcher pod in the same gang,
  some bound to one zone; GPU node groups are tainted.
- ``gpu-mix``: several gangs per GPU product (H100, A100, L4, A10G, T4),
  chosen by node selector, with 1, 4 or 8 GPUs per pod.
- ``cpu-mpi``: CPU MPI / Spark gangs of 10-500 small pods; Spark gangs are
  elastic (minCount below their size).
- ``mixed``: gang and basic PodGroups, ungrouped pods and a few GPU gangs.
- ``busy``: ``mixed`` on a cluster of hundreds to thousands of existing nodes
  whose free capacity is fragmented by running pods, with nodes upcoming.
- ``elastic``: `gangs` gang PodGroups of 1-16 pods, 80% elastic (minCount
  below the size), two priority levels, over eight pod shapes (four CPU, and
  1-GPU L4, 4-GPU A10G, 8-GPU A100 and H100 pods chosen by product selector),
  the rest of the pods in basic groups; existing nodes 30-90% used and tight
  node-group maxSize (a backlog where the first objective, gangs, is hard).

Everything is drawn from `random.Random(seed)`: the same spec writes the same
bytes.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import orjson
import yaml

from gangscale.instance_types import load_instance_types
from gangscale.output import render

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
ZONE_KEY = "topology.kubernetes.io/zone"
PRODUCT_KEY = "nvidia.com/gpu.product"
GPU = "nvidia.com/gpu"
NODE_GROUP_LABEL = "gangscale.io/node-group"
GPU_TAINT = {"key": GPU, "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
EPOCH = "2026-03-02T08:00:00Z"
_EPOCH_DT = datetime(2026, 3, 2, 8, tzinfo=timezone.utc)

H100 = "NVIDIA-H100-80GB-HBM3"
A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
L4 = "NVIDIA-L4"
A10G = "NVIDIA-A10G"
T4 = "NVIDIA-T4"

API_NATIVE = "scheduling.k8s.io/v1alpha2"
API_COSCHED = "scheduling.x-k8s.io/v1alpha1"
API_VOLCANO = "scheduling.volcano.sh/v1beta1"

FAMILIES = ("llm", "gpu-mix", "cpu-mpi", "mixed", "busy", "elastic")

# Instance types per role, most important first (the catalog takes a prefix).
TRAIN_TYPES = ["p5.48xlarge", "p4d.24xlarge", "p4de.24xlarge"]
INFER_TYPES = [
    "g6.xlarge",
    "g5.xlarge",
    "g6.12xlarge",
    "g5.12xlarge",
    "g4dn.xlarge",
    "g6.48xlarge",
    "g5.48xlarge",
    "g4dn.12xlarge",
]
CPU_TYPES = [
    "m5.2xlarge",
    "c5.4xlarge",
    "r5.2xlarge",
    "m5.8xlarge",
    "m6i.4xlarge",
    "c5.9xlarge",
    "r5.4xlarge",
    "m5.xlarge",
    "m7i.8xlarge",
    "c6i.8xlarge",
    "m5.16xlarge",
    "r5.8xlarge",
    "c5.18xlarge",
    "m5.4xlarge",
    "m6i.16xlarge",
    "c5.2xlarge",
    "r6i.16xlarge",
    "m5.24xlarge",
    "c6i.32xlarge",
    "m7i.2xlarge",
    "m5.12xlarge",
    "r5.xlarge",
    "c5.xlarge",
    "m6i.xlarge",
]


@dataclass(frozen=True, slots=True)
class BacklogSpec:
    """What to generate. Sizes are targets: the pending pod count lands within a gang of `pods`."""

    name: str
    family: str
    pods: int  # pending pods
    node_groups: int  # catalog entries (5..60), spread over 3 zones
    nodes: int = 0  # existing nodes
    gangs: int | None = None  # PodGroups (gang + basic); None: the family's natural sizes
    supply: float = 0.8  # node-group headroom relative to the backlog's demand (<1: scarce)
    seed: int = 0
    # the EKS GPU cluster's DaemonSets (`daemonsets()`), and their pods bound on the existing nodes where they fit;
    # every other object is the same with or without them (no random draw depends on it)
    daemonsets: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(slots=True)
class PodT:
    """A pod template: requests as Kubernetes quantities plus where it may run."""

    cpu: str
    memory: str
    gpus: int = 0
    selector: dict[str, str] = field(default_factory=dict)
    products: tuple[str, ...] = ()  # required node affinity: gpu.product In (...)
    gpu_toleration: bool = False

    def pools(self) -> tuple[str, ...]:
        """Capacity pools whose demand this pod adds to (a GPU product, or "cpu")."""
        if not self.gpus:
            return ("cpu",)
        if self.selector.get(PRODUCT_KEY):
            return (self.selector[PRODUCT_KEY],)
        if self.products:
            return self.products
        return (A100_40, A100_80, H100)


@dataclass(slots=True)
class GangPlan:
    name: str
    namespace: str
    kind: str  # native | cosched | volcano | basic | none
    roles: list[tuple[str, int, PodT]]
    min_count: int
    topology: bool = False
    priority: int = 0

    @property
    def size(self) -> int:
        return sum(n for _, n, _ in self.roles)


# ------------------------------------------------------------------ templates


def _h100() -> PodT:
    return PodT("176", "1800Gi", 8, {PRODUCT_KEY: H100}, gpu_toleration=True)


def _a100_80() -> PodT:
    return PodT("90", "1000Gi", 8, {PRODUCT_KEY: A100_80}, gpu_toleration=True)


def _a100_any() -> PodT:
    return PodT("90", "1000Gi", 8, products=(A100_40, A100_80), gpu_toleration=True)


def _gpu8_any() -> PodT:
    return PodT("88", "900Gi", 8, gpu_toleration=True)


def _launcher() -> PodT:
    return PodT("2", "4Gi")


def _cpu_pod(rng: random.Random, small: bool = True) -> PodT:
    cpus = ["250m", "500m", "1", "2"] if small else ["1", "2", "4", "8"]
    cpu = rng.choice(cpus)
    cores = int(cpu[:-1]) / 1000 if cpu.endswith("m") else int(cpu)
    ratio = rng.choice([1, 2, 4, 4, 8])
    mem_mi = max(512, int(cores * ratio * 1024))
    return PodT(cpu, f"{mem_mi}Mi" if mem_mi % 1024 else f"{mem_mi // 1024}Gi")


def _infer_pod(rng: random.Random, product: str) -> PodT:
    gpus = rng.choice([1, 1, 1, 4]) if product != T4 else 1
    if gpus == 1:
        return PodT("3", "12Gi", 1, {PRODUCT_KEY: product}, gpu_toleration=True)
    return PodT("40", "150Gi", 4, {PRODUCT_KEY: product}, gpu_toleration=True)


# ------------------------------------------------------------------- families

# the eight shapes of the `elastic` family: (template, weight); CPU first, then 1-, 4- and 8-GPU pods
_ELASTIC_SHAPES = [
    (PodT("1", "2Gi"), 20),
    (PodT("2", "8Gi"), 20),
    (PodT("8", "32Gi"), 12),
    (PodT("4", "32Gi"), 10),
    (PodT("3", "12Gi", 1, {PRODUCT_KEY: L4}, gpu_toleration=True), 16),
    (PodT("40", "150Gi", 4, {PRODUCT_KEY: A10G}, gpu_toleration=True), 10),
    (PodT("90", "1000Gi", 8, {PRODUCT_KEY: A100_40}, gpu_toleration=True), 7),
    (PodT("176", "1800Gi", 8, {PRODUCT_KEY: H100}, gpu_toleration=True), 5),
]


def _elastic_gang(rng: random.Random, i: int) -> GangPlan:
    """1-16 pods of one shape; 80% elastic (minCount below the size); a fifth at a higher priority."""
    tmpl = rng.choices([t for t, _ in _ELASTIC_SHAPES], [w for _, w in _ELASTIC_SHAPES])[0]
    hi = 16 if tmpl.gpus < 4 else (8 if tmpl.gpus == 4 else 4)
    n = rng.randint(1, hi)
    if n > 1 and rng.random() < 0.8:
        min_count = rng.randint(max(1, n // 2), n - 1)
    else:
        min_count = n
    api = _gang_api(rng)
    prio = 1000 if rng.random() < 0.2 else 0
    return GangPlan(
        f"elastic-{i:05d}",
        rng.choice(["train", "sim", "render", "etl"]),
        api,
        [("worker", n, tmpl)],
        min_count,
        priority=prio,
    )


_LLM_SIZES = ([2, 4, 8, 16, 32, 64], [25, 25, 20, 15, 10, 5])


def _gang_api(rng: random.Random) -> str:
    return rng.choices(["native", "cosched", "volcano"], [6, 3, 1])[0]


def _llm_gang(rng: random.Random, i: int, size_hint: float | None) -> GangPlan:
    if size_hint:
        workers = max(2, min(64, int(round(rng.lognormvariate(math.log(size_hint), 0.5)))))
    else:
        workers = rng.choices(*_LLM_SIZES)[0]
    tmpl = rng.choices([_h100, _a100_80, _a100_any, _gpu8_any], [3, 2, 2, 3])[0]()
    roles: list[tuple[str, int, PodT]] = [("worker", workers, tmpl)]
    if rng.random() < 0.5:
        roles.insert(0, ("launcher", 1, _launcher()))
    api = _gang_api(rng)
    topo = api == "native" and rng.random() < 0.3
    size = sum(n for _, n, _ in roles)
    return GangPlan(
        f"train-{i:05d}", rng.choice(["ml-research", "ml-prod", "llm"]), api, roles, size, topo
    )


def _infer_gang(rng: random.Random, i: int, product: str | None = None) -> GangPlan:
    product = product or rng.choice([H100, A100_40, L4, L4, A10G, A10G, T4])
    if product in (H100, A100_40):
        tmpl = (
            _h100()
            if product == H100
            else PodT("90", "1000Gi", 8, {PRODUCT_KEY: A100_40}, gpu_toleration=True)
        )
        n = rng.choice([1, 2, 2, 4])
    else:
        tmpl = _infer_pod(rng, product)
        n = rng.choice([2, 4, 4, 8, 16])
    api = _gang_api(rng)
    return GangPlan(
        f"gpu-{i:05d}",
        rng.choice(["inference", "vision", "speech"]),
        api,
        [("worker", n, tmpl)],
        n,
        api == "native" and rng.random() < 0.2,
    )


def _cpu_gang(rng: random.Random, i: int, lo: int, hi: int, size_hint: float | None) -> GangPlan:
    if size_hint:
        n = int(round(rng.lognormvariate(math.log(size_hint), 0.6)))
    else:
        n = int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))
    n = max(lo, min(hi, n))
    api = _gang_api(rng)
    ns = rng.choice(["hpc", "analytics", "etl", "science"])
    if rng.random() < 0.4:  # Spark: a driver and elastic executors
        execs = max(1, n - 1)
        tmpl = _cpu_pod(rng, small=False)
        min_count = 1 + max(1, int(execs * rng.choice([0.5, 0.75, 1.0])))
        return GangPlan(
            f"spark-{i:05d}",
            ns,
            api,
            [("driver", 1, PodT("1", "2Gi")), ("exec", execs, tmpl)],
            min_count,
        )
    tmpl = _cpu_pod(rng, small=True)
    return GangPlan(
        f"mpi-{i:05d}", ns, api, [("rank", n, tmpl)], n, api == "native" and rng.random() < 0.15
    )


def _basic_group(rng: random.Random, i: int, size_hint: float | None) -> GangPlan:
    n = max(1, min(200, int(round(rng.lognormvariate(math.log(size_hint or 12), 0.7)))))
    return GangPlan(
        f"batch-{i:05d}",
        rng.choice(["web", "batch", "etl"]),
        "basic",
        [("task", n, _cpu_pod(rng, small=rng.random() < 0.7))],
        1,
    )


def _ungrouped(rng: random.Random, i: int) -> GangPlan:
    return GangPlan(
        f"job-{i:06d}",
        rng.choice(["web", "batch", "default"]),
        "none",
        [("pod", 1, _cpu_pod(rng))],
        1,
    )


def _plans(spec: BacklogSpec, rng: random.Random, scale: float = 1.0) -> list[GangPlan]:
    target, fam = spec.pods, spec.family
    mean = spec.pods / spec.gangs * scale if spec.gangs else None
    plans: list[GangPlan] = []
    total = 0

    def add(p: GangPlan) -> None:
        nonlocal total
        plans.append(p)
        total += p.size

    i = 0
    if fam == "llm":
        while total < target:
            add(_llm_gang(rng, i, mean))
            i += 1
    elif fam == "gpu-mix":
        products = [H100, A100_40, L4, A10G, T4]
        while total < target:
            add(
                _infer_gang(rng, i, products[i % len(products)])
                if rng.random() < 0.8
                else _llm_gang(rng, i, None)
            )
            i += 1
    elif fam == "cpu-mpi":
        while total < target:
            add(_cpu_gang(rng, i, 10, 500, mean))
            i += 1
    elif fam == "elastic":
        for i in range(spec.gangs or 500):
            add(_elastic_gang(rng, i))
        while total < target:  # the rest: basic groups of CPU pods
            add(_basic_group(rng, i, 24))
            i += 1
    else:  # mixed, busy
        kinds = ["cpu", "basic", "none", "gpu", "llm"]
        weights = [50, 20, 12, 10, 8]
        while total < target:
            k = rng.choices(kinds, weights)[0]
            if k == "cpu":
                add(_cpu_gang(rng, i, 4, 500, mean))
            elif k == "basic":
                add(_basic_group(rng, i, mean))
            elif k == "none":
                for _ in range(rng.randint(1, 8)):
                    add(_ungrouped(rng, i))
                    i += 1
            elif k == "gpu":
                add(_infer_gang(rng, i))
            else:
                add(_llm_gang(rng, i, min(mean or 8, 16)))
            i += 1
    return plans


def _calibrated_plans(spec: BacklogSpec, rng: random.Random) -> list[GangPlan]:
    """Plans whose gang-policy PodGroup count is close to `spec.gangs` (when set)."""
    state = rng.getstate()
    plans = _plans(spec, rng)
    if not spec.gangs or spec.family == "elastic":
        return plans
    scale = 1.0
    for _ in range(6):
        got = sum(1 for p in plans if p.kind in ("native", "cosched", "volcano"))
        if abs(got - spec.gangs) <= max(2, spec.gangs // 50):
            break
        scale *= max(0.25, min(4.0, got / spec.gangs))
        rng.setstate(state)
        plans = _plans(spec, rng, scale)
    return plans


# -------------------------------------------------------------------- catalog


def _catalog_types(spec: BacklogSpec) -> list[str]:
    fam = spec.family
    n_types = max(2, math.ceil(spec.node_groups / len(ZONES)))
    if fam == "llm":
        order = [TRAIN_TYPES[0], CPU_TYPES[0], *TRAIN_TYPES[1:], *CPU_TYPES[1:]]
    elif fam == "gpu-mix":
        order = [
            TRAIN_TYPES[0],
            CPU_TYPES[0],
            "g6.xlarge",
            TRAIN_TYPES[1],
            "g5.xlarge",
            "g4dn.xlarge",
            "g6.12xlarge",
            "g5.12xlarge",
            TRAIN_TYPES[2],
            "g6.48xlarge",
            "g5.48xlarge",
            "g4dn.12xlarge",
            *CPU_TYPES[1:],
        ]
    elif fam == "cpu-mpi":
        order = list(CPU_TYPES)
    elif fam == "elastic":
        order = [
            CPU_TYPES[0],
            "g6.xlarge",
            "g5.12xlarge",
            TRAIN_TYPES[1],
            TRAIN_TYPES[0],
            CPU_TYPES[1],
            CPU_TYPES[2],
            "g6.12xlarge",
            CPU_TYPES[3],
            "g5.xlarge",
            *CPU_TYPES[4:],
        ]
    else:
        order = [
            CPU_TYPES[0],
            CPU_TYPES[1],
            TRAIN_TYPES[1],
            CPU_TYPES[2],
            "g6.xlarge",
            TRAIN_TYPES[0],
            "g5.xlarge",
            CPU_TYPES[3],
            "g4dn.xlarge",
            "g6.12xlarge",
            CPU_TYPES[4],
            TRAIN_TYPES[2],
            "g5.12xlarge",
            *CPU_TYPES[5:],
            "g6.48xlarge",
            "g5.48xlarge",
            "g4dn.12xlarge",
        ]
    seen: list[str] = []
    for t in order:
        if t not in seen:
            seen.append(t)
    return seen[:n_types]


@dataclass(slots=True)
class _Group:
    name: str
    itype: str
    zone: str
    product: str  # "" for CPU groups
    gpus: int
    cpu_m: int
    mem: int
    max_pods: int
    existing: int = 0
    upcoming: int = 0
    headroom: int = 0


def _groups(spec: BacklogSpec) -> list[_Group]:
    table = load_instance_types()
    out = []
    for t in _catalog_types(spec):
        it = table[t]
        alloc = it.allocatable()
        for z in ZONES:
            out.append(
                _Group(
                    f"{t.replace('.', '-')}-{z[-2:]}",
                    t,
                    z,
                    it.gpu_product,
                    it.gpus,
                    alloc["cpu"],
                    alloc["memory"],
                    alloc["pods"],
                )
            )
    return out[: spec.node_groups]


def _to_units(q: str) -> float:
    """Cores or bytes of the few quantity forms the generator writes."""
    for suf, mul in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10), ("m", 1e-3)):
        if q.endswith(suf):
            return float(q[: -len(suf)]) * mul
    return float(q)


def _set_headroom(
    spec: BacklogSpec, rng: random.Random, groups: list[_Group], plans: list[GangPlan]
) -> None:
    """maxSize so that each capacity pool offers `supply` x the backlog's demand on it."""
    demand: dict[str, float] = {}
    for p in plans:
        for _, n, t in p.roles:
            pools = t.pools()
            for pool in pools:
                units = t.gpus if t.gpus else _to_units(t.cpu) * 1000
                demand[pool] = demand.get(pool, 0.0) + n * units / len(pools)
    by_pool: dict[str, list[_Group]] = {}
    for g in groups:
        by_pool.setdefault(g.product or "cpu", []).append(g)
    for pool, gs in by_pool.items():
        weights = [rng.uniform(0.3, 1.0) for _ in gs]
        wsum = sum(weights)
        for g, w in zip(gs, weights, strict=True):
            unit = g.gpus if g.product else g.cpu_m
            need = demand.get(pool, 0.0) * spec.supply * w / wsum / unit
            g.headroom = max(1 if demand.get(pool) else 0, math.ceil(need))


# ------------------------------------------------------------------- objects


class _Ids:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))


def _ts(seconds: int) -> str:
    return (_EPOCH_DT + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _quantity_map(t: PodT) -> dict[str, str]:
    out = {"cpu": t.cpu, "memory": t.memory}
    if t.gpus:
        out[GPU] = str(t.gpus)
    return out


def _pod(
    name: str,
    ns: str,
    uid: str,
    created: str,
    t: PodT,
    role: str,
    *,
    link: tuple[str, str] | None,
    node: str | None = None,
    priority: int = 0,
) -> dict[str, Any]:
    requests = _quantity_map(t)
    limits = {"memory": t.memory}
    if t.gpus:
        limits[GPU] = str(t.gpus)
    labels = {"app.kubernetes.io/component": role}
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": uid,
        "creationTimestamp": created,
        "labels": labels,
    }
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler",
        "priority": priority,
        "restartPolicy": "Never" if link else "Always",
        "containers": [
            {
                "name": role,
                "image": f"registry.example.com/{role}:1.0",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    if t.selector:
        spec["nodeSelector"] = dict(t.selector)
    if t.products:
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": PRODUCT_KEY, "operator": "In", "values": list(t.products)}
                            ]
                        }
                    ]
                }
            }
        }
    if t.gpu_toleration:
        spec["tolerations"] = [dict(GPU_TOLERATION)]
    if link:
        kind, group = link
        if kind in ("native", "basic"):
            spec["schedulingGroup"] = {"podGroupName": group}
        elif kind == "cosched":
            labels["scheduling.x-k8s.io/pod-group"] = group
        elif kind == "volcano":
            meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    else:
        status = {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/0 nodes are available",
                }
            ],
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _podgroup(p: GangPlan, uid: str, created: str) -> dict[str, Any] | None:
    meta = {"name": p.name, "namespace": p.namespace, "uid": uid, "creationTimestamp": created}
    if p.kind in ("native", "basic"):
        policy = {"basic": {}} if p.kind == "basic" else {"gang": {"minCount": p.min_count}}
        spec: dict[str, Any] = {"schedulingPolicy": policy}
        if p.topology:
            spec["schedulingConstraints"] = {"topology": [{"key": ZONE_KEY}]}
        return {"apiVersion": API_NATIVE, "kind": "PodGroup", "metadata": meta, "spec": spec}
    if p.kind == "cosched":
        return {
            "apiVersion": API_COSCHED,
            "kind": "PodGroup",
            "metadata": meta,
            "spec": {"minMember": p.min_count},
        }
    if p.kind == "volcano":
        return {
            "apiVersion": API_VOLCANO,
            "kind": "PodGroup",
            "metadata": meta,
            "spec": {"minMember": p.min_count, "queue": "default"},
        }
    return None


def _cores(millis: int) -> str:
    return f"{millis}m" if millis % 1000 else str(millis // 1000)


def _node(
    name: str,
    g: _Group,
    labels: dict[str, str],
    taints: list[dict],
    alloc: dict[str, str],
    ids: _Ids,
    ready: bool,
    cordoned: bool,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"providerID": f"aws:///{g.zone}/i-{ids.uid().replace('-', '')[:17]}"}
    if taints:
        spec["taints"] = taints
    if cordoned:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {**labels, "kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "allocatable": alloc,
            "capacity": alloc,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def _existing_nodes(
    spec: BacklogSpec, rng: random.Random, ids: _Ids, groups: list[_Group]
) -> tuple[list, list]:
    """Nodes of the catalog's groups, each partly filled by running pods (fragmented free capacity)."""
    nodes: list[dict] = []
    pods: list[dict] = []
    if not spec.nodes:
        return nodes, pods
    table = load_instance_types()
    weights = [0.25 if g.product else 1.0 for g in groups]
    counts = [0] * len(groups)
    for _ in range(spec.nodes):
        counts[rng.choices(range(len(groups)), weights)[0]] += 1
    n = 0
    for g, cnt in zip(groups, counts, strict=True):
        it = table[g.itype]
        labels = {
            **it.labels(),
            ZONE_KEY: g.zone,
            NODE_GROUP_LABEL: g.name,
            "topology.kubernetes.io/region": "us-east-1",
        }
        taints = [dict(GPU_TAINT)] if g.product else []
        alloc = {"cpu": _cores(g.cpu_m), "memory": f"{g.mem // 1024}Ki", "pods": str(g.max_pods)}
        if g.gpus:
            alloc[GPU] = str(g.gpus)
        g.existing = cnt
        for _ in range(cnt):
            n += 1
            name = f"ip-10-{n // 65025 % 255}-{n // 255 % 255}-{n % 255 + 1}.ec2.internal"
            ready = rng.random() > 0.005
            cordoned = rng.random() < 0.005
            nodes.append(_node(name, g, labels, taints, alloc, ids, ready, cordoned))
            # running pods: 1-3 per node using 35-100% of CPU and 30-100% of memory
            k = rng.randint(1, 3)
            lo, hi = (0.3, 0.9) if spec.family == "elastic" else (0.35, 1.0)  # elastic: 30-90% used
            cpu_left = int(g.cpu_m * rng.uniform(lo, hi))
            mem_left = int(g.mem * rng.uniform(0.3, hi))
            gpu_left = rng.choice([0, g.gpus // 2, g.gpus, g.gpus]) if g.gpus else 0
            used_cpu, used_mem = cpu_left, mem_left
            for j in range(k):
                share = 1.0 / (k - j)
                c = max(10, int(cpu_left * share) // 10 * 10)
                m = max(2**20, int(mem_left * share) // 2**20 * 2**20)
                gp = gpu_left if j == k - 1 else 0
                cpu_left -= c
                mem_left -= m
                t = PodT(
                    _cores(c), f"{m // 2**20}Mi", gp, gpu_toleration=bool(gp) or bool(g.product)
                )
                pods.append(
                    _pod(
                        f"svc-{n}-{j}",
                        rng.choice(["prod", "staging", "kube-system"]),
                        ids.uid(),
                        EPOCH,
                        t,
                        "svc",
                        link=None,
                        node=name,
                    )
                )
            if spec.daemonsets:
                pods += _daemon_pods(name, g, g.cpu_m - used_cpu, g.mem - used_mem)
        if cnt and spec.family == "busy" and rng.random() < 0.2:
            g.upcoming = rng.randint(1, 2)
    return nodes, pods


# ----------------------------------------------------------------- DaemonSets

SYSTEM_NODE_CRITICAL = 2000001000  # the priority of PriorityClass system-node-critical
# name, namespace, containers (name, cpu, memory), init containers, hostNetwork, GPU nodes only. Requests as the EKS
# add-ons and the charts set them: kube-proxy (EKS add-on: 100m cpu), the VPC CNI aws-node (25m for aws-node and for
# the network-policy agent, 25m for its init container), the EBS CSI node plugin (10m / 40Mi per container), a Fluent
# Bit log agent, and on GPU nodes NVIDIA's device plugin and DCGM exporter (their charts leave requests to the user:
# the values here are common settings).
DAEMONSETS = (
    ("kube-proxy", "kube-system", (("kube-proxy", "100m", ""),), (), True, False),
    (
        "aws-node",
        "kube-system",
        (("aws-node", "25m", ""), ("aws-eks-nodeagent", "25m", "")),
        (("aws-vpc-cni-init", "25m", ""),),
        True,
        False,
    ),
    (
        "ebs-csi-node",
        "kube-system",
        (
            ("ebs-plugin", "10m", "40Mi"),
            ("node-driver-registrar", "10m", "40Mi"),
            ("liveness-probe", "10m", "40Mi"),
        ),
        (),
        False,
        False,
    ),
    ("fluent-bit", "amazon-cloudwatch", (("fluent-bit", "100m", "200Mi"),), (), False, False),
    (
        "nvidia-device-plugin",
        "kube-system",
        (("nvidia-device-plugin-ctr", "50m", "64Mi"),),
        (),
        False,
        True,
    ),
    ("dcgm-exporter", "gpu-monitoring", (("exporter", "100m", "512Mi"),), (), False, True),
)


def _containers(spec: tuple) -> list[dict[str, Any]]:
    out = []
    for name, cpu, mem in spec:
        requests = {"cpu": cpu, **({"memory": mem} if mem else {})}
        out.append(
            {
                "name": name,
                "image": f"registry.example.com/{name}:1.0",
                "resources": {"requests": requests},
            }
        )
    return out


def daemonsets() -> list[dict[str, Any]]:
    """The DaemonSets of an EKS GPU cluster (DAEMONSETS): system ones tolerate every taint, GPU ones run where the
    node carries a GPU product label and tolerate the GPU taint."""
    out = []
    for name, ns, containers, inits, host_network, gpu_only in DAEMONSETS:
        spec: dict[str, Any] = {
            "priority": SYSTEM_NODE_CRITICAL,
            "priorityClassName": "system-node-critical",
            "containers": _containers(containers),
        }
        if inits:
            spec["initContainers"] = _containers(inits)
        if host_network:
            spec["hostNetwork"] = True
        if gpu_only:
            spec["tolerations"] = [dict(GPU_TOLERATION)]
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": PRODUCT_KEY, "operator": "Exists"}]}
                        ]
                    }
                }
            }
        else:
            spec["tolerations"] = [{"operator": "Exists"}]
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "kubernetes.io/os",
                                        "operator": "In",
                                        "values": ["linux"],
                                    },
                                    {
                                        "key": "eks.amazonaws.com/compute-type",
                                        "operator": "NotIn",
                                        "values": ["fargate"],
                                    },
                                ]
                            }
                        ]
                    }
                }
            }
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": f"ds-{name}",
                    "creationTimestamp": EPOCH,
                },
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
                },
            }
        )
    return out


def _daemon_pods(node: str, g: _Group, room_cpu: int, room_mem: int) -> list[dict[str, Any]]:
    """The DaemonSet pods bound on an existing node, in queue order (priority, then name), each while it fits the
    room its other pods leave (a pod that does not fit would be Pending there, holding nothing)."""
    out = []
    for ds in sorted(daemonsets(), key=lambda d: d["metadata"]["name"]):
        name = ds["metadata"]["name"]
        if name in GPU_DAEMONSETS and not g.product:
            continue
        tspec = ds["spec"]["template"]["spec"]
        cpu = sum(_to_units(c["resources"]["requests"]["cpu"]) for c in tspec["containers"])
        mem = sum(
            _to_units(c["resources"]["requests"].get("memory", "0")) for c in tspec["containers"]
        )
        if cpu * 1000 > room_cpu or mem > room_mem:
            continue
        room_cpu, room_mem = room_cpu - int(cpu * 1000), room_mem - int(mem)
        meta = {
            "name": f"{name}-{node.split('.')[0]}",
            "namespace": ds["metadata"]["namespace"],
            "uid": f"{ds['metadata']['uid']}-{node}",
            "creationTimestamp": EPOCH,
            "labels": {"app": name},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": name,
                    "uid": ds["metadata"]["uid"],
                    "controller": True,
                }
            ],
        }
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": {**tspec, "nodeName": node},
                "status": {"phase": "Running"},
            }
        )
    return out


GPU_DAEMONSETS = frozenset(name for name, *_, gpu_only in DAEMONSETS if gpu_only)


# ---------------------------------------------------------------------- write


@dataclass(slots=True)
class Backlog:
    spec: BacklogSpec
    cluster: Path
    catalog: Path
    pending_pods: int
    groups: int  # PodGroups written (gang + basic)
    gangs: int  # PodGroups with gang policy
    existing_nodes: int
    node_groups: int


def build_objects(spec: BacklogSpec) -> tuple[list[dict], list[dict], dict[str, int]]:
    """(cluster objects, catalog entries, stats) for `spec`, deterministically."""
    if spec.family not in FAMILIES:
        raise ValueError(f"unknown family {spec.family!r}; expected one of {', '.join(FAMILIES)}")
    rng = random.Random(
        f"gangscale-bench/{spec.seed}/{spec.family}/{spec.pods}/{spec.node_groups}/{spec.nodes}"
    )
    ids = _Ids(rng)
    groups = _groups(spec)
    plans = _calibrated_plans(spec, rng)
    _set_headroom(spec, rng, groups, plans)
    nodes, bound = _existing_nodes(spec, rng, ids, groups)

    objects: list[dict] = list(nodes)
    pending: list[dict] = []
    n_groups = n_gangs = 0
    for gi, p in enumerate(plans):
        created = _ts(gi)
        pg = _podgroup(p, ids.uid(), created)
        if pg is not None:
            objects.append(pg)
            n_groups += 1
            n_gangs += p.kind != "basic"
        link = None if p.kind == "none" else (p.kind, p.name)
        k = 0
        for role, cnt, t in p.roles:
            for _ in range(cnt):
                name = p.name if p.kind == "none" else f"{p.name}-{role}-{k}"
                pending.append(
                    _pod(
                        name,
                        p.namespace,
                        ids.uid(),
                        created,
                        t,
                        role,
                        link=link,
                        priority=p.priority,
                    )
                )
                k += 1
    objects.extend(bound)
    objects.extend(pending)
    if spec.daemonsets:
        objects.extend(daemonsets())

    catalog = []
    for g in groups:
        entry: dict[str, Any] = {
            "name": g.name,
            "instanceType": g.itype,
            "zone": g.zone,
            "minSize": 0,
            "currentSize": g.existing + g.upcoming,
            "maxSize": g.existing + g.upcoming + g.headroom,
        }
        if g.product:
            entry["taints"] = [dict(GPU_TAINT)]
        catalog.append(entry)
    stats = {
        "pending_pods": len(pending),
        "groups": n_groups,
        "gangs": n_gangs,
        "existing_nodes": len(nodes),
        "node_groups": len(groups),
        "bound_pods": len(bound),
        "daemonsets": len(DAEMONSETS) if spec.daemonsets else 0,
    }
    return objects, catalog, stats


def write_backlog(spec: BacklogSpec, out_dir: str | Path, *, yaml_too: bool = False) -> Backlog:
    """Write `cluster.json` (kubectl List), `nodegroups.yaml` and `spec.json` under out_dir/spec.name."""
    d = Path(out_dir) / spec.name
    d.mkdir(parents=True, exist_ok=True)
    objects, catalog, stats = build_objects(spec)
    doc = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": objects,
    }
    (d / "cluster.json").write_bytes(orjson.dumps(doc))
    if yaml_too:
        (d / "cluster.yaml").write_text(
            yaml.dump(
                doc,
                Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                sort_keys=False,
                default_flow_style=False,
            )
        )
    (d / "nodegroups.yaml").write_text(render({"nodeGroups": catalog}, "yaml"))
    (d / "spec.json").write_text(render({"spec": spec.to_dict(), "stats": stats}, "json"))
    return Backlog(
        spec,
        d / "cluster.json",
        d / "nodegroups.yaml",
        stats["pending_pods"],
        stats["groups"],
        stats["gangs"],
        stats["existing_nodes"],
        stats["node_groups"],
    )
