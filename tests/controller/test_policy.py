"""Controller policy reaches the planner as a `SnapshotPolicy` value; nothing the cluster holds is changed."""

from __future__ import annotations

import copy

import pytest

from builders import group, node, pod, podgroup
from gangscale.catalog import parse_catalog
from gangscale.controller.events import involved_object
from gangscale.controller.lifecycle import EventTarget, GangState, Record
from gangscale.controller.reservations import reserved_registered, reserved_upcoming
from gangscale.ingest import ingest
from gangscale.model import (
    API_COSCHEDULING,
    API_NONE,
    API_PODGROUP_V1ALPHA2,
    API_PODGROUP_V1BETA1,
    API_VOLCANO,
    API_WORKLOAD,
    GangKey,
)
from gangscale.planner import OFF, make_plan
from gangscale.snapshot import RESERVED_TAINT, PreDecision, SnapshotPolicy, build_snapshot
from gangscale.solver.params import SolveOptions


def cluster_and_groups():
    objs = [podgroup("a", min_count=1), pod("a0", cpu="6", group="a"),
            podgroup("b", min_count=1), pod("b0", cpu="6", group="b")]
    groups, _ = parse_catalog([group("cpu", current=3, max_size=10)])
    return ingest(objs), groups


def test_reservations_boosts_and_holds_are_built_in_and_the_cluster_is_left_as_it_was():
    cluster, groups = cluster_and_groups()
    a, b = (g.key for g in cluster.gangs)
    before = copy.deepcopy((cluster.gangs, cluster.nodes))
    policy = SnapshotPolicy(reserved={"cpu": (a, a)}, priority={a: 7}, held={b: PreDecision("deferred", "cap")})
    snap = build_snapshot(cluster, groups, policy=policy)
    assert (cluster.gangs, cluster.nodes) == before  # copies where the policy changes them
    upcoming = [v for v in snap.nodes if v.upcoming]
    assert [v.reserved_for for v in upcoming] == [a, a, None]
    assert [t.key for t in upcoming[0].taints] == [RESERVED_TAINT] and not upcoming[2].taints
    planned_a = next(g for g in snap.gangs if g.key == a)
    assert planned_a.priority == 7
    assert planned_a.pending[0].placement.tolerations[-1].value == str(a)
    assert snap.decided[b].reason == "cap"
    assert [g.key for g in snap.solvable] == [a]


def test_a_reservation_beyond_the_nodes_on_their_way_gives_no_toleration():
    cluster, groups = cluster_and_groups()
    a, b = (g.key for g in cluster.gangs)
    snap = build_snapshot(cluster, groups, policy=SnapshotPolicy(reserved={"cpu": (a, a, a, b)}))
    planned_b = next(g for g in snap.gangs if g.key == b)
    assert planned_b.pending[0].placement.tolerations == ()


def _holding(key: GangKey, at: float, nodes: tuple[str, ...] = ()) -> Record:
    """A provisioning record of one cpu node bought at `at`; `nodes`: the registered ones attributed to it."""
    return Record(key, "uid", GangState.PROVISIONING, "", at,
                  requested={"cpu": 1}, requested_at=at, deadline=at + 900, nodes={"cpu": nodes} if nodes else {})


def test_the_node_still_on_its_way_is_reserved_for_the_newer_gang_once_the_older_gangs_node_has_arrived():
    # a was bought for first and its node has registered (its pods still wait, e.g. gated); b's node is the one
    # still on its way. Reserving that one for a left b without a node and bought b a second one; and a's
    # registered node, reserved for nobody, went to whichever gang came next (c), so a was bought for twice.
    objs = [podgroup("a", min_count=1), pod("a0", cpu="6", group="a"),
            podgroup("b", min_count=1), pod("b0", cpu="6", group="b"),
            podgroup("c", min_count=1), pod("c0", cpu="6", group="c"), node("cpu-1", group="cpu")]
    groups, _ = parse_catalog([group("cpu", current=2, max_size=10)])
    cluster = ingest(objs)
    a, b, c = (g.key for g in cluster.gangs)
    records = [_holding(a, 100.0, ("cpu-1",)), _holding(b, 200.0)]
    policy = SnapshotPolicy(reserved=reserved_upcoming(records), reserved_nodes=reserved_registered(records))
    snap = build_snapshot(cluster, groups, policy=policy)
    assert [v.reserved_for for v in snap.nodes if v.upcoming] == [b]
    assert [v.reserved_for for v in snap.nodes if v.name == "cpu-1"] == [a]
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    assert [r.decision for r in plan.gangs] == ["fits-existing", "fits-existing", "scale-up"]
    assert plan.existing_nodes["cpu-1"] == ["default/a0"] and [n.pods for n in plan.new_nodes] == [["default/c0"]]


@pytest.mark.parametrize("api, kind, name", [
    (API_WORKLOAD, "Workload", "train"),
    (API_PODGROUP_V1ALPHA2, "PodGroup", "train/workers"),
    (API_PODGROUP_V1BETA1, "PodGroup", "train/workers"),
    (API_COSCHEDULING, "PodGroup", "train/workers"),
    (API_VOLCANO, "PodGroup", "train/workers"),
])
def test_an_event_is_attached_to_the_gangs_own_object_for_every_api_flavour(api, kind, name):
    obj = involved_object(EventTarget(GangKey("ml", "train/workers", api), "uid-1/g"))
    assert (obj["apiVersion"], obj["kind"], obj["name"]) == (api, kind, name)


def test_an_event_about_a_lone_pod_or_a_missing_group_is_attached_to_the_pod():
    lone = involved_object(EventTarget(GangKey("ml", "p", API_NONE), "", "p", "pod-uid"))
    missing = involved_object(EventTarget(GangKey("ml", "g", API_VOLCANO), "", "p0", "u0", exists=False))
    assert (lone["apiVersion"], lone["kind"], lone["uid"]) == ("v1", "Pod", "pod-uid")
    assert (missing["kind"], missing["name"]) == ("Pod", "p0")
