"""Each planning rule on a small hand-made cluster whose optimal answer is known."""

from __future__ import annotations

import pytest

from builders import GPU_TAINT, gang, group, node, plan_for, pod, podgroup, snapshot
from gangscale.planner import OFF, make_plan
from gangscale.solver.params import SolveOptions
from checker import check_plan

CPU_GROUP = group("cpu", cpu="8", mem="32Gi", price=0.40)
H100 = group("h100", cpu="190", mem="1900Gi", gpu=8, price=55.04, taints=[GPU_TAINT],
             labels={"nvidia.com/gpu.product": "H100"})


def checked(objects, catalog, **kw):
    plan = plan_for(objects, catalog, **kw)
    errors = check_plan(objects, catalog, plan.to_dict())
    assert not errors, errors
    return plan


def test_launcher_plus_eight_gpu_workers_gets_eight_gpu_nodes_and_one_cpu_node():
    objs = [podgroup("train", min_count=9), pod("launcher", cpu="2", mem="4Gi", group="train")]
    objs += [pod(f"w{i}", cpu="96", mem="1000Gi", gpu=8, group="train") for i in range(8)]
    plan = checked(objs, [CPU_GROUP, H100])
    assert plan.scale_up == {"cpu": 1, "h100": 8}
    g = gang(plan, "train")
    assert (g.decision, g.placed) == ("scale-up", 9)
    assert plan.cost_per_hour == pytest.approx(0.40 + 8 * 55.04)
    assert plan.solver.status == "OPTIMAL"
    assert plan.lower_bound_per_hour == pytest.approx(plan.cost_per_hour)


def test_two_one_gpu_pods_get_two_small_nodes_when_cheaper_than_one_big():
    catalog = [group("g1", cpu="4", mem="16Gi", gpu=1, price=1.006), group("g4", cpu="48", mem="192Gi", gpu=4, price=5.672)]
    objs = [pod("a", gpu=1, tolerations=[]), pod("b", gpu=1, tolerations=[])]
    plan = checked(objs, catalog)
    assert plan.scale_up == {"g1": 2}
    # and the other way round when the big node is the cheaper option
    catalog[1]["pricePerHour"] = 1.5
    plan = checked(objs, catalog)
    assert plan.scale_up == {"g4": 1}


def test_existing_free_capacity_is_used_before_buying():
    objs = [node("n1", cpu="4", mem="16Gi", group="cpu"), pod("busy", cpu="1", node="n1"),
            pod("p1", cpu="2"), pod("p2", cpu="1")]
    plan = checked(objs, [CPU_GROUP | {"currentSize": 1}])
    assert plan.scale_up == {} and plan.cost_per_hour == 0
    assert sorted(plan.existing_nodes["n1"]) == ["default/p1", "default/p2"]
    assert {g.decision for g in plan.gangs} == {"fits-existing"}


def test_free_capacity_subtracts_bound_pods_and_skips_unready_nodes():
    objs = [node("n1", cpu="4", mem="16Gi"), pod("busy", cpu="3", node="n1"),
            node("n2", cpu="8", ready=False), node("n3", cpu="8", unschedulable=True),
            pod("p1", cpu="7500m"), pod("p2", cpu="1")]
    plan = checked(objs, [CPU_GROUP])
    assert plan.existing_nodes == {"n1": ["default/p2"]}
    assert plan.scale_up == {"cpu": 1}


def test_gang_below_its_quorum_capacity_buys_nothing():
    objs = [podgroup("job", min_count=4)] + [pod(f"w{i}", gpu=8, cpu="8", group="job") for i in range(4)]
    plan = checked(objs, [H100 | {"maxSize": 3}])
    assert plan.scale_up == {}
    g = gang(plan, "job")
    assert g.decision == "infeasible" and g.placed == 0
    assert "3 of the 4" in g.reason


