"""Kueue Workloads: one gang of the pod sets; nothing is bought before Kueue admits it unless asked."""

from __future__ import annotations

import copy

import pytest

from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.planner import make_plan
from gangscale.snapshot import build_snapshot
from gangscale.solver.params import SolveOptions
from tests.builders import gang, group, plan_for, pod
from tests.kube.conftest import load_fixture

CATALOG = [group("cpu8", cpu="8", mem="32Gi", price=1.0)]


def plan_unadmitted(objects: list[dict]):
    groups, warnings = parse_catalog(CATALOG)
    snap = build_snapshot(ingest(objects, plan_unadmitted=True), groups, warnings)
    return make_plan(snap, SolveOptions(time_limit=10))


def test_an_unadmitted_workload_waits_for_admission_and_the_rest_is_planned():
    plan = plan_for(load_fixture("inputs/kueue-workload.yaml") + [pod("plain", cpu="2")], CATALOG)
    g = gang(plan, "job-train-3f2a1", "research")
    assert (g.decision, g.min_count, g.pending, g.placed) == ("waiting-for-admission", 4, 4, 0)
    assert "Kueue has not admitted" in g.reason
    assert gang(plan, "plain").decision == "scale-up"
    assert plan.scale_up == {"cpu8": 1}


def test_plan_unadmitted_plans_the_pod_sets_as_one_gang_at_the_known_optimum():
    # launcher 2 CPU + 3 workers of 6 CPU on 8-CPU nodes: 3 nodes (the launcher shares one with a worker).
    plan = plan_unadmitted(load_fixture("inputs/kueue-workload.yaml"))
    g = gang(plan, "job-train-3f2a1", "research")
    assert (g.decision, g.placed, g.priority) == ("scale-up", 4, 100)
    assert plan.scale_up == {"cpu8": 3}


def test_min_count_makes_the_gang_quorum():
    wl = copy.deepcopy(load_fixture("inputs/kueue-workload.yaml")[0])
    wl["spec"]["podSets"][1]["minCount"] = 2
    assert ingest([wl]).gangs[0].min_count == 3


def gated(name: str) -> dict:
    return pod(name, schedulingGates=[{"name": "kueue.x-k8s.io/admission"}], cpu="2")


def test_pods_held_by_the_kueue_admission_gate_wait_for_admission():
    plan = plan_for([gated("a")], CATALOG)
    assert gang(plan, "a").decision == "waiting-for-admission"
    assert "kueue.x-k8s.io/admission" in gang(plan, "a").reason
    assert plan.scale_up == {}


def test_plan_unadmitted_lifts_only_the_kueue_gate():
    both = gated("b")
    both["spec"]["schedulingGates"].append({"name": "example.com/other"})
    plan = plan_unadmitted([gated("a"), both])
    assert gang(plan, "a").decision == "scale-up"
    assert all(g.name != "b" for g in plan.gangs)  # still gated by the other gate: nothing to plan


def test_an_admitted_workloads_job_pods_are_one_gang():
    wl = copy.deepcopy(load_fixture("inputs/kueue-workload.yaml")[0])
    wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "launcher"}, {"name": "workers"}]}}
    pods = [pod(f"train-{i}", "research", cpu="6", extra={"metadata": {"name": f"train-{i}", "namespace": "research",
                                                                       "labels": {"batch.kubernetes.io/job-name": "train"}}})
            for i in range(3)]
    cluster = ingest([wl, *pods])
    assert [(g.name, g.min_count, len(g.pending)) for g in cluster.gangs] == [("job-train-3f2a1", 4, 3)]
    plan = plan_for([wl, *pods], CATALOG)
    assert gang(plan, "job-train-3f2a1", "research").decision == "below-quorum"


@pytest.mark.parametrize("change, field", [
    (lambda s: s.update(podSets=[]), "spec.podSets is empty"),
    (lambda s: s["podSets"][0].update(count="one"), "spec.podSets[0].count"),
    (lambda s: s["podSets"][1]["template"]["spec"]["containers"][0]["resources"].update(requests={"cpu": "lots"}),
     "spec.podSets[1].template"),
])
def test_a_bad_workload_is_invalid_naming_the_field(change, field):
    wl = copy.deepcopy(load_fixture("inputs/kueue-workload.yaml")[0])
    change(wl["spec"])
    plan = plan_for([wl, pod("plain")], CATALOG)
    g = gang(plan, "job-train-3f2a1", "research")
    assert g.decision == "invalid" and field in g.reason
    assert gang(plan, "plain").decision == "scale-up"


def plain_pod_group(admitted: bool) -> list[dict]:
    """Kueue's plain-pod integration: 3 pods labelled with their group, one Workload owned by the pods."""
    wl = copy.deepcopy(load_fixture("inputs/kueue-workload.yaml")[0])
    wl["metadata"].update(name="grp", ownerReferences=[
        {"apiVersion": "v1", "kind": "Pod", "name": f"grp-{i}", "uid": f"u{i}"} for i in range(3)])
    wl["spec"]["podSets"] = [dict(wl["spec"]["podSets"][1], name="main")]
    if admitted:
        wl["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main"}]}}
    pods = []
    for i in range(3):
        p = pod(f"grp-{i}", "research", cpu="6", extra={"metadata": {
            "name": f"grp-{i}", "namespace": "research", "labels": {"kueue.x-k8s.io/pod-group-name": "grp"}}})
        if not admitted:
            p["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
            p["status"]["phase"] = "Pending"
        pods.append(p)
    return [wl, *pods]


def test_a_plain_pod_group_is_the_workloads_gang_and_waits_until_kueue_admits_it():
    waiting = plan_for(plain_pod_group(admitted=False), CATALOG)
    g = gang(waiting, "grp", "research")
    assert (g.decision, g.min_count) == ("waiting-for-admission", 3)
    assert waiting.scale_up == {}
    admitted = plan_for(plain_pod_group(admitted=True), CATALOG)
    assert [(g.name, g.min_count, g.placed) for g in admitted.gangs] == [("grp", 3, 3)]
    assert admitted.scale_up == {"cpu8": 3}
