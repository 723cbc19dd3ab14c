"""The reconciler in process, with the simulated cloud: the paths moto cannot reach."""

from __future__ import annotations

from builders import group, pod, podgroup
from cloud_adapters.simulated import SimulatedProvider
from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.controller.reconciler import Reconciler
from gangscale.controller.records import Record
from gangscale.ingest import ingest


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def provider_with(clock: Clock, **kw) -> SimulatedProvider:
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    return SimulatedProvider(groups, clock=clock, **kw)


def test_release_gives_back_launches_and_slots_never_launched():
    clock = Clock()
    sim = provider_with(clock, provisioning_delay=60)
    sim.increase_size("cpu", 1)  # one instance launching
    sim._groups["cpu"].target = 3  # and two slots the cloud has not launched yet (as an ASG can have)
    rec = Record("default/job/x", "default", "job", "x", "-", "timed-out", "", clock.now, requested={"cpu": 3})
    r = Reconciler(ControllerConfig(mode="enforce"), sim, clock=clock)
    assert r._release(rec, ingest([]), "timed-out") == 3
    assert sim.target_size("cpu") == 0 and rec.requested == {}


def test_a_gang_moves_off_a_group_whose_launches_fail():
    clock = Clock()
    groups, _ = parse_catalog([group("cheap", price=0.3, max_size=10), group("backup", price=0.6, max_size=10)])
    sim = SimulatedProvider(groups, clock=clock, provisioning_delay=30)
    r = Reconciler(ControllerConfig(mode="enforce"), sim, clock=clock)
    objs = [podgroup("job", min_count=2), pod("a", cpu="6", group="job"), pod("b", cpu="6", group="job")]
    plan = r.reconcile(objs, leader=True)
    assert plan.scale_up == {"cheap": 2}
    # the cloud reports the launches failed (the simulated cloud drops them from the target)
    for inst in sim._groups["cheap"].instances:
        inst.fails = True
    clock.now += 31
    plan = r.reconcile(objs, leader=True)
    assert plan.scale_up == {"backup": 2}
    assert r.state.records["default/job/scheduling.k8s.io/v1alpha2"].requested == {"backup": 2}
    assert "cheap" in r.state.backoff


def test_dry_run_and_followers_never_touch_the_cloud():
    clock = Clock()
    sim = provider_with(clock)
    objs = [podgroup("job", min_count=2), pod("a", cpu="6", group="job"), pod("b", cpu="6", group="job")]
    Reconciler(ControllerConfig(mode="dry-run"), sim, clock=clock).reconcile(objs, leader=True)
    Reconciler(ControllerConfig(mode="enforce"), sim, clock=clock).reconcile(objs, leader=False)
    assert sim.target_size("cpu") == 0
