"""DoNotSchedule topology spread on any key but the hostname (zones, custom labels): which domains count, and in
which domain each pending pod is planned.

kube-scheduler's PodTopologySpread filter (kubernetes pkg/scheduler/framework/plugins/podtopologyspread/
filtering.go `calPreFilterState` and `Filter`; common.go `matchNodeInclusionPolicies`; KEP-895, KEP-3022 minDomains,
KEP-3094 nodeAffinityPolicy / nodeTaintsPolicy, KEP-3243 matchLabelKeys): a node is a domain of the constraint's key
when it carries every spread key of the pod and passes the inclusion policies; the matching pods (the constraint's
selector, the pod's namespace) on those nodes are counted per domain; a pod may go to a domain when
count + 1 (if it matches itself) - the minimum over the domains <= maxSkew, the minimum being 0 while fewer domains
than minDomains exist.

The solver knows node groups and selectors, not skew, so `pin_gangs` decides as its problem is built: pods of every
constraint are dealt out, gang by gang in priority order, each to the eligible domain with the fewest matching pods
where a node or a node group could hold it, while that keeps the skew; each pod's copy for the solver gets that
domain as a nodeSelector. The domains counted are those of every existing node *and* of every node group's template
(a domain the plan may open): a superset of the domains after the plan, so its minimum is never above the true one
(sound). A gang whose quorum cannot be dealt out has its carriers pinned nowhere, so it comes out `infeasible`, with
a reason naming the constraint. What the solver then places is checked again on its final state
(`solver.skew.within_skew`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from .fit import labels_match, placement_allows, term_matches, tolerates_all
from .model import DomainSpread, Gang, GangKey, Node, Placement, Pod, Taint
from .snapshot import ClusterSnapshot, NodeView

# never a label value (it has a '/'): a pod pinned here fits no node
NO_DOMAIN = "gangscale.io/no-domain"


@dataclass(frozen=True, slots=True)
class Site:
    """A place a domain comes from: an existing node (cordoned and NotReady ones count too) or a node group."""

    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    name: str  # the node's or the group's
    group: bool
    free: Mapping[str, int] | None  # what it can still take (a group: per node); None: nothing
    nodes: int = 1  # nodes of that room: a group's headroom


@dataclass(frozen=True, slots=True)
class Spread:
    """One constraint as one carrier sees it: its eligible domains and the matching pods already bound in each."""

    spread: DomainSpread
    placement: Placement  # the carrier's own (before any pin)
    domains: frozenset[str]  # every eligible domain: existing nodes' and node groups'
    sure: frozenset[str]  # eligible domains of existing nodes (they exist whatever the plan does)
    bound: Mapping[str, int]  # matching bound pods per eligible domain

    def eligible(self, labels: Mapping[str, str], taints: tuple[Taint, ...]) -> bool:
        return eligible(self.spread, self.placement, labels, taints)

    def low(self, counts: Mapping[str, int], present: frozenset[str]) -> int:
        """The global minimum over the domains; 0 while fewer than minDomains are sure to exist (KEP-3022)."""
        if len(self.sure | present) < self.spread.min_domains:
            return 0
        return min((counts.get(d, 0) for d in self.domains), default=0)


@dataclass(frozen=True, slots=True)
class SpreadBook:
    """What the deal decided: each carrier's constraints (by pod key) and why pods were left out (by gang)."""

    carriers: Mapping[str, tuple[Spread, ...]]
    held: Mapping[GangKey, str]


def eligible(
    s: DomainSpread, placement: Placement, labels: Mapping[str, str], taints: tuple[Taint, ...]
) -> bool:
    """A node with these labels and taints is a domain of `s` for a pod with this placement (common.go)."""
    if s.key not in labels:
        return False
    if s.honor_affinity and not labels_match(placement, labels):
        return False
    return not s.honor_taints or tolerates_all(placement.tolerations, taints)


