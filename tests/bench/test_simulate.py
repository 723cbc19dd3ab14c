"""The simulated week (benchmarks/sim): hand-made engine scenarios, the 1-hour smoke trace, determinism, the CLI.

The smoke trace asserts the properties measured on it (docs/simulate.md); none is hidden by tuning
the trace.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from benchmarks.generate import PodT
from benchmarks.sim.engine import Engine
from benchmarks.sim.metrics import percentile
from benchmarks.sim.policies import CONTROLLER_CONFIG_ENV, CABackoff
from benchmarks.sim.report import SimConfig, run
from benchmarks.sim.trace import CATALOG, HEADROOM, GangSpec, Outage, Trace, make_trace, peak_demand

REPO = Path(__file__).resolve().parents[2]
BASELINES = ("ca", "ca-atomic", "karpenter")


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("gangscale").setLevel(logging.ERROR)
    yield
    logging.getLogger("gangscale").setLevel(logging.NOTSET)


def cpu_group(name: str, zone: str = "us-east-1a", max_size: int = 10) -> dict:
    return {"name": name, "instanceType": "m5.2xlarge", "zone": zone, "minSize": 0, "maxSize": max_size,
            "currentSize": 0}


def two_pod_gang(arrival: int = 0, runtime: int = 3600, api: str = "native") -> GangSpec:
    """Two 6-core ranks: one m5.2xlarge each (7.9 cores allocatable), so the gang needs two new nodes."""
    return GangSpec("job", "hpc", "cpu-mpi", api, (("rank", 2, PodT("6", "8Gi")),), 2, arrival, runtime)


def eight_node_gang() -> GangSpec:
    """Eight 6-core ranks on eight new m5.2xlarge, Ready at 300 s (`hand_trace`), done at 1,500 s."""
    return GangSpec("wide", "hpc", "cpu-mpi", "native", (("rank", 8, PodT("6", "8Gi")),), 8, 0, 1200)


@pytest.fixture
def exact_launches(monkeypatch):
    """The controller does not buy late launches again: in a hand trace every launch takes exactly its delay, so a
    cover bought 240 s in (the default `lateLaunchSeconds`) arrives after it and is given back; these scenarios
    count launches and their bill."""
    monkeypatch.setenv(CONTROLLER_CONFIG_ENV, '{"lateLaunchSeconds": 0}')


def hand_trace(gangs: list[GangSpec], catalog: list[dict], *, delay: int = 300, outages=(), restarts=(),
               horizon: int = 1800) -> Trace:
    """A trace with fixed launch delays (sigma 0: every launch takes exactly `delay` seconds), no random failures."""
    return Trace("hand", 0, gangs, catalog, {e["name"]: (float(delay), 0.0) for e in catalog}, 0.0, list(outages),
                 list(restarts), horizon)


# ------------------------------------------------------------------ engine scenarios

@pytest.mark.usefixtures("exact_launches")
@pytest.mark.parametrize("policy", ["gangscale-observe", "gangscale-gate", "ca"])
def test_a_gang_whose_nodes_take_5_minutes_starts_5_minutes_after_it_arrives(policy):
    e = Engine(hand_trace([two_pod_gang()], [cpu_group("cpu")]), policy)
    r = e.run()
    assert e.gangs["job"].start == 300  # bought at the arrival's scan, Ready at 300 s, bound in that step
    assert r["started"] == 1 and r["instances_launched"] == 2
    assert r["time_to_start_seconds"]["p50"] == 300


@pytest.mark.parametrize("policy", ["gangscale-gate", "ca"])
def test_a_gang_that_fits_the_capacity_at_hand_counts_as_started_on_arrival_and_one_that_waits_with_its_wait(
    policy,
):
    small = GangSpec("small", "hpc", "cpu-mpi", "native", (("rank", 1, PodT("1", "1Gi")),), 1, 305, 600)
    e = Engine(hand_trace([two_pod_gang(), small], [cpu_group("cpu")]), policy)
    r = e.run()
    assert e.gangs["job"].start == 300 and e.gangs["small"].start == 310  # beside a rank, at the next step
    parts = r["time_to_start_parts"]
    assert parts == {"started_on_arrival": 1, "waited_p50_seconds": 300, "waited_p95_seconds": 300}


def test_a_launch_that_fails_in_an_outage_moves_the_gang_to_the_other_group():
    catalog = [cpu_group("cheap"), cpu_group("backup", "us-east-1b")]
    catalog[1]["pricePerHour"] = 1.0  # dearer than m5.2xlarge's 0.384: the plan prefers "cheap"
    e = Engine(hand_trace([two_pod_gang()], catalog, outages=[Outage("cheap", 0, 1800)]), "gangscale-observe")
    r = e.run()
    groups = sorted({b.group for b in e.cloud.bill.values()})
    assert groups == ["backup"]  # the failed launches were never billed
    assert e.cloud.failure_count() == 2
    assert e.gangs["job"].start is not None and 300 < e.gangs["job"].start <= 20 + 10 + 300 + 10
    assert r["stranded_node_hours_past_deadline"] == 0


@pytest.mark.usefixtures("exact_launches")
def test_a_controller_restart_keeps_the_records_and_buys_nothing_twice():
    e = Engine(hand_trace([two_pod_gang()], [cpu_group("cpu")], restarts=[100]), "gangscale-observe")
    before = []
    e.policy.scan = _spy(e.policy.scan, lambda: before.append(e.policy.rec.record("hpc/job/scheduling.k8s.io/v1alpha2")))
    r = e.run()
    assert e.policy.restarts == 1
    first = next(rec for rec in before if rec is not None)
    after = e.policy.rec.record("hpc/job/scheduling.k8s.io/v1alpha2")  # the new Reconciler's, read from the store
    assert after.requested_at == first.requested_at and after.deadline == first.deadline
    assert r["instances_launched"] == 2 and e.gangs["job"].start == 300


def _spy(fn, after):
    def wrapped(*a, **kw):
        out = fn(*a, **kw)
        after()
        return out
    return wrapped


@pytest.mark.usefixtures("exact_launches")
@pytest.mark.parametrize("policy", ["gangscale-observe", "gangscale-gate"])
def test_a_crashed_member_is_recreated_pending_and_bound_again(policy):
    spec = replace(two_pod_gang(runtime=1200), crash_after=200, crash_member=1)
    e = Engine(hand_trace([spec], [cpu_group("cpu")], horizon=1400), policy)  # gate: the new pod is gated
    seen = []  # the recreated member's node at each scan
    e.policy.scan = _spy(e.policy.scan, lambda: seen.append(e.pods.get("hpc/job-rank-1~1", {}).get("spec", {})
                                                            .get("nodeName")))
    e.run()
    run_ = e.gangs["job"]  # started at 300, crashed at 500, ran to its end at 1500 (past the 1400 s horizon)
    assert run_.crashes == 1 and run_.done
    assert any(seen)  # recreated pending, bound again
    assert len(e.cloud.bill) == 2  # onto the node its predecessor freed: nothing bought


def test_ca_leaves_nodes_of_a_gang_that_cannot_start_billing_past_its_deadline():
    """One zone has room for 1 of 2 nodes: CA buys the one, the gang never starts, the node stays nominated."""
    e = Engine(hand_trace([two_pod_gang()], [cpu_group("cpu", max_size=1)], horizon=3600), "ca")
    r = e.run()
    assert r["never_started"] == 1 and r["instances_launched"] == 1
    assert r["stranded_node_hours_past_deadline"] > 0.5


def test_gangscale_buys_nothing_for_a_gang_that_cannot_start():
    e = Engine(hand_trace([two_pod_gang()], [cpu_group("cpu", max_size=1)], horizon=3600), "gangscale-observe")
    r = e.run()
    assert r["never_started"] == 1 and r["instances_launched"] == 0 and r["dollars"] == 0


ALL = ("gangscale-observe", "gangscale-gate", "ca", "ca-atomic", "karpenter")


@pytest.mark.usefixtures("exact_launches")
@pytest.mark.parametrize("policy", ALL)
def test_a_gang_whose_run_crosses_the_horizon_is_billed_to_its_end_under_every_policy(policy):
    """Started at 300 s on two new nodes, it runs until 3,900 s: past the 1,800 s horizon, billed to its end."""
    e = Engine(hand_trace([two_pod_gang(runtime=3600)], [cpu_group("cpu")]), policy)
    r = e.run()
    price = round(e.cloud.groups_by_name["cpu"].price_per_hour * 1_000_000)  # micro-dollars per hour
    assert e.gangs["job"].done and [b.end is not None and b.end >= 3900 for b in e.cloud.bill.values()] == [True, True]
    assert r["started"] == r["started_by_horizon"] == 1
    assert r["drained"] and 3900 <= r["end_seconds"] < 3900 + 1200  # the nodes went back after the run
    assert r["micro_dollars"] == sum(price * (b.end - b.start) // 3600 for b in e.cloud.bill.values())
    assert r["bill_dollars"]["running_pods"] == round(2 * price / 1e6, 2)  # two nodes, each 3,600 s running its rank
    assert r["bill_dollars"]["booting"] == round(2 * (price * 300 // 3600) / 1e6, 2)
    assert r["dollars_by_horizon"] == round(2 * (price * 1800 // 3600) / 1e6, 2) < r["dollars"]
    assert r["gpu_hours_used"] == 0 and r["gangs_running_at_end"] == 0


@pytest.mark.parametrize("policy", ALL)
def test_a_gang_that_starts_after_the_horizon_counts_as_started_with_its_wait_and_its_bill(policy):
    late = replace(two_pod_gang(runtime=600), arrival=1700)  # bought at 1,700 s, Ready at 2,000 s: after the horizon
    e = Engine(hand_trace([late], [cpu_group("cpu")]), policy)
    r = e.run()
    assert e.gangs["job"].start == 2000 and e.gangs["job"].done
    assert (r["started"], r["started_by_horizon"], r["started_after_horizon"], r["never_started"]) == (1, 0, 1, 0)
    assert r["time_to_start_seconds"]["p50"] == 300 and r["drained"]
    assert r["bill_dollars"]["running_pods"] > 0


def test_a_policy_that_never_gives_its_nodes_back_is_billed_until_the_drain_s_cap_and_says_so():
    """CA keeps the one node it could buy for a gang that cannot start (room for 1 of 2): the run stops at the cap."""
    e = Engine(hand_trace([two_pod_gang()], [cpu_group("cpu", max_size=1)], horizon=3600), "ca")
    r = e.run()
    assert e.drain_cap == 3600 + 2 * 3600 + 3600
    assert r["end_seconds"] == e.drain_cap and not r["drained"] and r["instances_billed_at_end"] == 1
    price = round(e.cloud.groups_by_name["cpu"].price_per_hour * 1_000_000)
    assert r["micro_dollars"] == price * e.drain_cap // 3600  # launched at 0 s, billed until the cap
    assert r["never_started"] == 1 and r["time_to_start_seconds"]["max"] == e.drain_cap  # waited the whole run
    parts = r["bill_micro_dollars"]
    assert parts["running_pods"] == 0 and parts["booting"] + parts["idle"] == r["micro_dollars"]


def test_gangscale_gives_back_every_empty_node_of_a_group_in_one_pass_as_its_grace_ends(monkeypatch):
    """Eight nodes go empty at once (Ready at 300 s, the gang done at 1,500 s): all eight go back in the pass the
    controller's own timer asks for when a 10 s grace ends (`Reconciler.next_due`), not a scan later (a timer one
    second after it would wake at 1,520 s) and not half of them a pass (the size floor counts each removal once)."""
    monkeypatch.setenv(CONTROLLER_CONFIG_ENV, '{"emptyNodeGraceSeconds": 10}')
    e = Engine(hand_trace([eight_node_gang()], [cpu_group("cpu")]), "gangscale-observe")
    r = e.run()
    assert len(e.cloud.bill) == 8 and not e.cloud.open and r["drained"]
    assert {b.end for b in e.cloud.bill.values()} == {1500 + 10}


def test_with_the_keep_rule_the_nodes_of_a_gang_go_back_in_one_pass_when_the_rule_s_keep_ends():
    """The same eight nodes under the default keep rule (keep.py): the one gang seen, 1,500 s before they empty,
    needing all eight, predicts the next fitting use 1,500 s away; the boot is measured on them (300 s, each launch's
    delay here). All eight go back in one pass when that keep ends, on the 10 s grid."""
    from gangscale.controller.config import ControllerConfig
    from gangscale.controller.keep import keep_seconds

    e = Engine(hand_trace([eight_node_gang()], [cpu_group("cpu")], horizon=3 * 3600), "gangscale-observe")
    e.run()
    price = e.cloud.groups_by_name["cpu"].price_per_hour
    keep = keep_seconds(300, price, 1500.0, ControllerConfig().keep_settings())
    assert {b.end for b in e.cloud.bill.values()} == {1500 + 10 * -(-int(keep) // 10)}


def test_karpenter_gives_back_an_empty_node_once_its_15_s_validation_has_passed():
    """The disruption loop finds the nodes empty at 1,500 s and waits `commandValidationDelay` (15 s) before it
    deletes them (kubernetes-sigs/karpenter pkg/controllers/disruption/emptiness.go): the first scan after is 1,520 s."""
    e = Engine(hand_trace([eight_node_gang()], [cpu_group("cpu")]), "karpenter")
    e.run()
    assert {b.end for b in e.cloud.bill.values()} == {1500 + 20}


def test_percentiles_are_nearest_rank_on_integer_seconds():
    assert [percentile(list(range(1, 101)), q) for q in (0.5, 0.95, 0.99)] == [50, 95, 99]
    assert percentile([7], 0.99) == 7 and percentile([], 0.5) is None


def test_the_bill_is_integer_micro_dollars_per_second_and_a_failed_launch_costs_nothing():
    e = Engine(hand_trace([], [cpu_group("cpu")], outages=[Outage("cpu", 0, 10)]), "ca")
    e.cloud.increase_size("cpu", 1)  # in the outage: fails, never billed
    e.clock.t = 20
    e.cloud.increase_size("cpu", 2)
    e.clock.t = 20 + 1800
    e.cloud.delete_instances("cpu", [iid for iid, *_ in e.cloud.launches()][:1])
    price = round(e.cloud.groups_by_name["cpu"].price_per_hour * 1_000_000)
    assert e.cloud.micro_dollars(20 + 3600) == price * 1800 // 3600 + price * 3600 // 3600
    assert e.cloud.calls["increase_size"] == 2 and e.cloud.calls["delete_instances"] == 1


def test_a_launch_in_one_group_does_not_change_the_delay_or_failure_another_group_s_next_launch_draws():
    """Common random numbers: the k-th launch of a group draws the same delay and failure under every policy, so a
    policy's extra CPU launch does not move the slow tail onto another policy's GPU launch."""
    def gpu_launches(cpu_first: int) -> list[tuple[float, bool]]:
        trace = replace(hand_trace([], [cpu_group("cpu"), cpu_group("gpu")]), failures=0.5,
                        delays={"cpu": (300.0, 0.6), "gpu": (300.0, 0.6)})
        e = Engine(trace, "ca")
        if cpu_first:
            e.cloud.increase_size("cpu", cpu_first)
        e.cloud.increase_size("gpu", 6)
        return [(ready, fails) for _, group, ready, fails in e.cloud.launches() if group == "gpu"]

    alone = gpu_launches(0)
    assert len({ready for ready, _ in alone}) > 1 and len({fails for _, fails in alone}) == 2  # the draws vary
    assert gpu_launches(3) == alone == gpu_launches(5)


@pytest.mark.parametrize("policy", ["gangscale-observe", "gangscale-gate"])
def test_the_controller_decides_the_same_when_the_simulator_keeps_parsed_objects_across_passes(policy):
    trace = make_trace("hour", seed=3, gangs=8, failures=0.1)
    kept = Engine(trace, policy, seed=3)
    fresh = Engine(trace, policy, seed=3)
    fresh.parse_cache.objects = False  # every object parsed again on every read, as the live controller does
    assert kept.run() == fresh.run()
    assert kept.parse_cache.pods and not fresh.parse_cache.pods


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["gangscale-observe", "gangscale-gate"])
def test_the_controller_decides_the_same_when_it_takes_the_engine_s_read_and_reuses_the_plan_of_a_repeated_snapshot(
        policy, monkeypatch):
    from gangscale.controller import reconciler

    trace = make_trace("hour", seed=3, gangs=8, failures=0.1)
    own_reads = []
    ingest = reconciler.ingest
    monkeypatch.setattr(reconciler, "ingest", lambda objs, **kw: own_reads.append(1) or ingest(objs, **kw))
    shared = Engine(trace, policy, seed=3)
    result = shared.run()
    assert shared.scans > 0 and not own_reads  # every pass took the engine's read
    monkeypatch.setattr(reconciler, "PLANS_KEPT", 0)  # every pass solves
    own = Engine(trace, policy, seed=3)
    own.policy.read_of = None  # the controller ingests the objects it is handed itself
    own.parse_cache.frozen_objects = False  # parses keyed by the objects' JSON
    assert own.run() == result
    assert shared.policy.rec.plans_reused > 0 and own.policy.rec.plans_reused == 0 and len(own_reads) >= own.scans


def test_the_week_s_groups_hold_its_peak_demand_with_headroom_and_the_hour_keeps_its_catalog():
    week = make_trace("week", seed=0)
    peak = peak_demand(week.gangs)  # p4d: 146 nodes at the peak; the hour's catalog has 3 x 8
    per_type = {}
    for e in week.catalog:
        per_type[e["instanceType"]] = per_type.get(e["instanceType"], 0) + e["maxSize"]
    assert all(per_type[t] * HEADROOM[1] >= HEADROOM[0] * peak[t] for t in peak), (per_type, peak)
    assert week.notes["max_size_per_zone"]["p4d.24xlarge"] * 3 == per_type["p4d.24xlarge"]
    hour = make_trace("hour", seed=0)
    assert [e["maxSize"] for e in hour.catalog] == [size for _, size, _, _ in CATALOG for _ in range(3)]


# ------------------------------------------------------------------ CA's backoff (kubernetes/autoscaler clusterstate)


def test_ca_backs_a_group_off_5_minutes_then_10_when_a_scale_up_after_the_first_backoff_fails_again():
    ca = CABackoff(300)
    ca.scaled_up("p4d", 8, 0)
    ca.failed("p4d", 1, upcoming=8, now=20)
    assert ca.until() == {"p4d": 320}
    ca.scaled_up("p4d", 1, 330)
    ca.failed("p4d", 1, upcoming=8, now=350)  # the previous backoff had expired: its duration doubles
    assert ca.until() == {"p4d": 950}


def test_ca_clears_a_groups_backoff_once_its_scale_up_has_no_node_left_to_come():
    ca = CABackoff(300)
    ca.scaled_up("p4d", 8, 0)
    ca.failed("p4d", 1, upcoming=8, now=20)
    ca.update({"p4d": 3}, 200)
    assert ca.until() == {"p4d": 320}
    ca.update({"p4d": 0}, 250)  # the other 7 registered: the scale-up finished, the backoff goes with it
    assert ca.until() == {} and ca.requests == {}


def test_ca_backs_a_group_off_when_its_nodes_have_not_registered_15_minutes_after_its_last_scale_up():
    ca = CABackoff(300)
    ca.scaled_up("p4d", 2, 0)
    ca.update({"p4d": 1}, 900)
    assert ca.until() == {}
    ca.update({"p4d": 1}, 910)
    assert ca.until() == {"p4d": 1210} and ca.requests == {}


# ------------------------------------------------------------------ the smoke trace

@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim")
    return run(SimConfig(trace="hour", seed=0, failures=0.1, policies=("gangscale-observe", *BASELINES), out=out,
                         plots=False))


@pytest.mark.slow
def test_the_smoke_hour_runs_every_gang_of_the_trace_under_each_policy(smoke):
    for p, r in smoke["results"].items():
        assert r["gangs"] + r["basic_groups_started"] >= 38, p
        assert r["started"] >= 30, p
    assert sum(smoke["cpu_seconds"].values()) < 60  # issue 10: under 60 s in CI (CPU time: this machine is shared)


@pytest.mark.slow
def test_with_10_percent_failures_gangscale_spends_no_more_per_started_gang_than_any_baseline(smoke):
    # every started gang billed to its end (the run drains past the horizon): every policy pays for the same 37 runs
    # ($4,677 running pods each, 1 Dec), so what differs is what ran nothing; docs/simulate.md
    # ($30.60 against ca-atomic's $30.71 with the 10 s empty-node grace alone, before whole runs were billed)
    own = smoke["results"]["gangscale-observe"]["dollars_per_started_gang"]
    assert all(own <= smoke["results"][b]["dollars_per_started_gang"] for b in BASELINES), {
        p: r["dollars_per_started_gang"] for p, r in smoke["results"].items()}


@pytest.mark.slow
def test_with_10_percent_failures_gangscale_wastes_no_more_per_started_gang_than_any_baseline(smoke):
    # the bill of instance-seconds that ran no pod (booting, idle): what the mission promises not to waste
    own = smoke["results"]["gangscale-observe"]["wasted_dollars_per_started_gang"]
    assert all(own <= smoke["results"][b]["wasted_dollars_per_started_gang"] for b in BASELINES), {
        p: r["wasted_dollars_per_started_gang"] for p, r in smoke["results"].items()}


@pytest.mark.slow
def test_the_wasted_bill_is_the_bill_less_the_instance_seconds_that_ran_a_pod(smoke):
    for p, r in smoke["results"].items():
        assert 0 < r["wasted_dollars"] < r["dollars"], p


@pytest.fixture(scope="module")
def gate_hour():
    return Engine(make_trace("hour", 0, None, 0.1), "gangscale-gate", seed=0).run()


@pytest.mark.slow
def test_with_10_percent_failures_gate_mode_with_the_keep_rule_costs_no_more_per_started_gang_than_any_baseline(
    smoke, gate_hour
):
    """The default policy (gate mode, empty nodes kept by the ski-rental rule) on seed 0: cheaper per started gang
    than every baseline, nothing stranded past a deadline, and its median gang starts no later than Karpenter's (CA,
    which keeps every node 10 minutes, starts it sooner: docs/simulate.md)."""
    own = gate_hour["dollars_per_started_gang"]
    assert all(own <= smoke["results"][b]["dollars_per_started_gang"] for b in BASELINES)
    assert gate_hour["stranded_node_hours_past_deadline"] == 0 and gate_hour["never_started"] == 0
    tts = gate_hour["time_to_start_seconds"]["p50"]
    assert tts <= smoke["results"]["karpenter"]["time_to_start_seconds"]["p50"]


@pytest.mark.slow
def test_with_10_percent_failures_gangscale_strands_no_node_hours_past_a_deadline(smoke):
    assert smoke["results"]["gangscale-observe"]["stranded_node_hours_past_deadline"] == 0



def test_gate_mode_decides_the_same_when_every_clock_read_takes_a_second(monkeypatch):
    """The simulated controller's solver budget is work, not wall time: a loaded machine gives the same week."""
    import time

    trace = make_trace("hour", seed=3, gangs=8, failures=0.1)
    calm = Engine(trace, "gangscale-gate", seed=3).run()
    now = [time.perf_counter()]

    def tick() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(time, "perf_counter", tick)
    assert Engine(trace, "gangscale-gate", seed=3).run() == calm


