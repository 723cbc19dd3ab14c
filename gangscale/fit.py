"""May a pod go on a node (or a node group's template)? Labels and taints only.

Resource fit is arithmetic on integer vectors and lives with its callers; this
module answers the scheduler's filter questions: nodeSelector, required node
affinity, and taints against tolerations.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from .model import Placement, Requirement, Taint, Toleration

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
        return any(term and all(requirement_matches(r, labels) for r in term) for term in placement.affinity)
    return True


def placement_allows(placement: Placement, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
    return labels_match(placement, labels) and tolerates_all(placement.tolerations, taints)


def label_keys(placement: Placement) -> set[str]:
    """Node label keys a placement looks at (what makes two nodes different to it)."""
    keys = {k for k, _ in placement.node_selector}
    for term in placement.affinity:
        keys.update(r.key for r in term)
    return keys