def _sites(snap: ClusterSnapshot) -> list[Site]:
    views = {v.name: v for v in snap.nodes if not v.upcoming}
    nodes: list[Node | NodeView] = [*snap.all_nodes] or [v for v in snap.nodes if not v.upcoming]
    out = [
        Site(n.labels, n.taints, n.name, False, views[n.name].free if n.name in views else None)
        for n in nodes
    ]
    out += [
        Site(g.labels, g.taints, g.name, True, g.allocatable if g.headroom else None, g.headroom)
        for g in snap.groups
    ]
    out += [
        Site(v.labels, v.taints, v.name, False, v.free)
        for v in snap.nodes
        if v.upcoming and v.reserved_for is None
    ]
    return out


def _spread_of(
    s: DomainSpread, placement: Placement, sites: list[Site], at: dict[str, Site], bound: list[Pod]
) -> Spread:
    ok = [x for x in sites if eligible(s, placement, x.labels, x.taints)]
    counts: dict[str, int] = {}
    for b in bound:
        x = at.get(b.node_name or "")
        if x is not None and term_matches(s.term, b) and eligible(s, placement, x.labels, x.taints):
            d = x.labels[s.key]
            counts[d] = counts.get(d, 0) + 1
    return Spread(
        s,
        placement,
        frozenset(x.labels[s.key] for x in ok),
        frozenset(x.labels[s.key] for x in ok if not x.group),
        counts,
    )


@dataclass(slots=True)
class _Deal:
    """Running state of the deal: matching pods per (constraint, placement) and domain, room left per site."""

    sites: list[Site]
    spreads: dict[tuple[DomainSpread, Placement], Spread]
    counts: dict[tuple[DomainSpread, Placement], dict[str, int]]
    room: dict[int, dict[str, int]]  # site index -> resources left (a group: over its headroom)
    log: list[tuple] = field(default_factory=list)  # undo log of a gang's deal

    def fits(self, i: int, pod: Pod) -> bool:
        left = self.room.get(i)
        if left is None:
            x = self.sites[i]
            if x.free is None or not all(x.free.get(k, 0) >= v for k, v in pod.requests.items()):
                return False
            left = self.room[i] = {k: v * x.nodes for k, v in x.free.items()}
        return all(left.get(k, 0) >= v for k, v in pod.requests.items())

    def take(self, i: int, pod: Pod) -> None:
        left = self.room[i]
        for k, v in pod.requests.items():
            left[k] = left.get(k, 0) - v
            self.log.append(("room", i, k, v))

    def count(self, key: tuple, d: str) -> None:
        c = self.counts[key]
        c[d] = c.get(d, 0) + 1
        self.log.append(("count", key, d))

    def undo(self, mark: int) -> None:
        while len(self.log) > mark:
            entry = self.log.pop()
            if entry[0] == "room":
                self.room[entry[1]][entry[2]] += entry[3]
            else:
                self.counts[entry[1]][entry[2]] -= 1


def _within(deal: _Deal, pod: Pod, x: Site) -> bool:
    """Every constraint of `pod` admits one more pod in the domains of site `x` (the filter's judging criteria)."""
    for s in pod.rules.domain_spread:
        key = (s, pod.placement)
        sp, counts = deal.spreads[key], deal.counts[key]
        d = x.labels.get(s.key)
        if d is None or d not in sp.domains:
            return False
        present = frozenset(k for k, v in counts.items() if v > sp.bound.get(k, 0))
        if counts.get(d, 0) + int(term_matches(s.term, pod)) - sp.low(counts, present) > s.max_skew:
            return False
    return True


def _choose(deal: _Deal, pod: Pod) -> int | None:
    """The site of the domain with the fewest matching pods (then existing before groups, then name) that keeps every
    constraint and has room; None: none does."""
    best: tuple | None = None
    for i, x in enumerate(deal.sites):
        if (
            x.free is None
            or not placement_allows(pod.placement, x.labels, x.taints)
            or not deal.fits(i, pod)
        ):
            continue
        if not _within(deal, pod, x):
            continue
        load = sum(
            deal.counts[(s, pod.placement)].get(x.labels[s.key], 0) for s in pod.rules.domain_spread
        )
        rank = (load, x.group, tuple(x.labels[s.key] for s in pod.rules.domain_spread), x.name)
        if best is None or rank < best[0]:
            best = (rank, i)
    return None if best is None else best[1]


