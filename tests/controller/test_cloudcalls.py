"""The counting wrapper around the provider keeps the controller's fence and crash hooks on the real provider."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter

from builders import group
from cloud_adapters.simulated import SimulatedProvider
from gangscale.controller.actuator import Actuator
from gangscale.controller.cloudcalls import CountedProvider
from gangscale.catalog import parse_catalog


class Deposed(Exception):
    pass


def test_the_fence_the_actuator_installs_through_the_counting_wrapper_runs_on_every_mutating_call():
    sim = SimulatedProvider(parse_catalog([group("a", max_size=10)])[0])
    fenced: list[str] = []

    def fence(what: str) -> None:
        fenced.append(what)
        raise Deposed(what)

    counter = Counter("calls", "calls", ["kind", "operation"], registry=CollectorRegistry())
    Actuator(CountedProvider(sim, counter), fence=fence)
    assert sim.before_mutation is not None and sim.after_mutation is not None
    with pytest.raises(Deposed):
        sim.before_mutation("SetDesiredCapacity", "a")  # the hook every adapter runs before a mutating call
    assert fenced == ["SetDesiredCapacity a"]
