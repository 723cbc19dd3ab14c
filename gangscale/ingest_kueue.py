"""Kueue (kueue.x-k8s.io) Workloads -> one gang each; Kueue decides admission, gangscale never buys ahead of it.

A Workload's pod sets form one gang of `sum(minCount or count)` members, each set's pod template its
shape, as Kueue's ProvisioningRequest admission check asks for them (one PodTemplate per pod set, `count`
pods). While a Workload is not admitted its Job is suspended and its pods do not exist: the gang is made of
the templates and reported `waiting-for-admission`. Pods held by the `kueue.x-k8s.io/admission` scheduling
gate (Kueue's plain-pod integration) put their gang in the same state. `plan_unadmitted` (CLI
`--plan-unadmitted`) plans them anyway; the default is off. Once admitted, the Job's pods (label
`batch.kubernetes.io/job-name`) or the pod group's pods (label `kueue.x-k8s.io/pod-group-name`) are the gang.

Upstream: kubernetes-sigs/kueue apis/kueue/v1beta1/workload_types.go (WorkloadSpec.podSets[]{name,
template, count, minCount}, priority, active; WorkloadStatus.admission and the Admitted / Finished
conditions); pkg/controller/jobs/pod (the admission gate, the pod-group-name label);
pkg/controller/admissionchecks/provisioning (one PodTemplate per pod set).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .model import Placement, Pod
from .parse import (
    FAMILY_NONE,
    ObjectError,
    _GroupDef,
    _ingest_pod,
    _int_field,
    _list,
    _map,
    _timestamp,
)
from .resources import PODS

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_APIS = (f"{KUEUE_GROUP}/v1beta1", f"{KUEUE_GROUP}/v1beta2")
API_KUEUE = f"{KUEUE_GROUP}/v1beta1"
ADMISSION_GATE = f"{KUEUE_GROUP}/admission"
POD_GROUP_LABEL = f"{KUEUE_GROUP}/pod-group-name"
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
FAMILY_KUEUE = "kueue"
# pods planned from one Workload's templates (its pod sets' counts are int32)
MAX_SYNTH_PODS = 100_000


@dataclass(slots=True)
class _Workload:
    ns: str
    name: str
    meta: Mapping[str, Any]
    spec: Mapping[str, Any]
    status: Mapping[str, Any]


@dataclass(slots=True)
class KueueIndex:
    workloads: list[_Workload] = field(default_factory=list)
    # gang key -> why it waits
    waiting: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def add(self, obj: Mapping[str, Any]) -> None:
        meta = _map(obj.get("metadata"), "metadata")
        if not isinstance(meta.get("name"), str) or not meta["name"]:
            raise ObjectError("metadata.name is missing")
        self.workloads.append(
            _Workload(
                str(meta.get("namespace") or "default"),
                meta["name"],
                meta,
                _map(obj.get("spec"), "spec"),
                _map(obj.get("status"), "status"),
            )
        )

    def finish(self, pods: list, defs: dict, plan_unadmitted: bool, note_pod: Any) -> None:
        """Gang definitions, template pods for unadmitted Workloads, admitted pods moved into their gang."""
        owned: dict[
            tuple[str, str, str], tuple[str, str, str]
        ] = {}  # (ns, label kind, value) -> gang key
        for wl in self.workloads:
            key = (wl.ns, FAMILY_KUEUE, wl.name)
            base = dict(
                created=_timestamp(wl.meta.get("creationTimestamp")),
                uid=str(wl.meta.get("uid") or ""),
            )
            try:
                self._workload(wl, key, base, pods, defs, owned, plan_unadmitted, note_pod)
            except ObjectError as exc:
                defs[key] = _GroupDef(
                    API_KUEUE,
                    invalid=f"Workload {wl.ns}/{wl.name}: {exc}",
                    created=base["created"],
                    uid=base["uid"],
                )
        self._rekey(pods, owned, plan_unadmitted)

    def _workload(
        self,
        wl: _Workload,
        key: tuple,
        base: dict,
        pods: list,
        defs: dict,
        owned: dict,
        plan_unadmitted: bool,
        note_pod: Any,
    ) -> None:
        """One Workload's gang definition, and its template pods while Kueue has not admitted it."""
        sets, priority = _pod_sets(wl.spec)
        if _condition(wl.status, "Finished") or wl.spec.get("active") is False:
            return  # done, or deactivated: Kueue will not admit it
        defs[key] = _GroupDef(
            API_KUEUE, "gang", max(1, sum(m for _n, _c, m, _t in sets)), priority, **base
        )
        owned[(wl.ns, "group", wl.name)] = key
        admitted = bool(wl.status.get("admission")) or _condition(wl.status, "Admitted")
        owners = [
            o
            for o in _list(wl.meta.get("ownerReferences"), "metadata.ownerReferences")
            if isinstance(o, Mapping)
        ]
        for o in owners:
            if o.get("kind") == "Job":
                owned[(wl.ns, "job", str(o.get("name")))] = key
        if admitted or any(o.get("kind") == "Pod" for o in owners):
            return  # the pods exist (admitted Job, or gated plain pods): they are the members
        if not plan_unadmitted:
            self.waiting[key] = (
                f"Kueue has not admitted Workload {wl.ns}/{wl.name} (queue "
                f"{wl.spec.get('queueName') or '?'}); no capacity is bought before admission "
                "(--plan-unadmitted plans it anyway)"
            )
        self._template_pods(wl, key, sets, pods, note_pod)

    def _template_pods(
        self, wl: _Workload, key: tuple, sets: list, pods: list, note_pod: Any
    ) -> None:
        made = 0
        for i, (ps_name, count, _min, template) in enumerate(sets):
            for j in range(count):
                made += 1
                if made > MAX_SYNTH_PODS:
                    return
                obj = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        **_map(template.get("metadata"), f"spec.podSets[{i}].template.metadata"),
                        "name": f"{wl.name}-{ps_name}-{j}",
                        "namespace": wl.ns,
                        "creationTimestamp": wl.meta.get("creationTimestamp"),
                    },
                    "spec": template.get("spec"),
                }
                pods.append(
                    synth_pod(obj, key, f"Workload {wl.ns}/{wl.name} spec.podSets[{i}].template")
                )
                note_pod(len(pods) - 1, obj)

    def _rekey(self, pods: list, owned: dict, plan_unadmitted: bool) -> None:
        if not owned and not plan_unadmitted:
            return  # no Workload to move a pod into and no gate to lift: nothing below could change a pod
        for i, (pod, key, problem) in enumerate(pods):
            if pod is None:
                continue
            if plan_unadmitted and ADMISSION_GATE in pod.scheduling_gates and not pod.node_name:
                gates = tuple(g for g in pod.scheduling_gates if g != ADMISSION_GATE)
                phase = "Pending" if not gates and pod.phase == "SchedulingGated" else pod.phase
                pod = replace(pod, scheduling_gates=gates, phase=phase)
                pods[i] = (pod, key, problem)
            if key is None or key[1] != FAMILY_NONE:
                continue
            target = None
            if pod.labels.get(POD_GROUP_LABEL):
                target = owned.get((key[0], "group", pod.labels[POD_GROUP_LABEL]))
            for label in JOB_NAME_LABELS:
                if target is None and pod.labels.get(label):
                    target = owned.get((key[0], "job", pod.labels[label]))
            if target is not None:
                pods[i] = (replace(pod, group_key=(target[0], target[2])), target, problem)

    def admissions(self, pods: list) -> dict[tuple[str, str, str], str]:
        """Why a gang waits for Kueue admission (the decision `waiting-for-admission`), per gang key."""
        out = dict(self.waiting)
        for pod, key, _problem in pods:
            if (
                pod is not None
                and key is not None
                and key not in out
                and ADMISSION_GATE in pod.scheduling_gates
                and not pod.node_name
            ):
                out[key] = (
                    f"pod {pod.key} is held by the {ADMISSION_GATE} scheduling gate until Kueue admits its "
                    "workload; no capacity is bought before admission (--plan-unadmitted plans it anyway)"
                )
        return out