def _place(deal: _Deal, pod: Pod, i: int) -> Pod:
    """Book `pod` on site `i`: its room, every constraint whose selector it matches; the pinned copy."""
    x = deal.sites[i]
    deal.take(i, pod)
    for key, sp in deal.spreads.items():
        if (
            sp.spread.key in x.labels
            and term_matches(sp.spread.term, pod)
            and sp.eligible(x.labels, x.taints)
        ):
            deal.count(key, x.labels[sp.spread.key])
    return _pinned(pod, {s.key: x.labels[s.key] for s in pod.rules.domain_spread})


def _pinned(pod: Pod, pins: Mapping[str, str]) -> Pod:
    sel = dict(pod.placement.node_selector)
    sel.update(pins)
    return replace(pod, placement=replace(pod.placement, node_selector=tuple(sorted(sel.items()))))


def _reason(pod: Pod, deal: _Deal, placed: int, total: int) -> str:
    parts = []
    for s in pod.rules.domain_spread:
        sp, counts = deal.spreads[(s, pod.placement)], deal.counts[(s, pod.placement)]
        shown = ", ".join(f"{d}: {counts.get(d, 0)}" for d in sorted(sp.domains)) or "none"
        parts.append(f"{s.what} (minDomains {s.min_domains}; matching pods per domain: {shown})")
    return (
        f"{placed} of {total} pending pods can be placed within "
        + " and ".join(parts)
        + " on the existing nodes and the node groups' zones; kube-scheduler's PodTopologySpread filter would "
        "keep the rest pending"
    )


def _deal_gang(deal: _Deal, g: Gang) -> tuple[Gang, str | None]:
    """The gang with its carriers pinned, and why pods were left out; when its quorum cannot be dealt out, every
    carrier is pinned nowhere (nothing is bought for it)."""
    mark = len(deal.log)
    pods, left, first = [], 0, None
    for p in g.pending:
        if not p.rules.domain_spread:
            pods.append(p)
            continue
        i = _choose(deal, p)
        if i is None:
            left += 1
            first = first or p
            pods.append(_nowhere(p))
        else:
            pods.append(_place(deal, p, i))
    if first is None:
        return replace(g, pending=tuple(pods)), None
    placed = len(g.pending) - left
    reason = _reason(first, deal, placed, len(g.pending))
    if placed < max(g.min_count - g.bound if g.policy == "gang" else 1, 1):
        deal.undo(mark)
        pods = [_nowhere(p) if p.rules.domain_spread else p for p in g.pending]
        reason += "; nothing is bought for a partial gang" if g.policy == "gang" else ""
    return replace(g, pending=tuple(pods)), reason


def _nowhere(pod: Pod) -> Pod:
    return _pinned(pod, {s.key: NO_DOMAIN for s in pod.rules.domain_spread})


def pin_gangs(snap: ClusterSnapshot) -> tuple[list[Gang], SpreadBook | None]:
    """The solvable gangs as the solver plans them (carriers pinned to their dealt domains), and the deal's book
    (None: no pending pod has such a constraint)."""
    gangs = snap.solvable
    if not any(p.rules.domain_spread for g in gangs for p in g.pending):
        return gangs, None
    sites = _sites(snap)
    at = {x.name: x for x in sites if not x.group}
    deal = _Deal(sites, {}, {}, {})
    carriers: dict[str, tuple[Spread, ...]] = {}
    for g in gangs:
        for p in g.pending:
            for s in p.rules.domain_spread:
                key = (s, p.placement)
                if key not in deal.spreads:
                    deal.spreads[key] = _spread_of(s, p.placement, sites, at, snap.bound)
                    deal.counts[key] = dict(deal.spreads[key].bound)
            if p.rules.domain_spread:
                carriers[p.key] = tuple(
                    deal.spreads[(s, p.placement)] for s in p.rules.domain_spread
                )
    spreading = [g for g in gangs if any(p.rules.domain_spread for p in g.pending)]
    changed: dict[GangKey, Gang] = {}
    held: dict[GangKey, str] = {}
    for g in sorted(
        spreading, key=lambda g: (-g.effective_priority, g.created, g.namespace, g.name)
    ):
        changed[g.key], reason = _deal_gang(deal, g)
        if reason:
            held[g.key] = reason
    return [changed.get(g.key, g) for g in gangs], SpreadBook(carriers, held)