def test_a_baseline_s_scan_and_the_scheduler_share_one_read_of_unchanged_objects(monkeypatch):
    from benchmarks.sim import engine as engine_mod
    from gangscale.ingest import ingest

    trace = make_trace("hour", seed=3, gangs=8, failures=0.1)
    own = Engine(trace, "ca", seed=3)
    own.policy.read = None  # the scan reads the objects itself, as before
    result = own.run()
    reads, ingests = [], []
    monkeypatch.setattr(engine_mod, "ingest", lambda objs, **kw: ingests.append(1) or ingest(objs, **kw))
    read = Engine.read
    monkeypatch.setattr(Engine, "read", lambda self: reads.append(1) or read(self))
    assert Engine(trace, "ca", seed=3).run() == result
    assert 0 < len(ingests) < len(reads)  # a scan after a step that bound nothing reuses the scheduler's read


def test_the_scheduler_sees_each_ready_node_as_read_and_makes_its_view_once_per_node_object(monkeypatch):
    """`Engine._sim_node` against the plain construction from the read's Node, at every step the scheduler runs."""
    from benchmarks.sim import engine as engine_mod
    from gangscale.scheduling import SimNode

    views: dict[int, tuple] = {}
    real = engine_mod.simulate

    def checked(nodes, gangs, **kw):
        cluster = eng.read()
        ready = [n for n in cluster.nodes if n.ready]
        assert [v.name for v in nodes] == [n.name for n in ready]
        for n, v in zip(ready, nodes):
            assert v == SimNode(n.name, {**n.labels, "kubernetes.io/hostname": n.name, "metadata.name": n.name},
                                tuple(n.taints), dict(n.allocatable), n.node_group, unschedulable=n.unschedulable)
            kept = views.setdefault(id(n), (n, v))
            assert kept[0] is not n or kept[1] is v  # the same Node object: the same view
        return real(nodes, gangs, **kw)

    monkeypatch.setattr(engine_mod, "simulate", checked)
    eng = Engine(make_trace("hour", seed=3, gangs=8, failures=0.1), "ca", seed=3)
    eng.run()
    assert views


