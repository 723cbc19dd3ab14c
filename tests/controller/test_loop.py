"""The act half of a pass (`loop.py`) with the real executor and the simulated cloud: the records are saved right
before a write-ahead action and for no other kind, and each outcome comes round as the next observation."""

from __future__ import annotations

from dataclasses import replace

from gangscale.controller.config import ControllerConfig
from gangscale.controller.reconciler import Deps, Reconciler
from gangscale.controller.records import ControllerState

from .test_reconciler import JOB, Clock, job, provider_with


class Store:
    """Keeps the last saved records in memory, and says when it was saved into the shared `order`."""

    def __init__(self, order: list[str]) -> None:
        self.order, self.state = order, ControllerState()

    def save(self, state: ControllerState) -> None:
        self.order.append("saved " + ",".join(str(r.state) for r in state.records.values()))
        self.state = ControllerState(dict(state.records), dict(state.backoff))

    def load(self) -> ControllerState:
        return self.state


def reconciler(order: list[str], clock: Clock, **sim) -> tuple[Reconciler, object]:
    cloud = provider_with(clock, **sim)
    deps = Deps(clock=clock, store=Store(order), fence=lambda what: order.append(what))  # type: ignore[arg-type]
    return Reconciler(ControllerConfig(mode="enforce"), cloud, deps), cloud


def test_the_records_are_saved_with_the_booking_before_the_scale_up_call_is_sent():
    order: list[str] = []
    r, cloud = reconciler(order, Clock(), provisioning_delay=600)
    r.reconcile(job(), leader=True)
    first_call = next(i for i, what in enumerate(order) if what.startswith("scale-up"))
    saves = [i for i, what in enumerate(order) if what.startswith("saved")]
    assert saves and saves[0] < first_call  # write-ahead: the booking is on the store before the cloud hears of it
    assert order[saves[0]] == "saved new"  # the booked record, before the outcome moved it to provisioning
    assert cloud.target_size("cpu") == 2 and r.record(JOB).state == "provisioning"


def test_a_release_is_not_write_ahead_nothing_is_saved_between_the_decision_and_the_call():
    clock = Clock()
    order: list[str] = []
    r, cloud = reconciler(order, clock, provisioning_delay=600)
    r.reconcile(job(deadline="30"), leader=True)
    clock.now += 31
    order.clear()
    r.reconcile(job(deadline="30"), leader=True)  # past the deadline: the launches go back
    release = next(i for i, what in enumerate(order) if what.startswith("release"))
    assert not any(what.startswith("saved") for what in order[:release])  # saved once, at the end of the pass
    assert order[-1] == "saved timed-out" and cloud.target_size("cpu") == 0


def test_what_the_cloud_gave_back_is_the_next_observation_and_its_reason_says_how_many():
    clock = Clock()
    r, cloud = reconciler([], clock, provisioning_delay=600)
    r.reconcile(job(deadline="30"), leader=True)
    r.state.records[JOB] = replace(r.record(JOB), requested={"cpu": 3})  # one more than the cloud has
    clock.now += 31
    r.reconcile(job(deadline="30"), leader=True)
    assert "gave back 2 unused nodes" in r.record(JOB).reason  # the outcome's count, not the record's