def synth_pod(
    obj: dict[str, Any], key: tuple[str, str, str], where: str
) -> tuple[Pod, tuple, str | None]:
    """A pod that does not exist yet, read from a template; a bad template marks the gang invalid."""
    try:
        pod, _key, _ = _ingest_pod(obj)
        return (
            replace(pod, phase="Pending", scheduling_gates=(), group_key=(key[0], key[2])),
            key,
            None,
        )
    except Exception as exc:  # noqa: BLE001 - as ingest: one bad template, never the whole pass
        meta = obj["metadata"]
        pod = Pod(
            str(meta["namespace"]),
            str(meta["name"]),
            "",
            {PODS: 1},
            Placement(),
            group_key=(key[0], key[2]),
        )
        return pod, key, f"{where}: {exc}"


def _pod_sets(
    spec: Mapping[str, Any],
) -> tuple[list[tuple[str, int, int, Mapping[str, Any]]], int | None]:
    """(name, count, minCount or count, template) per pod set, and the Workload's priority."""
    raw = _list(spec.get("podSets"), "spec.podSets")
    if not raw:
        raise ObjectError("spec.podSets is empty")
    out = []
    for i, ps in enumerate(raw):
        where = f"spec.podSets[{i}]"
        ps = _map(ps, where)
        count = _int_field(ps.get("count", 1), f"{where}.count", minimum=0)
        min_count = (
            count
            if ps.get("minCount") is None
            else _int_field(ps["minCount"], f"{where}.minCount", minimum=1, maximum=max(count, 1))
        )
        template = _map(ps.get("template"), f"{where}.template")
        if not isinstance(template.get("spec"), Mapping):
            raise ObjectError(f"{where}.template.spec is missing")
        out.append((str(ps.get("name") or "main"), count, min_count, template))
    priority = spec.get("priority")
    return out, None if priority is None else _int_field(priority, "spec.priority")


def _condition(status: Mapping[str, Any], kind: str) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == kind and c.get("status") == "True"
        for c in _list(status.get("conditions"), "status.conditions")
    )