def test_gang_scales_for_whole_request_and_never_below_min_count():
    objs = [podgroup("job", min_count=2)] + [pod(f"w{i}", cpu="6", group="job") for i in range(4)]
    plan = checked(objs, [CPU_GROUP])
    assert plan.scale_up == {"cpu": 4}
    assert gang(plan, "job").placed == 4
    # limits allow 3: all 3 (above minCount) rather than nothing
    plan = checked(objs, [CPU_GROUP | {"maxSize": 3}])
    assert gang(plan, "job").placed == 3
    # limits allow 1: below minCount 2, nothing
    plan = checked(objs, [CPU_GROUP | {"maxSize": 1}])
    assert gang(plan, "job").placed == 0 and plan.scale_up == {}


def test_bound_members_count_toward_min_count():
    objs = [node("n1", cpu="8", mem="32Gi", group="cpu"), podgroup("job", min_count=4),
            pod("w0", cpu="3", group="job", node="n1"), pod("w1", cpu="3", group="job", node="n1")]
    objs += [pod(f"w{i}", cpu="6", group="job") for i in (2, 3)]
    plan = checked(objs, [CPU_GROUP | {"currentSize": 1, "maxSize": 3}])
    g = gang(plan, "job")
    assert (g.bound, g.placed, g.decision) == (2, 2, "scale-up")
    assert plan.scale_up == {"cpu": 2}


def test_missing_group_object_waits_and_fewer_pods_than_min_count_is_below_quorum():
    objs = [pod("orphan", group="nope"), podgroup("small", min_count=3), pod("s0", group="small"), pod("s1", group="small"),
            pod("fine")]
    plan = checked(objs, [CPU_GROUP])
    assert gang(plan, "nope").decision == "waiting-for-podgroup"
    assert "does not exist" in gang(plan, "nope").reason
    assert gang(plan, "small").decision == "below-quorum"
    assert gang(plan, "fine").decision == "scale-up"
    assert plan.scale_up == {"cpu": 1}


@pytest.mark.parametrize("bad, field", [
    (podgroup("bad", min_count=0), "minCount"),
    ({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "bad"},
      "spec": {"schedulingPolicy": {"weird": {}}}}, "exactly one of 'gang' or 'basic'"),
    ({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "bad"},
      "spec": {"schedulingPolicy": {"gang": {}}}}, "gang.minCount is missing"),
    ({"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "bad"},
      "spec": {"schedulingPolicy": {"gang": {"minCount": "three"}}}}, "must be an integer"),
    ({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "bad"}, "spec": {}},
     "spec.minMember is missing"),
])
def test_invalid_group_objects_get_a_reason_and_the_rest_is_planned(bad, field):
    kind_is_cosched = bad["apiVersion"].startswith("scheduling.x-k8s.io")
    member = pod("m0", cosched="bad") if kind_is_cosched else pod("m0", group="bad")
    plan = plan_for([bad, member, pod("other")], [CPU_GROUP])
    g = gang(plan, "bad")
    assert g.decision == "invalid" and field in g.reason
    assert gang(plan, "other").decision == "scale-up"


def test_bad_pod_quantity_marks_its_gang_invalid_naming_the_field():
    bad = pod("b0", cpu="lots", group="job")
    objs = [podgroup("job", min_count=2), bad, pod("b1", group="job"), pod("other")]
    plan = plan_for(objs, [CPU_GROUP])
    g = gang(plan, "job")
    assert g.decision == "invalid"
    assert "default/b0" in g.reason and "spec.containers[0].resources.requests.cpu" in g.reason
    assert gang(plan, "other").placed == 1


def test_node_selector_and_taints_choose_the_group():
    catalog = [CPU_GROUP, H100, group("a100", cpu="90", mem="1100Gi", gpu=8, price=21.96, taints=[GPU_TAINT],
                                      labels={"nvidia.com/gpu.product": "A100"})]
    objs = [pod("on-h100", cpu="8", gpu=8, selector={"nvidia.com/gpu.product": "H100"}),
            pod("any-gpu", cpu="8", gpu=8),
            pod("no-toleration", cpu="8", gpu=8, tolerations=[])]
    plan = checked(objs, catalog, scheduler=OFF)  # the solver's own choice (observe mode: see tests/scheduling)
    assert plan.scale_up == {"h100": 1, "a100": 1}
    assert gang(plan, "no-toleration").decision == "infeasible"
    assert "not tolerated" in gang(plan, "no-toleration").reason


