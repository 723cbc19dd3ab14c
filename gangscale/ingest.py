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
    reading = _Reading(
        ParseCache() if cache is None else cache, Inputs(plan_unadmitted), node_group_label
    )
    for obj in objects:
        reading.read(obj)
    return reading.cluster()


# A pod as ingest read it: the Pod (None: unreadable), its gang key, and why it is bad (None: it is not).
_PodRead = tuple[Pod | None, tuple[str, str, str] | None, str | None]


class _Reading:
    """One `ingest` pass: what the objects read so far add up to."""

    def __init__(self, cache: ParseCache, extra: Inputs, node_group_label: str) -> None:
        self.cache = cache
        self.extra = extra
        self.node_group_label = node_group_label
        self.nodes: list[Node] = []
        self.warnings = WarningLog()
        self.defs: dict[tuple[str, str, str], _GroupDef] = {}
        self.pods: list[_PodRead] = []
        self.seen: set[tuple[str, ...]] = set()
        # pods read before, by the object itself (only an object handed over frozen keeps its id's meaning)
        self.again = cache.pod_reads if cache.objects and cache.frozen_objects else None

    def read(self, obj: Any) -> None:
        """One listed object: a pod read before is one lookup; anything but an object is counted, not read."""
        if self.again is not None and (hit := self.again.get(id(obj))) is not None:
            # an unchanged pod read before: its id is its own (the cache holds it) and its read is the same
            known, pod_read, claims = hit
            if not _listed_before(known, self.seen, obj, "Pod", self.warnings):
                self.pods.append(pod_read)
                if claims:
                    self.extra.note_pod(len(self.pods) - 1, obj)
            return
        if type(obj) is not dict and not isinstance(obj, Mapping):
            # (the ABC check alone is slow on 13k dicts); a 20 MB list of integers: count them, format ten
            wanted = self.warnings.wants("not-an-object")
            self.warnings.add(
                f"ignored {_obj_label(obj)}: not an object" if wanted else "", "not-an-object"
            )
            return
        kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
        ids: Sequence[tuple[str, ...]] = ()
        if kind in ("Node", "Pod"):
            ids = identities_cached(kind, obj, self.cache)
            if _listed_before(ids, self.seen, obj, kind, self.warnings):
                return
        try:
            self._parse(obj, kind, api, ids)
        except ObjectError as exc:
            _reject(obj, kind, str(exc), self.pods, self.warnings)
        except Exception as exc:  # noqa: BLE001 - a shape no check foresaw: one object, never the whole pass
            why = f"cannot be read ({type(exc).__name__}: {_short(str(exc))})"
            _reject(obj, kind, why, self.pods, self.warnings)

    def _parse(
        self, obj: Mapping[str, Any], kind: Any, api: str, ids: Sequence[tuple[str, ...]]
    ) -> None:
        """One object by its kind (`ids`: a Node's or Pod's identities); ObjectError names what is wrong."""
        cache = self.cache
        if kind == "Node":
            self.nodes.append(parse_node_cached(obj, self.node_group_label, cache))
        elif kind == "Pod":
            pod_read = ingest_pod_cached(obj, cache)
            self.pods.append(pod_read)
            claims = self.extra.note_pod(len(self.pods) - 1, obj)
            if self.again is not None and type(obj) is dict and len(self.again) < cache.limit:
                cache.held[id(obj)] = obj
                self.again[id(obj)] = (ids, pod_read, claims)
        elif self.extra.takes(kind, api):
            self.extra.add(obj, kind, self.warnings)
        elif kind == "Workload" and api != API_WORKLOAD:
            return  # 1.36+ Workloads only hold pod-group templates; the PodGroups carry the gang
        elif kind == "PodGroup" or kind == "Workload":
            ingest_group_cached(obj, kind, api, self.defs, cache)
            self.extra.note_group(obj, kind, api)

    def cluster(self) -> Cluster:
        """Every object read: the inputs applied, pods attached to their gangs."""
        self.extra.finish(self.pods, self.defs, self.nodes, self.warnings)
        bound, gangs = _attach_pods(self.defs, self.pods, self.extra)
        return Cluster(
            self.nodes, bound, gangs, self.warnings.lines(), list(self.extra.daemonsets.values())
        )


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
    pods: list[_PodRead],
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
            d.topology_keys,
            invalid=d.invalid,
            created=d.created,
            uid=d.uid,
            annotations=d.annotations,
        )
    members: dict[tuple[str, str, str], _Members] = {key: _Members() for key in heads}
    for pod, gang_key, problem in pods:
        if pod is None or gang_key is None:
            continue
        m = members.get(gang_key)
        if m is None:  # (not `setdefault(key, _Members())`: that builds one per pod)
            m = members[gang_key] = _Members()
            if gang_key not in heads:
                heads[gang_key] = _gang_for(gang_key, defs, pod)
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
