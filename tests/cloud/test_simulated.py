"""The simulated cloud: provisioning delay, seeded launch failures, atomic mode, saved state."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from cloud_adapters import CapacityError, NotFoundError, SizeLimitError, UnsupportedError, create_provider
from cloud_adapters.simulated import SimulatedProvider
from gangscale.providers import open_provider
from gangscale.catalog import parse_catalog


class Clock:
    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def groups(current: int = 0):
    gs, warnings = parse_catalog([{"name": "gpu", "instanceType": "g5.12xlarge", "maxSize": 10,
                                   "currentSize": current, "zone": "us-east-1a"}])
    assert not warnings
    return gs


def test_provisioning_delay_and_discovery():
    clock = Clock()
    sim = SimulatedProvider(groups(current=1), provisioning_delay=90, clock=clock)
    res = sim.increase_size("gpu", 2)
    assert (res.before, res.after) == (1, 3) and len(res.instance_ids) == 2
    assert sorted(i.state for i in sim.instances("gpu")) == ["launching", "launching", "running"]
    assert sim.discover().groups[0].current_size == 3
    clock.t += 90
    assert {i.state for i in sim.instances("gpu")} == {"running"}
    assert set(sim.instance_groups()) == {i.id for i in sim.instances("gpu")}
    assert sim.instances("gpu")[0].zone == "us-east-1a"


def test_failures_are_seeded_and_drop_out_of_the_target():
    def outcome(seed: int) -> tuple[int, int]:
        clock = Clock()
        sim = SimulatedProvider(groups(), provisioning_delay=10, failure_probability=0.5, seed=seed, clock=clock)
        start = datetime.fromtimestamp(clock.t, timezone.utc)
        sim.increase_size("gpu", 10)
        clock.t += 10
        failures = sim.launch_failures("gpu", start)
        assert all(isinstance(f.error, CapacityError) for f in failures)
        return sim.target_size("gpu"), len(failures)

    first = outcome(7)
    assert first == outcome(7)  # same seed, same cloud
    assert first[0] + first[1] == 10 and 0 < first[1] < 10


def test_atomic_mode_is_all_or_nothing():
    sim = SimulatedProvider(groups(), failure_probability=1.0, atomic=True)
    with pytest.raises(CapacityError):
        sim.atomic_increase_size("gpu", 3)
    assert sim.target_size("gpu") == 0 and sim.instances("gpu") == []
    plain = SimulatedProvider(groups())
    with pytest.raises(UnsupportedError):
        plain.atomic_increase_size("gpu", 1)


def test_limits_and_unknown_groups():
    sim = SimulatedProvider(groups(current=2))
    with pytest.raises(SizeLimitError):
        sim.increase_size("gpu", 9)
    with pytest.raises(SizeLimitError):
        sim.decrease_target_size("gpu", 1)  # both slots hold instances
    with pytest.raises(NotFoundError):
        sim.target_size("nope")
    with pytest.raises(NotFoundError):
        sim.delete_instances("gpu", ["sim-x"])
    one = sim.instances("gpu")[0].id
    assert sim.delete_instances("gpu", [one]).after == 1
    sim.increase_size("gpu", 1)
    with pytest.raises(Exception):
        sim.increase_size("gpu", 0)


def test_state_file_survives_between_runs(tmp_path):
    state = tmp_path / "sim.json"
    first = SimulatedProvider(groups(), state_file=state)
    first.increase_size("gpu", 4)
    second = SimulatedProvider(groups(), state_file=state)
    assert second.target_size("gpu") == 4 and len(second.instances("gpu")) == 4
    state.write_text("not json")
    with pytest.raises(ValueError):
        SimulatedProvider(groups(), state_file=state)


def test_registry_builds_the_simulated_provider_from_a_catalog(tmp_path):
    catalog = tmp_path / "c.yaml"
    catalog.write_text("- {name: cpu, instanceType: m5.xlarge, maxSize: 3}\n- {name: bad, maxSize: 1}\n")
    provider, warnings = open_provider("simulated", catalog=catalog)
    assert [g.name for g in provider.discover().groups] == ["cpu"]
    assert len(warnings) == 1 and "bad" in warnings[0]
    with pytest.raises(ValueError):
        create_provider("simulated")
    with pytest.raises(ValueError):
        create_provider("gcp")


def test_launches_in_flight_can_be_made_to_fail_and_are_reported_as_capacity_errors():
    clock = Clock()
    sim = SimulatedProvider(groups(current=1), provisioning_delay=30, clock=clock)
    start = datetime.fromtimestamp(clock.t, timezone.utc)
    sim.increase_size("gpu", 2)
    assert sim.fail_launches_in_flight("gpu") == 2  # the running instance is not touched
    clock.t += 30
    assert sim.target_size("gpu") == 1
    failures = sim.launch_failures("gpu", start)
    assert len(failures) == 2 and all(f.error.kind == "capacity" for f in failures)


def test_unlaunched_slots_raise_the_target_only():
    sim = SimulatedProvider(groups())
    sim.increase_size("gpu", 1)
    res = sim.add_unlaunched_slots("gpu", 2)
    assert (res.before, res.after) == (1, 3) and res.instance_ids == ()
    assert sim.target_size("gpu") == 3 and len(sim.instances("gpu")) == 1
    sim.decrease_target_size("gpu", 2)  # the slots can be taken back without touching the instance
    assert sim.target_size("gpu") == 1
