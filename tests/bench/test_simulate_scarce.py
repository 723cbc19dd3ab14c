"""The scarce trace (`--trace scarce`): capped GPU groups, ICE bursts, a zone out, member crashes."""

from __future__ import annotations

from benchmarks.sim.cloud import SimCloud
from benchmarks.sim.trace import ICE_BURST, SCARCE_CAP, Outage, make_trace, peak_demand
from benchmarks.generate import ZONES


def test_each_gpu_type_is_capped_at_50_to_70_percent_of_its_peak_demand_over_the_zones():
    for seed in range(3):
        t = make_trace("scarce", seed)
        peak = peak_demand(t.gangs)
        for itype, per_zone in t.notes["max_size_per_zone"].items():
            lo, hi = SCARCE_CAP
            assert per_zone == 1 or lo * peak[itype] // 100 <= per_zone * len(ZONES) + len(ZONES) - 1, itype
            assert per_zone * len(ZONES) <= max(len(ZONES), hi * peak[itype] // 100), itype


def test_the_scarce_trace_has_one_zone_out_bursts_at_30_percent_and_more_crashes_than_the_hour():
    t = make_trace("scarce", 0)
    full = [o for o in t.outages if o.probability == 1]
    assert len({o.group[-2:] for o in full}) == 1 and len({(o.start, o.end) for o in full}) == 1
    assert {o.probability for o in t.outages if o.probability < 1} == {ICE_BURST}
    crashed = sum(g.crash_after is not None for g in t.gangs) / len(t.gangs)
    assert crashed > sum(g.crash_after is not None for g in make_trace("hour", 0).gangs) / len(t.gangs)
    assert t.summary()["outages"][0].keys() == {"group", "start", "end"}  # an outage's summary as before


def test_a_burst_fails_about_its_share_of_launches_and_only_inside_its_window():
    from cloud_adapters.types import NodeGroup

    clock = [0.0]
    g = NodeGroup("gpu", "g5.xlarge", 1.0, 0, 10_000, 0, {"cpu": 4000})
    cloud = SimCloud([g], delays={}, failure_probability=0.0, outages=[Outage("gpu", 0, 100, 0.3)], seed=0,
                     clock=lambda: clock[0], t0=0.0)
    fails = sum(cloud._in_outage("gpu", 50) for _ in range(2000))
    assert 500 <= fails <= 700 and not cloud._in_outage("gpu", 100)
