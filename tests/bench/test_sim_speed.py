"""The simulator's shortcuts give what the work they skip gave: the controller policy's next wake-up, the metrics'
sums of bound pods. Each is checked against the plain computation, written out here."""

from __future__ import annotations

import logging
import random

import pytest

from benchmarks.generate import PodT
from benchmarks.sim.engine import T0, Engine
from benchmarks.sim.metrics import Recorder
from benchmarks.sim.policies import RESYNC
from benchmarks.sim.trace import GangSpec, Trace
from gangscale.model import GangKey
from gangscale.controller.lifecycle import GangState, Record


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("gangscale").setLevel(logging.ERROR)
    yield
    logging.getLogger("gangscale").setLevel(logging.NOTSET)


def _engine(policy: str = "gangscale-observe") -> Engine:
    cpu = {"name": "cpu", "instanceType": "m5.2xlarge", "zone": "us-east-1a", "minSize": 0, "maxSize": 10,
           "currentSize": 0}
    spec = GangSpec("job", "hpc", "cpu-mpi", "native", (("rank", 2, PodT("6", "8Gi")),), 2, 0, 3600)
    return Engine(Trace("hand", 0, [spec], [cpu], {"cpu": (300.0, 0.0)}, 0.0, [], [], 1800), policy)


def _every_timer_wake(policy, now: int, pending: bool) -> int | None:
    """Gangscale.next_wake as a list of every timer of every record, the earliest after the last pass kept."""
    t0, cfg, rec = policy.clock() - now, policy.cfg, policy.rec
    times = []
    for r in rec.state.records.values():
        times += [r.since + cfg.cancel_grace_seconds, r.since + cfg.launch_failure_backoff_seconds]
        if r.deadline:
            times.append(r.deadline)
        if r.state != GangState.RUNNING:
            times.append(r.first_seen + cfg.ageing_seconds)
    times += list(rec.state.backoff.values())
    times += [rec.empty_until[n] for n in rec.empty_since]  # each empty node's give-back time (keep.py)
    due = [v for t in times if (v := int(t - t0) + 1) > policy.last_scan]
    if any(int(rec.empty_until[n] - t0) + 1 <= policy.last_scan for n in rec.empty_since):
        due.append(policy.last_scan + int(cfg.resync_seconds))
    if rec.replan_soon:
        due.append(policy.last_scan + 10)
    elif pending or any(r.state in (GangState.PROVISIONING, GangState.READY) for r in rec.state.records.values()):
        due.append(policy.last_scan + RESYNC)
    return min(due) if due else None


def _record(rng: random.Random, i: int, now: float) -> Record:
    since = now - rng.choice([0.0, 0.4, 5.0, 59.9, 300.0, 400.0, 450.0, 900.0, 3600.0, 90000.0]) + rng.random()
    deadline = rng.choice([0.0, since + 900.0, now - 1.5, now + 0.25])
    return Record(GangKey("ns", f"g{i}", "none"), f"uid-{i}", rng.choice(list(GangState)), "why", since,
                  first_seen=since - rng.choice([0.0, 1.0, 1800.0, 7200.0]), deadline=deadline)


@pytest.mark.parametrize("seed", range(60))
def test_the_controller_policys_next_wake_is_the_earliest_of_all_its_timers_after_its_last_pass(seed):
    rng = random.Random(seed)
    e = _engine()
    policy = e.policy
    now = rng.choice([600, 3600, 90000])
    e.clock.t = now
    policy.last_scan = now - rng.choice([0, 10, 600])
    policy.rec.state.records = {(r := _record(rng, i, T0 + now)).key: r for i in range(rng.choice([0, 1, 1, 2, 3, 40]))}
    policy.rec.state.backoff = {f"g{i}": T0 + now + rng.uniform(-600, 600) for i in range(rng.choice([0, 0, 1, 2]))}
    policy.rec.empty_since = {f"n{i}": T0 + now - rng.uniform(0, 1200) for i in range(rng.choice([0, 0, 0, 1]))}
    policy.rec.empty_until = {n: s + rng.choice([10.0, 300.0, 1800.0]) for n, s in policy.rec.empty_since.items()}
    policy.rec.replan_soon = rng.random() < 0.1
    for pending in (False, True):
        assert policy.next_wake(now, pending) == _every_timer_wake(policy, now, pending)


@pytest.mark.parametrize("state, seen_before, expected", [
    (GangState.RUNNING, 0, None),  # a running gang does not age; its grace and backoff timers are past
    (GangState.PLANNED, 0, 3800),  # a planned one does: first seen 400.5 s ago, ageing 600 s, the step after
    (GangState.PROVISIONING, 1000, 3590 + RESYNC),  # every timer past, capacity on its way: the resync
])
def test_the_controller_policys_next_wake_counts_ageing_only_for_gangs_not_running_and_resyncs_what_is_on_its_way(
        state, seen_before, expected):
    e = _engine()
    policy, now = e.policy, 3600
    e.clock.t, policy.last_scan = now, now - 10
    since = T0 + now - 400.5
    r = Record(GangKey("ns", "g", "none"), "uid", state, "why", since, first_seen=since - seen_before)
    policy.rec.state.records = {r.key: r}
    assert policy.next_wake(now, False) == _every_timer_wake(policy, now, False) == expected


def test_a_step_that_changed_no_object_is_accounted_as_if_the_bound_pods_were_summed_again():
    e = _engine()
    e.run()  # a whole run: its nodes and pods as they ended, and its templates
    pods = {"hpc/a": {"spec": {"nodeName": "n1"}}, "hpc/b": {"spec": {"nodeName": "n2"}}, "hpc/c": {"spec": {}}}
    templates = {k: PodT("1", "1Gi", gpus=g) for k, g in zip(pods, (1, 2, 4))}
    nodes = {"n1": {}, "n2": {}, "n3": {}}
    kept, summed = Recorder(e.trace, e.cloud, e.group_gpus), Recorder(e.trace, e.cloud, e.group_gpus)
    # (step, version): the same version twice, then a bind with its new version, then the same again
    moves = [(10, 1), (20, 1), (30, 2), (40, 2), (50, 3)]
    for t, version in moves:
        if version == 2:
            pods = {**pods, "hpc/c": {"spec": {"nodeName": "n3"}}}
        if version == 3:
            pods = {k: p for k, p in pods.items() if k != "hpc/a"}
        kept.account(t, nodes, pods, templates, version)
        summed.account(t, nodes, pods, templates)
    assert (kept.gpu_used_s, kept.stranded_s, kept.used_s, kept.ever_used) == \
        (summed.gpu_used_s, summed.stranded_s, summed.used_s, summed.ever_used)
    assert summed.gpu_used_s == 10 * (3 + 3 + 7 + 7 + 6) and summed.used_s == {"n1": 40, "n2": 50, "n3": 30}
