"""Buying ahead through the real controller in the simulator: nodes bought before a gang asked start the gangs that
come on arrival, and a node bought ahead that no gang takes goes back by its purchase's deadline."""

from __future__ import annotations

import pytest

from benchmarks.generate import PodT
from benchmarks.sim.engine import Engine
from benchmarks.sim.policies import CONTROLLER_CONFIG_ENV
from benchmarks.sim.trace import GangSpec, Trace

DELAY = 100  # every launch takes exactly this long


def _trace(gangs: list[GangSpec], horizon: int) -> Trace:
    catalog = [{"name": "cpu", "instanceType": "m5.2xlarge", "zone": "us-east-1a", "minSize": 0, "maxSize": 40,
                "currentSize": 0}]
    return Trace("hand", 0, gangs, catalog, {"cpu": (float(DELAY), 0.0)}, 0.0, [], [], horizon)


def _one_node_gangs(every: int, until: int, runtime: int) -> list[GangSpec]:
    """One 6-core rank each (one m5.2xlarge), arriving every `every` s from 30 s until `until`."""
    return [GangSpec(f"job{i:03d}", "hpc", "cpu-mpi", "native", (("rank", 1, PodT("6", "8Gi")),), 1, t, runtime)
            for i, t in enumerate(range(30, until, every))]


def _run(monkeypatch, ahead: int, gangs: list[GangSpec], horizon: int) -> tuple[Engine, dict]:
    monkeypatch.setenv(CONTROLLER_CONFIG_ENV, f'{{"emptyNodeBuyAhead": {ahead}, "lateLaunchSeconds": 0}}')
    e = Engine(_trace(gangs, horizon), "gangscale-gate")
    return e, e.run()


@pytest.mark.parametrize("every", [45, 90])
def test_gangs_that_come_often_start_on_nodes_bought_before_they_asked(monkeypatch, every):
    gangs = _one_node_gangs(every, 1800, 400)
    off, r_off = _run(monkeypatch, 0, gangs, 1800)
    on, r_on = _run(monkeypatch, 4, gangs, 1800)
    assert r_off["started"] == r_on["started"] == len(gangs)
    # a gang that starts on a node that never ran a pod: in gate mode that node was bought ahead (each gang's own
    # purchase is Ready only after its arrival, DELAY s later)
    on_ahead = [k for k, run in on.gangs.items() if run.on == "never_ran_a_pod"]
    assert on_ahead and not [k for k, run in off.gangs.items() if run.on == "never_ran_a_pod"]
    arrived = sum(run.on is not None for run in on.gangs.values())
    assert arrived > sum(run.on is not None for run in off.gangs.values())
    assert on.policy.metrics.bought_ahead.labels("cpu")._value.get() > 0
    assert r_on["stranded_node_hours_past_deadline"] == 0


def test_a_node_bought_ahead_that_no_gang_takes_goes_back_by_its_purchase_s_deadline(monkeypatch):
    """Gangs every 45 s for ten minutes, then none: the nodes bought ahead at the end are never used, and each goes
    back no later than its purchase's deadline (`provisioningDeadlineSeconds`, the trace's 900 s) after its call,
    on the 10 s grid."""
    e, r = _run(monkeypatch, 4, _one_node_gangs(45, 600, 120), 3600)
    deadline = e.trace.deadline
    idle = [b for iid, b in e.cloud.bill.items() if iid not in e.rec.ever_used]
    assert idle, "some node bought ahead was never used"
    assert all(b.end is not None and b.end - b.start <= deadline + 10 for b in idle)
    assert r["stranded_node_hours_past_deadline"] == 0 and r["drained"]