def test_noexecute_taints_need_tolerations_and_prefer_no_schedule_does_not():
    catalog = [group("ne", taints=[{"key": "dedicated", "value": "batch", "effect": "NoExecute"}], price=0.1),
               group("pref", taints=[{"key": "spot", "value": "", "effect": "PreferNoSchedule"}], price=0.2)]
    objs = [pod("plain", cpu="6"), pod("tolerant", cpu="6", tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoExecute"}])]
    plan = checked(objs, catalog)
    assert plan.scale_up == {"ne": 1, "pref": 1}


@pytest.mark.parametrize("expr, expected", [
    ({"key": "tier", "operator": "In", "values": ["gold"]}, "gold"),
    ({"key": "tier", "operator": "NotIn", "values": ["gold"]}, "silver"),
    ({"key": "ssd", "operator": "Exists"}, "gold"),
    ({"key": "ssd", "operator": "DoesNotExist"}, "silver"),
    ({"key": "gen", "operator": "Gt", "values": ["5"]}, "gold"),
    ({"key": "gen", "operator": "Lt", "values": ["5"]}, "silver"),
])
def test_required_node_affinity_operators(expr, expected):
    catalog = [group("gold", price=2.0, labels={"tier": "gold", "ssd": "yes", "gen": "7"}),
               group("silver", price=3.0, labels={"tier": "silver", "gen": "3"})]
    plan = checked([pod("p", affinity=[[expr]])], catalog)
    assert plan.scale_up == {expected: 1}


def test_affinity_terms_are_ored():
    catalog = [group("gold", price=2.0, labels={"tier": "gold"}), group("silver", price=1.0, labels={"tier": "silver"})]
    terms = [[{"key": "tier", "operator": "In", "values": ["gold"]}], [{"key": "tier", "operator": "In", "values": ["silver"]}]]
    plan = checked([pod("p", affinity=terms)], catalog)
    assert plan.scale_up == {"silver": 1}


def test_max_size_minus_current_size_limits_growth():
    objs = [podgroup("job", min_count=3)] + [pod(f"w{i}", cpu="6", group="job") for i in range(3)]
    plan = checked(objs, [CPU_GROUP | {"maxSize": 5, "currentSize": 3}])
    # currentSize 3 with no registered node: 3 upcoming nodes carry the gang; nothing new is bought
    assert plan.scale_up == {}
    assert sorted(plan.existing_nodes) == ["cpu/upcoming-1", "cpu/upcoming-2", "cpu/upcoming-3"]
    full = [node(f"n{i}", cpu="1", mem="1Gi", group="cpu") for i in range(3)]
    plan = checked(full + objs, [CPU_GROUP | {"maxSize": 4, "currentSize": 3}])
    assert gang(plan, "job").decision == "infeasible" and plan.scale_up == {}


def test_topology_constraint_keeps_the_gang_in_one_zone():
    zone_a = group("gpu-a", cpu="190", mem="1900Gi", gpu=8, price=50.0, max_size=2, taints=[GPU_TAINT],
                   labels={"topology.kubernetes.io/zone": "a"})
    zone_b = group("gpu-b", cpu="190", mem="1900Gi", gpu=8, price=55.0, max_size=4, taints=[GPU_TAINT],
                   labels={"topology.kubernetes.io/zone": "b"})
    objs = [podgroup("job", min_count=3, topology=["topology.kubernetes.io/zone"])]
    objs += [pod(f"w{i}", cpu="8", gpu=8, group="job") for i in range(3)]
    plan = checked(objs, [zone_a, zone_b])
    assert plan.scale_up == {"gpu-b": 3}
    assert gang(plan, "job").topology_domain == {"topology.kubernetes.io/zone": "b"}
    # no single zone can hold it: nothing, even though both zones together could
    plan = checked(objs, [zone_a, zone_b | {"maxSize": 2}])
    assert plan.scale_up == {} and gang(plan, "job").decision == "infeasible"
    assert "one topology.kubernetes.io/zone domain" in gang(plan, "job").reason


def test_higher_priority_gang_wins_when_limits_cannot_serve_both():
    objs = [podgroup("low", min_count=2, priority=10), podgroup("high", min_count=2, priority=1000)]
    objs += [pod(f"l{i}", cpu="6", group="low") for i in range(2)]
    objs += [pod(f"h{i}", cpu="6", group="high") for i in range(2)]
    plan = checked(objs, [CPU_GROUP | {"maxSize": 3}])
    assert gang(plan, "high").decision == "scale-up"
    low = gang(plan, "low")
    assert low.decision == "deferred" and "fits alone" in low.reason


def test_pod_priority_is_used_when_the_group_has_none():
    objs = [podgroup("low", min_count=2), podgroup("high", min_count=2)]
    objs += [pod(f"l{i}", cpu="6", group="low", priority=1) for i in range(2)]
    objs += [pod(f"h{i}", cpu="6", group="high", priority=100) for i in range(2)]
    plan = checked(objs, [CPU_GROUP | {"maxSize": 2}])
    assert gang(plan, "high").placed == 2 and gang(plan, "low").placed == 0


def test_satisfying_a_gang_beats_placing_more_loose_pods():
    objs = [podgroup("gang", min_count=2)] + [pod(f"g{i}", cpu="6", group="gang") for i in range(2)]
    objs += [pod(f"loose{i}", cpu="2") for i in range(9)]  # 9 loose pods fit 3 nodes
    plan = checked(objs, [CPU_GROUP | {"maxSize": 3}], scheduler=OFF)
    assert gang(plan, "gang").placed == 2
    # the gang's two nodes keep 2 cpu each (one loose pod each); the third node takes 4
    assert sum(1 for g in plan.gangs if g.name.startswith("loose") and g.placed) == 6


def test_cheapest_set_among_equal_outcomes():
    catalog = [group("big", cpu="16", mem="64Gi", price=0.70), group("small", cpu="8", mem="32Gi", price=0.40)]
    objs = [podgroup("job", min_count=3)] + [pod(f"w{i}", cpu="6", mem="2Gi", group="job") for i in range(3)]
    plan = checked(objs, catalog)
    # 3 small ($1.20), 2 big ($1.40) or big+small ($1.10): 2 pods of 6 cpu share a 16-cpu node
    assert plan.scale_up == {"big": 1, "small": 1}
    assert plan.cost_per_hour == pytest.approx(1.10)


def test_fewer_nodes_break_cost_ties():
    catalog = [group("one", cpu="16", mem="64Gi", price=0.80), group("half", cpu="8", mem="32Gi", price=0.40)]
    plan = checked([pod(f"p{i}", cpu="7") for i in range(2)], catalog)
    assert plan.scale_up == {"one": 1}


def test_every_api_flavour_is_read():
    objs = [
        podgroup("native36", min_count=2), pod("a0", group="native36"), pod("a1", group="native36"),
        podgroup("native37", min_count=1, version="v1beta1"), pod("b0", group="native37"),
        {"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": "wl", "namespace": "default"},
         "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]}},
        pod("c0", workload={"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "r1"}),
        pod("c1", workload={"name": "wl", "podGroup": "workers", "podGroupReplicaKey": "r1"}),
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "co", "namespace": "default"},
         "spec": {"minMember": 2}},
        pod("d0", cosched="co"), pod("d1", cosched="co"),
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": {"name": "vc", "namespace": "default"},
         "spec": {"minMember": 2}},
        pod("e0", volcano="vc"), pod("e1", volcano="vc"),
        pod("loose"),
    ]
    plan = plan_for(objs, [CPU_GROUP])
    apis = {g.name: (g.api, g.policy, g.min_count, g.placed) for g in plan.gangs}
    assert apis == {
        "native36": ("scheduling.k8s.io/v1alpha2", "gang", 2, 2),
        "native37": ("scheduling.k8s.io/v1beta1", "gang", 1, 1),
        "wl/workers/r1": ("scheduling.k8s.io/v1alpha1", "gang", 2, 2),
        "co": ("scheduling.x-k8s.io/v1alpha1", "gang", 2, 2),
        "vc": ("scheduling.volcano.sh/v1beta1", "gang", 2, 2),
        "loose": ("none", "basic", 1, 1),
    }


def test_workload_gang_without_replica_key_and_missing_pod_group():
    objs = [{"apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload", "metadata": {"name": "wl"},
             "spec": {"podGroups": [{"name": "g", "policy": {"basic": {}}}]}},
            pod("x", workload={"name": "wl", "podGroup": "g"}), pod("y", workload={"name": "wl", "podGroup": "other"})]
    plan = plan_for(objs, [CPU_GROUP])
    assert gang(plan, "wl/g").policy == "basic" and gang(plan, "wl/g").placed == 1
    assert gang(plan, "wl/other").decision == "waiting-for-podgroup"


def test_scheduling_gated_and_terminating_pods_are_not_planned():
    gated = pod("gated", schedulingGates=[{"name": "example.com/wait"}])
    dying = pod("dying", extra={"metadata": {"name": "dying", "namespace": "default",
                                             "deletionTimestamp": "2026-11-30T00:00:00Z"}})
    plan = plan_for([gated, dying, pod("ok")], [CPU_GROUP])
    assert [g.name for g in plan.gangs] == ["ok"]


def test_timeout_still_returns_a_valid_plan():
    objs = []
    for j in range(12):
        objs.append(podgroup(f"job{j}", min_count=3))
        objs += [pod(f"j{j}-{i}", cpu=str(1 + (i + j) % 5), mem=f"{2 + j}Gi", group=f"job{j}") for i in range(5)]
    catalog = [group(f"g{i}", cpu=str(4 * (i + 1)), mem=f"{16 * (i + 1)}Gi", price=0.2 * (i + 1) * (1.1 if i % 2 else 1))
               for i in range(5)]
    plan = checked(objs, catalog, time_limit=0.3, scheduler=OFF)
    assert all(g.decision == "scale-up" for g in plan.gangs)
    assert plan.lower_bound_per_hour <= plan.cost_per_hour
    observed = checked(objs, catalog, time_limit=0.3)  # observe mode: valid too, whatever the repair had time for
    assert observed.lower_bound_per_hour <= observed.cost_per_hour


def test_once_both_gaps_close_the_planner_stops_long_before_a_60_second_limit():
    # issue 11: "Stop early when both gaps close" (three 4-pod gangs and seven 3-cpu pods, all of it fits)
    objs = [podgroup(f"g{i}", min_count=4) for i in range(3)]
    objs += [pod(f"g{i}-{j}", cpu="1", mem="1Gi", group=f"g{i}") for i in range(3) for j in range(4)]
    objs += [pod(f"x{j}", cpu="3", mem="5Gi") for j in range(7)]
    catalog = [group("a", cpu="4", mem="16Gi", price=0.2, max_size=100),
               group("b", cpu="8", mem="32Gi", price=0.39, max_size=100)]
    plan = make_plan(snapshot(objs, catalog), SolveOptions(time_limit=60.0), OFF)
    assert plan.solver.status == "OPTIMAL" and plan.solver.gap == 0
    assert plan.solver.gangs_started == plan.solver.gangs_upper_bound == 3
    assert plan.solver.seconds < 20  # 0.03 s here; a solver that used its limit would take 60
    assert not check_plan(objs, catalog, plan.to_dict())
