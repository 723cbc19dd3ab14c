"""gangscale.io/CapacityReady on PodGroup status: the pure builder, and the writer against the API emulator.

The writer's promise is that only gangscale's own entry changes: a condition the scheduler
wrote (by server-side apply under its own manager, or by a plain update) survives every write,
on the native PodGroup (list-map, server-side apply) and on Volcano's (atomic list, JSON patch).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from builders import pod, podgroup
from gangscale.controller import conditions
from gangscale.controller.config import ControllerConfig
from gangscale.controller.events import EventSink
from gangscale.controller.lifecycle import GangState, Record
from gangscale.controller.reconciler import Deps, Reconciler
from gangscale.kube.client import connect
from gangscale.kube.podgroupstatus import FIELD_MANAGER, ConditionWriter, entry_patch, status_path
from gangscale.model import API_COSCHEDULING, API_PODGROUP_V1ALPHA2, API_VOLCANO, API_WORKLOAD, GangKey
from kube.emulator import Emulator
from cloud_adapters.simulated import SimulatedProvider

T0 = 1_790_000_000.0  # 2026-09-21T...Z
SCHEDULED = {"type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available", "lastTransitionTime": "2026-01-01T00:00:00Z"}


def rec(state: GangState, *, since: float = T0, requested: dict[str, int] | None = None, reason: str = "because",
        api: str = API_PODGROUP_V1ALPHA2, uid: str = "uid-1") -> Record:
    return Record(GangKey("default", "train", api), uid, state, reason, since,
                  requested=requested or {})


def pg_obj(conds: list[dict[str, Any]] | None = None, *, generation: int = 3) -> dict[str, Any]:
    obj = podgroup("train")
    obj["metadata"].update(uid="uid-1", generation=generation)
    if conds is not None:
        obj["status"] = {"conditions": conds}
    return obj


# ------------------------------------------------------------------ the builder (pure)


@pytest.mark.parametrize("state, reason, status", [
    (GangState.PLANNED, "WaitingForCapacity", "False"),
    (GangState.BELOW_QUORUM, "WaitingForCapacity", "False"),
    (GangState.INFEASIBLE, "WaitingForCapacity", "False"),
    (GangState.PROVISIONING, "NodesRequested", "False"),
    (GangState.READY, "Provisioned", "True"),
    (GangState.RUNNING, "Provisioned", "True"),
    (GangState.TIMED_OUT, "TimedOut", "False"),
    (GangState.CANCELLED, "Released", "False"),
])
def test_each_gang_state_maps_to_one_condition_reason_and_status(state, reason, status):
    cond = conditions.build(rec(state), pg_obj(), API_PODGROUP_V1ALPHA2)
    assert (cond["type"], cond["reason"], cond["status"]) == ("gangscale.io/CapacityReady", reason, status)


def test_the_message_names_the_nodes_requested_then_the_reason_and_since_is_the_state_change():
    cond = conditions.build(rec(GangState.PROVISIONING, requested={"gpu": 2, "cpu": 1}, reason="capacity on its way"),
                            pg_obj(), API_PODGROUP_V1ALPHA2)
    assert cond["message"] == "nodes requested: 3 (cpu=1, gpu=2); capacity on its way"
    assert cond["lastTransitionTime"] == conditions.stamp(T0) and cond["lastTransitionTime"].endswith("Z")
    assert cond["observedGeneration"] == 3


def test_last_transition_time_is_kept_while_the_state_holds_and_moves_when_it_changes():
    first = conditions.build(rec(GangState.PLANNED, since=T0), pg_obj(), API_PODGROUP_V1ALPHA2)
    on_object = pg_obj([SCHEDULED, first])
    # below quorum a minute later: another record state, the same condition state -> same time, new message
    again = conditions.build(rec(GangState.BELOW_QUORUM, since=T0 + 60, reason="3 of 4 pods"), on_object,
                             API_PODGROUP_V1ALPHA2)
    assert again["lastTransitionTime"] == first["lastTransitionTime"] and again["message"].endswith("3 of 4 pods")
    assert conditions.needs_write(again, on_object)
    # nodes bought two minutes later: the state changed -> the time moves to the record's `since`
    moved = conditions.build(rec(GangState.PROVISIONING, since=T0 + 120, requested={"cpu": 2}), on_object,
                             API_PODGROUP_V1ALPHA2)
    assert moved["lastTransitionTime"] == conditions.stamp(T0 + 120) != first["lastTransitionTime"]


def test_an_unchanged_condition_needs_no_write_and_volcano_gets_no_observed_generation():
    cond = conditions.build(rec(GangState.PLANNED), pg_obj(), API_VOLCANO)
    assert "observedGeneration" not in cond
    assert not conditions.needs_write(cond, pg_obj([SCHEDULED, cond]))
    assert conditions.needs_write(cond, pg_obj([SCHEDULED]))


def test_only_native_and_volcano_podgroups_are_written_and_a_recreated_podgroup_is_skipped():
    assert conditions.WRITE_MODE == {API_PODGROUP_V1ALPHA2: "apply", "scheduling.k8s.io/v1beta1": "apply",
                                     API_VOLCANO: "patch"}
    assert API_COSCHEDULING not in conditions.WRITE_MODE and API_WORKLOAD not in conditions.WRITE_MODE
    objs: list[Any] = [pg_obj(), {"kind": "PodGroup", "apiVersion": API_PODGROUP_V1ALPHA2, "metadata": "junk"}, 7]
    assert [r.gang for r, *_ in conditions.due([rec(GangState.PLANNED)], objs)] == [rec(GangState.PLANNED).gang]
    assert conditions.due([rec(GangState.PLANNED, uid="uid-old")], objs) == []


def test_the_json_patch_touches_only_gangscales_entry():
    cond = {"type": conditions.CONDITION_TYPE, "status": "False", "reason": "WaitingForCapacity"}
    assert entry_patch({"metadata": {}}, cond) == [{"op": "add", "path": "/status", "value": {"conditions": [cond]}}]
    assert entry_patch(pg_obj([SCHEDULED]), cond) == [{"op": "add", "path": "/status/conditions/-", "value": cond}]
    assert entry_patch(pg_obj([SCHEDULED, {"type": conditions.CONDITION_TYPE}]), cond) == [
        {"op": "test", "path": "/status/conditions/1/type", "value": conditions.CONDITION_TYPE},
        {"op": "replace", "path": "/status/conditions/1", "value": cond}]


# ------------------------------------------------------------------ the writer, against the emulator


@pytest.fixture
def emu(tmp_path: Path):
    e = Emulator(release="1.36", volcano=True).start()
    try:
        yield e, connect(e.kubeconfig(str(tmp_path / "kc")))
    finally:
        e.stop()


def scheduler_applies(client, api: str, name: str, cond: dict[str, Any]) -> None:
    """The scheduler's own condition, by server-side apply under its own field manager."""
    body = {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
            "status": {"conditions": [cond]}}
    client.apply(status_path(api, "podgroups", "default", name), body, field_manager="kube-scheduler")


