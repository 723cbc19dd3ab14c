"""Issue 12's done-when: after one enforce pass, what an operator sees with kubectl and `gangscale status`.

`gangscale run` is a real process against the API emulator and moto: the PodGroup carries
gangscale's condition beside the scheduler's, the member pods carry Cluster Autoscaler's
events, repeats bump `count` on the same Event objects, and `gangscale status` lists the gang.
"""

from __future__ import annotations

import json

from gangscale.cli import main
from gangscale.controller.conditions import CONDITION_TYPE
from gangscale.kube.client import connect
from gangscale.kube.podgroupstatus import status_path
from gangscale.model import API_PODGROUP_V1ALPHA2 as API

from .conftest import events, wait_for
from .test_controller_e2e import gang

SCHEDULED = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/0 nodes are available", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def condition(emu, name: str, ctype: str = CONDITION_TYPE) -> dict | None:
    obj = emu.get(API, "PodGroup", "default", name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == ctype), None)


def test_after_one_enforce_pass_the_podgroup_condition_pod_events_and_status_show_the_gang(
        cluster, world, controllers, tmp_path, capsys):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    kc = cluster.kubeconfig(str(tmp_path / "kc"))
    client = connect(kc)
    gang(cluster, "train", 2)
    gang(cluster, "huge", 2, cpu="64")  # fits no group: NotTriggerScaleUp every pass
    for name in ("train", "huge"):  # the scheduler's own condition, under its own field manager
        client.apply(status_path(API, "podgroups", "default", name), {
            "apiVersion": API, "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
            "status": {"conditions": [SCHEDULED]}}, field_manager="kube-scheduler")
    ctl = controllers(eventRefreshSeconds=0)  # write every repeat, so the second pass shows in `count`
    wait_for(lambda: world.desired("cpu") == 2, what="the scale-up")

    # the condition: the state, the nodes requested, since when; the scheduler's condition untouched
    cond = wait_for(lambda: (c := condition(cluster, "train")) and c["reason"] == "NodesRequested" and c,
                    what="the NodesRequested condition")
    assert cond["status"] == "False" and cond["message"].startswith("nodes requested: 2 (cpu=2); ")
    assert cond["lastTransitionTime"].endswith("Z")
    assert condition(cluster, "train", "PodGroupScheduled") == SCHEDULED
    owners = {m["manager"] for m in cluster.get(API, "PodGroup", "default", "train")["metadata"]["managedFields"]}
    assert owners == {"gangscale", "kube-scheduler"}
    huge = wait_for(lambda: condition(cluster, "huge"), what="the waiting gang's condition")
    assert (huge["reason"], huge["status"]) == ("WaitingForCapacity", "False")
    assert condition(cluster, "huge", "PodGroupScheduled") == SCHEDULED

    # CA's events on the member pods, as well as on the PodGroup
    triggered = {e["involvedObject"]["name"]: e for e in events(cluster, "TriggeredScaleUp", kind="Pod")}
    assert sorted(triggered) == ["train-0", "train-1"]
    assert triggered["train-0"]["message"].startswith("pod triggered scale-up: gang default/train: cpu +2")
    assert [e["involvedObject"]["name"] for e in events(cluster, "TriggeredScaleUp", kind="PodGroup")] == ["train"]

    # aggregated: later passes bump count on the same objects, they add none
    def waiting() -> list[dict]:
        return [e for e in events(cluster, "NotTriggerScaleUp") if e["involvedObject"]["name"].startswith("huge")]
    first = wait_for(lambda: len(waiting()) == 3 and waiting(), what="the waiting gang's events")
    assert {e["message"].split(": gang ")[0] for e in first if e["involvedObject"]["kind"] == "Pod"} == {
        "pod didn't trigger scale-up"}
    later = wait_for(lambda: (w := waiting()) and min(e["count"] for e in w) >= 3 and w, what="repeats counted")
    assert len(later) == 3 and {e["metadata"]["name"] for e in later} == {e["metadata"]["name"] for e in first}
    assert all(e["lastTimestamp"] >= e["firstTimestamp"] for e in later)

    # gangscale status lists the gang, from the records the same pass saved
    def listed() -> dict | None:
        assert main(["status", "--kubeconfig", kc, "-o", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        return next((g for g in doc["gangs"] if g["name"] == "train" and g["state"] == "provisioning"), None)
    row = wait_for(listed, what="the gang in `gangscale status`")
    assert row["nodesRequested"] == 2 and row["requested"] == {"cpu": 2}
    assert not ctl.logged("cannot write the PodGroup condition")
    ctl.assert_no_tracebacks()
