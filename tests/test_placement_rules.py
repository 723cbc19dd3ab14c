"""Pod-to-pod placement rules: modelled per node, or the gang is `invalid` with the field named.

Upstream semantics: kube-scheduler's InterPodAffinity, NodePorts and PodTopologySpread filter plugins
(kubernetes/kubernetes pkg/scheduler/framework/plugins/{interpodaffinity,nodeports,podtopologyspread}),
KEP-895 (spread), KEP-3022 (minDomains), KEP-3243 / KEP-3633 (matchLabelKeys).
"""

from __future__ import annotations

import copy

import pytest

from builders import gang, group, node, plan_for, pod, podgroup
from checker import check_plan

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def anti(selector: dict | None = None, key: str = HOST, **extra) -> dict:
    term = {"topologyKey": key, "labelSelector": {"matchLabels": selector or {"app": "w"}}, **extra}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def spread(skew: int, key: str = HOST, when: str = "DoNotSchedule", **extra) -> list[dict]:
    return [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
             "labelSelector": {"matchLabels": {"app": "w"}}, **extra}]


def member(name: str, pg: str = "pg", labels: dict | None = None, **spec) -> dict:
    p = pod(name, cpu="1", mem="1Gi", group=pg, **spec)
    p["metadata"]["labels"] = labels if labels is not None else {"app": "w"}
    return p


def with_port(port: int, host_network: bool = False) -> dict:
    key = "containerPort" if host_network else "hostPort"
    return {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                            "ports": [{key: port, **({} if host_network else {"containerPort": 8080})}]}]}


CATALOG = [group("g", cpu="16", mem="64Gi", max_size=10)]


def planned(objects: list[dict], catalog: list[dict] = CATALOG):
    plan = plan_for(objects, catalog, time_limit=3.0)
    errors = check_plan(objects, catalog, plan.to_dict())
    assert not errors, errors
    return plan


def per_node(plan) -> list[int]:
    return sorted([len(n.pods) for n in plan.new_nodes] + [len(v) for v in plan.existing_nodes.values()])


def _gang(n: int, spec_patch: dict, pg: str = "pg", labels: dict | None = None) -> list[dict]:
    objs = [podgroup(pg, min_count=n)]
    for i in range(n):
        p = member(f"{pg}-{i}", pg, labels)
        p["spec"].update(copy.deepcopy(spec_patch))
        objs.append(p)
    return objs


def test_a_4_pod_gang_with_hostname_anti_affinity_gets_a_node_each():
    plan = planned(_gang(4, {"affinity": anti()}))
    assert gang(plan, "pg").placed == 4
    assert per_node(plan) == [1, 1, 1, 1]


def test_a_4_pod_gang_using_one_host_port_gets_a_node_each():
    plan = planned(_gang(4, with_port(9000)))
    assert gang(plan, "pg").placed == 4 and per_node(plan) == [1, 1, 1, 1]


def test_with_host_network_every_container_port_is_a_host_port():
    plan = planned(_gang(3, {**with_port(9000, host_network=True), "hostNetwork": True}))
    assert per_node(plan) == [1, 1, 1]


def test_different_host_ports_may_share_a_node():
    objs = _gang(1, with_port(9000), pg="a") + _gang(1, with_port(9001), pg="b")
    assert per_node(planned(objs)) == [2]


def test_spread_max_skew_2_puts_at_most_2_members_on_a_node():
    plan = planned(_gang(5, {"topologySpreadConstraints": spread(2)}))
    assert gang(plan, "pg").placed == 5
    assert max(per_node(plan)) <= 2 and len(plan.new_nodes) == 3


def test_spread_schedule_anyway_is_a_score_and_is_ignored():
    plan = planned(_gang(4, {"topologySpreadConstraints": spread(1, when="ScheduleAnyway")}))
    assert per_node(plan) == [4]


def test_an_existing_node_running_a_matching_pod_gets_no_anti_affine_member():
    bound = pod("old", cpu="1", node="n1")
    bound["metadata"]["labels"] = {"app": "w"}
    objs = [node("n1", cpu="16", mem="64Gi"), node("n2", cpu="16", mem="64Gi"), bound] + _gang(2, {"affinity": anti()})
    plan = planned(objs)
    assert "n1" not in plan.existing_nodes
    assert len(plan.existing_nodes.get("n2", [])) == 1 and len(plan.new_nodes) == 1


def test_an_existing_node_using_the_host_port_gets_no_member_using_it():
    bound = pod("old", cpu="1", node="n1", **with_port(9000))
    objs = [node("n1", cpu="16", mem="64Gi"), bound] + _gang(2, with_port(9000))
    plan = planned(objs)
    assert "n1" not in plan.existing_nodes and len(plan.new_nodes) == 2


