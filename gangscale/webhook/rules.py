"""Validating rules: one gang object or gang pod -> the findings that would make it wait forever.

Pure functions of (object, namespace, Policy): no network, no clock. Every
finding names its rule (a key of `admission.rules` in the controller config,
which says deny, warn or off) and, in its message, the field or the node
group and resource at fault, as `plan` words it (explain.py). Capacity rules
only deny what is certain: a gang is refused when no mix of node groups at
their maxSize could hold it, or when a lower bound on its nodes, GPUs or $/h
exceeds the namespace's cap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..controller.config import ControllerConfig
from ..explain import group_misfit
from ..fit import labels_match, tolerates_all
from ..model import (
    API_COSCHEDULING,
    API_VOLCANO,
    API_WORKLOAD,
    NodeGroup,
    Placement,
    Pod,
    Toleration,
)
from ..parse import (
    COSCHEDULING_LABEL,
    FAMILY_COSCHED,
    FAMILY_NATIVE,
    FAMILY_VOLCANO,
    FAMILY_WORKLOAD,
    NATIVE_PODGROUP_APIS,
    VOLCANO_ANNOTATIONS,
    ObjectError,
    _group_link,
    _ingest_group,
    _ingest_pod,
    _resources,
)
from ..resources import GPU, PODS

RULE_CROSS_NS, RULE_MIN_COUNT, RULE_CAPS = "crossNamespaceGroup", "minCount", "namespaceCaps"
RULE_NO_GROUP, RULE_FEATURE, RULE_UNREADABLE = "noNodeGroupFits", "gangFeatureOff", "unreadable"
GROUP_KINDS = ("PodGroup", "Workload")
SHOWN_REASONS = 4
ANY_PLACEMENT = Placement(
    tolerations=(Toleration(None, "Exists", "", None),)
)  # as explain.pod_misfit: the first few groups, then a count

# family -> (apiVersions that serve it, the pod field that links to it)
FAMILY_APIS: dict[str, tuple[tuple[str, ...], str]] = {
    FAMILY_NATIVE: (NATIVE_PODGROUP_APIS, "spec.schedulingGroup.podGroupName"),
    FAMILY_WORKLOAD: ((API_WORKLOAD,), "spec.workloadRef"),
    FAMILY_COSCHED: ((API_COSCHEDULING,), f"metadata.labels[{COSCHEDULING_LABEL}]"),
    FAMILY_VOLCANO: ((API_VOLCANO,), "metadata.annotations[scheduling.k8s.io/group-name]"),
}


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str  # a key of admission.rules
    message: str


@dataclass(frozen=True, slots=True)
class GroupClass:
    """Node groups whose nodes are alike (allocatable, labels, taints): one fit test answers for all of them."""

    groups: tuple[NodeGroup, ...]
    max_nodes: int  # sum of maxSize
    cheapest: float  # $/h of the cheapest node

    @property
    def node(self) -> NodeGroup:
        return self.groups[0]


def group_classes(groups: tuple[NodeGroup, ...], labels: bool = True) -> tuple[GroupClass, ...]:
    """Groups alike for a fit test; `labels=False`: alike for a pod without selectors or affinity (labels unread)."""
    by: dict[tuple, list[NodeGroup]] = {}
    for g in groups:
        key = (
            tuple(sorted(g.allocatable.items())),
            tuple(sorted(g.labels.items())) if labels else (),
            g.taints,
        )
        by.setdefault(key, []).append(g)
    return tuple(
        GroupClass(tuple(gs), sum(g.max_size for g in gs), min(g.price_per_hour for g in gs))
        for gs in by.values()
    )


@dataclass(frozen=True, slots=True)
class Policy:
    """What the webhook decides with: the config, the node-group catalog, the gang APIs the server serves."""

    config: ControllerConfig
    groups: tuple[NodeGroup, ...] = ()
    # apiVersions; None: unknown, the feature rule stays silent
    served: frozenset[str] | None = None
    # (family, namespace, name) -> the group object a pod names (lookup.py), for its minCount; None: pods judged alone
    lookup: Callable[[str, str, str], Mapping[str, Any] | None] | None = field(
        default=None, compare=False
    )
    # no catalog: the groups the cloud reports (discovered.py), read when a capacity rule asks; None: none known
    discovered: Callable[[], tuple[NodeGroup, ...]] | None = field(default=None, compare=False)
    # built once: reviews cost O(classes)
    classes: tuple[GroupClass, ...] = field(default=(), init=False)
    shapes: tuple[GroupClass, ...] = field(default=(), init=False)  # the same with labels ignored
    _derived: dict[int, Policy] = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", group_classes(tuple(self.groups)))
        object.__setattr__(self, "shapes", group_classes(tuple(self.groups), labels=False))

    def for_capacity(self) -> Policy:
        """The policy the capacity rules judge with: this one, or with no catalog the same policy over the groups
        discovered last (built once per discovery that changed them)."""
        if self.groups or self.discovered is None:
            return self
        groups = self.discovered()
        made = self._derived.get(id(groups))
        if made is None or made.groups is not groups:
            made = Policy(self.config, groups, self.served, self.lookup)
            self._derived.clear()
            self._derived[id(groups)] = made
        return made


# ------------------------------------------------------------------ groups


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The object's spec, or an empty one when it is missing or not a mapping."""
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _min_counts(obj: Mapping[str, Any], kind: str, api: str) -> list[tuple[str, Any]]:
    """(field path, raw value) of every minCount / minMember the object declares."""
    spec = _spec(obj)
    if kind == "PodGroup" and api in (API_COSCHEDULING, API_VOLCANO):
        return [("spec.minMember", spec["minMember"])] if "minMember" in spec else []
    policies: list[tuple[str, Any]] = []
    if kind == "PodGroup":
        policies = [("spec.schedulingPolicy", spec.get("schedulingPolicy"))]
    elif kind == "Workload" and isinstance(spec.get("podGroups"), list):
        policies = [
            (f"spec.podGroups[{i}].policy", pg.get("policy"))
            for i, pg in enumerate(spec["podGroups"])
            if isinstance(pg, Mapping)
        ]
    out = []
    for where, policy in policies:
        gang = policy.get("gang") if isinstance(policy, Mapping) else None
        if isinstance(gang, Mapping) and "minCount" in gang:
            out.append((f"{where}.gang.minCount", gang["minCount"]))
    return out


