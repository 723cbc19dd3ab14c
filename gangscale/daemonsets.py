"""DaemonSet overhead: the pods every new node of a group runs before any pod of the backlog.

Which DaemonSets run on a node is the DaemonSet controller's `NodeShouldRunDaemonPod` (kubernetes
pkg/controller/daemon/daemon_controller.go, `predicates`): the template's `spec.nodeName` names the node
(or is empty), its nodeSelector and required node affinity match the node's labels, and every NoSchedule
and NoExecute taint is tolerated, counting the tolerations the controller adds to every daemon pod
(pkg/controller/daemon/util/daemonset_util.go `AddOrUpdateDaemonPodTolerations`, added by `ingest_daemonsets`).
A daemon pod is pinned to its node by a `metadata.name` node-affinity term (`ReplaceDaemonSetPodNodeNameNodeAffinity`),
so it never competes with other nodes. A new node's name is unknown, so a template that names a node (by
`spec.nodeName` or a `metadata.name` term) runs on no new node.

As Cluster Autoscaler does for a template node (cluster-autoscaler utils/daemonset `GetDaemonSetPodsForNode`,
called from simulator/node_info_utils.go `TemplateNodeInfoFromNodeGroupTemplate`) and Karpenter per instance type
(pkg/controllers/provisioning/scheduling/scheduler.go `getDaemonOverhead`), the requests of the daemon pods that
would run are taken off a new node's allocatable before anything is packed. Unlike CA, a daemon pod too big for
the node's room left (it would stay Pending there, holding nothing) is not counted and is reported instead
(`GroupDaemons.unfit`; `gangscale check`). Pods are admitted in kube-scheduler's queue order: priority, then
name (creation order is not known for a template).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from .fit import placement_allows
from .model import NodeGroup, Pod, Taint
from .resources import add, fits, format_amount, sub

DAEMONSET_KIND = "DaemonSet"


@dataclass(frozen=True, slots=True)
class DaemonSet:
    """One DaemonSet: the pod its controller creates for a node (requests counted as for any pod, placement with
    the controller's default tolerations), and the node its template names, if any."""

    namespace: str
    name: str
    pod: Pod
    node_name: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GroupDaemons:
    """What DaemonSets take on one new node of a group: the daemon pods that fit (in admission order), their summed
    requests, and the DaemonSets whose pod would run there but does not fit the room the others leave."""

    pods: tuple[Pod, ...] = ()
    requests: Mapping[str, int] | None = None
    unfit: tuple[str, ...] = ()

    @property
    def load(self) -> dict[str, int]:
        return dict(self.requests or {})


NONE = GroupDaemons()


def should_run(ds: DaemonSet, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
    """`NodeShouldRunDaemonPod` for a new node with these labels and taints (its name is not known yet)."""
    if ds.node_name:
        return False
    return placement_allows(ds.pod.placement, labels, taints)


def daemons_on(
    daemonsets: Sequence[DaemonSet],
    labels: Mapping[str, str],
    taints: Iterable[Taint],
    allocatable: Mapping[str, int],
) -> GroupDaemons:
    """The daemon pods a new node with these labels, taints and allocatable runs (see the module docstring)."""
    taints = tuple(taints)
    runs = sorted(
        (ds for ds in daemonsets if should_run(ds, labels, taints)),
        key=lambda ds: (-ds.pod.priority, ds.namespace, ds.name),
    )
    pods: list[Pod] = []
    unfit: list[str] = []
    used: dict[str, int] = {}
    for ds in runs:
        if fits(ds.pod.requests, sub(allocatable, used)):
            pods.append(ds.pod)
            used = add(used, ds.pod.requests)
        else:
            unfit.append(ds.key)
    if not pods and not unfit:
        return NONE
    return GroupDaemons(tuple(pods), used, tuple(unfit))


def group_daemons(
    groups: Iterable[NodeGroup], daemonsets: Sequence[DaemonSet]
) -> dict[str, GroupDaemons]:
    """Per node group (by name), what DaemonSets take on each of its new nodes; groups none run on are left out."""
    if not daemonsets:
        return {}
    out = {}
    for g in groups:
        d = daemons_on(daemonsets, g.labels, g.taints, g.allocatable)
        if d is not NONE:
            out[g.name] = d
    return out


def net_of_daemons(
    groups: Sequence[NodeGroup], daemons: Mapping[str, GroupDaemons]
) -> list[NodeGroup]:
    """The groups as the solver sees them: each new node's allocatable less its daemon pods' requests."""
    if not daemons:
        return list(groups)
    return [
        replace(g, allocatable=sub(g.allocatable, daemons[g.name].load)) if g.name in daemons else g
        for g in groups
    ]


def unfit_warnings(daemons: Mapping[str, GroupDaemons], groups: Sequence[NodeGroup]) -> list[str]:
    """One warning per group where some DaemonSet's pod would run but cannot fit a new node."""
    alloc = {g.name: g.allocatable for g in groups}
    out = []
    for name, d in sorted(daemons.items()):
        for key in d.unfit:
            out.append(
                f"DaemonSet {key}: its pod does not fit a new node of node group {name} "
                f"({describe(alloc.get(name, {}))} allocatable, {describe(d.load)} taken by other daemon pods); "
                "it would stay Pending there and is not counted"
            )
    return out


def quantity(name: str, units: int) -> str:
    """An integer amount as the Kubernetes quantity it stands for: millicores as `250m` or `2`, bytes in the largest
    binary unit that divides them (`100Mi`), counts as they are."""
    if name == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if name == "memory" or name == "ephemeral-storage" or name.startswith("hugepages-"):
        for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if units and units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)


def overhead_report(daemons: Mapping[str, GroupDaemons]) -> dict[str, dict[str, str]]:
    """Per node group, what its daemon pods take on each new node, as the plan's `daemonSetOverhead` reports it."""
    return {
        name: {r: quantity(r, v) for r, v in sorted(d.load.items()) if v}
        for name, d in sorted(daemons.items())
        if d.pods
    }


def describe(amounts: Mapping[str, int]) -> str:
    """`cpu 1, memory 0.5Gi` for people (cpu and memory first, then the rest by name)."""
    order = sorted(amounts, key=lambda r: (r not in ("cpu", "memory"), r))
    return (
        ", ".join(f"{r} {format_amount(r, amounts[r])}" for r in order if amounts[r]) or "nothing"
    )


def is_daemon_pod(pod: Pod) -> bool:
    """A pod a DaemonSet controls (its owner reference): the DaemonSet controller, not the backlog, places it."""
    return DAEMONSET_KIND in pod.owner_kinds