def test_a_scheduler_condition_survives_gangscales_apply_on_the_native_podgroup(emu):
    e, client = emu
    e.apply(podgroup("train"))
    scheduler_applies(client, API_PODGROUP_V1ALPHA2, "train", SCHEDULED)
    obj = e.get(API_PODGROUP_V1ALPHA2, "PodGroup", "default", "train")
    writer = ConditionWriter(client)
    for state in (GangState.PLANNED, GangState.PROVISIONING):
        cond = conditions.build(rec(state, uid=obj["metadata"]["uid"]), obj, API_PODGROUP_V1ALPHA2)
        assert writer.write(obj, cond, "apply") is None
        obj = e.get(API_PODGROUP_V1ALPHA2, "PodGroup", "default", "train")
    types = {c["type"]: c for c in obj["status"]["conditions"]}
    assert types["PodGroupScheduled"] == SCHEDULED
    assert types[conditions.CONDITION_TYPE]["reason"] == "NodesRequested"
    owners = {m["manager"]: m["fieldsV1"]["f:status"]["f:conditions"] for m in obj["metadata"]["managedFields"]}
    assert list(owners[FIELD_MANAGER]) == ['k:{"type":"gangscale.io/CapacityReady"}']
    assert list(owners["kube-scheduler"]) == ['k:{"type":"PodGroupScheduled"}']
    assert obj["spec"] == podgroup("train")["spec"]  # the status subresource changed nothing else
    # and the scheduler's next apply keeps gangscale's entry
    scheduler_applies(client, API_PODGROUP_V1ALPHA2, "train", {**SCHEDULED, "status": "True", "reason": "Scheduled"})
    after = e.get(API_PODGROUP_V1ALPHA2, "PodGroup", "default", "train")
    assert [c["type"] for c in after["status"]["conditions"]] == ["PodGroupScheduled", conditions.CONDITION_TYPE]


