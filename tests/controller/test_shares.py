"""The pure rules of shared nodes and of settling a booking by token (no emulator, no cloud).

Attribution: a plan's new nodes are split into units linked by their gangs, and each group's nodes of a unit
are dealt among its gangs as whole nodes in proportion to what their pods take there (`shares.split`).
Settlement: after a restart a booking keeps exactly the instances in the group that carry its call's client
token (`lifecycle.by_token`, the `Confirmed` report), whatever order the calls were made in.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from builders import group, pod, podgroup
from gangscale.catalog import parse_catalog
from gangscale.controller.config import ControllerConfig
from gangscale.controller.lifecycle import (
    Booked,
    Confirmed,
    EventTarget,
    GangFacts,
    GangState,
    Record,
    by_token,
    transition,
)
from gangscale.controller.limits import over_caps
from gangscale.controller.reconciler import launched_for
from gangscale.controller.reservations import (attribute_new_nodes, reserved_registered, reserved_upcoming,
                                               shared_reservations, sharing_units)
from gangscale.controller.shares import split, unit_key
from gangscale.apply import GroupAction
from gangscale.ingest import ingest
from gangscale.model import GangKey
from gangscale.planner import OFF, make_plan
from gangscale.snapshot import SnapshotPolicy, build_snapshot
from gangscale.solver.params import SolveOptions

API = "scheduling.k8s.io/v1alpha2"
NOW = 1_800_000_000.0
A = GangKey("team-a", "train", API)
B = GangKey("team-b", "train", API)
C = GangKey("team-c", "train", API)
GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
P5 = group("p5", cpu="192", mem="2000Gi", gpu=8, price=55.0, max_size=20, taints=GPU_TAINT, itype="p5.48xlarge")


def gpu_gang(ns: str, members: int, gpus: int = 4) -> list[dict]:
    return [podgroup("train", ns, min_count=members),
            *(pod(f"train-{i}", ns, cpu="8", mem="32Gi", gpu=gpus, group="train") for i in range(members))]


def planned(objects: list[dict], policy: SnapshotPolicy | None = None, current: int = 0):
    groups, _ = parse_catalog([{**P5, "currentSize": current}])
    snap = build_snapshot(ingest(objects), groups, policy=policy)
    return snap, make_plan(snap, SolveOptions(time_limit=5), OFF)


SPLIT_TABLE = [
    # (id, nodes, weights, shares)
    ("two gangs, half each", 2, {A: 8, B: 8}, {A: 1, B: 1}),
    ("one node, two gangs: the larger remainder, then the smaller key", 1, {A: 4, B: 4}, {A: 1, B: 0}),
    ("three gangs on one node: two get none, all are named", 1, {A: 2, B: 3, C: 3}, {A: 0, B: 1, C: 0}),
    ("by weight", 3, {A: 6, B: 2}, {A: 2, B: 1}),  # 2.25 and 0.75: the larger remainder
    ("nothing measurable: by count", 3, {A: 0, B: 0}, {A: 2, B: 1}),
    ("a lone gang takes them all", 4, {A: 1}, {A: 4}),
]


@pytest.mark.parametrize("total, weights, shares", [r[1:] for r in SPLIT_TABLE], ids=[r[0] for r in SPLIT_TABLE])
def test_a_units_nodes_are_dealt_among_its_gangs_as_whole_nodes(total, weights, shares):
    assert split(total, weights) == shares


@given(st.integers(0, 40), st.lists(st.integers(0, 10_000), min_size=1, max_size=6))
def test_the_shares_add_up_to_the_units_nodes_and_each_is_within_a_node_of_its_exact_part(total, ws):
    keys = [GangKey("ns", f"g{i}", API) for i in range(len(ws))]
    weights = dict(zip(keys, ws))
    got = split(total, weights)
    assert set(got) == set(keys) and sum(got.values()) == total and min(got.values()) >= 0
    whole = sum(ws)
    for k, w in weights.items():  # the independent check: exact fractions
        exact = Fraction(total * w, whole) if whole else Fraction(total, len(keys))
        assert abs(got[k] - exact) < 1


def test_two_gangs_the_plan_packs_onto_two_shared_p5_nodes_are_each_booked_one_and_charged_one():
    snap, plan = planned([*gpu_gang("team-a", 2), *gpu_gang("team-b", 2)])
    assert plan.scale_up == {"p5": 2}
    intents = attribute_new_nodes(plan, snap)
    assert intents == {A: {"p5": 1}, B: {"p5": 1}}  # whichever way the pods pair up: 8 GPUs each
    shared = any(len({p.split("/")[0] for p in n.pods}) > 1 for n in plan.new_nodes)
    assert sharing_units(plan, snap) == ((frozenset({A, B}),) if shared else ())
    cfg = ControllerConfig(namespaceCaps={"team-a": {"maxNodes": 1}, "team-b": {"maxNodes": 1}})
    assert over_caps(plan, snap, cfg, {}, {}) == {}  # each namespace's share is one node: within its cap
    tight = ControllerConfig(namespaceCaps={"team-a": {"maxNodes": 1}, "team-b": {"maxNodes": 0}})
    assert set(over_caps(plan, snap, tight, {}, {})) == {B}


def test_a_gang_whose_share_rounds_to_zero_is_booked_with_its_unit():
    # three 1-GPU pods of three gangs: one p5 node holds them all
    snap, plan = planned([*gpu_gang("team-a", 1, 1), *gpu_gang("team-b", 1, 1), *gpu_gang("team-c", 1, 1)])
    assert plan.scale_up == {"p5": 1}
    assert attribute_new_nodes(plan, snap) == {A: {"p5": 1}, B: {"p5": 0}, C: {"p5": 0}}


def facts(key: GangKey, deadline: float = 600.0) -> GangFacts:
    return GangFacts(key, f"uid-{key.namespace}", (f"{key.namespace}-p",), frozenset({f"{key.namespace}/train-0"}),
                     deadline, EventTarget(key))


def test_gangs_that_share_nodes_are_booked_as_one_unit_with_one_deadline_and_reserved_for_the_unit():
    booked, actions, _ = transition({}, None, Booked(
        (facts(A, 900.0), facts(B, 300.0), facts(C)), {A: {"p5": 1}, B: {"p5": 1}, C: {"p5": 2}},
        desired={"p5": 0}, shared=(frozenset({A, B}),)), NOW)
    a, b, c = booked[A], booked[B], booked[C]
    assert a.shared and a.shared == b.shared and not c.shared
    assert a.deadline == b.deadline == NOW + 300.0 and c.deadline == NOW + 600.0  # the unit: the earliest
    unit = unit_key(a.shared)
    assert reserved_upcoming(booked.values()) == {"p5": (unit, unit, C, C)}  # (same request time: by record order)
    assert shared_reservations(booked.values(), {A, B, C}) == {A: unit, B: unit}
    arrived = {**booked, A: Record(**{**_fields(a), "nodes": {"p5": ("n1",)}})}
    assert reserved_registered(arrived.values()) == {"n1": unit}
    assert all(Record.from_json(r.to_json()) == r for r in booked.values())  # the unit round-trips


def _fields(rec: Record) -> dict:
    return {k: getattr(rec, k) for k in Record.__slots__}  # type: ignore[attr-defined]


def test_the_next_plan_reuses_a_units_nodes_for_both_its_gangs_and_buys_nothing():
    objs = [*gpu_gang("team-a", 2), *gpu_gang("team-b", 2)]
    unit = unit_key("unit-x")
    policy = SnapshotPolicy(reserved={"p5": (unit, unit)}, shared={A: unit, B: unit})
    _, plan = planned(objs, policy, current=2)
    assert plan.scale_up == {} and {g.decision for g in plan.gangs} == {"fits-existing"}
    _, alone = planned(objs, SnapshotPolicy(reserved={"p5": (unit, unit)}, shared={A: unit}), current=2)
    assert alone.scale_up == {"p5": 1}  # without the unit, b's pods may not use the unit's nodes


def booked_pair(order: tuple[GangKey, GangKey] = (A, B)):
    """Two gangs booked in one pass on one group, each by a call of its own (aws-fleet's separate units)."""
    records, _, _ = transition({}, None, Booked(
        (facts(A), facts(B)), {A: {"p5": 2}, B: {"p5": 3}},
        units=((frozenset({A}), {"p5": 2}), (frozenset({B}), {"p5": 3})), desired={"p5": 0}), NOW)
    return records


SETTLE_TABLE = [
    # (id, instances in the group by which record's call carries their token, tokens read?, a after, b after)
    ("b's call went first and landed, a's never went out", {"b": 3}, True, 0, 3),
    ("a's call went first and landed, b's never went out", {"a": 2}, True, 2, 0),
    ("both landed", {"a": 2, "b": 3}, True, 2, 3),
    ("neither landed", {}, True, 0, 0),
    ("the cloud cannot say: by desired capacity, gang order", {"b": 3}, False, 2, 1),
]


@pytest.mark.parametrize("landed, read, a_after, b_after", [r[1:] for r in SETTLE_TABLE],
                         ids=[r[0] for r in SETTLE_TABLE])
def test_a_restart_settles_each_booking_by_the_tokens_on_the_groups_instances(landed, read, a_after, b_after):
    records = booked_pair()
    token = {"a": records[A].calls["p5"][0], "b": records[B].calls["p5"][0]}
    assert token["a"] != token["b"]
    ids = {token[who]: tuple(f"i-{who}{k}" for k in range(n)) for who, n in landed.items()}
    desired = {"p5": sum(landed.values())}
    new, actions, _ = transition(records, None, Confirmed(desired, ids if read else None), NOW + 5)
    assert actions == ()
    for key, want, who in ((A, a_after, "a"), (B, b_after, "b")):
        rec = new[key]
        assert sum(rec.requested.values()) == want and not rec.unconfirmed and not rec.calls
        assert rec.state == (GangState.PROVISIONING if want else GangState.PLANNED)
        if read:  # held by id: exactly its own call's instances
            assert rec.launches.get("p5", ()) == ids.get(token[who], ())


def test_a_call_shared_by_a_unit_deals_its_instances_to_the_units_records_each_its_share():
    records, _, _ = transition({}, None, Booked(
        (facts(A), facts(B)), {A: {"p5": 1}, B: {"p5": 1}}, units=((frozenset({A, B}), {"p5": 2}),),
        desired={"p5": 0}, shared=(frozenset({A, B}),)), NOW)
    token = records[A].calls["p5"][0]
    assert records[B].calls["p5"][0] == token
    dealt = by_token(records.values(), {token: ("i-2", "i-1", "i-9")})  # one more than booked: never dealt
    assert dealt == {(A, "p5"): ("i-1",), (B, "p5"): ("i-2",)}
    assert by_token(records.values(), None) == {}


def test_the_instances_of_one_pass_are_held_by_the_gang_whose_call_launched_them():
    records = booked_pair()
    calls = {k: r.calls for k, r in records.items()}
    actions = [GroupAction("p5", 3, "applied", instance_ids=["i-b1", "i-b2", "i-b3"], token=calls[B]["p5"][0]),
               GroupAction("p5", 2, "applied", instance_ids=["i-a1", "i-a2"], token=calls[A]["p5"][0])]
    got = launched_for({A: {"p5": 2}, B: {"p5": 3}}, actions, calls)
    assert got == {A: {"p5": ("i-a1", "i-a2")}, B: {"p5": ("i-b1", "i-b2", "i-b3")}}


def test_the_scheduler_model_keeps_a_units_gangs_on_the_units_nodes_and_a_new_gang_off_them():
    from gangscale.controller.reservations import HELD_TAINT, held_in_the_model
    from gangscale.scheduling import nodes_from_views, simulate

    objs = [*gpu_gang("team-a", 2), *gpu_gang("team-b", 1), *gpu_gang("team-c", 2)]
    unit = unit_key("unit-x")
    groups, _ = parse_catalog([{**P5, "currentSize": 3}])  # two nodes on their way for the unit, one free
    snap = build_snapshot(ingest(objs), groups, policy=SnapshotPolicy(reserved={"p5": (unit, unit)},
                                                                      shared={A: unit, B: unit}))
    held = held_in_the_model(snap)
    views = {v.name: v for v in held.nodes}
    assert views["p5/upcoming-1"].labels[HELD_TAINT] == str(unit)  # a and b fit there together: pinned
    assert HELD_TAINT not in views["p5/upcoming-3"].labels
    unit_nodes = {"p5/upcoming-1", "p5/upcoming-2"}
    for seed in (0, 1, 2):  # independently: the scheduler model places a and b there, c elsewhere
        res = simulate(nodes_from_views(held.nodes), held.solvable, seed=seed)
        assert {res.placement[f"{ns}/train-{i}"] for ns, n in (("team-a", 2), ("team-b", 1))
                for i in range(n)} <= unit_nodes
        assert not {res.placement.get(f"team-c/train-{i}") for i in range(2)} & unit_nodes
