"""YuniKorn task groups: one gang per application, placeholders are members, never extra demand."""

from __future__ import annotations

import copy

from gangscale.ingest import ingest
from tests.builders import gang, group, node, plan_for
from tests.kube.conftest import load_fixture

CATALOG = [group("cpu8", cpu="8", mem="32Gi", price=1.0, labels={"kubernetes.io/arch": "amd64"})]
TG = "yunikorn.apache.org/task-group-name"


def test_task_groups_make_one_gang_planned_at_the_known_optimum():
    # driver 1 CPU + 3 executors of 4 CPU (one exists, two are planned from minResource): 13 CPU on two 8-CPU nodes.
    plan = plan_for(load_fixture("inputs/yunikorn-taskgroups.yaml"), CATALOG)
    g = gang(plan, "spark-pi-0001", "spark")
    assert (g.api, g.policy, g.min_count, g.pending, g.placed, g.decision) == (
        "yunikorn.apache.org", "gang", 4, 4, 4, "scale-up")
    assert plan.scale_up == {"cpu8": 2}


def executor(name: str, *, placeholder: bool = False, node_name: str | None = None) -> dict:
    exec_pod = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml")[1])
    exec_pod["metadata"]["name"] = name
    if placeholder:
        exec_pod["metadata"]["annotations"]["yunikorn.apache.org/placeholder"] = "true"
    if node_name:
        exec_pod["spec"]["nodeName"] = node_name
        exec_pod["status"]["phase"] = "Running"
    return exec_pod


def test_pending_executors_take_the_slots_of_bound_placeholders():
    driver = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml")[0])
    driver["spec"]["nodeName"], driver["status"]["phase"] = "n0", "Running"
    objs = [node("n0", cpu="16", mem="64Gi"), driver]
    objs += [executor(f"tg-ph-{i}", placeholder=True, node_name="n0") for i in range(3)]
    objs += [executor(f"exec-{i}") for i in range(3)]
    plan = plan_for(objs, CATALOG)
    assert plan.scale_up == {}
    assert all(g.name != "spark-pi-0001" for g in plan.gangs)  # quorum met by bound members


def test_a_bad_task_groups_annotation_makes_the_gang_invalid_naming_it():
    driver, exec_pod = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml"))
    driver["metadata"]["annotations"]["yunikorn.apache.org/task-groups"] = '[{"name": "spark-driver", "minMember": 0}]'
    cluster = ingest([driver, exec_pod])
    assert "yunikorn.apache.org/task-groups" in cluster.gangs[0].invalid
    assert "minResource" in cluster.gangs[0].invalid


def test_a_task_group_name_that_is_not_defined_is_invalid():
    driver, exec_pod = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml"))
    exec_pod["metadata"]["annotations"][TG] = "spark-worker"
    cluster = ingest([driver, exec_pod])
    assert "'spark-worker' names no task group" in cluster.gangs[0].invalid


def test_a_task_group_pod_without_an_application_id_is_invalid():
    _driver, exec_pod = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml"))
    del exec_pod["metadata"]["labels"]["applicationId"]
    cluster = ingest([exec_pod])
    assert "no application id" in cluster.gangs[0].invalid


def test_pending_executors_and_their_pending_placeholders_are_planned_once():
    # YuniKorn has created the 3 executor placeholders (not bound yet) and Spark the 3 real executors, which
    # YuniKorn holds until the placeholders are allocated and then swaps in: 3 slots, not 6. Counting both
    # bought 4 nodes instead of the optimum 2 (driver 1 CPU + 3 x 4 CPU on 8-CPU nodes).
    driver = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml")[0])
    objs = [driver] + [executor(f"tg-ph-{i}", placeholder=True) for i in range(3)] + [executor(f"exec-{i}") for i in range(3)]
    cluster = ingest(objs)
    (g,) = cluster.gangs
    assert (g.min_count, sorted(p.name for p in g.pending)) == (
        4, ["spark-pi-driver", "tg-ph-0", "tg-ph-1", "tg-ph-2"])
    plan = plan_for(objs, CATALOG)
    assert gang(plan, "spark-pi-0001", "spark").decision == "scale-up"
    assert plan.scale_up == {"cpu8": 2}


def test_executors_beyond_the_placeholders_are_planned_as_extra_members():
    # 1 placeholder left, 3 real executors: 2 of them need capacity of their own (minMember is a floor).
    driver = copy.deepcopy(load_fixture("inputs/yunikorn-taskgroups.yaml")[0])
    objs = [driver, executor("tg-ph-0", placeholder=True)] + [executor(f"exec-{i}") for i in range(3)]
    (g,) = ingest(objs).gangs
    assert sorted(p.name for p in g.pending) == ["exec-1", "exec-2", "spark-pi-driver", "tg-ph-0"]
