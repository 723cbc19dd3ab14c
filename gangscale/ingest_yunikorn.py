"""Apache YuniKorn task groups -> one gang per application.

A pod with the annotation `yunikorn.apache.org/task-group-name` belongs to its application's gang (the
application id from the `applicationId` label, `yunikorn.apache.org/app-id`, or Spark's
`spark-app-selector`). The application's `yunikorn.apache.org/task-groups` annotation (a JSON list of
{name, minMember, minResource, nodeSelector, tolerations, affinity, topologySpreadConstraints}) gives the
gang: minCount is the sum of minMember, and YuniKorn reserves each task group with placeholder pods of the
group's minResource before the real pods run.

Invariant: placeholders are members, never extra demand. A placeholder holds the slot its real pod will
take (YuniKorn swaps them), so a pending real pod covered by a live placeholder (bound, or pending and
planned in its place) needs no capacity of its own; members not yet
created (up to minMember per task group) are planned with the task group's resources and placement.
A bad annotation makes the gang invalid with the annotation named.

Upstream: apache/yunikorn-k8shim pkg/common/constants/constants.go (annotation and label names),
pkg/cache/utils.go GetTaskGroupsFromAnnotation (name, minMember > 0 and minResource required),
pkg/cache/placeholder.go (placeholders carry the task group's annotations, nodeSelector, tolerations and
affinity, and request minResource).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .ingest_kueue import synth_pod
from .parse import FAMILY_NONE, ObjectError, _GroupDef, _int_field, _map

YK = "yunikorn.apache.org"
API_YUNIKORN = YK  # task groups are annotations, not an API version
TASK_GROUP_NAME = f"{YK}/task-group-name"
TASK_GROUPS = f"{YK}/task-groups"
PLACEHOLDER = f"{YK}/placeholder"
APP_ID_KEYS = ("applicationId", f"{YK}/app-id", "spark-app-selector")
FAMILY_YUNIKORN = "yunikorn"
MAX_MEMBERS = 100_000  # placeholders planned for one task group


def _app_id(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str | None:
    for k in APP_ID_KEYS:
        if labels.get(k) or annotations.get(k):
            return labels.get(k) or annotations[k]
    return None


def _is_placeholder(labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    return str(annotations.get(PLACEHOLDER) or labels.get("placeholder") or "").lower() == "true"


def parse_task_groups(text: str) -> list[dict[str, Any]]:
    """The task-groups annotation, checked as YuniKorn checks it."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ObjectError(f"annotation {TASK_GROUPS} is not JSON ({exc.msg})") from None
    if not isinstance(raw, list):
        raise ObjectError(f"annotation {TASK_GROUPS} must be a JSON list")
    out = []
    for i, tg in enumerate(raw):
        where = f"annotation {TASK_GROUPS}[{i}]"
        tg = _map(tg, where)
        if not isinstance(tg.get("name"), str) or not tg["name"]:
            raise ObjectError(f"{where}.name is missing")
        if not isinstance(tg.get("minResource"), Mapping):
            raise ObjectError(f"{where}.minResource is missing")
        _int_field(tg.get("minMember"), f"{where}.minMember", minimum=1, maximum=MAX_MEMBERS)
        out.append(dict(tg))
    return out


def group_yunikorn(pods: list, defs: dict, note_pod: Any) -> None:
    """Move task-group pods into their application's gang and plan the members not yet created."""
    apps: dict[tuple[str, str], list[int]] = {}
    for i, (pod, key, problem) in enumerate(pods):
        if (
            pod is None
            or key is None
            or key[1] != FAMILY_NONE
            or TASK_GROUP_NAME not in pod.annotations
        ):
            continue
        app = _app_id(pod.labels, pod.annotations)
        if app is None:
            pods[i] = (
                pod,
                key,
                problem
                or f"annotation {TASK_GROUP_NAME} is set but the pod has no application id "
                f"(label {APP_ID_KEYS[0]} or {APP_ID_KEYS[1]})",
            )
            continue
        pods[i] = (replace(pod, group_key=(key[0], app)), (key[0], FAMILY_YUNIKORN, app), problem)
        apps.setdefault((key[0], app), []).append(i)
    for (ns, app), members in apps.items():
        _app_gang(ns, app, members, pods, defs, note_pod)