def test_a_policy_runs_with_few_collections_and_the_collector_s_thresholds_come_back_after():
    import gc

    from benchmarks.sim.report import GC_THRESHOLD, few_collections

    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with few_collections():
            assert gc.get_threshold() == GC_THRESHOLD != before
            raise RuntimeError("a policy's run failed")
    assert gc.get_threshold() == before


def test_the_same_seed_writes_the_same_json(tmp_path):
    docs = []
    for i in range(2):  # the second run in parallel processes (--jobs 2)
        cfg = SimConfig(trace="hour", seed=3, gangs=8, policies=("gangscale-observe", "ca"), out=tmp_path / str(i),
                        plots=False, jobs=1 + i)
        run(cfg)
        docs.append((cfg.out / "simulate.json").read_bytes())
    assert docs[0] == docs[1]
    other = SimConfig(trace="hour", seed=4, gangs=8, policies=("ca",), out=tmp_path / "other", plots=False)
    run(other)
    assert orjson.loads((other.out / "simulate.json").read_bytes())["trace"] != orjson.loads(docs[0])["trace"]


def test_the_report_says_whether_the_whole_week_ran_in_under_10_minutes_and_says_nothing_of_it_for_other_runs():
    from benchmarks.sim.policies import POLICIES
    from benchmarks.sim.report import week_target

    week = {"trace": {"kind": "week", "gangs": 5000}, "policies": list(reversed(POLICIES))}
    assert week_target(week, 599.4) == "the week of 5,000 gangs, every policy, in under 600 s: 599 s, met"
    assert week_target(week, 600.0).endswith("600 s, missed")
    others = ({**week, "trace": {"kind": "hour", "gangs": 5000}}, {**week, "trace": {"kind": "week", "gangs": 500}},
              {**week, "trace": {"kind": "week", "gangs": 5000, "first_hours": 24}}, {**week, "policies": ["ca"]})
    assert [week_target(o, 1.0) for o in others] == [None] * 4


