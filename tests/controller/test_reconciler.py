"""The reconciler in process, with the simulated cloud: the paths moto cannot reach."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import group, node, pod, podgroup
from cloud_adapters.simulated import SimulatedProvider
from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.controller.reconciler import Deps, Reconciler
from gangscale.model import API_PODGROUP_V1ALPHA2, GangKey

JOB = GangKey("default", "job", API_PODGROUP_V1ALPHA2)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def provider_with(clock: Clock, **kw) -> SimulatedProvider:
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    return SimulatedProvider(groups, clock=clock, **kw)


def job(cpu: str = "6", deadline: str | None = None) -> list[dict]:
    pg = podgroup("job", min_count=2)
    if deadline:
        pg["metadata"]["annotations"] = {"gangscale.io/provisioning-deadline-seconds": deadline}
    return [pg, pod("a", cpu=cpu, group="job"), pod("b", cpu=cpu, group="job")]


def test_release_at_the_deadline_gives_back_launches_and_slots_never_launched():
    clock = Clock()
    sim = provider_with(clock, provisioning_delay=600)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock))
    r.reconcile(job(deadline="30"), leader=True)  # 2 launches in flight
    assert sim.target_size("cpu") == 2 and r.record(JOB).requested == {"cpu": 2}
    r.state.records[JOB] = replace(r.record(JOB), requested={"cpu": 3})  # a third slot, bought and never launched
    sim.add_unlaunched_slots("cpu", 1)
    clock.now += 31
    r.reconcile(job(deadline="30"), leader=True)
    rec = r.record(JOB)
    assert rec.state == "timed-out" and "gave back 3 unused nodes" in rec.reason
    assert sim.target_size("cpu") == 0 and rec.requested == {}


def test_a_gang_moves_off_a_group_whose_launches_fail():
    clock = Clock()
    groups, _ = parse_catalog([group("cheap", price=0.3, max_size=10), group("backup", price=0.6, max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=30)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock))
    plan = r.reconcile(job(), leader=True)
    assert plan.scale_up == {"cheap": 2}
    assert sim.fail_launches_in_flight("cheap") == 2  # the cloud reports the launches failed
    clock.now += 31
    plan = r.reconcile(job(), leader=True)
    assert plan.scale_up == {"backup": 2}
    assert r.record("default/job/scheduling.k8s.io/v1alpha2").requested == {"backup": 2}
    assert "cheap" in r.state.backoff


def test_dry_run_and_followers_never_touch_the_cloud():
    clock = Clock()
    sim = provider_with(clock)
    Reconciler(ControllerConfig(mode="dry-run"), sim, Deps(clock=clock)).reconcile(job(), leader=True)
    Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock)).reconcile(job(), leader=False)
    assert sim.target_size("cpu") == 0


def test_one_failed_launch_of_two_gives_back_only_that_one_and_the_gang_keeps_the_other():
    clock = Clock()
    groups, _ = parse_catalog([group("cheap", price=0.3, max_size=10), group("backup", price=0.6, max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=30)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock))
    assert r.reconcile(job(), leader=True).scale_up == {"cheap": 2}
    assert sim.fail_launches_in_flight("cheap", count=1) == 1  # ICE for one launch; the other got capacity
    clock.now += 31
    plan = r.reconcile(job(), leader=True)
    assert plan.scale_up == {"backup": 1}  # only the failed launch is bought again, on the alternative
    assert r.record(JOB).requested == {"cheap": 1, "backup": 1}
    assert [i.state for i in sim.instances("cheap")] == ["running"] and "cheap" in r.state.backoff


def test_a_scale_up_after_the_backoff_is_not_backed_off_again_for_the_failure_before_it():
    clock = Clock()  # the controller's clock, not the wall clock: launch failures are dated on it
    sim = provider_with(clock, provisioning_delay=30)
    r = Reconciler(ControllerConfig(mode="enforce", launchFailureBackoffSeconds=300), sim, Deps(clock=clock))
    r.reconcile(job(), leader=True)
    sim.fail_launches_in_flight("cpu")
    clock.now += 31
    r.reconcile(job(), leader=True)
    assert r.state.backoff["cpu"] == clock.now + 300
    clock.now += 301
    assert r.reconcile(job(), leader=True).scale_up == {"cpu": 2}
    assert r.state.backoff.get("cpu", 0.0) < clock.now and r.record(JOB).state == "provisioning"


def test_a_pass_that_sees_the_same_snapshot_as_a_recent_one_reuses_its_plan_and_a_new_pod_is_planned(monkeypatch):
    import gangscale.controller.reconciler as reconciler

    calls = []
    real = reconciler.make_plan
    monkeypatch.setattr(reconciler, "make_plan", lambda *a: calls.append(a[0]) or real(*a))
    clock = Clock()
    sim = provider_with(clock, provisioning_delay=600)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock))
    assert r.reconcile(job(), leader=True).scale_up == {"cpu": 2}
    clock.now += 10
    waiting = r.reconcile(job(), leader=True)  # the two launches are on their way: nothing new to buy
    clock.now += 10
    again = r.reconcile(job(), leader=True)  # a resync: the same objects, the same launches in flight
    assert len(calls) == 2 and r.plans_reused == 1 and again.solver.seconds == 0
    assert {**again.to_dict(), "solver": None} == {**waiting.to_dict(), "solver": None}
    assert not again.scale_up and sim.target_size("cpu") == 2
    clock.now += 10
    more = r.reconcile([*job(), pod("c", cpu="6")], leader=True)  # a new pod: a new snapshot, planned
    assert len(calls) == 3 and more.scale_up == {"cpu": 1} and r.plans_reused == 1


def _cpu_nodes(sim: SimulatedProvider) -> list[dict]:
    """One Ready Node object per instance of the `cpu` group, as the kubelet registers them."""
    out = []
    for inst in sim.instances("cpu"):
        n = node(inst.id, cpu="8", mem="32Gi", group="cpu")
        n["spec"]["providerID"] = f"sim:///zone-a/{inst.id}"
        out.append(n)
    return out


def test_an_empty_node_no_pending_gang_uses_goes_back_after_ten_seconds_and_those_a_gangs_plan_uses_stay():
    clock = Clock()
    groups, _ = parse_catalog([group("cpu", max_size=10, current=3)])
    sim = SimulatedProvider(groups, clock=clock)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, Deps(clock=clock))  # the default grace
    nodes = _cpu_nodes(sim)
    plan = r.reconcile(nodes + job(), leader=True)  # the gang's two 6-CPU pods fit two of the three empty nodes
    used = {n for n, pods in plan.existing_nodes.items() if pods}
    assert len(used) == 2 and not plan.scale_up and sim.target_size("cpu") == 3
    clock.now += 5
    r.reconcile(nodes + job(), leader=True)
    assert sim.target_size("cpu") == 3  # within the grace
    clock.now += 6
    r.reconcile(nodes + job(), leader=True)
    left = {i.id for i in sim.instances("cpu")}
    assert sim.target_size("cpu") == 2 and left == used  # the node no plan uses went back; the gang's stay
    clock.now += 3600
    r.reconcile([n for n in nodes if n["metadata"]["name"] in left] + job(), leader=True)
    assert {i.id for i in sim.instances("cpu")} == used  # kept while the gang's plan counts on them


@pytest.mark.parametrize("min_size", [0, 1])
def test_every_node_of_a_group_that_stayed_empty_goes_back_in_one_pass_down_to_min_size(min_size):
    clock = Clock()
    groups, _ = parse_catalog([{**group("cpu", max_size=10, current=4), "minSize": min_size}])
    sim = SimulatedProvider(groups, clock=clock)
    r = Reconciler(ControllerConfig(mode="enforce", emptyNodeGraceSeconds=60), sim, Deps(clock=clock))
    nodes = _cpu_nodes(sim)
    r.reconcile(nodes, leader=True)
    clock.now += 61
    r.reconcile(nodes, leader=True)
    # all four but minSize in one pass, not the first half (each removal lowers the target the check reads)
    assert sim.target_size("cpu") == min_size and len(sim.instances("cpu")) == min_size
