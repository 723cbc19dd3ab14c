"""The empty-node keep rule (keep.py): its worst-case ratio against an independent checker, and its decisions."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timezone

import orjson
import pytest

from gangscale.controller import keep
from gangscale.controller.config import ControllerConfig
from gangscale.controller.keep import Arrival, KeepRule, KeepSettings, KeepState
from gangscale.controller.lifecycle import GangState, Record
from gangscale.ingest import Cluster
from gangscale.model import Gang, GangKey, Node, NodeGroup, Placement, Pod

NOW = 1_800_000_000.0
CPU = NodeGroup("cpu", "m5.2xlarge", 0.4, 0, 10, 1, {"cpu": 8000, "memory": 32 << 30, "pods": 110})


def _cost(keep_for: float, gap: float, price: float, relaunch: float) -> float:
    """What a node kept `keep_for` s costs when the next fitting gang comes `gap` s after it emptied ($, per s price)."""
    return price * gap if gap <= keep_for else price * keep_for + relaunch


def test_the_rule_never_costs_more_than_its_ratio_bound_times_the_best_choice_in_hindsight():
    """Whatever the prediction and whenever the next fitting gang comes (just before, at and just after every point
    where the rule changes its mind), the rule's cost is at most r x min(keep until it comes, relaunch)."""
    for boot, price, wait, ratio in itertools.product((45, 150, 600), (0.4, 32.8), (0.0, 4.0, 50.0), (2, 3, 5, 11)):
        s = KeepSettings(ratio=ratio, max_keep_seconds=1e9, wait_dollars_per_hour=wait)
        per_s, relaunch = price / 3600, (price + wait) * boot / 3600  # the relaunch cost, computed here afresh
        b = relaunch / per_s
        for gap in (None, 0.0, b / 2, b * 0.999, b, 3 * b):
            k = keep.keep_seconds(boot, price, gap, s)
            for t in (1e-3, k * 0.5, k, k + 1e-3, b, 2 * k + 1, 10 * b + k, 1e7):
                best = min(per_s * t, relaunch)
                assert _cost(k, t, per_s, relaunch) <= ratio * best * (1 + 1e-9), (boot, price, wait, ratio, gap, t)


def test_the_plain_break_even_keeps_exactly_until_idle_has_cost_one_relaunch_whatever_is_predicted():
    s = KeepSettings(ratio=2, max_keep_seconds=1e9, wait_dollars_per_hour=4.0)
    b = 100 * (1 + 4.0 / 0.4)  # boot x (price + wait value) / price
    assert [keep.keep_seconds(100, 0.4, g, s) for g in (None, 1.0, 1e6)] == pytest.approx([b, b, b])


def _pod(name: str, cpu: int) -> Pod:
    return Pod("hpc", name, f"uid-{name}", {"cpu": cpu, "memory": 1 << 30, "pods": 1}, Placement(),
               group_key=("hpc", "job"))


def _gang(name: str, ranks: int, cpu: int = 7000) -> Gang:
    return Gang("hpc", name, "native", "gang", ranks, pending=tuple(_pod(f"{name}-{i}", cpu) for i in range(ranks)))


