"""`gangscale run` as a process: poisoned objects beside a good gang never stop the good gang's scale-up.

Issue 16 (item 2, "Done when"): one bad object used to make the whole pass fail ("reconcile failed"), so no
gang of any tenant was served. Each poisoned object must get its own reason naming the field (its gang
`invalid`, a Warning Event), and every other gang is planned and bought for, pass after pass.
"""

from __future__ import annotations

import json

import pytest

from builders import node, pod, podgroup

from .conftest import events, state_records, wait_for
from .test_controller_e2e import gang


def test_a_pod_asking_for_10P_cpu_gets_its_reason_and_the_good_gang_is_still_scaled_up(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers()
    cluster.apply(pod("poison", cpu="10P"))  # a valid quantity to the API server, 10**16 millicores to gangscale
    huge = node("huge-node")
    huge["status"]["allocatable"]["memory"] = str(2**63)  # above int64: the node is skipped, not the pass
    cluster.apply(huge)
    gang(cluster, "good", 2)
    wait_for(lambda: world.desired("cpu") == 2, what="the good gang scaled up beside the poisoned pod")
    poisoned = wait_for(lambda: [e for e in events(cluster, "NotTriggerScaleUp")
                                 if e["involvedObject"]["name"] == "poison"], what="the poisoned pod's event")
    assert "spec.containers[0].resources.requests.cpu" in poisoned[0]["message"]
    assert poisoned[0]["type"] == "Warning"

    def node_warned() -> bool:  # the pass that saw the node may be logged after the scale-up: wait for it
        plans = [line["plan"] for line in ctl.lines() if line.get("msg") == "plan"]
        return any(w.startswith("ignored Node huge-node: status.allocatable.memory") for p in plans for w in p["warnings"])

    wait_for(node_warned, what="the huge node's warning in a plan log line")
    assert not ctl.logged("reconcile failed")
    ctl.assert_no_tracebacks()


def _poisons() -> dict[str, tuple[list[dict], str]]:
    """Gang name -> (its objects, the field its reason must name): each fails a different check in ingest."""
    tol = pod("tol", cpu="1")
    tol["spec"]["tolerations"] = [{"key": {"a": 1}, "operator": "Exists"}]
    digits = pod("digits", cpu="1")
    digits["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "١٢"  # Unicode digits
    anti = pod("anti", cpu="1")
    anti["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "topology.kubernetes.io/zone", "labelSelector": {"matchLabels": {"app": "x"}}}]}}
    yk = pod("yk-0", cpu="1")  # a YuniKorn application whose task-groups annotation (a free string) asks for 10P
    yk["metadata"]["labels"] = {"applicationId": "yk-app"}
    yk["metadata"]["annotations"] = {
        "yunikorn.apache.org/task-group-name": "tg",
        "yunikorn.apache.org/task-groups": json.dumps([{"name": "tg", "minMember": 2, "minResource": {"cpu": "10P"}}])}
    return {
        "tol": ([tol], "spec.tolerations[0].key"),
        "digits": ([digits], "spec.containers[0].resources.requests.cpu"),
        "anti": ([anti], "topologyKey"),
        "bigpg": ([podgroup("bigpg", min_count=2**40), pod("bigpg-0", cpu="1", group="bigpg")],
                  "spec.schedulingPolicy.gang.minCount"),
        "yk-app": ([yk], "yunikorn.apache.org/task-groups"),
    }


@pytest.mark.slow
def test_every_kind_of_poisoned_gang_gets_a_warning_naming_its_field_while_the_other_gangs_are_served(
        cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers()
    poisons = _poisons()
    for objs, _ in poisons.values():
        cluster.apply_all(objs)
    gang(cluster, "good", 2)
    wait_for(lambda: world.desired("cpu") == 2, what="the good gang scaled up beside five poisoned gangs")

    def all_reported() -> dict[str, str] | None:  # invalid gangs get a Warning Event (no record is kept for them)
        out = {e["involvedObject"]["name"]: e["message"] for e in events(cluster)
               if e["type"] == "Warning" and e["involvedObject"]["name"] in poisons}
        return out if len(out) == len(poisons) else None

    reasons = wait_for(all_reported, what="a Warning Event on every poisoned gang")
    for name, (_, field) in poisons.items():
        assert field in reasons[name], (name, reasons[name])
    assert not {k.split("/")[1] for k in state_records(cluster)} & set(poisons)  # nothing was bought for them
    # a later gang is still served: the poisoned objects do not stop later passes either
    gang(cluster, "later", 1)
    wait_for(lambda: world.desired("cpu") == 3, what="a gang created after the poisoned ones scaled up")
    assert ctl.exited() is None
    assert not ctl.logged("reconcile failed")
    ctl.assert_no_tracebacks()
