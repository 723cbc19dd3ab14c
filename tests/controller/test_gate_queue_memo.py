"""Gate mode's memo of the scheduler model's runs of the queue (gates.QueueMemo): the same answers as without it,
under every input the runs read, and the runs made once for a pass's plan and its release."""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import group, node, pod, podgroup
from gangscale.catalog import parse_catalog
from gangscale.controller.gates import QueueMemo, decide, scheduled_first
from gangscale.ingest import CAPACITY_GATE, ingest
from gangscale.planner import OFF, make_plan
from gangscale.scheduling.config import strategy_config
from gangscale.snapshot import build_snapshot
from gangscale.solver.params import SolveOptions


def _objects(*, lone_cpu: str = "4", n1: tuple[str, str] = ("8", "32Gi"), bound: bool = False) -> list[dict]:
    """Two unequal Ready nodes, a held gang and one ungated pod (the queue): LeastAllocated puts it on n2, the
    bigger node; MostAllocated on n1 (on either, cpu and memory are used alike: BalancedAllocation is even)."""
    gang = podgroup("g")
    gang["metadata"]["creationTimestamp"] = "2030-01-01T00:00:01Z"
    gated = pod("g0", cpu="6", group="g", schedulingGates=[{"name": CAPACITY_GATE}])
    objs = [node("n1", cpu=n1[0], mem=n1[1]), node("n2", cpu="16", mem="64Gi"), gang, gated,
            pod("lone", cpu=lone_cpu, mem="16Gi")]
    return [*objs, pod("busy", cpu="10", node="n2")] if bound else objs


def _snap(**kw):
    groups, _ = parse_catalog([group("cpu", cpu="8")])
    return build_snapshot(ingest(_objects(**kw)), groups)


def _held(g) -> bool:
    return True


def _other_bound():
    """The same Ready nodes (free room as before) with another bound pod: the model reads bound pods apart from
    the nodes' free room (allocatable, per-node pod rules)."""
    return replace(_snap(), bound=_snap(bound=True).bound)


VARIANTS = {  # one input of the runs changed at a time, each changing the answer
    "the queue": (lambda: _snap(lone_cpu="10"), None),
    "the Ready nodes": (lambda: _snap(n1=("32", "128Gi")), None),
    "the bound pods": (_other_bound, None),
    "the scheduler's configuration": (_snap, strategy_config("MostAllocated")),
}


@pytest.mark.parametrize("changed", VARIANTS)
def test_the_queue_runs_memo_answers_a_pass_whose_input_changed_as_if_it_had_no_memo(changed):
    make, config = VARIANTS[changed]
    memo = QueueMemo()
    base = scheduled_first(_snap(), _held, memo=memo)
    assert memo.runs == 1
    snap = make()
    fresh = scheduled_first(snap, _held, config=config)
    assert fresh != base  # this input decides the answer, so a key without it answers wrongly
    assert scheduled_first(snap, _held, config=config, memo=memo) == fresh
    assert memo.runs == 2 and memo.hits == 0


def test_a_pass_with_unchanged_inputs_reuses_the_queue_runs_and_answers_the_same():
    memo = QueueMemo()
    first = scheduled_first(_snap(), _held, memo=memo)
    again = scheduled_first(_snap(), _held, memo=memo)  # equal objects read again: a new pass, nothing changed
    assert again == first == scheduled_first(_snap(), _held)
    assert (memo.runs, memo.hits) == (1, 1)


def test_the_release_reuses_the_queue_runs_its_pass_made_for_the_plan():
    groups, _ = parse_catalog([group("cpu", cpu="8")])
    cluster = ingest(_objects())
    snap = build_snapshot(cluster, groups)
    memo = QueueMemo()
    plan = make_plan(scheduled_first(snap, _held, memo=memo), SolveOptions(time_limit=5), OFF)
    plan = plan.model_copy(update={"existing_nodes": {**plan.existing_nodes, "n1": ["default/g0"]}})  # Ready room
    with_memo = decide(cluster.gangs, plan, snap, _held, memo=memo)
    assert with_memo == decide(cluster.gangs, plan, snap, _held)
    assert [lift.nodes for lift in with_memo.lifts] == [("n1",)]  # the release did ask for the room
    assert (memo.runs, memo.hits) == (1, 1)


def test_a_pass_that_releases_no_gang_runs_no_model_of_the_queue_and_asks_each_gang_once_whether_it_is_held():
    more = [pod(f"g{i}", cpu="1", group="g", schedulingGates=[{"name": CAPACITY_GATE}]) for i in (1, 2)]
    cluster = ingest([*_objects(), *more])
    snap = build_snapshot(cluster, [])
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    plan = plan.model_copy(update={"existing_nodes": {}})  # the plan places none of the held gang's pods
    memo, asked = QueueMemo(), []
    d = decide(cluster.gangs, plan, snap, lambda g: asked.append(g.name) or True, memo=memo)
    assert d.lifts == () and [k.name for k in d.held] == ["g"] and "places none" in d.held[next(iter(d.held))]
    assert memo.runs == 0  # the room (the queue's model runs) is only needed to narrow a released pod
    assert asked == ["g"]  # once, not once per gated pod nor again for the room