def check_min_counts(
    obj: Mapping[str, Any], kind: str, api: str, ns: str, cfg: ControllerConfig
) -> list[Finding]:
    cap = cfg.gang_size_cap(ns)
    out = []
    for where, value in _min_counts(obj, kind, api):
        if not isinstance(value, int) or isinstance(value, bool):
            continue  # not a number: the unreadable rule names it
        if value < 1:
            out.append(
                Finding(RULE_MIN_COUNT, f"{where} is {value}: a gang needs at least 1 member")
            )
        elif value > cap:
            out.append(
                Finding(
                    RULE_MIN_COUNT,
                    f"{where} is {value}, above the gang size cap {cap} of "
                    f"namespace {ns} (maxGangPods)",
                )
            )
    return out


def _group_shape(obj: Mapping[str, Any], api: str, ns: str, name: str, count: int) -> Pod | None:
    """One member's requests from spec.minResources (Volcano, scheduler-plugins): the total over minMember pods."""
    spec = _spec(obj)
    if api not in (API_COSCHEDULING, API_VOLCANO) or not spec.get("minResources") or count < 1:
        return None
    total = _resources(spec["minResources"], "spec.minResources")
    per_pod = {r: -(-v // count) for r, v in total.items() if v > 0}
    per_pod[PODS] = 1
    return Pod(
        ns, f"{name} (member)", "", per_pod, ANY_PLACEMENT
    )  # placement unknown: only size can refuse


def review_group(obj: Mapping[str, Any], ns: str, policy: Policy) -> list[Finding]:
    """Findings for a PodGroup (any flavour) or a Workload."""
    kind, api = str(obj.get("kind")), str(obj.get("apiVersion", ""))
    if kind == "Workload" and api != API_WORKLOAD:
        return []  # 1.36+ Workloads hold pod-group templates only; their PodGroups carry the gang (as ingest reads)
    findings = check_min_counts(obj, kind, api, ns, policy.config)
    defs: dict = {}
    try:
        _ingest_group(obj, kind, api, defs)
    except ObjectError as exc:
        return findings + [Finding(RULE_UNREADABLE, f"{kind} {ns}: {exc}")]
    for d in defs.values():
        if d.invalid and not findings:  # a minCount finding already names the field
            findings.append(Finding(RULE_UNREADABLE, d.invalid))
    if findings:
        return findings
    name = str(obj["metadata"]["name"])
    d = next(iter(defs.values()), None)
    member = _group_shape(obj, api, ns, name, d.min_count) if d is not None else None
    if member is not None and d is not None:
        findings += check_capacity(member, d.min_count, f"gang {ns}/{name}", policy)
    return findings


# -------------------------------------------------------------------- pods


def _raw_reference(
    meta: Mapping[str, Any], spec: Mapping[str, Any], family: str
) -> tuple[str, Any, Any]:
    """(field, referenced name, referenced namespace if the reference carries one)."""
    if family == FAMILY_NATIVE:
        sg = spec.get("schedulingGroup") or {}
        return "spec.schedulingGroup", sg.get("podGroupName"), sg.get("namespace")
    if family == FAMILY_WORKLOAD:
        wr = spec.get("workloadRef") or {}
        return "spec.workloadRef", wr.get("name"), wr.get("namespace")
    if family == FAMILY_COSCHED:
        return (
            f"metadata.labels[{COSCHEDULING_LABEL}]",
            (meta.get("labels") or {}).get(COSCHEDULING_LABEL),
            None,
        )
    notes = meta.get("annotations") or {}
    key = next((k for k in VOLCANO_ANNOTATIONS if notes.get(k)), VOLCANO_ANNOTATIONS[0])
    return f"metadata.annotations[{key}]", notes.get(key), None


def check_cross_namespace(
    meta: Mapping[str, Any], spec: Mapping[str, Any], family: str, ns: str
) -> list[Finding]:
    """Group references are namespace-local in every API: one naming another namespace never resolves."""
    where, name, other = _raw_reference(meta, spec, family)
    if other is None and isinstance(name, str) and name.count("/") == 1:
        other = name.split("/")[0]  # `namespace/name`
    if other is not None and other != ns:
        return [
            Finding(
                RULE_CROSS_NS,
                f"{where} points at group {name!r} in namespace {other!r}, but the pod is "
                f"in {ns!r}: a pod's group must be in its own namespace",
            )
        ]
    return []


def check_feature(family: str, served: frozenset[str] | None) -> list[Finding]:
    if served is None:
        return []
    apis, where = FAMILY_APIS[family]
    if any(a in served for a in apis):
        return []
    return [
        Finding(
            RULE_FEATURE,
            f"{where} links the pod to a gang, but the API server serves none of "
            f"{', '.join(apis)} (the feature gate or the scheduler plugin is off): "
            "the pod would be scheduled alone, not as a gang",
        )
    ]


def review_pod(obj: Mapping[str, Any], ns: str, policy: Policy) -> list[Finding]:
    """Findings for a pod that references a group; pods outside gangs pass untouched."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
        return [Finding(RULE_UNREADABLE, "Pod: metadata and spec must be objects")]
    try:
        link = _group_link(meta, spec)
    except ObjectError as exc:
        return [Finding(RULE_UNREADABLE, f"Pod {ns}/{meta.get('name')}: {exc}")]
    if link is None:
        return []
    family = link[0]
    findings = check_cross_namespace(meta, spec, family, ns) + check_feature(family, policy.served)
    try:
        pod, _key, _ = _ingest_pod(obj)
    except (ObjectError, KeyError, TypeError, ValueError) as exc:
        return findings + [Finding(RULE_UNREADABLE, f"Pod {ns}/{meta.get('name')}: {exc}")]
    if pod.node_name:
        return findings  # already bound: capacity is not the question
    gang = group_min_count(family, link[1], ns, policy)
    if gang is not None and gang[0] > 1:
        count, name = gang
        return findings + check_capacity(
            pod, count, f"gang {name} ({count} pods like pod {pod.key}, its minCount)", policy
        )
    return findings + check_capacity(pod, 1, f"pod {pod.key}", policy)


def group_min_count(family: str, name: str, ns: str, policy: Policy) -> tuple[int, str] | None:
    """(minCount, ns/name) of the gang group a pod names, read through `policy.lookup`; None when unknown.

    A native PodGroup or Workload has no pod shape: its gang is judged as minCount pods like the pod
    under review (a group's members come from one template)."""
    if policy.lookup is None:
        return None
    # <workload>/<podGroup>[/<replica>]
    base = "/".join(name.split("/")[:2]) if family == FAMILY_WORKLOAD else name
    obj = policy.lookup(family, ns, base.split("/")[0] if family == FAMILY_WORKLOAD else base)
    if not isinstance(obj, Mapping):
        return None
    defs: dict = {}
    try:
        _ingest_group(obj, str(obj.get("kind")), str(obj.get("apiVersion", "")), defs)
    except (ObjectError, KeyError, TypeError, ValueError):
        return None  # the group's own review names what is wrong with it
    d = defs.get((ns, family, base))
    if d is None or d.invalid or d.policy != "gang":
        return None
    return d.min_count, f"{ns}/{base}"


# ---------------------------------------------------------------- capacity


def per_node(pod: Pod, group: NodeGroup) -> int:
    """How many such pods one node of `group` holds (0: none)."""
    counts = [group.allocatable.get(r, 0) // v for r, v in pod.requests.items() if v > 0]
    return min(counts) if counts else 0


def _usable(member: Pod, group: NodeGroup) -> int:
    """Pods like `member` one node of `group` holds, 0 when selectors, taints or size rule it out (no strings)."""
    if member.placement.node_selector or member.placement.affinity:
        if not labels_match(member.placement, group.labels):
            return 0
    if group.taints and not tolerates_all(member.placement.tolerations, group.taints):
        return 0
    return per_node(member, group)


def _misfit_reasons(
    member: Pod, count: int, policy: Policy, fits: list[tuple[GroupClass, int]]
) -> str:
    """The denial's words, as plan's: the first few groups and why, then a count (only built when denying)."""
    reasons: list[str] = []
    fitting = {id(g) for c, _ in fits for g in c.groups}
    for g in policy.groups:
        if len(reasons) >= SHOWN_REASONS:
            break
        if id(g) not in fitting:
            why = group_misfit(
                member, replace(g, current_size=0)
            )  # maxSize, not today's size, is the limit
            reasons.append(f"{g.name}: {why or 'a node holds none'}")
    for c, n in fits:
        for g in c.groups[: max(0, SHOWN_REASONS - len(reasons))]:
            reasons.append(f"{g.name}: maxSize {g.max_size} holds {g.max_size * n} of {count} pods")
    more = (
        f"; and {len(policy.groups) - len(reasons)} more"
        if len(policy.groups) > len(reasons)
        else ""
    )
    return "; ".join(reasons) + more


def check_capacity(member: Pod, count: int, label: str, policy: Policy) -> list[Finding]:
    """noNodeGroupFits and namespaceCaps for `count` pods shaped like `member`."""
    policy = policy.for_capacity()
    if not policy.groups:
        return []  # no catalog and no group discovered: nothing is known about capacity
    # as _usable: else labels are unread
    selective = member.placement.node_selector or member.placement.affinity
    fits = [
        (c, n)
        for c in (policy.classes if selective else policy.shapes)
        if (n := _usable(member, c.node)) > 0
    ]
    if sum(c.max_nodes * n for c, n in fits) < count:
        why = _misfit_reasons(member, count, policy, fits)
        return [Finding(RULE_NO_GROUP, f"no node group can ever hold {label} ({why})")]
    return check_caps(member, count, label, fits, policy.config)


def check_caps(
    member: Pod, count: int, label: str, fits: list[tuple[GroupClass, int]], cfg: ControllerConfig
) -> list[Finding]:
    """Lower bounds (densest group for nodes, cheapest per pod for $/h) against the namespace's caps."""
    ns = member.namespace
    cap = cfg.cap_for(ns)
    out = []
    gpus = member.requests.get(GPU, 0) * count
    if cap.max_gpus is not None and gpus > cap.max_gpus:
        out.append(
            Finding(
                RULE_CAPS,
                f"{label} needs {gpus} {GPU}, namespace {ns} cap maxGPUs is {cap.max_gpus}",
            )
        )
    if gpus > cfg.max_gang_gpus:
        out.append(
            Finding(RULE_CAPS, f"{label} needs {gpus} {GPU}, above maxGangGPUs {cfg.max_gang_gpus}")
        )
    nodes = -(-count // max(n for _, n in fits))
    if cap.max_nodes is not None and nodes > cap.max_nodes:
        out.append(
            Finding(
                RULE_CAPS,
                f"{label} needs at least {nodes} nodes, namespace {ns} cap maxNodes is "
                f"{cap.max_nodes}",
            )
        )
    dollars = count * min(c.cheapest / n for c, n in fits)
    if cap.max_dollars_per_hour is not None and dollars > cap.max_dollars_per_hour + 1e-9:
        out.append(
            Finding(
                RULE_CAPS,
                f"{label} costs at least ${dollars:.2f}/h, namespace {ns} cap "
                f"maxDollarsPerHour is {cap.max_dollars_per_hour:g}",
            )
        )
    return out + check_ceiling(label, nodes, gpus, dollars, cfg)


def check_ceiling(
    label: str, nodes: int, gpus: int, dollars: float, cfg: ControllerConfig
) -> list[Finding]:
    """Lower bounds against the cluster-wide ceiling (`clusterCeiling`): a gang above it never gets its nodes."""
    c, out = cfg.cluster_ceiling, []
    for what, need, limit in (("nodes", nodes, c.max_nodes), (GPU, gpus, c.max_gpus)):
        if limit is not None and need > limit:
            out.append(
                Finding(
                    RULE_CAPS,
                    f"{label} needs at least {need} {what}, above the cluster ceiling "
                    f"(clusterCeiling.max{'Nodes' if what == 'nodes' else 'GPUs'} {limit})",
                )
            )
    if c.max_dollars_per_hour is not None and dollars > c.max_dollars_per_hour + 1e-9:
        out.append(
            Finding(
                RULE_CAPS,
                f"{label} costs at least ${dollars:.2f}/h, above the cluster ceiling "
                f"(clusterCeiling.maxDollarsPerHour {c.max_dollars_per_hour:g})",
            )
        )
    return out
