"""The independent checker must reject broken plans, or the property test proves nothing."""

from __future__ import annotations

import copy

from builders import GPU_TAINT, group, node, plan_for, pod, podgroup
from checker import check_plan

CATALOG = [group("cpu", cpu="8", mem="32Gi", price=0.4, labels={"tier": "gold"}),
           group("gpu", cpu="32", mem="128Gi", gpu=4, price=3.0, taints=[GPU_TAINT])]
OBJECTS = [node("n1", cpu="4", mem="16Gi"), podgroup("job", min_count=3)] + [
    pod(f"w{i}", cpu="5", group="job") for i in range(3)] + [pod("solo", cpu="1")]


def good_plan() -> dict:
    plan = plan_for(OBJECTS, CATALOG).to_dict()
    assert check_plan(OBJECTS, CATALOG, plan) == []
    return plan


def test_checker_rejects_each_kind_of_broken_plan():
    base = good_plan()
    assert base["scaleUp"] == {"cpu": 3}

    def broken(mutate) -> list[str]:
        plan = copy.deepcopy(base)
        mutate(plan)
        return check_plan(OBJECTS, CATALOG, plan)

    assert any("overcommitted" in e for e in broken(lambda p: p["newNodes"][0]["pods"].extend(p["newNodes"][1]["pods"])))
    assert any("placed 2 times" in e for e in broken(lambda p: p["newNodes"][1]["pods"].append(p["newNodes"][0]["pods"][0])))
    assert any("scaleUp" in e for e in broken(lambda p: p["scaleUp"].update(cpu=4)))
    assert any("costPerHour" in e for e in broken(lambda p: p.update(costPerHour=1.0)))
    assert any("tolerate" in e for e in broken(lambda p: p["newNodes"][0].update(nodeGroup="gpu", pricePerHour=3.0)))

    def partial(p):
        drop = p["newNodes"].pop()
        p["scaleUp"]["cpu"] -= 1
        p["costPerHour"] -= 0.4
        for g in p["gangs"]:
            if g["name"] == "job":
                g["placed"] -= len([x for x in drop["pods"] if x.startswith("default/w")])
    assert any("partial" in e for e in broken(partial))
    assert any("lower bound" in e for e in broken(lambda p: p.update(lowerBoundPerHour=99.0)))


def test_checker_rejects_selector_and_unready_node_violations():
    objs = [node("down", cpu="8", ready=False), pod("p", cpu="1", selector={"tier": "silver"})]
    plan = {"scaleUp": {"cpu": 1}, "newNodes": [{"nodeGroup": "cpu", "pods": ["default/p"], "pricePerHour": 0.4}],
            "existingNodes": {}, "gangs": [], "costPerHour": 0.4, "lowerBoundPerHour": 0.0}
    assert any("selector" in e for e in check_plan(objs, CATALOG, plan))
    plan = {"scaleUp": {}, "newNodes": [], "existingNodes": {"down": ["default/p"]}, "gangs": [],
            "costPerHour": 0.0, "lowerBoundPerHour": 0.0}
    assert any("not Ready" in e for e in check_plan(objs, CATALOG, plan))


# ------------------------------------------------ DRA claims, Kueue Workloads, YuniKorn task groups

DEV = "dra.gangscale.io/gpu.nvidia.com"
DRA_GROUP = {**group("dra", cpu="16", mem="64Gi", price=5.0)}
DRA_GROUP["allocatable"] = {**DRA_GROUP["allocatable"], DEV: "4"}  # the checker reads the catalog as parsed


def _template(name: str, count: int, **exactly) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "r", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count, **exactly}}]}}}}


def _plan(new: list[tuple[str, list[str]]], existing: dict | None = None, gangs: list | None = None,
          price: float = 5.0) -> dict:
    per = {}
    for g, _ in new:
        per[g] = per.get(g, 0) + 1
    return {"scaleUp": per, "newNodes": [{"nodeGroup": g, "pods": ps, "pricePerHour": price} for g, ps in new],
            "existingNodes": existing or {}, "gangs": gangs or [], "costPerHour": price * len(new),
            "lowerBoundPerHour": 0.0}


def _meta(obj: dict, **fields: dict) -> dict:
    obj["metadata"].update(fields)
    return obj


def _gang(name: str, placed: int, ns: str = "default", decision: str = "scale-up") -> dict:
    return {"namespace": ns, "name": name, "placed": placed, "decision": decision}


def test_checker_counts_claimed_devices_per_node_and_a_shared_claim_once():
    objs = [podgroup("g", min_count=2), _template("three", 3)]
    objs += [pod(f"d{i}", group="g", resourceClaims=[{"name": "t", "resourceClaimTemplateName": "three"}])
             for i in range(2)]
    both = _plan([("dra", ["default/d0", "default/d1"])], gangs=[_gang("g", 2)])
    assert any(f"{DEV} overcommitted (6 > 4)" in e for e in check_plan(objs, [DRA_GROUP], both))
    apart = _plan([("dra", ["default/d0"]), ("dra", ["default/d1"])], gangs=[_gang("g", 2)])
    assert check_plan(objs, [DRA_GROUP], apart) == []
    shared = [podgroup("g", min_count=2), {**_template("x", 1), "kind": "ResourceClaim",
                                            "spec": _template("x", 4)["spec"]["spec"]}]
    shared += [pod(f"d{i}", group="g", resourceClaims=[{"name": "s", "resourceClaimName": "x"}]) for i in range(2)]
    assert check_plan(shared, [DRA_GROUP], both) == []  # one claim of 4 devices, used by both pods


