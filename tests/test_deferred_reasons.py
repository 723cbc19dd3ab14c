"""A pod left out because a node group may add no more nodes is told which group and which limit held it back."""

from __future__ import annotations

from builders import gang, group, plan_for, pod

from gangscale.catalog import parse_catalog
from gangscale.controller.backoff import backed_off
from gangscale.ingest import ingest
from gangscale.planner import make_plan
from gangscale.realize import OFF
from gangscale.snapshot import build_snapshot
from gangscale.solver.params import SolveOptions


def test_a_basic_pod_left_out_by_max_size_names_the_group_and_its_max_size():
    plan = plan_for([pod("a", cpu="6"), pod("b", cpu="6")], [group("g", cpu="8", max_size=1)], scheduler=OFF)
    left = next(g for g in plan.gangs if g.decision == "deferred")
    assert "node group g reaches maxSize 1 with the 1 node this plan adds (0 before)" in left.reason


def test_a_group_already_at_max_size_is_named_as_such():
    """Two upcoming nodes hold two of three pods; the group may add no more."""
    plan = plan_for([pod(f"p{i}", cpu="6") for i in range(3)], [group("g", cpu="8", max_size=2, current=2)],
                    scheduler=OFF)
    left = [g for g in plan.gangs if g.decision == "deferred"]
    assert len(left) == 1 and "node group g is at maxSize 2 (2 nodes)" in left[0].reason


def test_the_pods_of_a_basic_group_left_pending_name_the_limit():
    from builders import podgroup

    objects = [podgroup("x", policy="basic"), pod("x1", cpu="6", group="x"), pod("x2", cpu="6", group="x")]
    r = gang(plan_for(objects, [group("g", cpu="8", max_size=1)], scheduler=OFF), "x")
    assert r.decision == "scale-up" and "1 stay pending: node group g reaches maxSize 1" in r.reason


def test_a_backed_off_group_is_named_as_backed_off_not_at_max_size():
    groups, _ = parse_catalog([group("g", cpu="8", max_size=10, current=1)])
    held = [backed_off(g, {"g": 1300.0}, 1000.0) for g in groups]
    snap = build_snapshot(ingest([pod("a", cpu="6"), pod("b", cpu="6")]), held)
    plan = make_plan(snap, SolveOptions(time_limit=5.0), OFF)
    left = next(g for g in plan.gangs if g.decision == "deferred")
    assert "node group g is backed off until 1970-01-01T00:21:40Z: it recently failed to deliver nodes" in left.reason
    assert "is at maxSize" not in left.reason
