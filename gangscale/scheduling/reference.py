"""The reference path: kube-scheduler's scheduling cycle for one pod, every node filtered and scored.

`select` is `schedule_one.go` `schedulePod` as written: the filters over every node
(`feasible`: NodeUnschedulable, NodeResourcesFit, NodeAffinity, TaintToleration, then the pod-to-pod
rules), `numFeasibleNodesToFind` nodes from the rotating start (`nextStartNodeIndex`), the score
plugins over those (score_arrays.py), and `selectHost`'s uniform pick among the best. Invariant: it
keeps no state between pods but the engine's start index and RNG, so it is the definition the fast
path (fastpath.py) must reproduce node for node; it also serves every pod the fast path does not
take (pods with pod-to-pod rules, or a cluster holding any).
"""

from __future__ import annotations

import numpy as np

from ..fit import term_matches
from ..model import Pod
from .cluster import Cluster
from .config import Profile
from .engine import Engine, num_feasible_to_find
from .score_arrays import score_nodes
from .topology import domain_spread_ok, keep_placed


def pod_rules_ok(c: Cluster, pod: Pod, mask: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """The per-node pod rules gangscale admits (ingest refuses the rest), as their filter plugins check them:
    NodePorts (a hostPort taken on the node), InterPodAffinity (the pod's required anti-affinity on the
    hostname, and existing pods' anti-affinity against it: symmetry) and PodTopologySpread
    (DoNotSchedule on the hostname: matching pods on the node + self - the minimum over the nodes the
    pod's node affinity allows, taints ignored as by default <= maxSkew; on any other key: topology.py).
    Sources: pkg/scheduler/framework/plugins/{nodeports,interpodaffinity,podtopologyspread}/filtering.go."""
    ok = np.ones(len(c.nodes), dtype=bool)
    rules = pod.rules
    check = (
        set(np.flatnonzero(mask).tolist()) if (rules.anti_affinity or rules.host_ports) else set()
    )
    check |= {j for j in c.anti_nodes if mask[j]}
    for j in check:
        others = c.pods_on[j]
        if rules.host_ports and any(
            set(q.rules.host_ports) & set(rules.host_ports) for q in others
        ):
            ok[j] = False
        elif any(term_matches(t, q) for t in rules.anti_affinity for q in others):
            ok[j] = False
        elif any(term_matches(t, pod) for q in others for t in q.rules.anti_affinity):
            ok[j] = False
    for term, skew in rules.spread:
        counts = np.array(
            [
                sum(1 for q in c.pods_on[j] if term_matches(term, q)) if eligible[j] else 0
                for j in range(len(c.nodes))
            ],
            dtype=np.int64,
        )
        if not eligible.any():
            break
        low = int(counts[eligible].min())
        ok &= counts + int(term_matches(term, pod)) - low <= skew
    if rules.domain_spread:  # zones and other keys (topology.py)
        ok &= domain_spread_ok(c.nodes, c.pods_on, pod)
    # the final state keeps placed pods' spread too (see docs/scheduling.md)
    for q, jq in c.spread_pods:
        if q.rules.domain_spread:
            keep_placed(c.nodes, c.pods_on, q, jq, pod, ok)
        if ok[jq] and mask[jq] and _breaks_spread(c, q, jq, pod):
            ok[jq] = False
    return ok


def _breaks_spread(c: Cluster, q: Pod, jq: int, pod: Pod) -> bool:
    """Would `pod` on q's node put q's DoNotSchedule spread over maxSkew (checked on the final state)?"""
    for term, skew in q.rules.spread:
        if not term_matches(term, pod):
            continue
        elig = c.affinity_nodes(q.placement)
        counts = np.array(
            [
                sum(1 for x in c.pods_on[j] if term_matches(term, x)) if elig[j] else 0
                for j in range(len(c.nodes))
            ],
            dtype=np.int64,
        )
        counts[jq] += 1
        if elig.any() and counts[jq] - int(counts[elig].min()) > skew:
            return True
    return False


def feasible(c: Cluster, pod: Pod, prof: Profile) -> np.ndarray:
    """The filter plugins' verdict per node: the profile's node filters, NodeResourcesFit, then the pod rules."""
    mask = c.compat(pod.placement, prof)
    if "NodeResourcesFit" in prof.filters:
        mask = mask & c.fits(c.vec(pod))
    if pod.rules or c.anti_nodes or c.spread_pods:
        mask = mask & pod_rules_ok(c, pod, mask, c.affinity_nodes(pod.placement))
    return mask


def select(eng: Engine, pod: Pod, prof: Profile) -> int | None:
    """One scheduling cycle: filter every node, score the first `numFeasibleNodesToFind` feasible ones from the
    rotating start (schedule_one.go `findNodesThatPassFilters`, `nextStartNodeIndex`), pick among the best."""
    mask = feasible(eng.c, pod, prof)
    if eng.allowed is not None:
        mask = mask & eng.allowed
    n = len(mask)
    if n == 0 or not mask.any():
        return None
    start = eng.next_start % n
    order = np.roll(np.arange(n), -start)
    feas = order[mask[order]]
    k = num_feasible_to_find(
        eng.allowed_n if eng.allowed is not None else n, prof.percentage_of_nodes_to_score
    )
    if len(feas) > k:
        last = feas[k - 1]
        processed = int((last - start) % n) + 1
        feas = feas[:k]
    else:
        processed = n
    eng.next_start = (start + processed) % n
    if len(feas) == 1:
        return int(feas[0])
    scores = score_nodes(eng.c, feas, pod, prof)
    return eng.pick(feas[scores == scores.max()])
