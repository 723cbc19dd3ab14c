"""The scheduler model's PodTopologySpread filter on zones, worked by hand from upstream's judging criteria:
matchNum + selfMatch - minMatchNum <= maxSkew over the counted nodes' domains, minMatchNum 0 below minDomains
(kubernetes pkg/scheduler/framework/plugins/podtopologyspread/filtering.go, common.go; KEP-3022, KEP-3094)."""

from __future__ import annotations

from dataclasses import replace

from gangscale.model import (
    DomainSpread,
    LabelSelector,
    PodRules,
    PodTerm,
    Requirement,
    Taint,
)
from gangscale.scheduling import simulate

from .helpers import gang, lone, mkpod, node

ZONE = "topology.kubernetes.io/zone"
TERM = PodTerm(LabelSelector((("app", "web"),)), frozenset({"team-a"}))


def web(name: str, skew: int = 1, **spread) -> object:
    rules = PodRules(domain_spread=(DomainSpread(TERM, ZONE, skew, **spread),))
    return replace(mkpod(name, 1000, 1), labels={"app": "web"}, rules=rules)


def zones(*names: str, kind: str = "existing") -> list:
    return [node(f"n-{z}", 16000, 64, labels={ZONE: z}, kind=kind) for z in names]


def bound_web(name: str, where: str):
    return replace(mkpod(name, 100, 0), labels={"app": "web"}, node_name=where, phase="Running")


def test_a_pod_goes_to_the_zone_with_fewer_matching_pods_when_the_other_is_at_the_skew():
    res = simulate(zones("a", "b"), [lone(web("w0"))], bound=[bound_web("old", "n-a")])
    assert res.placement["team-a/w0"] == "n-b"  # a: 1 + 1 - 0 = 2 > 1


def test_a_gang_of_four_with_max_skew_1_over_two_zones_lands_two_and_two():
    res = simulate(zones("a", "b"), [gang("g", [web(f"w{i}") for i in range(4)], min_count=4)])
    where = sorted(res.placement.values())
    assert where == ["n-a", "n-a", "n-b", "n-b"]


def test_a_node_without_the_zone_label_never_takes_a_carrier():
    nodes = [node("bare", 16000, 64)]
    res = simulate(nodes, [lone(web("w0"))])
    assert "team-a/w0" not in res.placement


def test_below_min_domains_the_minimum_is_zero_so_one_zone_holds_only_max_skew():
    pods = [web(f"w{i}", min_domains=3) for i in range(3)]  # a third pod: 1 + 1 - 0 > 1 in either zone
    res = simulate(zones("a", "b"), [lone(p) for p in pods])
    assert sorted(res.placement.values()) == ["n-a", "n-b"]


def test_node_affinity_policy_ignore_counts_a_zone_the_pod_cannot_go_to():
    only_a = (Requirement(ZONE, "In", ("a",)),)
    honor = replace(web("h0"), placement=replace(mkpod("x", 1, 1).placement, affinity=(only_a,)))
    ignore = replace(honor, name="i0", rules=PodRules(domain_spread=(DomainSpread(TERM, ZONE, 1, 1, False),)))
    bound = [bound_web("old", "n-a")]
    # Honor: only zone a counts, its minimum is its own count, so a takes the pod (1 + 1 - 1 <= 1)
    assert simulate(zones("a", "b"), [lone(honor)], bound=bound).placement["team-a/h0"] == "n-a"
    # Ignore: zone b (0) counts too: a would be 1 + 1 - 0 = 2 > 1
    assert "team-a/i0" not in simulate(zones("a", "b"), [lone(ignore)], bound=bound).placement


def test_node_taints_policy_honor_leaves_an_untolerated_zone_out_of_the_minimum():
    nodes = zones("a") + [node("n-b", 16000, 64, labels={ZONE: "b"}, kind="existing",
                               taints=(Taint("dedicated", "x", "NoSchedule"),))]
    bound = [bound_web("old", "n-a")]
    honor = replace(web("t0"), rules=PodRules(domain_spread=(DomainSpread(TERM, ZONE, 1, 1, True, True),)))
    assert simulate(nodes, [lone(honor)], bound=bound).placement["team-a/t0"] == "n-a"
    assert "team-a/t1" not in simulate(nodes, [lone(web("t1"))], bound=bound).placement  # Ignore: b counts 0
