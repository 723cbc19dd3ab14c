"""PodTopologySpread's filter for DoNotSchedule constraints on keys other than the hostname (zones, custom labels).

Upstream: kubernetes pkg/scheduler/framework/plugins/podtopologyspread/filtering.go (`calPreFilterState`: a node
counts when it carries every spread key of the pod and passes `matchNodeInclusionPolicies` of common.go --
nodeAffinityPolicy Honor (default) checks the pod's nodeSelector and required node affinity, nodeTaintsPolicy Honor
(default Ignore) its tolerations; matching pods of the pod's namespace on counted nodes are summed per domain;
`Filter`: a node without the key is unschedulable, else matchNum + selfMatch - minMatchNum <= maxSkew, with
minMatchNum 0 while fewer domains than minDomains exist, KEP-3022). The model keeps placed pods' constraints on the
final state too, as it does for the hostname (docs/scheduling.md): a pod may not go where it would put an earlier
pod's domain over its skew.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ..fit import labels_match, term_matches, tolerates_all
from ..model import DomainSpread, Placement, Pod, Taint

HOSTNAME = "kubernetes.io/hostname"


class _Node(Protocol):
    labels: dict[str, str]
    taints: tuple[Taint, ...]


def _counted(s: DomainSpread, pl: Placement, keys: set[str], n: _Node) -> bool:
    if any(k not in n.labels for k in keys):
        return False
    if s.honor_affinity and not labels_match(pl, n.labels):
        return False
    return not s.honor_taints or tolerates_all(pl.tolerations, n.taints)


def spread_keys(pod: Pod) -> set[str]:
    """The keys a node must carry to count for any of the pod's constraints (the hostname: every node has it)."""
    return {s.key for s in pod.rules.domain_spread}


def tally(
    nodes: Sequence[_Node], pods_on: Sequence[Sequence[Pod]], s: DomainSpread, owner: Pod
) -> tuple[dict[str, int], int, list[bool]]:
    """Matching pods per domain over the counted nodes, the global minimum, and which nodes are counted."""
    keys = spread_keys(owner)
    counts: dict[str, int] = {}
    counted = []
    for n, pods in zip(nodes, pods_on, strict=True):
        ok = _counted(s, owner.placement, keys, n)
        counted.append(ok)
        if ok:
            d = n.labels[s.key]
            counts[d] = counts.get(d, 0) + sum(
                1 for q in pods if q.namespace == owner.namespace and term_matches(s.term, q)
            )
    low = min(counts.values()) if counts and len(counts) >= s.min_domains else 0
    return counts, low, counted


def domain_spread_ok(
    nodes: Sequence[_Node], pods_on: Sequence[Sequence[Pod]], pod: Pod
) -> np.ndarray:
    """Per node, whether the pod's own DoNotSchedule constraints on non-hostname keys let it go there."""
    ok = np.ones(len(nodes), dtype=bool)
    for s in pod.rules.domain_spread:
        counts, low, _ = tally(nodes, pods_on, s, pod)
        self_match = int(term_matches(s.term, pod))
        for j, n in enumerate(nodes):
            d = n.labels.get(s.key)
            if d is None or counts.get(d, 0) + self_match - low > s.max_skew:
                ok[j] = False
    return ok


def keep_placed(
    nodes: Sequence[_Node],
    pods_on: Sequence[Sequence[Pod]],
    q: Pod,
    jq: int,
    pod: Pod,
    ok: np.ndarray,
) -> None:
    """Clear `ok` on the nodes where `pod` would put placed pod q's domain (on node jq) over q's skew."""
    for s in q.rules.domain_spread:
        d = nodes[jq].labels.get(s.key)
        if d is None or pod.namespace != q.namespace or not term_matches(s.term, pod):
            continue
        counts, low, counted = tally(nodes, pods_on, s, q)
        if counts.get(d, 0) + 1 - low <= s.max_skew:
            continue
        for j, n in enumerate(nodes):
            if counted[j] and n.labels.get(s.key) == d:
                ok[j] = False
