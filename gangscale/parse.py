"""Kubernetes objects (any gang API flavour), one at a time -> the planner's Pods, Nodes and group definitions.

Input is raw JSON-like dicts, as `kubectl get -o json` prints them or as the
API server returns them, so every Kubernetes release reads the same way. A
field that cannot be understood raises `ObjectError` naming it; `ingest`
turns that into the gang's `invalid` reason or a warning. Every amount is at
most resources.MAX_UNITS, a pod's total requests included. Parsed pieces are
memoised in a `ParseCache` owned by the caller (by default one per `ingest`
call): nothing parsed outlives the pass that asked for it.
"""

from __future__ import annotations

from collections.abc import (  # abc isinstance is ~5x faster than typing.Mapping
    Callable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

import orjson

from .daemonsets import DaemonSet
from .model import (
    API_COSCHEDULING,
    API_NONE,
    API_PODGROUP_V1ALPHA2,
    API_PODGROUP_V1BETA1,
    API_VOLCANO,
    API_WORKLOAD,
    NO_RULES,
    DomainSpread,
    Gang,
    LabelSelector,
    Node,
    Placement,
    Pod,
    PodRules,
    PodTerm,
    Policy,
    Requirement,
    Taint,
    Toleration,
    new_pod,
)
from .resources import PODS, QuantityError, add, check_bound, parse_resource_list, vmax

DEFAULT_NODE_GROUP_LABEL = "gangscale.io/node-group"
# gangscale's own scheduling gate (gate mode, docs/scheduling.md): a pod held only by it is pending to plan for
CAPACITY_GATE = "gangscale.io/capacity"
# namespaces gate mode never gates (with gangscale's own): the control plane's and the node heartbeats'
# (https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/#initial-namespaces)
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
# 1.37 serves v1beta1 and v1alpha3; 1.36 v1alpha2: the PodGroup fields gangscale reads are the same.
NATIVE_PODGROUP_APIS = (API_PODGROUP_V1BETA1, "scheduling.k8s.io/v1alpha3", API_PODGROUP_V1ALPHA2)
NATIVE_PODGROUP = "scheduling.k8s.io/PodGroup"  # family name before the version is known

# Gang families: objects of different APIs with one name never merge.
FAMILY_NATIVE = "native"
FAMILY_WORKLOAD = "workload"
FAMILY_COSCHED = "coscheduling"
FAMILY_VOLCANO = "volcano"
FAMILY_NONE = "none"


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # priority, minCount, minMember are int32 in the API
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class ObjectError(ValueError):
    """A field of one object that cannot be understood (message names the field)."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """Everything read from one cluster view, before any planning (built whole by `ingest`; copied, never changed)."""

    nodes: list[Node] = field(default_factory=list)
    bound: list[Pod] = field(default_factory=list)  # pods holding node capacity
    gangs: list[Gang] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # apps/v1 DaemonSets: what new nodes run first
    daemonsets: list[DaemonSet] = field(default_factory=list)


# --------------------------------------------------------------------- helpers


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        raise ObjectError("metadata is missing")
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ObjectError("metadata.name is missing")
    ns = meta.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise ObjectError(f"metadata.namespace must be a string, got {_short(ns)}")
    return meta


def _short(value: Any) -> str:
    """repr of a bad value, cut to stay a sentence."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _map(raw: Any, where: str) -> Mapping[str, Any]:
    if type(raw) is dict:  # the parsed-JSON case, without the ABC check (12k pods: ~10 checks each)
        return raw
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ObjectError(f"{where} must be an object")
    return raw


def _mapping_or_empty(raw: Any) -> Mapping[str, Any]:
    """`raw` where it is an object, else an empty one: for reading what is left of a bad object."""
    return raw if isinstance(raw, Mapping) else {}


def _entry(raw: Any, where: str) -> Mapping[str, Any]:
    """A list entry: the API server decodes `null` there to an empty struct and rejects it, so must we."""
    if not isinstance(raw, Mapping):
        raise ObjectError(f"{where} must be an object, got {_short(raw)}")
    return raw


def _list(raw: Any, where: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ObjectError(f"{where} must be a list")
    return raw


def _str_map(raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}  # most pods carry no annotations: no comprehension to run
    return {str(k): str(v) for k, v in _map(raw, where).items()}


_T = TypeVar("_T")


@dataclass(slots=True)
class ParseCache:
    """Parsed pieces by the exact input they came from: pods of one workload share their spec, nodes of
    one group their allocatable, so each distinct one is parsed once.

    Owned by whoever calls `ingest` (by default a fresh one per call), never by the module, so a
    long-running controller holds no parse results between passes. At most `limit` entries per table.
    Values are immutable or copied on the way out.
    """

    limit: int = 100_000
    resources: dict[tuple, dict[str, int]] = field(default_factory=dict)
    requests: dict[bytes, dict[str, int]] = field(default_factory=dict)
    placements: dict[bytes, Placement] = field(default_factory=dict)
    rules: dict[bytes, PodRules] = field(default_factory=dict)
    # whole Pods and Nodes by their exact JSON, only when `objects` is set: for a caller that keeps the cache
    # across many reads of mostly unchanged objects (the simulator); one read of distinct objects gains nothing
    objects: bool = False
    pods: dict[Any, tuple[Pod, tuple[str, str, str], None]] = field(default_factory=dict)
    nodes: dict[tuple[Any, str], Node] = field(default_factory=dict)
    # with `objects`: key them by the object itself instead of its JSON, for a caller that never changes an object
    # it has handed over (a change is a new dict): no JSON written per read. `held` keeps each keyed object alive,
    # so its id is never another object's; `forget_objects` drops both
    frozen_objects: bool = False
    held: dict[int, Any] = field(default_factory=dict)
    # `identities_cached`
    identities: dict[int, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    # `ingest_group_cached`
    groups: dict[int, tuple[tuple[str, str, str], Any]] = field(default_factory=dict)
    # with `frozen_objects`: a Pod's whole read by `ingest` (identities, parse, whether its claims need noting), so a
    # re-read of an unchanged pod is one lookup (`ingest`)
    pod_reads: dict[
        int, tuple[Sequence[tuple[str, ...]], tuple[Pod, tuple[str, str, str], None], bool]
    ] = field(default_factory=dict)

    def forget_objects(self) -> None:
        """Drop the parsed Pods and Nodes (and the objects held for their keys)."""
        self.pod_reads.clear()
        self.pods.clear()
        self.nodes.clear()
        self.identities.clear()
        self.groups.clear()
        self.held.clear()

    def memo(self, table: dict[Any, _T], key: Any, make: Callable[[], _T]) -> _T:
        """`table[key]`, made (and kept while the table has room) on a miss; no key: no caching."""
        hit = table.get(key) if key is not None else None
        if hit is None:
            hit = make()
            if key is not None and len(table) < self.limit:
                table[key] = hit
        return hit

    def __len__(self) -> int:
        return (
            len(self.resources)
            + len(self.requests)
            + len(self.placements)
            + len(self.rules)
            + len(self.pods)
            + len(self.nodes)
        )


def _object_key(obj: Any) -> bytes | None:
    """An object's exact JSON, the key of its parse; None (no caching) for anything but plain JSON."""
    if type(obj) is not dict:
        return None
    try:
        return orjson.dumps(obj)
    except TypeError:
        return None


def _cached_object_key(obj: Any, cache: ParseCache) -> Any:
    """The key of an object's parse: the object's id (held) under `frozen_objects`, else its exact JSON."""
    if cache.frozen_objects and type(obj) is dict:
        cache.held[id(obj)] = obj
        return id(obj)
    return _object_key(obj)


def parse_node_cached(obj: Mapping[str, Any], node_group_label: str, cache: ParseCache) -> Node:
    """`parse_node`, by the Node's exact JSON (or identity) when `cache.objects`; the Node is frozen (the group match
    returns a copy), so reads share it."""
    if not cache.objects:
        return parse_node(obj, node_group_label, cache)
    if (
        cache.frozen_objects and type(obj) is dict
    ):  # a kept object: one lookup (it is held, so its id is its own)
        hit = cache.nodes.get((id(obj), node_group_label))
        if hit is not None:
            return hit
    key = _cached_object_key(obj, cache)
    return cache.memo(
        cache.nodes,
        (key, node_group_label) if key is not None else None,
        lambda: parse_node(obj, node_group_label, cache),
    )


def ingest_pod_cached(
    obj: Mapping[str, Any], cache: ParseCache
) -> tuple[Pod, tuple[str, str, str], None]:
    """`_ingest_pod`, by the pod's exact JSON when `cache.objects` (a pod that fails to parse is never kept);
    the Pod is frozen and nothing writes to its maps, so reads share it."""
    if not cache.objects:
        return _ingest_pod(obj, cache)
    if (
        cache.frozen_objects and type(obj) is dict
    ):  # a kept object: one lookup (it is held, so its id is its own)
        hit = cache.pods.get(id(obj))
        if hit is not None:
            return hit
    return cache.memo(cache.pods, _cached_object_key(obj, cache), lambda: _ingest_pod(obj, cache))


def _resources(raw: Any, where: str, cache: ParseCache | None = None) -> dict[str, int]:
    if cache is None:
        return _parse_resources(raw, where)
    key = None
    # str keys too: 1 == True == 1.0 would make {1: ...} and {True: ...} share an entry
    if type(raw) is dict and all(type(k) is str and type(v) is str for k, v in raw.items()):
        key = tuple(raw.items())
    parsed = cache.memo(cache.resources, key, lambda: _parse_resources(raw, where))
    return dict(parsed)


def _parse_resources(raw: Any, where: str) -> dict[str, int]:
    try:
        return parse_resource_list(raw, field=where)
    except QuantityError as exc:
        raise ObjectError(str(exc)) from None


def _taints(raw: Any, where: str) -> tuple[Taint, ...]:
    out = []
    for i, t in enumerate(_list(raw, where)):
        t = _entry(t, f"{where}[{i}]")
        if not t.get("key") or t.get("effect") not in TAINT_EFFECTS:
            raise ObjectError(
                f"{where}[{i}]: needs a key and an effect of NoSchedule, PreferNoSchedule or NoExecute"
            )
        out.append(Taint(str(t["key"]), str(t.get("value") or ""), str(t["effect"])))
    return tuple(out)


def _timestamp(raw: Any) -> str:
    """RFC 3339 as the API writes it; PyYAML turns an unquoted one into a datetime, so normalise it."""
    if type(raw) is str:
        return raw  # as read from JSON (and `str(raw or "")` of a str is itself)
    if isinstance(raw, datetime):
        if raw.tzinfo is not None:
            raw = raw.astimezone(timezone.utc)
        return raw.strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(raw or "")


def _int_field(raw: Any, where: str, *, minimum: int = INT32_MIN, maximum: int = INT32_MAX) -> int:
    """An integer field; the API's are int32, and a larger one must not reach numpy or CP-SAT."""
    if type(raw) is int and minimum <= raw <= maximum:
        return raw  # the common case, without the checks that name what is wrong
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ObjectError(f"{where} must be an integer, got {_short(raw)}")
    if raw < minimum:
        raise ObjectError(f"{where} must be at least {minimum}, got {raw}")
    if raw > maximum:
        raise ObjectError(f"{where} must be at most {maximum}, got {_short(raw)}")
    return raw


# ----------------------------------------------------------------------- nodes


def parse_node(
    obj: Mapping[str, Any],
    node_group_label: str = DEFAULT_NODE_GROUP_LABEL,
    cache: ParseCache | None = None,
) -> Node:
    meta = _meta(obj)
    spec = _map(obj.get("spec"), "spec")
    status = _map(obj.get("status"), "status")
    labels = _str_map(meta.get("labels"), "metadata.labels")
    ready = False
    ready_changed: Any = ""
    for cond in _list(status.get("conditions"), "status.conditions"):
        if isinstance(cond, Mapping) and cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            ready_changed = cond.get("lastTransitionTime")
    alloc = status.get("allocatable", status.get("capacity"))
    return Node(
        name=str(meta["name"]),
        labels=labels,
        taints=_taints(spec.get("taints"), "spec.taints"),
        allocatable=_resources(alloc, "status.allocatable", cache),
        ready=ready,
        unschedulable=spec.get("unschedulable") is True
        or str(spec.get("unschedulable")).lower() == "true",
        node_group=labels.get(node_group_label),
        provider_id=str(spec.get("providerID") or ""),
        created=_timestamp(meta.get("creationTimestamp")),
        ready_changed=_timestamp(ready_changed),
    )


# ------------------------------------------------------------------------ pods


def _container_requests(c: Mapping[str, Any], where: str) -> dict[str, int]:
    res = _map(c.get("resources"), f"{where}.resources")
    # The API server defaults requests to limits; hand-written files may not.
    limits = _resources(res.get("limits"), f"{where}.resources.limits")
    requests = _resources(res.get("requests"), f"{where}.resources.requests")
    return {**limits, **requests}


def pod_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """Requests as the scheduler sums them (sidecar-aware), plus overhead and one pod slot."""
    containers: dict[str, int] = {}
    if not _list(spec.get("containers"), "spec.containers"):
        raise ObjectError("spec.containers is missing: a pod needs at least one container")
    for i, c in enumerate(_list(spec.get("containers"), "spec.containers")):
        containers = add(
            containers,
            _container_requests(_entry(c, f"spec.containers[{i}]"), f"spec.containers[{i}]"),
        )
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, c in enumerate(_list(spec.get("initContainers"), "spec.initContainers")):
        c = _entry(c, f"spec.initContainers[{i}]")
        req = _container_requests(c, f"spec.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":  # sidecar: runs beside everything after it
            sidecars = add(sidecars, req)
            init_peak = vmax(init_peak, sidecars)
        else:
            init_peak = vmax(init_peak, add(sidecars, req))
    total = vmax(add(containers, sidecars), init_peak)
    pod_level = _map(spec.get("resources"), "spec.resources")
    if pod_level:  # pod-level resources (1.32+) replace the container sum for what they name
        total.update(_container_requests(spec, "spec"))
    total = add(total, _resources(spec.get("overhead"), "spec.overhead"))
    total[PODS] = total.get(PODS, 0) + 1
    for name, units in total.items():  # each part is bounded; their sum must be too
        try:
            check_bound(name, units)
        except QuantityError as exc:
            raise ObjectError(f"spec.containers: the pod's total request: {exc}") from None
    return {k: v for k, v in total.items() if v > 0}


def _requirements(raw: Any, where: str) -> tuple[Requirement, ...]:
    out = []
    for i, r in enumerate(_list(raw, where)):
        r = _map(r, f"{where}[{i}]")
        op = r.get("operator")
        if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt") or not r.get("key"):
            raise ObjectError(f"{where}[{i}]: unknown operator {op!r} or missing key")
        values = tuple(str(v) for v in _list(r.get("values"), f"{where}[{i}].values"))
        out.append(Requirement(str(r["key"]), op, values))
    return tuple(out)


def pod_placement(spec: Mapping[str, Any]) -> Placement:
    selector = tuple(sorted(_str_map(spec.get("nodeSelector"), "spec.nodeSelector").items()))
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    affinity = _map(spec.get("affinity"), "spec.affinity")
    node_aff = _map(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = _map(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    terms = []
    for i, term in enumerate(
        _list(required.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    ):
        term = _map(term, f"{where}.nodeSelectorTerms[{i}]")
        reqs = _requirements(
            term.get("matchExpressions"), f"{where}.nodeSelectorTerms[{i}].matchExpressions"
        )
        # matchFields can only name metadata.name; treat it as an In/NotIn on a pseudo label.
        fields = _requirements(
            term.get("matchFields"), f"{where}.nodeSelectorTerms[{i}].matchFields"
        )
        fields = tuple(Requirement("metadata.name", r.operator, r.values) for r in fields)
        terms.append(reqs + fields)
    tolerations = tuple(
        _toleration(t, f"spec.tolerations[{i}]")
        for i, t in enumerate(_list(spec.get("tolerations"), "spec.tolerations"))
    )
    return Placement(selector, tuple(terms), tolerations)


def _toleration(raw: Any, where: str) -> Toleration:
    """One toleration; key, value and effect are strings in the API (an object there is refused)."""
    t = _map(raw, where)
    for f in ("key", "operator", "value", "effect"):
        if t.get(f) is not None and not isinstance(t[f], str):
            raise ObjectError(f"{where}.{f} must be a string, got {_short(t[f])}")
    op = t.get("operator") or "Equal"
    if op not in ("Equal", "Exists"):
        raise ObjectError(f"{where}.operator: unknown operator {op!r}")
    effect = t.get("effect") or None
    if effect is not None and effect not in TAINT_EFFECTS:
        raise ObjectError(f"{where}.effect: unknown effect {effect!r}")
    return Toleration(t.get("key") or None, op, t.get("value") or "", effect)


# ------------------------------------------------------- pod-to-pod placement rules
# Upstream semantics: kube-scheduler's InterPodAffinity, PodTopologySpread and NodePorts filter plugins
# (kubernetes/kubernetes pkg/scheduler/framework/plugins/{interpodaffinity,podtopologyspread,nodeports}),
# KEP-895 (topology spread), KEP-3022 (minDomains), KEP-3243 / KEP-3633 (matchLabelKeys).

HOSTNAME = "kubernetes.io/hostname"
_SELECTOR_OPS = ("In", "NotIn", "Exists", "DoesNotExist")


def _label_selector(
    raw: Any, where: str, pod_labels: Mapping[str, str], match_keys: Any, mismatch_keys: Any = None
) -> LabelSelector:
    """A LabelSelector, with matchLabelKeys (key In [own value]) and mismatchLabelKeys (NotIn) merged in."""
    sel = _map(raw, where)
    labels = tuple(sorted(_str_map(sel.get("matchLabels"), f"{where}.matchLabels").items()))
    exprs = list(_requirements(sel.get("matchExpressions"), f"{where}.matchExpressions"))
    for i, r in enumerate(exprs):
        if r.operator not in _SELECTOR_OPS:
            raise ObjectError(
                f"{where}.matchExpressions[{i}]: operator {r.operator!r} is not valid in a label selector"
            )
    for field_name, keys, op in (
        ("matchLabelKeys", match_keys, "In"),
        ("mismatchLabelKeys", mismatch_keys, "NotIn"),
    ):
        for k in _list(keys, f"{where.rsplit('.', 1)[0]}.{field_name}"):
            if (
                str(k) in pod_labels
            ):  # a key the pod does not carry is ignored, as the scheduler does
                exprs.append(Requirement(str(k), op, (pod_labels[str(k)],)))
    return LabelSelector(labels, tuple(exprs))


def _term_namespaces(term: Mapping[str, Any], where: str, own: str) -> frozenset[str] | None:
    """The namespaces an affinity term looks at: its list plus its namespaceSelector (None: all)."""
    names = {str(n) for n in _list(term.get("namespaces"), f"{where}.namespaces")}
    ns_sel = term.get("namespaceSelector")
    if ns_sel is not None:
        ns_sel = _map(ns_sel, f"{where}.namespaceSelector")
        if ns_sel.get("matchLabels") or ns_sel.get("matchExpressions"):
            raise ObjectError(
                f"{where}.namespaceSelector selects namespaces by label, which the planner cannot see"
            )
        return None  # {} selects every namespace
    return frozenset(names or {own})


def _anti_affinity(
    affinity: Mapping[str, Any], ns: str, labels: Mapping[str, str], strict: bool
) -> tuple[PodTerm, ...]:
    pod_aff = _map(affinity.get("podAffinity"), "spec.affinity.podAffinity")
    where = "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    if strict and _list(pod_aff.get("requiredDuringSchedulingIgnoredDuringExecution"), where):
        raise ObjectError(
            f"{where} is not supported: the planner cannot co-locate pods with others"
        )
    anti = _map(affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity")
    where = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    out = []
    for i, t in enumerate(_list(anti.get("requiredDuringSchedulingIgnoredDuringExecution"), where)):
        w = f"{where}[{i}]"
        try:
            t = _entry(t, w)
            if t.get("topologyKey") != HOSTNAME:
                raise ObjectError(
                    f"{w}.topologyKey {t.get('topologyKey')!r} is not supported (only {HOSTNAME})"
                )
            if t.get("labelSelector") is None:
                continue  # a null selector matches no pod: no rule
            sel = _label_selector(
                t["labelSelector"],
                f"{w}.labelSelector",
                labels,
                t.get("matchLabelKeys"),
                t.get("mismatchLabelKeys"),
            )
            out.append(PodTerm(sel, _term_namespaces(t, w, ns)))
        except ObjectError:
            if strict:
                raise  # a bound pod's unreadable term is skipped: it must still count for capacity
    return tuple(out)


_POLICIES = ("Honor", "Ignore")


def _spread(
    raw: Any, ns: str, labels: Mapping[str, str], strict: bool
) -> tuple[tuple[tuple[PodTerm, int], ...], tuple[DomainSpread, ...]]:
    """DoNotSchedule constraints: (term, maxSkew) on the hostname, and `DomainSpread`s on every other key."""
    out, domains = [], []
    for i, c in enumerate(_list(raw, "spec.topologySpreadConstraints")):
        w = f"spec.topologySpreadConstraints[{i}]"
        try:
            c = _entry(c, w)
            if c.get("whenUnsatisfiable", "DoNotSchedule") == "ScheduleAnyway":
                continue  # a score, not a filter: it never keeps a pod pending
            if c.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
                raise ObjectError(f"{w}.whenUnsatisfiable must be DoNotSchedule or ScheduleAnyway")
            key = c.get("topologyKey")
            if not isinstance(key, str) or not key:
                raise ObjectError(f"{w}.topologyKey is missing")
            skew = _int_field(c.get("maxSkew"), f"{w}.maxSkew", minimum=1)
            if c.get("labelSelector") is None:
                continue  # matches no pod: every domain counts 0, the skew is always 0
            sel = _label_selector(
                c["labelSelector"], f"{w}.labelSelector", labels, c.get("matchLabelKeys")
            )
            term = PodTerm(sel, frozenset({ns}))  # spread counts pods of the pod's own namespace
            if key == HOSTNAME:
                out.append((term, skew))
                continue
            min_domains = (
                1
                if c.get("minDomains") is None
                else _int_field(c["minDomains"], f"{w}.minDomains", minimum=1)
            )
            policies = []
            for name, default in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
                value = c.get(name) or default
                if value not in _POLICIES:
                    raise ObjectError(f"{w}.{name} must be Honor or Ignore, not {value!r}")
                policies.append(value == "Honor")
            domains.append(DomainSpread(term, key, skew, min_domains, *policies))
        except ObjectError:
            if strict:
                raise
    return tuple(out), tuple(domains)


def _host_ports(spec: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """(protocol, hostPort) of containers and sidecars; with hostNetwork every containerPort is a hostPort."""
    host_net = spec.get("hostNetwork") is True
    out: set[tuple[str, int]] = set()
    containers = [
        (f"spec.containers[{i}]", c)
        for i, c in enumerate(_list(spec.get("containers"), "spec.containers"))
    ]
    containers += [
        (f"spec.initContainers[{i}]", c)
        for i, c in enumerate(_list(spec.get("initContainers"), "spec.initContainers"))
        if isinstance(c, Mapping) and c.get("restartPolicy") == "Always"
    ]
    for where, c in containers:
        if not isinstance(c, Mapping) or not c.get("ports"):
            continue
        for j, port in enumerate(_list(c.get("ports"), f"{where}.ports")):
            port = _map(port, f"{where}.ports[{j}]")
            hp = port.get("hostPort", port.get("containerPort") if host_net else None)
            if hp is None or hp == 0:
                continue
            hp = _int_field(hp, f"{where}.ports[{j}].hostPort", minimum=1)
            out.add((str(port.get("protocol") or "TCP"), hp))
    return tuple(sorted(out))


def pod_rules(
    spec: Mapping[str, Any],
    ns: str,
    labels: Mapping[str, str],
    *,
    strict: bool = True,
    cache: ParseCache | None = None,
) -> PodRules:
    """The pod's per-node rules; with `strict` (pending pods) an unsupported form is an ObjectError."""
    affinity = spec.get("affinity")
    has_pod_aff = (
        affinity is not None
        and isinstance(affinity, Mapping)
        and ("podAffinity" in affinity or "podAntiAffinity" in affinity)
    )
    has_ports = _has_ports(spec.get("containers"))
    if not (
        has_pod_aff
        or has_ports
        or spec.get("topologySpreadConstraints")
        or spec.get("hostNetwork")
        or spec.get("initContainers")
    ):
        return NO_RULES  # the common pod: nothing to parse
    # pods of one workload share these fields: parse once (labels matter only to *LabelKeys)
    key = _spec_key(
        spec,
        ("affinity", "topologySpreadConstraints", "hostNetwork", "containers", "initContainers"),
    )
    if cache is not None and key is not None and b"LabelKeys" not in key:
        key = b"%s|%d|%s" % (ns.encode(), strict, key)
        return cache.memo(
            cache.rules,
            key,
            lambda: _parse_rules(spec, ns, labels, strict, affinity if has_pod_aff else None),
        )
    return _parse_rules(spec, ns, labels, strict, affinity if has_pod_aff else None)


def _has_ports(containers: Any) -> bool:
    """Whether any container lists ports (a loop: a generator per pod costs more than the check)."""
    if isinstance(containers, list):
        for c in containers:
            if (type(c) is dict or isinstance(c, Mapping)) and c.get("ports"):
                return True
    return False


def _parse_rules(
    spec: Mapping[str, Any], ns: str, labels: Mapping[str, str], strict: bool, affinity: Any
) -> PodRules:
    anti = (
        _anti_affinity(_map(affinity, "spec.affinity"), ns, labels, strict)
        if affinity is not None
        else ()
    )
    spread, domain_spread = _spread(spec.get("topologySpreadConstraints"), ns, labels, strict)
    try:
        ports = _host_ports(spec)
    except ObjectError:
        if strict:
            raise
        ports = ()
    rules = PodRules(anti, spread, ports, domain_spread)
    return rules if rules else NO_RULES


# Pods of one workload share their spec: parse each distinct requests/placement once. The key is the
# exact JSON of the fields the parser reads (a different key order only costs a cache miss).


def _spec_key(spec: Mapping[str, Any], fields: tuple[str, ...]) -> bytes | None:
    try:
        return orjson.dumps(list(map(spec.get, fields)))
    except TypeError:  # not plain JSON (hand-built objects): parse without the cache
        return None


_REQUEST_FIELDS = ("containers", "initContainers", "resources", "overhead")
_PLACEMENT_FIELDS = ("nodeSelector", "affinity", "tolerations")


def _pod_requests_cached(spec: Mapping[str, Any], cache: ParseCache) -> dict[str, int]:
    key = _spec_key(spec, _REQUEST_FIELDS)
    hit = cache.requests.get(key) if key is not None else None  # a hit without building `make`
    if hit is None:
        hit = cache.memo(cache.requests, key, lambda: pod_requests(spec))
    return dict(hit)


# what `pod_placement` makes of a spec with none of _PLACEMENT_FIELDS (most pods)
_NO_PLACEMENT = Placement()


def _pod_placement_cached(spec: Mapping[str, Any], cache: ParseCache) -> Placement:
    get = spec.get
    if get("nodeSelector") is None and get("affinity") is None and get("tolerations") is None:
        return _NO_PLACEMENT  # no key to write: nothing to read
    key = _spec_key(spec, _PLACEMENT_FIELDS)
    hit = cache.placements.get(key) if key is not None else None
    return (
        hit if hit is not None else cache.memo(cache.placements, key, lambda: pod_placement(spec))
    )  # immutable


def _group_link(
    meta: Mapping[str, Any], spec: Mapping[str, Any], strict: bool = True
) -> tuple[str, str] | None:
    """(family, group name) the pod points at, or None for an ungrouped pod.

    strict: a reference without its name is refused, as the API server does; otherwise it is
    ignored (for a pod already rejected, which only needs some gang to report on)."""
    sg = spec.get("schedulingGroup")
    if sg is not None:  # (the ABC check below is slow on the None of most pods)
        if strict and not (
            isinstance(sg, Mapping)
            and isinstance(sg.get("podGroupName"), str)
            and sg["podGroupName"]
        ):
            raise ObjectError("spec.schedulingGroup.podGroupName is missing")
        if isinstance(sg, Mapping) and sg.get("podGroupName"):
            return FAMILY_NATIVE, str(sg["podGroupName"])
    wr = spec.get("workloadRef")
    if wr is not None:
        if strict and not (
            isinstance(wr, Mapping) and isinstance(wr.get("name"), str) and wr["name"]
        ):
            raise ObjectError("spec.workloadRef.name is missing")
        if isinstance(wr, Mapping) and wr.get("name"):
            name = f"{wr['name']}/{wr.get('podGroup') or ''}"
            if wr.get("podGroupReplicaKey"):
                name += f"/{wr['podGroupReplicaKey']}"
            return FAMILY_WORKLOAD, name
    labels = meta.get("labels") or {}
    if (type(labels) is dict or isinstance(labels, Mapping)) and labels.get(COSCHEDULING_LABEL):
        return FAMILY_COSCHED, str(labels[COSCHEDULING_LABEL])
    annotations = meta.get("annotations") or {}
    if annotations and isinstance(annotations, Mapping):
        for key in VOLCANO_ANNOTATIONS:
            if annotations.get(key):
                return FAMILY_VOLCANO, str(annotations[key])
    return None


# ---------------------------------------------------------------------- groups


@dataclass(slots=True)
class _GroupDef:
    api: str
    policy: Policy = "gang"
    min_count: int = 1
    priority: int | None = None
    topology_keys: tuple[str, ...] = ()
    invalid: str | None = None
    created: str = ""
    uid: str = ""
    annotations: dict[str, str] = field(default_factory=dict)


def _native_policy(policy: Mapping[str, Any], where: str) -> tuple[Policy, int]:
    has_gang, has_basic = "gang" in policy, "basic" in policy
    if has_gang == has_basic:
        raise ObjectError(
            f"{where}: exactly one of 'gang' or 'basic' must be set, got {sorted(policy) or 'none'}"
        )
    if has_basic:
        return "basic", 1
    gang = _map(policy.get("gang"), f"{where}.gang")
    if "minCount" not in gang:
        raise ObjectError(f"{where}.gang.minCount is missing")
    return "gang", _int_field(gang["minCount"], f"{where}.gang.minCount", minimum=1)


def _parse_native_podgroup(obj: Mapping[str, Any], api: str) -> _GroupDef:
    spec = _map(obj.get("spec"), "spec")
    policy, min_count = _native_policy(
        _map(spec.get("schedulingPolicy"), "spec.schedulingPolicy"), "spec.schedulingPolicy"
    )
    keys = []
    constraints = _map(spec.get("schedulingConstraints"), "spec.schedulingConstraints")
    for i, t in enumerate(
        _list(constraints.get("topology"), "spec.schedulingConstraints.topology")
    ):
        t = _entry(t, f"spec.schedulingConstraints.topology[{i}]")
        if not isinstance(t.get("key"), str) or not t["key"]:
            raise ObjectError(f"spec.schedulingConstraints.topology[{i}].key is missing")
        keys.append(t["key"])
    priority = spec.get("priority")
    if priority is not None:
        priority = _int_field(priority, "spec.priority")
    return _GroupDef(api, policy, min_count, priority, tuple(keys))


def _parse_min_member(obj: Mapping[str, Any], api: str) -> _GroupDef:
    spec = _map(obj.get("spec"), "spec")
    if "minMember" not in spec:
        raise ObjectError("spec.minMember is missing")
    return _GroupDef(api, "gang", _int_field(spec["minMember"], "spec.minMember", minimum=1))


# ---------------------------------------------------------------------- ingest


def _obj_label(obj: Any) -> str:
    if not isinstance(obj, Mapping):
        return f"<{type(obj).__name__}>"
    meta = _mapping_or_empty(obj.get("metadata"))
    ns = meta.get("namespace")
    ns = ns if isinstance(ns, str) else _short(ns) if ns is not None else ""
    name = meta.get("name", "?")
    name = name if isinstance(name, str) else _short(name)
    kind = obj.get("kind", "?")
    return f"{kind if isinstance(kind, str) else _short(kind)} {ns + '/' if ns else ''}{name}"


def identities_cached(
    kind: str, obj: Mapping[str, Any], cache: ParseCache
) -> Sequence[tuple[str, ...]]:
    """`_identities`, kept by the object itself under `frozen_objects` (an object handed over never changes, so
    neither does its uid or name): a re-read of unchanged objects reads no metadata."""
    if not (cache.objects and cache.frozen_objects) or type(obj) is not dict:
        return _identities(kind, obj)
    hit = cache.identities.get(id(obj))
    if hit is None:
        hit = tuple(_identities(kind, obj))
        if len(cache.identities) < cache.limit:
            cache.held[id(obj)] = obj
            cache.identities[id(obj)] = hit
    return hit


def _identities(kind: str, obj: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """What makes two listed Nodes or Pods the same object: its uid, and its (namespace/)name."""
    meta = obj.get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        return []
    out: list[tuple[str, ...]] = []
    uid, name, ns = meta.get("uid"), meta.get("name"), meta.get("namespace")
    if isinstance(uid, str) and uid:
        out.append((kind, "uid", uid))
    if isinstance(name, str) and name:
        out.append(
            (kind, "name", ns if kind == "Pod" and isinstance(ns, str) and ns else "default", name)
            if kind == "Pod"
            else (kind, "name", name)
        )
    return out


def _ingest_group(obj: Mapping[str, Any], kind: str, api: str, defs: dict) -> None:
    meta = _meta(obj)
    ns = str(meta.get("namespace") or "default")
    name = str(meta["name"])
    created = _timestamp(meta.get("creationTimestamp"))
    uid = str(meta.get("uid") or "")
    annotations = (
        {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        if isinstance(meta.get("annotations"), Mapping)
        else {}
    )
    if kind == "PodGroup" and api in NATIVE_PODGROUP_APIS:
        key = (ns, FAMILY_NATIVE, name)
        parse = lambda: _parse_native_podgroup(obj, api)  # noqa: E731
    elif kind == "PodGroup" and api == API_COSCHEDULING:
        key = (ns, FAMILY_COSCHED, name)
        parse = lambda: _parse_min_member(obj, api)  # noqa: E731
    elif kind == "PodGroup" and api == API_VOLCANO:
        key = (ns, FAMILY_VOLCANO, name)
        parse = lambda: _parse_min_member(obj, api)  # noqa: E731
    elif kind == "Workload" and api == API_WORKLOAD:
        spec = _map(obj.get("spec"), "spec")
        groups = _list(spec.get("podGroups"), "spec.podGroups")
        for i, pg in enumerate(groups):
            where = f"spec.podGroups[{i}]"
            pg_name = pg.get("name") if isinstance(pg, Mapping) else None
            if not pg_name:
                raise ObjectError(f"{where}.name is missing")
            key = (ns, FAMILY_WORKLOAD, f"{name}/{pg_name}")
            try:
                policy, min_count = _native_policy(
                    _map(pg.get("policy"), f"{where}.policy"), f"{where}.policy"
                )
                defs[key] = _GroupDef(
                    API_WORKLOAD,
                    policy,
                    min_count,
                    created=created,
                    uid=uid,
                    annotations=annotations,
                )
            except ObjectError as exc:
                defs[key] = _GroupDef(
                    API_WORKLOAD, invalid=f"Workload {ns}/{name}: {exc}", created=created, uid=uid
                )
        return
    else:
        raise ObjectError(f"unsupported apiVersion {api!r} for {kind}")
    if key in defs:
        return  # the same object listed in two served versions: keep the first
    try:
        d = parse()
    except ObjectError as exc:
        d = _GroupDef(api, invalid=f"{kind} {ns}/{name}: {exc}")
    d.created, d.uid, d.annotations = created, uid, annotations
    defs[key] = d


def ingest_group_cached(
    obj: Mapping[str, Any], kind: str, api: str, defs: dict, cache: ParseCache
) -> None:
    """`_ingest_group`; under `frozen_objects` a PodGroup's definition is kept by the object itself (an object
    handed over never changes) and each read gets a copy of it (`ingest_inputs` may mark a read's copy invalid).
    A miss, or a group whose key was already read this time, goes through `_ingest_group` as it is."""
    if not (cache.objects and cache.frozen_objects) or type(obj) is not dict or kind != "PodGroup":
        _ingest_group(obj, kind, api, defs)
        return
    hit = cache.groups.get(id(obj))
    if hit is not None and hit[0] not in defs:
        defs[hit[0]] = _copy_def(hit[1])
        return
    before = len(defs)
    _ingest_group(obj, kind, api, defs)
    if len(defs) > before and len(cache.groups) < cache.limit:
        key = next(reversed(defs))
        cache.held[id(obj)] = obj
        cache.groups[id(obj)] = (key, _copy_def(defs[key]))


def _copy_def(d: _GroupDef) -> _GroupDef:
    return _GroupDef(
        d.api,
        d.policy,
        d.min_count,
        d.priority,
        d.topology_keys,
        d.invalid,
        d.created,
        d.uid,
        d.annotations,
    )


def _gang_for(key: tuple[str, str, str], defs: dict, pod: Pod) -> Gang:
    """The gang a pod belongs to when no group object was listed under its key."""
    ns, family, name = key
    if family == FAMILY_NONE:
        return Gang(
            ns,
            name,
            API_NONE,
            "basic",
            1,
            created=pod.created,
            uid=pod.uid,
            annotations=pod.annotations,
        )
    if family == FAMILY_WORKLOAD:
        # `<workload>/<podGroup>/<replicaKey>`: the policy lives on `<workload>/<podGroup>`.
        base = "/".join(name.split("/")[:2])
        d = defs.get((ns, FAMILY_WORKLOAD, base))
        if d is not None:
            replica = name[len(base) + 1 :]
            return Gang(
                ns,
                name,
                API_WORKLOAD,
                d.policy,
                d.min_count,
                d.priority,
                invalid=d.invalid,
                created=d.created,
                uid=f"{d.uid}/{replica}" if replica else d.uid,
                annotations=d.annotations,
            )
        return Gang(ns, name, API_WORKLOAD, exists=False)
    api = {
        FAMILY_NATIVE: NATIVE_PODGROUP,
        FAMILY_COSCHED: API_COSCHEDULING,
        FAMILY_VOLCANO: API_VOLCANO,
    }[family]
    return Gang(ns, name, api, exists=False)


def _ingest_pod(
    obj: Mapping[str, Any], cache: ParseCache | None = None
) -> tuple[Pod, tuple[str, str, str], None]:
    cache = ParseCache() if cache is None else cache  # a synthesised pod (Kueue templates): its own
    meta = _meta(obj)
    spec = _map(obj.get("spec"), "spec")
    status = _map(obj.get("status"), "status")
    ns = str(meta.get("namespace") or "default")
    link = _group_link(
        meta, spec, strict=not spec.get("nodeName")
    )  # a bound pod still uses capacity
    name = str(meta["name"])
    uid = str(meta.get("uid") or "")
    requests = _pod_requests_cached(spec, cache)
    placement = _pod_placement_cached(spec, cache)
    priority = spec.get("priority", 0)
    priority = _int_field(priority if priority is not None else 0, "spec.priority")
    node_name = str(spec["nodeName"]) if spec.get("nodeName") else None
    phase = _phase(status)
    created = _timestamp(meta.get("creationTimestamp"))
    annotations = _str_map(meta.get("annotations"), "metadata.annotations")
    owner_kinds = _entry_fields(meta.get("ownerReferences"), "metadata.ownerReferences", "kind")
    scheduler_name = str(spec.get("schedulerName") or "default-scheduler")
    gates = _entry_fields(spec.get("schedulingGates"), "spec.schedulingGates", "name")
    labels = _str_map(meta.get("labels"), "metadata.labels")
    rules = pod_rules(spec, ns, labels, strict=node_name is None, cache=cache)
    phase = _held_phase(phase, meta, node_name, gates)
    family, gname = link if link else (FAMILY_NONE, name)
    pod = new_pod(
        ns,
        name,
        uid,
        requests,
        placement,
        priority,
        node_name,
        phase,
        (ns, gname),
        API_NONE,
        created,
        gates,
        annotations,
        owner_kinds,
        labels,
        rules,
        scheduler_name,
    )  # = Pod(...), the fields in order
    return pod, (ns, family, gname), None


def _entry_fields(raw: Any, where: str, key: str) -> tuple[str, ...]:
    """`key` of each object in the list `raw` (entries that are not objects skipped; None: no list)."""
    if raw is None:
        return ()
    return tuple(str(e.get(key)) for e in _list(raw, where) if isinstance(e, Mapping))


def _held_phase(
    phase: str, meta: Mapping[str, Any], node_name: str | None, gates: tuple[str, ...]
) -> str:
    """The phase the planner reads: a pending pod going away is `Terminating` (never scale for it); one held
    by another gate than gangscale's (e.g. Kueue's) is `SchedulingGated`, not ours to plan for yet."""
    if meta.get("deletionTimestamp") and not node_name:
        phase = "Terminating"
    if gates and not node_name and gates != (CAPACITY_GATE,):
        phase = "SchedulingGated"
    return phase


def _phase(status: Mapping[str, Any]) -> str:
    """status.phase; none is Pending, as the API server sets it on create."""
    phase = status.get("phase")
    if phase is not None and not isinstance(phase, str):
        raise ObjectError(f"status.phase must be a string, got {_short(phase)}")
    return phase or "Pending"


def _bad_pod(obj: Mapping[str, Any], problem: str) -> tuple[Pod, tuple[str, str, str], str]:
    """A pod we cannot read still marks its gang invalid, so the problem is visible."""
    meta = obj["metadata"]
    spec = _mapping_or_empty(obj.get("spec"))
    raw_ns = meta.get("namespace")
    ns = (
        raw_ns
        if isinstance(raw_ns, str) and raw_ns
        else _short(raw_ns)
        if raw_ns not in (None, "")
        else "default"
    )
    link = _group_link(meta, spec, strict=False)
    family, gname = link if link else (FAMILY_NONE, str(meta["name"]))
    pod = Pod(
        ns,
        str(meta["name"]),
        str(meta.get("uid") or ""),
        {PODS: 1},
        Placement(),
        group_key=(ns, gname),
    )
    return pod, (ns, family, gname), problem
