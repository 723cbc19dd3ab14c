"""Events on the group object and member pods: aggregated (count/lastTimestamp), capped per gang, never raising."""

from __future__ import annotations

from pathlib import Path

import pytest

from gangscale.controller.events import EventSink
from gangscale.controller.lifecycle import EventTarget
from gangscale.kube.client import connect
from gangscale.model import API_NONE, API_PODGROUP_V1ALPHA2, GangKey
from kube.emulator import Emulator

KEY = GangKey("default", "train", API_PODGROUP_V1ALPHA2)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def emu(tmp_path: Path):
    e = Emulator(release="1.36").start()
    try:
        yield e, connect(e.kubeconfig(str(tmp_path / "kc")))
    finally:
        e.stop()


def stored(e: Emulator) -> list[dict]:
    with e._cond:
        return [dict(v) for v in e._store.get("/events", {}).values()]


def gang(members: int) -> EventTarget:
    return EventTarget(KEY, "uid-pg", "train-0", "uid-0", True,
                       tuple(sorted((f"train-{i}", f"uid-{i}") for i in range(members))))


def test_a_repeated_event_bumps_count_and_last_timestamp_on_the_one_event_object(emu):
    e, client = emu
    clock = Clock()
    sink = EventSink(client, refresh_seconds=0, pods_per_gang=0, clock=clock)
    sink.emit(gang(1), "NotTriggerScaleUp", "no node group fits", warning=True)
    clock.now += 30
    sink.emit(gang(1), "NotTriggerScaleUp", "no node group fits", warning=True)
    [ev] = stored(e)
    assert ev["count"] == 2 and ev["type"] == "Warning" and ev["involvedObject"]["kind"] == "PodGroup"
    assert ev["firstTimestamp"] < ev["lastTimestamp"]
    sink.emit(gang(1), "NotTriggerScaleUp", "another reason", warning=True)  # another message: another object
    assert sorted(x["count"] for x in stored(e)) == [1, 2]


def test_repeats_inside_the_refresh_window_are_counted_and_written_once_it_has_passed(emu):
    e, client = emu
    clock = Clock()
    sink = EventSink(client, refresh_seconds=300, pods_per_gang=0, clock=clock)
    for _ in range(5):  # five passes, 30 s apart: one POST, nothing else
        sink.emit(gang(1), "TriggeredScaleUp", "pod group triggered scale-up: cpu +2")
        clock.now += 30
    assert sink.calls == 1 and stored(e)[0]["count"] == 1
    clock.now += 300
    sink.emit(gang(1), "TriggeredScaleUp", "pod group triggered scale-up: cpu +2")
    assert sink.calls == 2 and [x["count"] for x in stored(e)] == [6]


def test_ca_reasons_go_to_at_most_pods_per_gang_member_pods_with_cas_message(emu):
    e, client = emu
    sink = EventSink(client, refresh_seconds=0, pods_per_gang=10)
    sink.emit(gang(1000), "TriggeredScaleUp", "pod group triggered scale-up: cpu +250; fits")
    assert sink.calls == 11  # the group object and 10 pods, not 1,000
    pods = [x for x in stored(e) if x["involvedObject"]["kind"] == "Pod"]
    assert sorted(x["involvedObject"]["name"] for x in pods) == sorted(f"train-{i}" for i in range(1000))[:10]
    assert {x["message"] for x in pods} == {"pod triggered scale-up: gang default/train: cpu +250; fits"}
    assert {x["involvedObject"]["uid"] for x in pods} <= {f"uid-{i}" for i in range(1000)}
    sink.emit(gang(1000), "NotTriggerScaleUp", "waiting for 3 more pods")
    assert {x["message"] for x in stored(e) if x["reason"] == "NotTriggerScaleUp" and x["involvedObject"]["kind"] == "Pod"} \
        == {"pod didn't trigger scale-up: gang default/train: waiting for 3 more pods"}
    calls = sink.calls
    sink.emit(gang(1000), "CapacityReleased", "gave back 4 unused nodes")  # gangscale's own reasons: group only
    assert sink.calls == calls + 1


def test_a_lone_pod_gets_its_event_once(emu):
    e, client = emu
    lone = EventTarget(GangKey("default", "solo", API_NONE), "uid-solo", "solo", "uid-solo", True,
                       (("solo", "uid-solo"),))
    EventSink(client).emit(lone, "NotTriggerScaleUp", "no node group fits")
    assert [(x["involvedObject"]["kind"], x["involvedObject"]["name"]) for x in stored(e)] == [("Pod", "solo")]


def test_an_event_that_expired_is_created_again_and_a_refused_write_does_not_raise(emu):
    e, client = emu
    sink = EventSink(client, refresh_seconds=0, pods_per_gang=0)
    sink.emit(gang(1), "NotTriggerScaleUp", "x")
    [ev] = stored(e)
    e.delete("v1", "Event", "default", ev["metadata"]["name"])  # --event-ttl passed
    sink.emit(gang(1), "NotTriggerScaleUp", "x")
    assert [x["count"] for x in stored(e)] == [1]
    e.fail_next(2, 403, "/events")
    sink.emit(gang(1), "NotTriggerScaleUp", "x")  # the PATCH is refused: a log line
    sink.emit(gang(1), "NotTriggerScaleUp", "y")  # the POST is refused: a log line
    assert [x["count"] for x in stored(e)] == [1]