def _app_gang(ns: str, app: str, members: list[int], pods: list, defs: dict, note_pod: Any) -> None:
    key = (ns, FAMILY_YUNIKORN, app)
    text = next(
        (
            pods[i][0].annotations[TASK_GROUPS]
            for i in members
            if TASK_GROUPS in pods[i][0].annotations
        ),
        None,
    )
    first = pods[members[0]][0]
    base = dict(created=min(pods[i][0].created for i in members), uid=f"{ns}/{app}")
    if text is None:  # no pod carries the definition: YuniKorn schedules the pods one by one
        defs[key] = _GroupDef(API_YUNIKORN, "basic", 1, **base)
        return
    try:
        groups = parse_task_groups(text)
    except ObjectError as exc:
        defs[key] = _GroupDef(API_YUNIKORN, invalid=f"application {ns}/{app}: {exc}", **base)
        return
    defs[key] = _GroupDef(API_YUNIKORN, "gang", sum(int(g["minMember"]) for g in groups), **base)
    names = {g["name"] for g in groups}
    for i in members:
        pod, k, problem = pods[i]
        tg = pod.annotations[TASK_GROUP_NAME]
        if tg not in names:
            pods[i] = (
                pod,
                k,
                problem
                or f"annotation {TASK_GROUP_NAME} {tg!r} names no task group of "
                f"application {app} ({', '.join(sorted(names))})",
            )
    for tg in groups:
        _task_group(
            ns,
            app,
            tg,
            [i for i in members if pods[i][0].annotations[TASK_GROUP_NAME] == tg["name"]],
            pods,
            key,
            first,
            note_pod,
        )


def _task_group(
    ns: str,
    app: str,
    tg: Mapping[str, Any],
    members: list[int],
    pods: list,
    key: tuple,
    first: Any,
    note_pod: Any,
) -> None:
    """Real pods waiting for a placeholder take its slot; members not yet created are planned.

    YuniKorn holds a task group's real pods until its placeholders are allocated, then swaps them: a pending
    real pod with a live placeholder (bound, or pending and planned itself) needs no capacity of its own."""
    live_ph = [
        i
        for i in members
        if not pods[i][0].terminal and _is_placeholder(pods[i][0].labels, pods[i][0].annotations)
    ]
    pending_real = [
        i
        for i in members
        if not pods[i][0].node_name
        and pods[i][0].phase == "Pending"
        and not _is_placeholder(pods[i][0].labels, pods[i][0].annotations)
    ]
    for i in pending_real[
        : len(live_ph)
    ]:  # will replace a placeholder: its slot is the placeholder's
        pod, k, problem = pods[i]
        pods[i] = (replace(pod, phase="Replacing"), k, problem)
    present = sum(1 for i in members if not pods[i][0].terminal and pods[i][0].phase != "Replacing")
    for j in range(max(0, int(tg["minMember"]) - present)):
        spec = {
            "containers": [
                {"name": "placeholder", "resources": {"requests": dict(tg["minResource"])}}
            ]
        }
        for f in ("nodeSelector", "tolerations", "affinity", "topologySpreadConstraints"):
            if tg.get(f) is not None:
                spec[f] = tg[f]
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "spec": spec,
            "metadata": {
                "name": f"tg-{app}-{tg['name']}-planned-{j}",
                "namespace": ns,
                "annotations": {TASK_GROUP_NAME: str(tg["name"]), PLACEHOLDER: "true"},
                "creationTimestamp": first.created or None,
            },
        }
        pods.append(
            synth_pod(
                obj, key, f"application {ns}/{app} annotation {TASK_GROUPS} task group {tg['name']}"
            )
        )
        note_pod(len(pods) - 1, obj)