def _node(name: str) -> Node:
    return Node(name, {}, (), dict(CPU.allocatable), node_group="cpu", provider_id=f"sim:///z/{name}",
                created=datetime.fromtimestamp(NOW - 3600, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _seen(*arrivals: tuple[float, int], start: float = NOW - 7200) -> KeepState:
    """A state that has seen gangs needing `n` cpu nodes at each time, and a node `n1` that has run a pod."""
    log = tuple(Arrival(t, f"hpc/g{i}/native", {"cpu": n}) for i, (t, n) in enumerate(arrivals))
    return KeepState(log, frozenset(a.gang for a in log), {"cpu": {"old": 100.0}}, used=frozenset({"n1"}),
                     start=start)


def _keep_for(state: KeepState, settings: KeepSettings, empty: tuple[str, ...] = ("n1",)) -> float:
    cluster = Cluster(nodes=[_node(n) for n in empty])
    until = keep.keep_until(state, {n: NOW for n in empty}, {}, cluster, {"cpu": CPU}, NOW, settings)
    return until["n1"] - NOW


SETTINGS = KeepSettings(ratio=5, max_keep_seconds=1e9, wait_dollars_per_hour=4.0)  # lambda 1/4
B = 100 * (1 + 4.0 / 0.4)  # the measured boot (100 s) at m5's 0.4 $/h: 1,100 s


def test_a_node_goes_back_at_the_rule_s_shortest_keep_when_nothing_fitting_arrived_in_the_window():
    assert _keep_for(_seen(), SETTINGS) == pytest.approx(B / 4)
    assert _keep_for(_seen((NOW - 3601, 1), (NOW - 3700, 1)), SETTINGS) == pytest.approx(B / 4)  # out of the window


def test_a_node_goes_back_at_the_shortest_keep_when_the_last_fitting_gang_came_longer_ago_than_break_even():
    busy_once = [(NOW - 3000 + 60 * i, 1) for i in range(20)]  # 20 an hour, but none for the last 1,860 s
    assert _keep_for(_seen(*busy_once), SETTINGS) == pytest.approx(B / 4)


def test_a_node_is_kept_until_break_even_over_lambda_when_a_fitting_gang_is_likely_within_break_even():
    often = [(NOW - 60 * i, 1) for i in range(1, 30)]  # one a minute
    assert _keep_for(_seen(*often), SETTINGS) == pytest.approx(4 * B)
    capped = KeepSettings(ratio=5, max_keep_seconds=1800, wait_dollars_per_hour=4.0)
    assert _keep_for(_seen(*often), capped) == 1800


def test_a_gang_that_needs_more_nodes_than_the_group_has_empty_is_not_fitting_work():
    wide = [(NOW - 60 * i, 3) for i in range(1, 30)]  # each needs three nodes: one kept node saves it nothing
    assert _keep_for(_seen(*wide), SETTINGS) == pytest.approx(B / 4)
    assert _keep_for(_seen(*wide), SETTINGS, ("n1", "n2", "n3")) > B  # three empty: they start it at once


def test_a_node_that_never_ran_a_pod_goes_back_after_the_fixed_grace():
    often = [(NOW - 60 * i, 1) for i in range(1, 30)]
    state = _seen(*often)
    cluster = Cluster(nodes=[_node("n1"), _node("fresh")])
    until = keep.keep_until(state, {"n1": NOW, "fresh": NOW}, {}, cluster, {"cpu": CPU}, NOW, SETTINGS)
    assert until["fresh"] == NOW + SETTINGS.grace_seconds and until["n1"] > NOW + B


def test_a_node_s_keep_is_decided_when_it_empties_and_kept_while_it_stays_empty():
    often = [(NOW - 60 * i, 1) for i in range(1, 30)]
    cluster = Cluster(nodes=[_node("n1")])
    until = keep.keep_until(_seen(*often), {"n1": NOW - 50}, {"n1": NOW + 5}, cluster, {"cpu": CPU}, NOW, SETTINGS)
    assert until == {"n1": NOW + 5}


def test_gangs_first_seen_pending_are_counted_once_with_the_nodes_they_need_per_group():
    s = KeepSettings()
    gpu = NodeGroup("gpu", "g5.xlarge", 1.0, 0, 10, 0, {"cpu": 4000, "memory": 16 << 30, "pods": 110, "nvidia.com/gpu": 1})
    cluster = Cluster(gangs=[_gang("wide", 3), _gang("small", 1, cpu=500)])
    state = keep.observe(KeepState(), cluster, {"cpu": CPU, "gpu": gpu}, (), NOW, s)
    assert {a.gang: dict(a.need) for a in state.arrivals} == {"hpc/wide/native": {"cpu": 3}, "hpc/small/native": {"cpu": 1, "gpu": 1}}
    again = keep.observe(state, cluster, {"cpu": CPU, "gpu": gpu}, (), NOW + 10, s)
    assert again.arrivals == state.arrivals
    later = keep.observe(again, cluster, {"cpu": CPU, "gpu": gpu}, (), NOW + s.window_seconds + 1, s)
    assert later.arrivals == ()  # out of the window, and not counted again while they wait
    back = keep.observe(later, Cluster(gangs=[_gang("small", 1, cpu=500)]), {"cpu": CPU}, (), NOW + 4000, s)
    back = keep.observe(back, cluster, {"cpu": CPU}, (), NOW + 4010, s)
    assert [a.gang for a in back.arrivals] == ["hpc/wide/native"]  # left the queue, pending again: new work


def test_after_a_restart_a_gang_is_counted_from_its_saved_record_s_first_sight():
    rec = Record(GangKey("hpc", "wide", "native"), "uid", GangState.PROVISIONING, "", NOW - 50, NOW - 600)
    state = keep.observe(KeepState(), Cluster(gangs=[_gang("wide", 1)]), {"cpu": CPU}, [rec], NOW, KeepSettings())
    assert [a.at for a in state.arrivals] == [NOW - 600] and state.start == NOW - 600


def test_a_restart_reads_back_what_the_rule_has_seen_and_keeps_a_node_as_before_it():
    """A fitting gang a minute for the last half hour, a measured boot of 100 s: a node that has run a pod is kept
    B / lambda = 4 x 1,100 s after the restart as before it; one that has not goes back after the grace."""
    often = [(NOW - 60 * i, 1) for i in range(1, 30)]
    before = replace(_seen(*often), known=frozenset({"n1", "fresh"}))
    back = keep.from_json(orjson.loads(orjson.dumps(keep.to_json(before))))
    cluster = Cluster(nodes=[_node("n1"), _node("fresh")])
    first = keep.observe(back, cluster, {"cpu": CPU}, (), NOW, SETTINGS)
    until = keep.keep_until(first, {"n1": NOW, "fresh": NOW}, {}, cluster, {"cpu": CPU}, NOW, SETTINGS)
    assert until == {"n1": pytest.approx(NOW + 4 * B), "fresh": NOW + SETTINGS.grace_seconds}
    assert first.unused is None and first.used == {"n1"}  # read back once: the passes after it see for themselves


def test_a_saved_state_that_cannot_be_read_is_an_empty_one():
    assert keep.from_json({"arrivals": [[1.0, "hpc/a/native"]], "boots": {}, "start": None, "unused": []}) == KeepState()
    assert keep.from_json(None) == KeepState() and keep.from_json({"arrivals": []}) == KeepState()


def test_the_boot_is_measured_from_a_purchase_to_its_node_s_registration():
    s = KeepSettings()
    rec = Record(GangKey("hpc", "job", "native"), "uid", GangState.PROVISIONING, "", NOW, NOW,
                 requested={"cpu": 2}, requested_at=NOW)
    state = keep.observe(KeepState(), Cluster(), {"cpu": CPU}, [rec], NOW, s)
    nodes = [Node(n, {}, (), {}, node_group="cpu", created=datetime.fromtimestamp(NOW + d, timezone.utc)
                  .strftime("%Y-%m-%dT%H:%M:%SZ")) for n, d in (("a", 90), ("b", 130))]
    state = keep.observe(state, Cluster(nodes=nodes), {"cpu": CPU}, [rec], NOW + 140, s)
    assert dict(state.boots["cpu"]) == {"a": 90.0, "b": 130.0}
    assert keep.boot_seconds(state, "cpu", 120.0) == 110.0 and keep.boot_seconds(state, "gpu", 120.0) == 120.0
    late = Node("c", {}, (), {}, node_group="cpu", created=datetime.fromtimestamp(NOW + 600, timezone.utc)
                .strftime("%Y-%m-%dT%H:%M:%SZ"))  # not this purchase's: it had its two nodes
    after = keep.observe(state, Cluster(nodes=[*nodes, late]), {"cpu": CPU}, [rec], NOW + 610, s)
    assert dict(after.boots["cpu"]) == {"a": 90.0, "b": 130.0}


def test_a_config_that_sets_the_grace_keeps_its_fixed_grace_and_one_that_does_not_keeps_by_the_rule():
    assert ControllerConfig().keep_settings().rule is KeepRule.SKI_RENTAL
    assert ControllerConfig(emptyNodeGraceSeconds=60).keep_settings().rule is KeepRule.GRACE
    chosen = ControllerConfig(emptyNodeGraceSeconds=60, emptyNodeKeep="ski-rental").keep_settings()
    assert chosen.rule is KeepRule.SKI_RENTAL and chosen.grace_seconds == 60
    cluster = Cluster(nodes=[_node("n1")])
    grace = KeepSettings(rule=KeepRule.GRACE, grace_seconds=60)
    assert keep.keep_until(_seen(), {"n1": NOW - 5}, {}, cluster, {"cpu": CPU}, NOW, grace) == {"n1": NOW + 55}


def test_a_ratio_below_two_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="emptyNodeKeepRatio"):
        ControllerConfig(emptyNodeKeepRatio=1.5)


def test_the_wake_up_is_the_first_give_back_after_the_last_pass():
    assert keep.wake_up({"a": NOW + 30, "b": NOW + 10, "c": NOW - 1}, NOW) == NOW + 10
    assert keep.wake_up({"c": NOW - 1}, NOW) is None
