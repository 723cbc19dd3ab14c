"""`gangscale check`'s `scheduler-scoring` line: how the cluster's kube-scheduler scores nodes, and what to set.

Where the cloud runs the control plane (aws-eks), the scoring strategy is read from the cloud
(`NodeGroupProvider.scheduler_scoring`, DescribeCluster). With GPUs in play (a discovered node group
or a Node with GPUs, or a pod requesting them) LeastAllocated sends a small GPU pod to the emptiest
node, often the large one bought for a gang (docs/scheduling.md): the check recommends MostAllocated
with a GPU weight and prints the one `aws eks update-cluster-config` call that sets it. The call's
argument follows botocore's `UpdateClusterConfig` input (data/eks/2017-11-01/service-2.json
`KubeSchedulerConfigRequest` → `nodeResourcesFit.scoringStrategy{type, resources[{name, weight}]}`). Pure: no
API call is made here.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from cloud_adapters.base import SchedulerScoring
from cloud_adapters.types import NodeGroup

from .check import INFO, OK, WARN, CheckResult

GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
GPU_WEIGHT = 5  # the weight of docs/scheduling.md's recommended profile
DEFAULT_RESOURCES = (
    ("cpu", 1),
    ("memory", 1),
)  # upstream's NodeResourcesFit resources when none are named
PROFILE_DOC = "docs/scheduling.md#recommended-profile-for-gpu-batch-clusters"
NAME = "scheduler-scoring"


def _requests(pod: dict[str, Any]) -> Iterable[str]:
    spec = pod.get("spec") or {}
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = (c.get("resources") or {}) if isinstance(c, dict) else {}
        for part in ("requests", "limits"):
            yield from (res.get(part) or {})


def _name(o: dict[str, Any]) -> str:
    meta = o.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace + '/' if namespace else ''}{meta.get('name', '?')}"


def gpu_users(
    groups: Sequence[NodeGroup],
    nodes: Iterable[dict[str, Any]] = (),
    pods: Iterable[dict[str, Any]] = (),
) -> dict[str, list[str]]:
    """GPU resource name -> what uses it (node groups, Nodes, pods), for the report; empty: no GPUs anywhere.

    Nodes and pods come apart: items of a Kubernetes list carry no `kind`."""
    out: dict[str, list[str]] = {}
    for g in groups:
        for r in GPU_RESOURCES:
            if g.allocatable.get(r, 0) > 0:
                out.setdefault(r, []).append(f"node group {g.name}")
    for n in nodes:
        allocatable = (n.get("status") or {}).get("allocatable") or {}
        for r in GPU_RESOURCES:
            if str(allocatable.get(r, "0")) not in ("0", ""):
                out.setdefault(r, []).append(f"node {_name(n)}")
    for p in pods:
        for r in sorted(set(_requests(p)) & set(GPU_RESOURCES)):
            out.setdefault(r, []).append(f"pod {_name(p)}")
    return out


def recommended(scoring: SchedulerScoring, gpus: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """MostAllocated's resources: the cluster's own weights, and GPU_WEIGHT for each GPU resource not weighted yet."""
    res = dict(scoring.resources or DEFAULT_RESOURCES)
    for g in sorted(gpus):
        res.setdefault(g, GPU_WEIGHT)
    return tuple(res.items())


def update_command(cluster: str, region: str, resources: Sequence[tuple[str, int]]) -> str:
    """The `aws eks update-cluster-config` call that sets MostAllocated with these weights."""
    arg = {
        "nodeResourcesFit": {
            "scoringStrategy": {
                "type": "MostAllocated",
                "resources": [{"name": n, "weight": w} for n, w in resources],
            }
        }
    }
    parts = ["aws", "eks", "update-cluster-config", "--name", cluster]
    if region:
        parts += ["--region", region]
    parts += ["--kube-scheduler-config", json.dumps(arg, separators=(",", ":"))]
    return shlex.join(parts)


def _some(items: list[str], shown: int = 3) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _described(scoring: SchedulerScoring) -> str:
    res = ", ".join(f"{n} {w}" for n, w in scoring.resources or DEFAULT_RESOURCES)
    return f"{scoring.strategy} ({res})"


def check_scheduler_scoring(
    scoring: SchedulerScoring | None, cluster: str, region: str, gpus: dict[str, list[str]]
) -> CheckResult | None:
    """The cluster's scoring strategy, and the change GPU gangs need (None: the provider cannot know it)."""
    if scoring is None:
        return None
    if scoring.unknown:
        return CheckResult(
            NAME,
            WARN,
            f"cannot read the cluster's kube-scheduler scoring strategy: {scoring.unknown}",
            [
                "gangscale plans assume upstream defaults (LeastAllocated on cpu and memory) until it "
                "can: allow eks:DescribeCluster on the cluster (config/iam/aws-eks.json), or pass the "
                "profile with --scheduler-config FILE (controller: schedulerConfigFile)"
            ],
        )
    summary = f"{scoring.source or cluster} scores nodes with {_described(scoring)}"
    weighted = {n for n, _ in scoring.resources}
    if not gpus or (scoring.strategy == "MostAllocated" and set(gpus) <= weighted):
        return CheckResult(
            NAME, OK, summary, [] if gpus else ["no GPU node group, Node or pod found"]
        )
    facts = ["GPUs in use: " + "; ".join(f"{r} by {_some(w)}" for r, w in sorted(gpus.items()))]
    res = recommended(scoring, gpus)
    why = (
        "LeastAllocated sends a small GPU pod to the emptiest node it fits, often the large one bought for a "
        "gang, which then does not fit and leaves the small node empty"
        if scoring.strategy != "MostAllocated"
        else "without a GPU weight, GPU nodes of the same cpu and memory size score alike"
    )
    fix = [
        f"recommended: MostAllocated with a GPU weight ({', '.join(f'{n} {w}' for n, w in res)}): {why}",
        f"run: {update_command(cluster, region, res)}",
        "self-managed kube-scheduler: set the same scoringStrategy in its KubeSchedulerConfiguration "
        f"({PROFILE_DOC}) and give gangscale the file with --scheduler-config",
    ]
    verdict = WARN if scoring.strategy != "MostAllocated" else INFO
    return CheckResult(NAME, verdict, summary, facts + fix)
