"""A controller's snapshots keep the node views of the last one (`NodeViews`): every snapshot equals one built afresh.

Each step below changes one thing a view derives from (a pod bound on the node, the gang the node is reserved for,
whether its group is known, the Node itself) and checks the snapshot against `build_snapshot` without kept views,
and which views were kept: a view kept where its node changed would be stale (a wrong free capacity, reservation
or group), so leaving any of the four out of what is compared fails here.
"""

from __future__ import annotations

import copy

from builders import group, node, pod
from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.model import GangKey
from gangscale.parse import ParseCache
from gangscale.snapshot import NodeViews, SnapshotPolicy, build_snapshot


def _objects() -> dict[str, dict]:
    return {"n1": node("n1", group="cpu"), "n2": node("n2", group="cpu"), "n3": node("n3", group="other"),
            "b1": pod("b1", cpu="2", node="n1"), "p": pod("p", cpu="3")}


def _views_of(snap) -> dict[str, object]:
    return {v.name: v for v in snap.nodes if not v.upcoming}


def test_a_snapshot_built_with_kept_node_views_equals_one_built_afresh_and_keeps_only_unchanged_nodes_views():
    cache = ParseCache(objects=True, frozen_objects=True)  # the simulator's: an unchanged object parses to the same Node
    groups, _ = parse_catalog([group("cpu"), group("other")])
    views = NodeViews()
    objs = _objects()
    owner = GangKey("default", "p", "none")
    # (what changed, the objects, the groups, the policy, the nodes whose view must be new)
    steps = [
        ("the first snapshot", objs, groups, SnapshotPolicy(), {"n1", "n2", "n3"}),
        ("nothing", objs, groups, SnapshotPolicy(), set()),
        ("a pod bound on n2", {**objs, "b2": pod("b2", cpu="1", node="n2")}, groups, SnapshotPolicy(), {"n2"}),
        ("n1 reserved for a gang", objs, groups, SnapshotPolicy(reserved_nodes={"n1": owner}), {"n1", "n2"}),
        ("n3's group no longer discovered", objs, groups[:1], SnapshotPolicy(reserved_nodes={"n1": owner}), {"n3"}),
        ("n3 relabelled (a new Node)", {**objs, "n3": node("n3", group="other", labels={"zone": "b"})}, groups[:1],
         SnapshotPolicy(reserved_nodes={"n1": owner}), {"n3"}),
    ]
    before: dict[str, object] = {}
    for what, objects, gs, policy, changed in steps:
        cluster = ingest(list(objects.values()), cache=cache)
        kept = build_snapshot(cluster, gs, policy=policy, views=views)
        afresh = build_snapshot(ingest(copy.deepcopy(list(objects.values()))), gs, policy=policy)
        assert kept == afresh, what
        now = _views_of(kept)
        assert {n for n, v in now.items() if before.get(n) is not v} == changed, what
        before = now
