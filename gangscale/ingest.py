"""Kubernetes objects (any gang API flavour) -> the planner's Pods, Nodes and Gangs.

An object that cannot be understood never stops the rest: a bad group or pod
turns its gang `invalid` with a reason naming the field (`parse`), anything
else becomes a warning. An object listed twice (same uid, or same
namespace/name) is read once, so no pod is placed twice and no node's
capacity counted twice. Warnings are capped per kind (warnlog), so output
follows what is pending. Inputs beside the gang APIs (DRA claims, Kueue
Workloads, YuniKorn task groups) are read by `ingest_inputs` once every
object is seen. Dependencies point down: parse <- ingest_{dra,kueue,yunikorn}
<- ingest_inputs <- ingest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .daemonsets import is_daemon_pod
from .ingest_inputs import Inputs
from .model import API_WORKLOAD, Gang, Node, Pod, new_gang
from .parse import (
    CAPACITY_GATE,
    DEFAULT_NODE_GROUP_LABEL,
    VOLCANO_ANNOTATIONS,
    Cluster,
    ObjectError,
    ParseCache,
    _bad_pod,
    _gang_for,
    _GroupDef,
    _obj_label,
    _short,
    identities_cached,
    ingest_group_cached,
    ingest_pod_cached,
    parse_node_cached,
    pod_requests,
)
from .warnlog import WarningLog

__all__ = [
    "CAPACITY_GATE",
    "DEFAULT_NODE_GROUP_LABEL",
    "VOLCANO_ANNOTATIONS",
    "Cluster",
    "ParseCache",
    "ingest",
    "pod_requests",
]


def ingest(
    objects: Iterable[Any],
    *,
    node_group_label: str = DEFAULT_NODE_GROUP_LABEL,
    cache: ParseCache | None = None,
    plan_unadmitted: bool = False,
) -> Cluster:
    """Read nodes, pods and every gang flavour; attach pods to their gangs.

    `cache`: parse results to reuse (and fill); None: a fresh one, dropped when this call returns.
    DRA claims, Kueue Workloads and YuniKorn task groups: `ingest_inputs` (`plan_unadmitted`: plan what
    Kueue has not admitted yet), apps/v1 DaemonSets. A pending pod a DaemonSet owns is the DaemonSet controller's,
    never a pod of the backlog.
    """
    cache = ParseCache() if cache is None else cache
    extra = Inputs(plan_unadmitted)
    nodes: list[Node] = []
    warnings = WarningLog()
    defs: dict[tuple[str, str, str], _GroupDef] = {}
    pods: list[tuple[Pod | None, tuple[str, str, str] | None, str | None]] = []
    seen: set[tuple[str, ...]] = set()
    again = cache.pod_reads if cache.objects and cache.frozen_objects else None

    for obj in objects:
        if (
            again is not None and (hit := again.get(id(obj))) is not None
        ):  # an unchanged pod read before: its id is
            ids, read, claims = hit  # its own (the cache holds it) and its read is the same
            if not _listed_before(ids, seen, obj, "Pod", warnings):
                pods.append(read)
                if claims:
                    extra.note_pod(len(pods) - 1, obj)
            continue
        if type(obj) is not dict and not isinstance(
            obj, Mapping
        ):  # (the ABC check alone is slow on 13k dicts)
            warnings.add(
                f"ignored {_obj_label(obj)}: not an object"
                if warnings.wants("not-an-object")
                else "",
                "not-an-object",
            )  # a 20 MB list of integers: count them, format ten
            continue
        kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
        if kind in ("Node", "Pod"):
            ids = identities_cached(kind, obj, cache)
            if _listed_before(ids, seen, obj, kind, warnings):
                continue
        try:
            if kind == "Node":
                nodes.append(parse_node_cached(obj, node_group_label, cache))
            elif kind == "Pod":
                pods.append(ingest_pod_cached(obj, cache))
                claims = extra.note_pod(len(pods) - 1, obj)
                if again is not None and type(obj) is dict and len(again) < cache.limit:
                    cache.held[id(obj)] = obj
                    again[id(obj)] = (ids, pods[-1], claims)
            elif extra.takes(kind, api):
                extra.add(obj, kind, warnings)
            elif kind == "Workload" and api != API_WORKLOAD:
                continue  # 1.36+ Workloads only hold pod-group templates; the PodGroups carry the gang
            elif kind == "PodGroup" or kind == "Workload":
                ingest_group_cached(obj, kind, api, defs, cache)
                extra.note_group(obj, kind, api)
        except ObjectError as exc:
            _reject(obj, kind, str(exc), pods, warnings)
        except Exception as exc:  # noqa: BLE001 - a shape no check foresaw: one object, never the whole pass
            _reject(
                obj,
                kind,
                f"cannot be read ({type(exc).__name__}: {_short(str(exc))})",
                pods,
                warnings,
            )
    extra.finish(pods, defs, nodes, warnings)
    bound, gangs = _attach_pods(defs, pods, extra)
    return Cluster(nodes, bound, gangs, warnings.lines(), list(extra.daemonsets.values()))


def _listed_before(
    ids: Sequence[tuple[str, ...]],
    seen: set[tuple[str, ...]],
    obj: Mapping[str, Any],
    kind: str,
    warnings: WarningLog,
) -> bool:
    """A Node or Pod whose uid or name was listed already this read: warned (capped per kind) and skipped; else its
    identities are noted."""
    if not seen.isdisjoint(ids):
        warnings.add(
            f"ignored {_obj_label(obj)}: listed more than once (same uid or name); the first copy is used",
            f"duplicate {kind}",
        )
        return True
    seen.update(ids)
    return False


def _attach_pods(
    defs: dict[tuple[str, str, str], _GroupDef],
    pods: list[tuple[Pod | None, tuple[str, str, str] | None, str | None]],
    extra: Inputs,
) -> tuple[list[Pod], list[Gang]]:
    """Gangs from the group objects, then every pod counted in (or making) its gang (`extra` marks its own):
    the members are tallied first and each gang is built once, with its final values."""
    heads: dict[tuple[str, str, str], Gang] = {}
    for key, d in defs.items():
        ns, family, name = key
        if d.api == API_WORKLOAD:
            continue  # Workload pod groups become gangs per replica key, when pods point at them
        heads[key] = Gang(
            ns,
            name,
            d.api,
            d.policy,
            d.min_count,
            d.priority,
            d.topology_keys,  # type: ignore[arg-type]
            invalid=d.invalid,
            created=d.created,
            uid=d.uid,
            annotations=d.annotations,
        )
    members: dict[tuple[str, str, str], _Members] = {key: _Members() for key in heads}
    for pod, key, problem in pods:
        if pod is None or key is None:
            continue
        m = members.get(key)
        if m is None:  # (not `setdefault(key, _Members())`: that builds one per pod)
            m = members[key] = _Members()
            if key not in heads:
                heads[key] = _gang_for(key, defs, pod)
        m.add(pod, problem)
    admission = extra.admissions(pods)
    gangs = [m.gang(heads[key], admission.get(key)) for key, m in members.items()]
    bound = [
        pod
        for pod, _key, problem in pods
        if pod is not None and pod.node_name and not pod.terminal and not problem
    ]
    return bound, [g for g in gangs if _worth_listing(g)]


class _Members:
    """One gang's members as ingest meets them: the first bad pod, bound, pending and gated counts."""

    def __init__(self) -> None:
        self.invalid: str | None = None
        self.bound = 0
        self.gated = 0
        self.pending: list[Pod] = []

    def add(self, pod: Pod, problem: str | None) -> None:
        if problem and self.invalid is None:
            self.invalid = f"pod {pod.key}: {problem}"
        if pod.node_name and not pod.terminal:
            self.bound += 1
        elif is_daemon_pod(pod):
            return  # CA's filterOutDaemonSetPodListProcessor: its controller places it on the node it was made for
        elif pod.phase == "Pending" and not problem:
            self.pending.append(pod)
        elif pod.phase in ("SchedulingGated", "Terminating"):
            self.gated += 1

    def gang(self, head: Gang, admission: str | None) -> Gang:
        """The gang object (or its stand-in) with its members: an object's own problem wins over a pod's."""
        h = head  # = replace(head, invalid=..., bound=..., gated=..., pending=..., admission=...), the fields in order
        return new_gang(
            h.namespace,
            h.name,
            h.api,
            h.policy,
            h.min_count,
            h.priority,
            h.topology_keys,
            tuple(self.pending),
            self.bound,
            self.gated,
            h.exists,
            h.invalid or self.invalid,
            h.created,
            h.uid,
            h.annotations,
            admission,
            h.queue_priority,
        )


def _reject(
    obj: Mapping[str, Any], kind: Any, problem: str, pods: list, warnings: WarningLog
) -> None:
    """A bad pod turns its gang invalid; anything else is skipped with a warning (capped per kind)."""
    meta = obj.get("metadata")
    if (
        kind == "Pod"
        and isinstance(meta, Mapping)
        and isinstance(meta.get("name"), str)
        and meta["name"]
    ):
        pods.append(_bad_pod(obj, problem))
    else:
        warnings.add(
            f"ignored {_obj_label(obj)}: {problem}",
            f"ignored {kind if isinstance(kind, str) else '?'}",
        )


def _worth_listing(g: Gang) -> bool:
    """Gangs with pending members, too few members, or a problem to report."""
    if g.invalid or g.pending or g.admission:
        return True
    return g.policy == "gang" and g.bound < g.min_count
