"""Property: every plan for a random cluster passes the independent checker."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import GPU_TAINT, GPU_TOL, group, node, plan_for, pod, podgroup
from checker import check_plan

ZONES = ["a", "b"]


HOST = "kubernetes.io/hostname"


def _zone_spread(draw, sel: dict) -> dict:
    """A DoNotSchedule spread on the zone with random maxSkew, minDomains, inclusion policies and matchLabelKeys."""
    c = {"maxSkew": draw(st.integers(1, 2)), "topologyKey": "topology.kubernetes.io/zone",
         "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}
    if draw(st.booleans()):
        c["minDomains"] = draw(st.integers(1, 3))
    for name in ("nodeAffinityPolicy", "nodeTaintsPolicy"):
        if draw(st.booleans()):
            c[name] = draw(st.sampled_from(["Honor", "Ignore"]))
    if draw(st.booleans()):
        c["matchLabelKeys"] = ["job"]
    return c


def _pod_rules(draw, p: dict, j: int) -> None:
    """Now and then: pod labels, hostname anti-affinity, hostname or zone spread, a hostPort, or an unsupported rule."""
    p["metadata"]["labels"] = {"app": draw(st.sampled_from(["w", "x"])), "job": f"pg{j}"}
    sel = {"matchLabels": {"app": draw(st.sampled_from(["w", "x"]))}}
    rule = draw(st.sampled_from(["none", "none", "anti", "spread", "port", "zone-anti", "zone-spread"]))
    if rule == "anti":
        p["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOST, "labelSelector": sel, **({"matchLabelKeys": ["job"]} if draw(st.booleans()) else {})}]}
    elif rule == "spread":
        p["spec"]["topologySpreadConstraints"] = [{"maxSkew": draw(st.integers(1, 3)), "topologyKey": HOST,
                                                   "whenUnsatisfiable": "DoNotSchedule", "labelSelector": sel}]
    elif rule == "zone-spread":
        p["spec"]["topologySpreadConstraints"] = [_zone_spread(draw, sel)]
    elif rule == "port":
        p["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": draw(st.sampled_from([9000, 9001]))}]
    elif rule == "zone-anti":  # unsupported: the gang must come out invalid, never planned
        p["spec"].setdefault("affinity", {})["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": sel}]}


@st.composite
def clusters(draw):
    catalog = []
    for i in range(draw(st.integers(1, 4))):
        gpu = draw(st.sampled_from([0, 0, 1, 4, 8]))
        labels = {"topology.kubernetes.io/zone": draw(st.sampled_from(ZONES)), "tier": draw(st.sampled_from(["gold", "silver"]))}
        catalog.append(group(
            f"g{i}", cpu=str(draw(st.sampled_from([2, 4, 8, 16]))), mem=f"{draw(st.sampled_from([4, 16, 64]))}Gi",
            pods=str(draw(st.sampled_from([4, 110]))), gpu=gpu, price=draw(st.sampled_from([0.1, 0.4, 0.75, 1.0, 3.2])),
            max_size=draw(st.integers(0, 6)), labels=labels,
            taints=[GPU_TAINT] if gpu and draw(st.booleans()) else []))
    objects = []
    for n in range(draw(st.integers(0, 3))):
        g = draw(st.sampled_from(catalog))
        name = f"node{n}"
        objects.append(node(name, cpu=g["allocatable"]["cpu"], mem=g["allocatable"]["memory"], pods="110",
                            gpu=int(g["allocatable"].get("nvidia.com/gpu", 0)), group=g["name"],
                            labels=dict(g["labels"]), taints=g["taints"], ready=draw(st.booleans())))
        g["currentSize"] = g.get("currentSize", 0) + 1
        g["maxSize"] = max(g["maxSize"], g["currentSize"])
        for b in range(draw(st.integers(0, 2))):
            bp = pod(f"bound-{n}-{b}", cpu="500m", mem="512Mi", node=name, tolerations=[GPU_TOL])
            _pod_rules(draw, bp, -1)
            objects.append(bp)
    for j in range(draw(st.integers(1, 4))):
        policy = draw(st.sampled_from(["gang", "gang", "basic", "none"]))
        count = draw(st.integers(1, 5))
        topo = ["topology.kubernetes.io/zone"] if policy == "gang" and draw(st.booleans()) else None
        if policy != "none":
            objects.append(podgroup(f"pg{j}", min_count=draw(st.integers(1, count)), policy=policy, topology=topo,
                                    priority=draw(st.sampled_from([None, 0, 100]))))
        for i in range(count):
            kw = {}
            if draw(st.booleans()):
                kw["selector"] = {"tier": draw(st.sampled_from(["gold", "silver"]))}
            if draw(st.integers(0, 3)) == 0:
                kw["affinity"] = [[{"key": "topology.kubernetes.io/zone", "operator": draw(st.sampled_from(["In", "NotIn"])),
                                    "values": [draw(st.sampled_from(ZONES))]}]]
            p = pod(
                f"p{j}-{i}", cpu=draw(st.sampled_from(["250m", "1", "2", "3500m", "7"])),
                mem=draw(st.sampled_from(["256Mi", "2Gi", "8Gi"])), gpu=draw(st.sampled_from([0, 0, 1, 2, 8])),
                tolerations=[GPU_TOL] if draw(st.booleans()) else [],
                group=f"pg{j}" if policy != "none" else None, **kw)
            _pod_rules(draw, p, j)
            objects.append(p)
    for d in range(draw(st.integers(0, 2))):  # DaemonSets: their pods' room comes off every new node they run on
        spec = {"containers": [{"name": "agent", "resources": {"requests": {
            "cpu": draw(st.sampled_from(["100m", "1", "3"])), "memory": "128Mi"}}}]}
        if draw(st.booleans()):
            spec["nodeSelector"] = {"tier": draw(st.sampled_from(["gold", "silver"]))}
        if draw(st.booleans()):
            spec["tolerations"] = [GPU_TOL]
        objects.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": f"ds{d}", "namespace": "sys"},
                        "spec": {"template": {"metadata": {"labels": {"app": f"ds{d}"}}, "spec": spec}}})
    return objects, catalog


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_every_plan_passes_the_independent_checker(cluster):
    objects, catalog = cluster
    plan = plan_for(objects, catalog, time_limit=2.0)
    errors = check_plan(objects, catalog, plan.to_dict())
    assert not errors, errors


@st.composite
def zone_spread_clusters(draw):
    """Every pending pod spreads over the zones (1 to 3 of them, some groups tainted), beside bound matching pods on
    existing nodes of every zone, cordoned and NotReady ones too."""
    zones = ZONES + ["c"]
    catalog = [group(f"g{i}", cpu=str(draw(st.sampled_from([2, 4, 8]))), mem="16Gi", max_size=draw(st.integers(0, 4)),
                     price=draw(st.sampled_from([0.1, 0.4, 1.0])), labels={"topology.kubernetes.io/zone": zones[i % 3]},
                     taints=[GPU_TAINT] if draw(st.integers(0, 3)) == 0 else [])
               for i in range(draw(st.integers(1, 4)))]
    objects = []
    for n in range(draw(st.integers(0, 3))):
        name = f"node{n}"
        objects.append(node(name, cpu="4", mem="16Gi", labels={"topology.kubernetes.io/zone": draw(st.sampled_from(zones))},
                            ready=draw(st.integers(0, 4)) > 0, unschedulable=draw(st.integers(0, 4)) == 0))
        for b in range(draw(st.integers(0, 3))):
            bp = pod(f"bound-{n}-{b}", cpu="500m", mem="512Mi", node=name)
            bp["metadata"]["labels"] = {"app": draw(st.sampled_from(["w", "x"])), "job": f"pg{draw(st.integers(0, 2))}"}
            objects.append(bp)
    for j in range(draw(st.integers(1, 3))):
        policy = draw(st.sampled_from(["gang", "basic", "none"]))
        count = draw(st.integers(1, 6))
        if policy != "none":
            objects.append(podgroup(f"pg{j}", min_count=draw(st.integers(1, count)), policy=policy))
        for i in range(count):
            p = pod(f"p{j}-{i}", cpu=draw(st.sampled_from(["500m", "1", "3"])), mem="1Gi",
                    tolerations=[GPU_TOL] if draw(st.booleans()) else [], group=f"pg{j}" if policy != "none" else None)
            p["metadata"]["labels"] = {"app": draw(st.sampled_from(["w", "x"])), "job": f"pg{j}"}
            p["spec"]["topologySpreadConstraints"] = [_zone_spread(draw, {"matchLabels": {"app": "w"}})]
            objects.append(p)
    return objects, catalog


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zone_spread_clusters())
def test_every_plan_keeps_every_zone_spread_within_its_skew_per_the_checker(cluster):
    objects, catalog = cluster
    plan = plan_for(objects, catalog, time_limit=1.0)
    errors = check_plan(objects, catalog, plan.to_dict())
    assert not errors, errors


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.sampled_from([0.3, 1.0, 2.0]))
def test_no_plan_costs_more_than_the_greedy_plan_at_equal_gangs_and_pods(cluster, time_limit):
    from builders import snapshot
    from gangscale.planner import OFF, _repair, make_plan
    from gangscale.solver.greedy import greedy
    from gangscale.solver.params import SolveOptions
    from gangscale.solver.problem import MICRO, build_problem

    objects, catalog = cluster
    snap = snapshot(objects, catalog)
    prob = build_problem(snap)
    hint = greedy(prob)
    plan = make_plan(snap, SolveOptions(time_limit=time_limit, workers=1), OFF)  # the solver's own plan
    assert not check_plan(objects, catalog, plan.to_dict())
    solvable = {g.gang.key for g in prob.gangs}
    placed = sum(g.placed for g in plan.gangs)
    gangs = sum(1 for g in plan.gangs if g.placed and (g.namespace, g.name, g.api) in solvable)
    if (gangs, placed) == (sum(hint.satisfied), sum(hint.y)):
        assert plan.cost_per_hour <= hint.cost(prob) / MICRO + 1e-6
    # the greedy plan, or its cost repair by LP prices when that ran and was cheaper (the fill only adds pods)
    if plan.solver.greedy_only and (gangs, placed) == (sum(hint.satisfied), sum(hint.y)):
        repaired, _ = _repair(prob, hint, None)
        assert plan.cost_per_hour in {round(hint.cost(prob) / MICRO, 6), round(repaired.cost(prob) / MICRO, 6)}
    assert 0 <= plan.lower_bound_per_hour <= plan.cost_per_hour
    assert plan.lower_bound_per_hour > 0 or plan.cost_per_hour == 0  # a bound always (every price here is > 0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.booleans())
def test_the_greedy_plan_alone_passes_the_checker_in_either_order(cluster, quorum_first):
    """The greedy is the fallback plan: quorum-first or whole-gang-first, it must be valid on its own."""
    from builders import snapshot
    from gangscale.planner import _render
    from gangscale.solver.greedy import greedy
    from gangscale.solver.problem import build_problem

    objects, catalog = cluster
    snap = snapshot(objects, catalog)
    prob = build_problem(snap)
    a = greedy(prob, quorum_first=quorum_first)
    plan = _render(snap, prob, a, a.cost(prob), 0)
    assert not check_plan(objects, catalog, plan.to_dict())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_an_optimal_plan_has_both_gaps_closed(cluster):
    objects, catalog = cluster
    plan = plan_for(objects, catalog, time_limit=2.0)
    sv = plan.solver
    assert sv.gangs_started <= sv.gangs_upper_bound
    assert sum(t.gangs_upper_bound for t in sv.by_priority) == sv.gangs_upper_bound
    if sv.status == "OPTIMAL":
        assert sv.gang_gap == 0 and plan.lower_bound_per_hour == plan.cost_per_hour


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_the_whole_gang_repair_done_apart_is_the_greedys_own_and_stays_valid(cluster):
    """The planner runs the greedy without its whole-gang repair and calls `repacked` only when the LP repair
    misses the cost target: apart, it must give what the greedy gives with it, and a valid plan."""
    from builders import snapshot
    from gangscale.planner import _render
    from gangscale.solver.greedy import greedy, repacked
    from gangscale.solver.problem import build_problem

    objects, catalog = cluster
    snap = snapshot(objects, catalog)
    prob = build_problem(snap)
    raw, whole = greedy(prob, repack=False), greedy(prob)
    again = repacked(prob, raw) or raw
    assert (again.y, again.bins, again.cost(prob)) == (whole.y, whole.bins, whole.cost(prob))
    plan = _render(snap, prob, again, again.cost(prob), 0)
    assert not check_plan(objects, catalog, plan.to_dict())
