"""The records' store against the API emulator over HTTP (the official client), which refuses a ConfigMap whose
data passes 1 MiB as the API server does: one ConfigMap per gang record at any gang count, a save that writes only
what changed, and the upgrade from the single-ConfigMap layout (crash-safe: running it again is harmless)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kube.emulator import MAX_DATA_BYTES

from gangscale.controller.keep import Arrival, KeepState
from gangscale.controller.lifecycle import GangState, Record, pod_prints
from gangscale.controller.records import (
    ControllerState,
    StateConflict,
    StateStore,
    read_layout,
    record_name,
)
from gangscale.kube.client import connect
from gangscale.kube.errors import KubeError
from gangscale.kube.refs import CONFIGMAPS
from gangscale.model import GangKey

from .conftest import STATE_NS

API = "scheduling.k8s.io/v1alpha2"
NAME = "gangscale-state"


@pytest.fixture
def client(cluster, tmp_path):
    c = connect(cluster.kubeconfig(str(tmp_path / "kc")), timeout=60.0)
    yield c
    c.close()


def uids(i: int, pods: int) -> tuple[str, ...]:
    return tuple(sorted(str(uuid.UUID(int=(i << 20) + p + 1)) for p in range(pods)))


def big_record(i: int, now: float, pods: int = 1024) -> Record:
    """A provisioning gang of `pods` pods with a write-ahead call in flight, as a pass books it."""
    key = GangKey(f"team-{i % 7}", f"train-{i:03d}", API)
    return Record(key, f"pg-uid-{i}", GangState.PROVISIONING,
                  "capacity on its way", now, first_seen=now, requested={"gpu": 128}, requested_at=now,
                  deadline=now + 1800, pods=pod_prints(uids(i, pods)), attempt=1,
                  calls={"gpu": (f"gangscale-{i:040d}", 128)}, unconfirmed={"gpu": (i * 128, 128)})


def legacy_configmap(records: list[Record], backoff: dict[str, float] | None = None) -> dict:
    """The single ConfigMap an older controller wrote: every record, its pods as whole uids, in records.json."""
    old = {}
    for r in records:
        raw = r.to_json()
        del raw["pod_prints"]
        old[r.gang] = {**raw, "pods": list(uids(int(r.name.rsplit("-", 1)[1]), len(r.pods)))}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": STATE_NS},
            "data": {"records.json": json.dumps(old), "backoff.json": json.dumps(backoff or {})}}


def record_configmaps(cluster) -> dict[str, dict]:
    with cluster._cond:
        cms = [json.loads(json.dumps(o)) for (ns, _), o in cluster._store.get("/configmaps", {}).items()
               if ns == STATE_NS]
    return {cm["metadata"]["name"]: cm for cm in cms
            if (cm["metadata"].get("labels") or {}).get("gangscale.io/records-of") == NAME}


def test_the_single_configmap_of_26_gangs_of_1024_pods_is_refused_by_the_api_server(cluster, client):
    """What the earlier layout wrote before every cloud call: over 1 MiB at 26 such gangs, so the API server
    refuses the write-ahead save (422) and nothing is bought, cluster-wide."""
    now = time.time()
    cm = legacy_configmap([big_record(i, now) for i in range(26)])
    assert len(cm["data"]["records.json"]) > MAX_DATA_BYTES
    with pytest.raises(KubeError) as refused:
        client.post(CONFIGMAPS.path(STATE_NS), cm)
    assert refused.value.status == 422 and "Too long: may not be more than 1048576 bytes" in str(refused.value)


def test_100_concurrent_gangs_of_1024_pods_save_and_load_each_in_its_own_configmap(cluster, client):
    now = time.time()
    records = [big_record(i, now) for i in range(100)]
    store = StateStore(client, STATE_NS, NAME)
    started = time.monotonic()
    store.save(ControllerState({r.key: r for r in records}, {"gpu": now + 600}))
    saved_in = time.monotonic() - started
    cms = record_configmaps(cluster)
    assert len(cms) == 100 and store.writes == 101  # a ConfigMap per record, and the backoffs'
    sizes = sorted(len(cm["data"]["record.json"]) for cm in cms.values())
    assert sizes[-1] < 16 * 1024  # 1,024 pods as 12-digit prints: far below 1 MiB per record
    assert {cm["metadata"]["name"] for cm in cms.values()} == {record_name(NAME, r.gang) for r in records}
    loaded = StateStore(client, STATE_NS, NAME).load()
    assert loaded.records == {r.key: r for r in records} and loaded.backoff == {"gpu": now + 600}
    print(f"100 x 1,024-pod records: saved in {saved_in:.2f}s, largest {sizes[-1]} bytes, total {sum(sizes)}")


def test_a_save_writes_only_the_records_that_changed_and_deletes_those_no_longer_kept(cluster, client):
    now = time.time()
    records = {r.key: r for r in (big_record(i, now, pods=8) for i in range(5))}
    store = StateStore(client, STATE_NS, NAME)
    state = ControllerState(dict(records))
    store.save(state)
    first = store.writes
    store.save(state)
    assert store.writes == first  # nothing changed, nothing written
    one, two = sorted(records)[:2]
    state.records[one] = Record.from_json({**records[one].to_json(), "reason": "nodes arrived", "calls": {}})
    state.records[two] = Record.from_json({**records[two].to_json(), "state": "running", "requested": {}})
    store.save(state)  # one updated; the other holds nothing any more: its ConfigMap goes
    assert store.writes == first + 2
    names = set(record_configmaps(cluster))
    assert record_name(NAME, str(two)) not in names and len(names) == 4
    again = StateStore(client, STATE_NS, NAME).load().records
    assert again[one].reason == "nodes arrived" and two not in again


def test_what_the_keep_rule_has_seen_is_saved_in_the_state_configmap_and_read_back(cluster, client):
    seen = KeepState((Arrival(100.0, "hpc/a/native", {"cpu": 2}),), frozenset({"hpc/a/native"}), {"cpu": {"n1": 90.0}},
                     known=frozenset({"n1", "n2"}), used=frozenset({"n1"}), start=50.0)
    store = StateStore(client, STATE_NS, NAME)
    store.save(ControllerState(keep=seen))
    first = store.writes
    store.save(ControllerState(keep=seen))
    assert store.writes == first  # nothing changed, nothing written
    back = StateStore(client, STATE_NS, NAME).load().keep
    assert back.arrivals == seen.arrivals and back.start == 50.0 and dict(back.boots) == {"cpu": {"n1": 90.0}}
    assert back.unused == {"n2"}  # registered and never ran a pod when saved


def test_an_unreadable_keep_state_loads_as_an_empty_one_with_a_warning_and_the_records_still_load(
    cluster, client, caplog
):
    now = time.time()
    rec = big_record(1, now, pods=4)
    StateStore(client, STATE_NS, NAME).save(ControllerState({rec.key: rec}))
    index = client.get(CONFIGMAPS.path(STATE_NS, NAME))
    index["data"]["keep.json"] = '{"arrivals": [[1.0]]'  # cut short
    client.put(CONFIGMAPS.path(STATE_NS, NAME), index)
    with caplog.at_level("WARNING", logger="gangscale"):
        state = StateStore(client, STATE_NS, NAME).load()
    assert state.keep == KeepState() and rec.key in state.records
    assert any("keep.json" in r.getMessage() and "unreadable" in r.getMessage() for r in caplog.records)


def test_a_record_changed_by_another_writer_is_a_conflict_not_an_overwrite(cluster, client):
    now = time.time()
    rec = big_record(1, now, pods=4)
    mine, theirs = StateStore(client, STATE_NS, NAME), StateStore(client, STATE_NS, NAME)
    mine.save(ControllerState({rec.key: rec}))
    state = theirs.load()
    state.records[rec.key] = Record.from_json({**rec.to_json(), "reason": "the new leader's"})
    theirs.save(state)
    with pytest.raises(StateConflict):  # a deposed leader's stale write loses (409)
        mine.save(ControllerState({rec.key: Record.from_json({**rec.to_json(), "reason": "stale"})}))
    assert StateStore(client, STATE_NS, NAME).load().records[rec.key].reason == "the new leader's"


def test_an_upgrade_moves_every_record_of_the_single_configmap_into_its_own_and_keeps_every_booking(
        cluster, client):
    now = time.time()
    records = [big_record(i, now, pods=16) for i in range(12)]
    cluster.apply(legacy_configmap(records, {"gpu": now + 300}))
    state = StateStore(client, STATE_NS, NAME).load()
    assert state.records == {r.key: r for r in records}  # whole uids now kept as their prints
    assert state.backoff == {"gpu": now + 300}
    index = cluster.get("v1", "ConfigMap", STATE_NS, NAME)
    assert "records.json" not in index["data"] and json.loads(index["data"]["backoff.json"]) == {"gpu": now + 300}
    cms = record_configmaps(cluster)
    assert len(cms) == 12 and all(json.loads(cm["data"]["record.json"])["unconfirmed"] for cm in cms.values())


def test_an_upgrade_cut_short_runs_again_to_the_same_result_and_drops_records_the_old_layout_no_longer_had(
        cluster, client):
    now = time.time()
    records = [big_record(i, now, pods=16) for i in range(6)]
    stale = big_record(99, now, pods=4)  # written by a newer controller before a downgrade: not in records.json
    StateStore(client, STATE_NS, "gangscale-state").save(ControllerState({stale.key: stale}))
    cluster.apply(legacy_configmap(records))
    cut = StateStore(client, STATE_NS, NAME)

    def crash(*_args, **_kw):  # the process dies before its last step: records.json dropped
        raise KubeError("killed", 0)

    cut._write_index = crash  # type: ignore[method-assign]
    with pytest.raises(KubeError, match="killed"):
        cut.load()
    assert "records.json" in cluster.get("v1", "ConfigMap", STATE_NS, NAME)["data"]
    assert len(record_configmaps(cluster)) == 6  # each record moved, the stale one already gone
    mark = len(cluster.requests)
    state = StateStore(client, STATE_NS, NAME).load()  # the next leader migrates again
    rewrites = [r for r in cluster.requests[mark:] if r.method in ("POST", "PUT", "DELETE")]
    assert [r.method for r in rewrites] == ["PUT"]  # only records.json dropped: every record was already there
    assert state.records == {r.key: r for r in records}
    assert "records.json" not in cluster.get("v1", "ConfigMap", STATE_NS, NAME)["data"]
    assert StateStore(client, STATE_NS, NAME).load().records == state.records  # and nothing happens a third time


def test_status_reads_either_layout(cluster, client):
    now = time.time()
    records = [big_record(i, now, pods=4) for i in range(3)]
    cluster.apply(legacy_configmap(records))
    assert {r.gang for r in read_layout(client, STATE_NS, NAME).current.values()} == {r.gang for r in records}
    StateStore(client, STATE_NS, NAME).load()
    layout = read_layout(client, STATE_NS, NAME)
    assert layout.legacy is None and set(layout.current) == {r.gang for r in records}


def test_past_the_record_cap_only_records_holding_nothing_are_dropped_never_a_booking():
    from gangscale.controller.records import MAX_RECORDS

    now = time.time()
    holding = {r.key: r for r in (big_record(i, now - 10_000 + i, pods=1) for i in range(MAX_RECORDS + 5))}
    idle = Record.from_json({**big_record(5000, now, pods=1).to_json(), "requested": {}, "state": "cancelled"})
    state = ControllerState({**holding, idle.key: idle})
    state.prune(now)
    assert set(state.records) == set(holding)  # over the cap with bookings alone: the idle record goes, none else


def test_an_unreadable_record_configmap_is_skipped_then_taken_over_by_its_gang_or_deleted(cluster, client):
    now = time.time()
    mine, other = big_record(1, now, pods=4), big_record(2, now, pods=4)
    for rec in (mine, other):
        cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": record_name(NAME, rec.gang), "namespace": STATE_NS, "labels": {"gangscale.io/records-of": NAME}},
            "data": {"record.json": "{cut short"}})
    store = StateStore(client, STATE_NS, NAME)
    assert store.load().records == {}  # skipped: the cloud and the cluster show what they held
    store.save(ControllerState({mine.key: mine}))  # its gang's record replaces one; the other is deleted
    assert set(record_configmaps(cluster)) == {record_name(NAME, mine.gang)}
    assert StateStore(client, STATE_NS, NAME).load().records == {mine.key: mine}
