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
