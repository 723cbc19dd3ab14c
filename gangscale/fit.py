"""May a pod go on a node (or a node group's template)? Labels, taints and per-node pod rules.

Resource fit is arithmetic on integer vectors and lives with its callers; this
module answers the scheduler's filter questions: nodeSelector, required node
affinity, and taints against tolerations. Pod-to-pod rules that act per node
(hostname anti-affinity, hostname spread, hostPorts) become *per-node limits*:
each limit is a pseudo-resource every member pod requests one unit of and every
node offers `cap` units of (less what its bound members use), so the solver's
ordinary resource arithmetic enforces it in fitting, patterns, greedy and CP-SAT
alike. Invariant: a plan within every limit satisfies the rules it came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .model import LabelSelector, Placement, Pod, PodTerm, Requirement, Taint, Toleration

# Effects that keep a pod off a node (PreferNoSchedule only discourages).
HARD_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def tolerates_all(tolerations: Iterable[Toleration], taints: Iterable[Taint]) -> bool:
    tols = tuple(tolerations)
    return all(
        any(tolerates(t, taint) for t in tols) for taint in taints if taint.effect in HARD_EFFECTS
    )


def _int(v: str) -> int | None:
    try:
        return int(v)
    except ValueError:
        return None


def requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    val = labels.get(req.key)
    op = req.operator
    if op == "In":
        return val is not None and val in req.values
    if op == "NotIn":
        return val is None or val not in req.values
    if op == "Exists":
        return val is not None
    if op == "DoesNotExist":
        return val is None
    if op in ("Gt", "Lt"):
        if val is None or len(req.values) != 1:
            return False
        have, want = _int(val), _int(req.values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def labels_match(placement: Placement, labels: Mapping[str, str]) -> bool:
    """nodeSelector and required node affinity against a node's labels."""
    for k, v in placement.node_selector:
        if labels.get(k) != v:
            return False
    if placement.affinity:
        # OR over terms; an empty term matches nothing (as in Kubernetes).
        return any(
            term and all(requirement_matches(r, labels) for r in term)
            for term in placement.affinity
        )
    return True


def placement_allows(
    placement: Placement, labels: Mapping[str, str], taints: Iterable[Taint]
) -> bool:
    return labels_match(placement, labels) and tolerates_all(placement.tolerations, taints)


def label_keys(placement: Placement) -> set[str]:
    """Node label keys a placement looks at (what makes two nodes different to it)."""
    keys = {k for k, _ in placement.node_selector}
    for term in placement.affinity:
        keys.update(r.key for r in term)
    return keys


# ------------------------------------------------------------ per-node pod rules

LIMIT_PREFIX = "gangscale.io/per-node-limit-"  # pseudo-resources; never a real node resource


