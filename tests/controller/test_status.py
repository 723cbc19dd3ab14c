"""`gangscale status`: the controller's records as a table or a document, read from the cluster."""

from __future__ import annotations

import json
import time

import pytest

from gangscale.cli import main
from tests.kube.emulator import Emulator

from .conftest import STATE_NS, wait_for
from .test_controller_e2e import gang


def status(kubeconfig: str, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["status", "--kubeconfig", kubeconfig, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_after_one_enforce_pass_status_shows_the_gang_provisioning_with_its_nodes_and_deadline(
        cluster, world, controllers, tmp_path, capsys):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers()
    gang(cluster, "train", 2)
    wait_for(lambda: world.desired("cpu") == 2, what="scale-up")
    kc = cluster.kubeconfig(str(tmp_path / "status-kc"))
    def provisioning():  # the write-ahead record ("new") is saved first, then the pass's outcome
        d = json.loads(status(kc, capsys, "-o", "json")[1])
        return d if [g["state"] for g in d["gangs"]] == ["provisioning"] else None
    doc = wait_for(provisioning, what="the saved record of the pass")
    [row] = doc["gangs"]
    assert (row["namespace"], row["name"], row["state"]) == ("default", "train", "provisioning")
    assert row["nodesRequested"] == 2 and row["requested"] == {"cpu": 2}
    assert row["deadline"].endswith("Z") and row["since"].endswith("Z") and row["ageSeconds"] >= 0
    assert doc["source"] == f"ConfigMap {STATE_NS}/gangscale-state"
    code, text, _ = status(kc, capsys, "-o", "table")
    header, line = text.splitlines()
    assert code == 0 and header.split()[:6] == ["GANG", "API", "STATE", "AGE", "NODES", "DEADLINE"]
    assert line.startswith("default/train ") and " provisioning " in line and "2 (cpu=2)" in line and " in " in line
    ctl.assert_no_tracebacks()


def _records(now: float) -> dict:
    def rec(ns: str, name: str, state: str, since: float, deadline: float, requested: dict, **more) -> dict:
        return {"gang": f"{ns}/{name}/scheduling.k8s.io/v1alpha2", "namespace": ns, "name": name,
                "api": "scheduling.k8s.io/v1alpha2", "generation": "uid-" + name, "state": state,
                "reason": f"{name} reason", "since": since, "first_seen": since, "requested": requested,
                "requested_at": since, "deadline": deadline, "pods": [], **more}
    return {r["gang"]: r for r in (
        rec("ml", "late", "timed-out", now - 7200, now - 3600, {"gpu": 4}),
        rec("web", "fresh", "provisioning", now - 30, now + 870, {"cpu": 1, "mem": 2},
            nodes={"mem": ["ip-10-0-0-7", "ip-10-0-0-5"]}),
    )}


@pytest.fixture
def emu_with_state(tmp_path):
    emu = Emulator(release="1.36").start()
    try:
        yield emu, emu.kubeconfig(str(tmp_path / "kc"))
    finally:
        emu.stop()


def put_state(emu: Emulator, records_json: str) -> None:
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STATE_NS}})
    emu.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gangscale-state", "namespace": STATE_NS},
               "data": {"records.json": records_json, "backoff.json": "{}"}})


def test_status_lists_every_record_oldest_first_with_human_ages_and_deadlines(emu_with_state, capsys):
    emu, kc = emu_with_state
    put_state(emu, json.dumps(_records(time.time())))
    code, text, _ = status(kc, capsys, "-o", "table")
    rows = text.splitlines()[1:]
    assert code == 0 and [r.split()[0] for r in rows] == ["ml/late", "web/fresh"]
    assert " timed-out " in rows[0] and " 2h " in rows[0] and "4 (gpu=4)" in rows[0] and "1h ago" in rows[0]
    assert "3 (cpu=1, mem=2), 2 arrived" in rows[1] and "in 14m" in rows[1] and "arrived" not in rows[0]


def test_status_names_the_nodes_that_arrived_for_a_waiting_gang(emu_with_state, capsys):
    emu, kc = emu_with_state
    put_state(emu, json.dumps(_records(time.time())))
    code, text, _ = status(kc, capsys, "-o", "json")
    late, fresh = json.loads(text)["gangs"]
    assert code == 0 and (late["nodesArrived"], late["arrived"]) == (0, {})
    assert (fresh["nodesArrived"], fresh["arrived"]) == (2, {"mem": ["ip-10-0-0-5", "ip-10-0-0-7"]})
    code, md, _ = status(kc, capsys, "-o", "markdown")
    assert md.startswith("| GANG | API | STATE |") and "| ml/late |" in md
    code, yml, _ = status(kc, capsys, "-o", "yaml", "-n", "web")
    assert "name: fresh" in yml and "late" not in yml


def test_status_without_a_state_configmap_says_there_are_no_records(emu_with_state, capsys):
    _, kc = emu_with_state
    code, text, _ = status(kc, capsys, "-o", "table")
    assert code == 0 and text == f"no gang records in ConfigMap {STATE_NS}/gangscale-state\n"
    assert json.loads(status(kc, capsys, "-o", "json")[1])["gangs"] == []


def test_a_corrupted_state_configmap_is_one_sentence_and_exit_2(emu_with_state, capsys):
    emu, kc = emu_with_state
    put_state(emu, "{not json")
    code, out, err = status(kc, capsys)
    assert code == 2 and out == "" and "records.json" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_status_reads_the_same_rows_from_one_configmap_per_gang_as_from_the_single_one(emu_with_state, capsys):
    from gangscale.controller.lifecycle import Record
    from gangscale.controller.records import ControllerState, StateStore
    from gangscale.kube.client import connect

    emu, kc = emu_with_state
    now = time.time()
    put_state(emu, json.dumps(_records(now)))
    old = json.loads(status(kc, capsys, "-o", "json")[1])["gangs"]
    emu.delete("v1", "ConfigMap", STATE_NS, "gangscale-state")
    with connect(kc) as client:  # the records as the controller saves them now
        recs = [Record.from_json(r) for r in _records(now).values()]
        StateStore(client, STATE_NS, "gangscale-state").save(ControllerState({r.key: r for r in recs}))
    assert "records.json" not in emu.get("v1", "ConfigMap", STATE_NS, "gangscale-state")["data"]
    code, text, _ = status(kc, capsys, "-o", "json")
    new = json.loads(text)["gangs"]
    assert code == 0 and [g["name"] for g in new] == ["late", "fresh"]
    assert [{k: v for k, v in g.items() if k != "ageSeconds"} for g in new] == \
        [{k: v for k, v in g.items() if k != "ageSeconds"} for g in old]
    late = next(n for (_, n), o in emu._store["/configmaps"].items() if "late" in json.dumps(o.get("data")))
    emu.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": late, "namespace": STATE_NS, "labels": {"gangscale.io/records-of": "gangscale-state"}},
        "data": {"record.json": "{broken"}})
    code, out, err = status(kc, capsys)
    assert code == 2 and out == "" and late in err and len(err.strip().splitlines()) == 1