def test_checker_counts_a_podgroup_claim_once_for_the_group():
    pg = podgroup("g", min_count=2)
    pg["spec"]["resourceClaims"] = [{"name": "t", "resourceClaimTemplateName": "three"}]
    objs = [pg, _template("three", 3)]
    objs += [pod(f"d{i}", group="g", resourceClaims=[{"name": "t", "resourceClaimTemplateName": "three"}])
             for i in range(2)]
    both = _plan([("dra", ["default/d0", "default/d1"])], gangs=[_gang("g", 2)])
    assert check_plan(objs, [DRA_GROUP], both) == []  # one claim of 3 devices for the PodGroup, not 3 per pod


def test_checker_rejects_a_pod_whose_claim_cannot_be_modelled_and_reads_slice_devices():
    objs = [_template("any", 1, allocationMode="All"),
            pod("p", resourceClaims=[{"name": "t", "resourceClaimTemplateName": "any"}])]
    assert any("allocationMode" in e for e in check_plan(objs, [DRA_GROUP], _plan([("dra", ["default/p"])])))
    sliced = [node("n1", cpu="16", mem="64Gi"), _template("two", 2),
              {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
               "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1},
                        "devices": [{"name": f"gpu-{i}"} for i in range(2)]}}]
    sliced += [pod(f"p{i}", resourceClaims=[{"name": "t", "resourceClaimTemplateName": "two"}]) for i in range(2)]
    one = _plan([], {"n1": ["default/p0"]}, price=0.0)
    assert check_plan(sliced, [DRA_GROUP], one) == []
    two = _plan([], {"n1": ["default/p0", "default/p1"]}, price=0.0)
    assert any(f"{DEV} overcommitted (4 > 2)" in e for e in check_plan(sliced, [DRA_GROUP], two))


WORKLOAD = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "default",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "u"}]},
            "spec": {"podSets": [{"name": "workers", "count": 3, "template": {"spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}}]}}


def test_checker_knows_kueue_gangs_their_quorum_and_that_unadmitted_workloads_get_nothing():
    cpu = [group("cpu", cpu="8", mem="32Gi", price=0.4)]
    unadmitted = [("cpu", [f"default/wl-workers-{i}" for i in range(3)])]
    plan = _plan(unadmitted, gangs=[_gang("wl", 3)], price=0.4)
    assert any("not admitted by Kueue" in e for e in check_plan([WORKLOAD], cpu, plan))
    assert check_plan([WORKLOAD], cpu, plan, plan_unadmitted=True) == []
    admitted = {**WORKLOAD, "status": {"admission": {"clusterQueue": "q"}}}
    members = [_meta(pod(f"train-{i}"), labels={"batch.kubernetes.io/job-name": "train"}) for i in range(3)]
    two = _plan([("cpu", ["default/train-0", "default/train-1"])], gangs=[_gang("wl", 2)], price=0.4)
    assert any("partial: 2 placed + 0 bound < minCount 3" in e for e in check_plan([admitted, *members], cpu, two))


def test_checker_knows_yunikorn_task_groups_and_plans_their_missing_members():
    tgs = '[{"name": "exec", "minMember": 3, "minResource": {"cpu": "2", "memory": "1Gi"}}]'
    ann = {"yunikorn.apache.org/task-group-name": "exec", "yunikorn.apache.org/task-groups": tgs}
    objs = [_meta(pod("e0", cpu="2"), labels={"applicationId": "app"}, annotations=ann)]
    cpu = [group("cpu", cpu="8", mem="32Gi", price=0.4)]
    full = ["default/e0", "default/tg-app-exec-planned-0", "default/tg-app-exec-planned-1"]
    assert check_plan(objs, cpu, _plan([("cpu", full)], gangs=[_gang("app", 3)], price=0.4)) == []
    partial = _plan([("cpu", full[:2])], gangs=[_gang("app", 2)], price=0.4)
    assert any("partial: 2 placed + 0 bound < minCount 3" in e for e in check_plan(objs, cpu, partial))


def test_checker_splits_a_drivers_slice_devices_between_classes_by_their_attributes():
    # 2 full GPUs and 2 MIG slices on n1: two pods of 2 full GPUs each overcommit the node's gpu class.
    classes = [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": c},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == 'gpu.nvidia.com' && "
                                                              f"device.attributes['gpu.nvidia.com'].type == '{t}'"}}]}}
               for c, t in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig"))]
    objs = [node("n1", cpu="16", mem="64Gi"), _template("two", 2), *classes,
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "s"},
             "spec": {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1},
                      "devices": [{"name": f"d{i}", "attributes": {"type": {"string": t}}}
                                  for i, t in enumerate(["gpu", "gpu", "mig", "mig"])]}}]
    objs += [pod(f"p{i}", resourceClaims=[{"name": "t", "resourceClaimTemplateName": "two"}]) for i in range(2)]
    assert check_plan(objs, [DRA_GROUP], _plan([], {"n1": ["default/p0"]}, price=0.0)) == []
    two = _plan([], {"n1": ["default/p0", "default/p1"]}, price=0.0)
    assert any(f"{DEV} overcommitted (4 > 2)" in e for e in check_plan(objs, [DRA_GROUP], two))