def selector_matches(sel: LabelSelector, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: an empty selector matches every pod."""
    return all(labels.get(k) == v for k, v in sel.match_labels) and all(
        requirement_matches(r, labels) for r in sel.match_expressions
    )


def term_matches(term: PodTerm, pod: Pod) -> bool:
    return (term.namespaces is None or pod.namespace in term.namespaces) and selector_matches(
        term.selector, pod.labels
    )


@dataclass(frozen=True, slots=True)
class NodeLimit:
    name: str  # the pseudo-resource
    cap: int  # members one node may hold
    what: str  # for people: which rule
    kind: str  # anti-affinity | spread | host-port
    term: PodTerm | None = None
    port: tuple[str, int] | None = None

    def member(self, pod: Pod) -> bool:
        """Counts toward the limit: carries the rule or (for pod rules) is matched by it.

        Counting carriers *and* matched pods under one cap is conservative (two matched pods
        without the rule could in truth share a node) and therefore sound.
        """
        if self.kind == "host-port":
            return self.port in pod.rules.host_ports
        assert self.term is not None
        if self.kind == "anti-affinity" and self.term in pod.rules.anti_affinity:
            return True
        if self.kind == "spread" and (self.term, self.cap) in pod.rules.spread:
            return True
        return term_matches(self.term, pod)


@dataclass(slots=True)
class NodeLimits:
    """The per-node limits one problem needs, and who counts toward them."""

    limits: list[NodeLimit] = field(default_factory=list)
    # node -> limit -> bound members on it
    used: dict[str, dict[str, int]] = field(default_factory=dict)
    _cache: dict = field(default_factory=dict)

    @property
    def caps(self) -> dict[str, int]:
        """What an empty (new or upcoming) node offers."""
        return {lim.name: lim.cap for lim in self.limits}

    def requests(self, pod: Pod) -> dict[str, int]:
        """One unit of every limit the pod counts toward."""
        if not self.limits:
            return {}
        key = (pod.namespace, tuple(sorted(pod.labels.items())), pod.rules)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = {lim.name: 1 for lim in self.limits if lim.member(pod)}
        return hit

    def free_on(self, node: str) -> dict[str, int]:
        """What an existing node still offers: the cap less the bound members already there."""
        used = self.used.get(node, {})
        return {lim.name: max(0, lim.cap - used.get(lim.name, 0)) for lim in self.limits}


def node_limits(pending: Iterable[Pod], bound: Iterable[Pod]) -> NodeLimits:
    """Derive the per-node limits from pending pods' rules (and bound pods' anti-affinity).

    - Required podAntiAffinity on kubernetes.io/hostname (InterPodAffinity filter): no two pods where one
      carries the term and the other matches it share a node -> cap 1. The filter is symmetric: a bound
      pod's term keeps matching pending pods off its node, so bound pods' terms are limits too.
    - hostPort (NodePorts filter): one user of a (protocol, port) per node -> cap 1 (hostIP ignored:
      conservative).
    - topologySpreadConstraints, DoNotSchedule, kubernetes.io/hostname (PodTopologySpread filter): a pod
      may go on node n only if matching(n) + self - min over eligible nodes <= maxSkew. The global min is
      never negative, so matching(n) <= maxSkew on every node is sufficient whatever the min, the
      minDomains rule (it only forces min to 0), nodeAffinityPolicy or nodeTaintsPolicy are -> cap maxSkew.
    """
    pending = list(pending)
    bound = [b for b in bound if b.node_name]
    found: dict[tuple, NodeLimit] = {}
    matched: dict[PodTerm, bool] = {}

    def matches_someone(t: PodTerm) -> bool:
        """A term no visible pod matches keeps nothing apart (carriers alone never conflict)."""
        if t not in matched:
            matched[t] = any(term_matches(t, p) for p in pending) or any(
                term_matches(t, b) for b in bound
            )
        return matched[t]

    def add(key: tuple, cap: int, what: str, kind: str, term=None, port=None) -> None:
        if key not in found:
            found[key] = NodeLimit(f"{LIMIT_PREFIX}{len(found)}", cap, what, kind, term, port)

    for p in pending:
        r = p.rules
        for t in r.anti_affinity:
            if matches_someone(t):
                add(
                    ("anti-affinity", t),
                    1,
                    "podAntiAffinity on kubernetes.io/hostname",
                    "anti-affinity",
                    term=t,
                )
        for t, skew in r.spread:
            add(
                ("spread", t, skew),
                skew,
                f"topologySpreadConstraints maxSkew {skew} on kubernetes.io/hostname",
                "spread",
                term=t,
            )
        for port in r.host_ports:
            add(("host-port", port), 1, f"hostPort {port[1]}/{port[0]}", "host-port", port=port)
    bound_terms = {t for b in bound for t in b.rules.anti_affinity}
    for t in bound_terms:  # only a bound term that matches some pending pod matters
        if ("anti-affinity", t) not in found and any(term_matches(t, p) for p in pending):
            add(("anti-affinity", t), 1, "podAntiAffinity of a bound pod", "anti-affinity", term=t)
    out = NodeLimits(list(found.values()))
    if out.limits:
        _charge_bound(out, bound)
    return out


def _charge_bound(limits: NodeLimits, bound: list[Pod]) -> None:
    """Each bound pod that is a member of a limit uses one of its node's room for it (`limits.used`)."""
    for b in bound:
        got = limits.requests(b)
        if got:
            used = limits.used.setdefault(b.node_name or "", {})
            for name in got:
                used[name] = used.get(name, 0) + 1