def test_a_bound_pods_anti_affinity_keeps_pods_it_matches_off_its_node():
    bound = pod("guard", cpu="1", node="n1", affinity=None)
    bound["spec"]["affinity"] = anti({"role": "batch"})
    objs = [node("n1", cpu="16", mem="64Gi"), bound] + _gang(2, {}, labels={"role": "batch"})
    plan = planned(objs)
    assert "n1" not in plan.existing_nodes and gang(plan, "pg").placed == 2


def test_match_label_keys_scopes_anti_affinity_to_the_own_job():
    term = anti(matchLabelKeys=["job"])
    objs = _gang(2, {"affinity": term}, pg="a", labels={"app": "w", "job": "a"}) + \
        _gang(2, {"affinity": term}, pg="b", labels={"app": "w", "job": "b"})
    plan = planned(objs)
    assert per_node(plan) == [2, 2]  # one of each job per node, never two of one job


def test_anti_affinity_towards_another_namespace_does_not_spread_the_gang():
    plan = planned(_gang(3, {"affinity": anti(namespaces=["elsewhere"])}))
    assert per_node(plan) == [3]


def test_too_few_nodes_for_an_anti_affine_gang_buy_nothing():
    plan = planned(_gang(4, {"affinity": anti()}), [group("g", cpu="16", mem="64Gi", max_size=3)])
    g = gang(plan, "pg")
    assert g.placed == 0 and g.decision == "infeasible" and not plan.new_nodes


@pytest.mark.parametrize("patch, field", [
    ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchLabels": {"app": "w"}}}]}}},
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution"),
    ({"affinity": anti(key=ZONE)}, "podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"),
    ({"affinity": anti(namespaceSelector={"matchLabels": {"team": "x"}})}, "[0].namespaceSelector"),
    ({"topologySpreadConstraints": spread(1, key="")}, "spec.topologySpreadConstraints[0].topologyKey"),
    ({"topologySpreadConstraints": spread(1, key=ZONE, nodeTaintsPolicy="Sometimes")},
     "spec.topologySpreadConstraints[0].nodeTaintsPolicy"),
    ({"topologySpreadConstraints": spread(0)}, "spec.topologySpreadConstraints[0].maxSkew"),
    ({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOST, "labelSelector": {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}}]}}},
     "labelSelector.matchExpressions[0]"),
    (with_port("x"), "spec.containers[0].ports[0].hostPort"),  # type: ignore[arg-type]
])
def test_an_unsupported_placement_rule_makes_the_gang_invalid_naming_the_field(patch, field):
    objs = _gang(2, patch) + _gang(1, {}, pg="ok", labels={})
    plan = planned(objs)
    g = gang(plan, "pg")
    assert g.decision == "invalid" and field in g.reason and g.placed == 0
    assert gang(plan, "ok").placed == 1  # the rest is planned


def test_a_bound_pod_with_an_unsupported_rule_still_holds_its_capacity():
    bound = pod("big", cpu="15", node="n1")
    bound["spec"]["affinity"] = anti(key=ZONE)
    objs = [node("n1", cpu="16", mem="64Gi"), bound] + _gang(2, {}, labels={})
    plan = planned(objs)
    assert "n1" not in plan.existing_nodes and gang(plan, "pg").placed == 2


def test_the_checker_rejects_anti_affine_pods_sharing_a_node():
    objs = _gang(2, {"affinity": anti()})
    plan = plan_for(objs, CATALOG, time_limit=2.0).to_dict()
    both = [p for n in plan["newNodes"] for p in n["pods"]]
    plan["newNodes"] = [{**plan["newNodes"][0], "pods": both}]
    plan["scaleUp"] = {"g": 1}
    plan["costPerHour"] = 1.0
    assert any("anti-affinity" in e for e in check_plan(objs, CATALOG, plan))


def test_the_checker_rejects_a_spread_skew_above_max_skew():
    objs = [node("n0", cpu="16", mem="64Gi")] + _gang(3, {"topologySpreadConstraints": spread(1)})
    plan = plan_for(objs, CATALOG, time_limit=2.0).to_dict()
    plan["existingNodes"] = {"n0": [f"default/pg-{i}" for i in range(3)]}
    plan["newNodes"], plan["scaleUp"], plan["costPerHour"], plan["lowerBoundPerHour"] = [], {}, 0.0, 0.0
    objs.append(node("n9", cpu="16", mem="64Gi"))  # an empty eligible node keeps the minimum at 0
    assert any("maxSkew" in e for e in check_plan(objs, CATALOG, plan))
