"""apps/v1 DaemonSet objects -> `DaemonSet`: the pod its controller would create on a new node.

The pod is the template's spec read as any pod's (`parse.pod_requests`: containers, sidecar-aware init
containers, pod-level resources, `overhead`, one pod slot), with the tolerations the DaemonSet controller adds
to every daemon pod (kubernetes pkg/controller/daemon/util/daemonset_util.go `AddOrUpdateDaemonPodTolerations`):
NoExecute `node.kubernetes.io/not-ready` and `unreachable`; NoSchedule `disk-pressure`, `memory-pressure`,
`pid-pressure` and `unschedulable`; and NoSchedule `network-unavailable` for `hostNetwork` pods. A bad field
raises `ObjectError` naming it (the DaemonSet is then skipped with a warning: it is not a pod of the backlog).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .daemonsets import DAEMONSET_KIND, DaemonSet
from .model import Pod, Toleration
from .parse import (
    ObjectError,
    _int_field,
    _map,
    _meta,
    _str_map,
    pod_placement,
    pod_requests,
    pod_rules,
)

DAEMONSET_API = "apps/v1"

_NO_SCHEDULE = (
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/unschedulable",
)
_NO_EXECUTE = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"


def default_tolerations(host_network: bool) -> tuple[Toleration, ...]:
    """`AddOrUpdateDaemonPodTolerations`: what every daemon pod tolerates, whatever its template says."""
    out = [Toleration(k, "Exists", "", "NoExecute") for k in _NO_EXECUTE]
    out += [Toleration(k, "Exists", "", "NoSchedule") for k in _NO_SCHEDULE]
    if host_network:
        out.append(Toleration(_NETWORK_UNAVAILABLE, "Exists", "", "NoSchedule"))
    return tuple(out)


def parse_daemonset(obj: Mapping[str, Any]) -> DaemonSet:
    """One DaemonSet object; `ObjectError` names the field it cannot read."""
    meta = _meta(obj)
    ns = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    spec = _map(obj.get("spec"), "spec")
    template = _map(spec.get("template"), "spec.template")
    tmeta = _map(template.get("metadata"), "spec.template.metadata")
    pspec = _map(template.get("spec"), "spec.template.spec")
    try:
        requests = pod_requests(pspec)
        placement = pod_placement(pspec)
        labels = _str_map(tmeta.get("labels"), "metadata.labels")
        rules = pod_rules(pspec, ns, labels, strict=False)
        priority = pspec.get("priority")
        priority = _int_field(priority if priority is not None else 0, "spec.priority")
    except ObjectError as exc:
        raise ObjectError(f"spec.template.{exc}") from None
    host_network = pspec.get("hostNetwork") is True
    placement = replace(
        placement, tolerations=placement.tolerations + default_tolerations(host_network)
    )
    pod = Pod(
        ns,
        name,
        str(meta.get("uid") or ""),
        requests,
        placement,
        priority,
        phase="Running",
        owner_kinds=(DAEMONSET_KIND,),
        labels=labels,
        rules=rules,
        scheduler_name=str(pspec.get("schedulerName") or "default-scheduler"),
    )
    node_name = pspec.get("nodeName")
    return DaemonSet(ns, name, pod, str(node_name) if node_name else None)