def test_the_emulator_refuses_an_unforced_apply_of_another_managers_condition(emu):
    e, client = emu
    e.apply(podgroup("train"))
    scheduler_applies(client, API_PODGROUP_V1ALPHA2, "train", SCHEDULED)
    body = {"apiVersion": API_PODGROUP_V1ALPHA2, "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "default"}, "status": {"conditions": [SCHEDULED]}}
    with pytest.raises(Exception, match="409"):
        client.apply(status_path(API_PODGROUP_V1ALPHA2, "podgroups", "default", "train"), body, field_manager="other")


def volcano_pg(name: str) -> dict[str, Any]:
    return {"apiVersion": API_VOLCANO, "kind": "PodGroup", "metadata": {"name": name, "namespace": "default"},
            "spec": {"minMember": 2}, "status": {"phase": "Pending", "conditions": [SCHEDULED]}}


def test_a_volcano_podgroups_conditions_are_patched_entry_by_entry_and_the_schedulers_survive(emu):
    e, client = emu
    e.apply(volcano_pg("v"))  # Volcano's scheduler wrote its condition with a plain update
    writer = ConditionWriter(client)
    for state in (GangState.PLANNED, GangState.READY):
        obj = e.get(API_VOLCANO, "PodGroup", "default", "v")
        cond = conditions.build(rec(state, api=API_VOLCANO), obj, API_VOLCANO)
        assert writer.write(obj, cond, "patch") is None
    obj = e.get(API_VOLCANO, "PodGroup", "default", "v")
    assert obj["status"]["conditions"][0] == SCHEDULED and obj["status"]["phase"] == "Pending"
    assert [c["reason"] for c in obj["status"]["conditions"][1:]] == ["Provisioned"]  # replaced, not appended


def test_an_apply_on_an_atomic_crd_list_would_drop_the_schedulers_condition(emu):
    """Why Volcano is patched, not applied: without list-map markers the applier owns the whole list."""
    e, client = emu
    e.apply(volcano_pg("v"))
    cond = conditions.build(rec(GangState.PLANNED, api=API_VOLCANO), volcano_pg("v"), API_VOLCANO)
    body = {"apiVersion": API_VOLCANO, "kind": "PodGroup", "metadata": {"name": "v", "namespace": "default"},
            "status": {"conditions": [cond]}}
    client.apply(status_path(API_VOLCANO, "podgroups", "default", "v"), body, field_manager=FIELD_MANAGER, force=True)
    assert [c["type"] for c in e.get(API_VOLCANO, "PodGroup", "default", "v")["status"]["conditions"]] == [
        conditions.CONDITION_TYPE]


def listed(client) -> list[dict[str, Any]]:
    """Pods and PodGroups as the informer hands them to a pass (typed)."""
    pgs = client.get("/apis/scheduling.k8s.io/v1alpha2/podgroups")["items"]
    pods = client.get("/api/v1/pods")["items"]
    return ([{**o, "apiVersion": API_PODGROUP_V1ALPHA2, "kind": "PodGroup"} for o in pgs]
            + [{**o, "apiVersion": "v1", "kind": "Pod"} for o in pods])


def test_a_podgroup_whose_status_cannot_be_written_is_a_log_line_and_the_others_are_written(emu, caplog):
    e, client = emu
    for name in ("gone", "refused", "rejected", "fine"):
        e.apply(podgroup(name))
        e.apply(pod(f"{name}-0", group=name, cpu="64"))  # no node group at all: a record per gang, no scale-up
    objs = listed(client)
    e.delete(API_PODGROUP_V1ALPHA2, "PodGroup", "default", "gone")  # deleted after the informer saw it: 404
    e.fail_next(1, 403, "/podgroups/refused/status")
    e.fail_next(1, 422, "/podgroups/rejected/status")
    r = Reconciler(ControllerConfig(mode="enforce"), SimulatedProvider([]), Deps(events=EventSink(None),
                   conditions=ConditionWriter(client)))
    with caplog.at_level(logging.WARNING, logger="gangscale.controller"):
        r.reconcile(objs, leader=True)
    failed = {getattr(x, "gang", "") for x in caplog.records if x.getMessage() == "cannot write the PodGroup condition"}
    assert failed == {f"default/{n}/{API_PODGROUP_V1ALPHA2}" for n in ("gone", "refused", "rejected")}
    fine = e.get(API_PODGROUP_V1ALPHA2, "PodGroup", "default", "fine")
    assert [(c["type"], c["reason"]) for c in fine["status"]["conditions"]] == [
        (conditions.CONDITION_TYPE, "WaitingForCapacity")]
    assert r.deps.conditions.written == 1