# ------------------------------------------------------------------ the CLI

@pytest.mark.slow
def test_simulate_from_the_command_line_writes_json_markdown_and_plots(tmp_path):
    out = tmp_path / "sim"
    proc = subprocess.run([sys.executable, "-m", "gangscale", "bench", "simulate", "--trace", "hour", "--gangs", "3",
                           "--policies", "ca", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "| ca |" in proc.stdout
    for f in ("simulate.json", "simulate.md", "nodes.png", "cost.png", "time_to_start_cdf.png", "stranded.png"):
        assert (out / f).exists(), f
    md = (out / "simulate.md").read_text()
    assert "The whole run: " in md and "plots included" in md and "Target" not in md  # the week's target only


def test_an_unknown_policy_is_refused_with_one_line_and_exit_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "simulate", "--policies", "nope", "--out",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown policy 'nope'" in proc.stderr


def test_a_controller_restart_reads_back_what_the_keep_rule_has_seen():
    gangs = [replace(two_pod_gang(arrival=0, runtime=600), name="first"), replace(two_pod_gang(arrival=500), name="next")]
    e = Engine(hand_trace(gangs, [cpu_group("cpu")], restarts=[1000]), "gangscale-gate")
    seen = []
    restart = e.policy.restart

    def spied():
        before = e.policy.rec.loop.view().keep
        restart()
        seen.append((before, e.policy.rec.loop.view().keep))

    e.policy.restart = spied
    e.run()
    (before, after), = seen
    assert [a.gang for a in before.arrivals] == ["hpc/first/scheduling.k8s.io/v1alpha2", "hpc/next/scheduling.k8s.io/v1alpha2"]
    assert after.arrivals == before.arrivals and after.start == before.start and after.boots == before.boots
    assert after.unused == before.known - before.used
