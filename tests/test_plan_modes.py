"""`gangscale plan --mode gate`, the default: the snapshot gate mode plans on, as the webhook and the controller
would leave it. The CLI's end-to-end checks are in test_cli.py."""

from __future__ import annotations

from builders import node, pod, podgroup
from gangscale.controller.config import ControllerConfig
from gangscale.controller.gates import GATE_MODE_KEY
from gangscale.ingest import CAPACITY_GATE, ingest
from gangscale.plan_modes import CONTROLLER_GATE_MODE, DEFAULT_MODE, SKIPPED, gate_mode_snapshot
from gangscale.plan_modes import GATE_MODE_KEY as PLAN_KEY
from gangscale.snapshot import build_snapshot


def test_the_default_plan_mode_is_the_controllers_default_and_skips_what_its_webhook_skips():
    cfg = ControllerConfig()
    assert DEFAULT_MODE.value == "gate" and cfg.gate_mode == CONTROLLER_GATE_MODE == "opt-out"
    assert PLAN_KEY == GATE_MODE_KEY and cfg.state_namespace in SKIPPED
    assert {"kube-system", "kube-public", "kube-node-lease"} < SKIPPED


def _gates(snap) -> dict[str, tuple[str, ...]]:
    return {p.key: p.scheduling_gates for g in snap.gangs for p in g.pending}


def test_gate_mode_plans_gang_pods_gated_except_where_the_webhook_would_not_gate_them():
    opted_out = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "out", "labels": {GATE_MODE_KEY: "false"}}}
    own = pod("own", "team", group="pg")
    own["metadata"]["annotations"] = {GATE_MODE_KEY: "false"}
    objects = [opted_out, podgroup("pg", "team", min_count=2), pod("a", "team", group="pg"), own,
               podgroup("pg", "out"), pod("b", "out", group="pg"),
               podgroup("pg", "kube-system"), pod("c", "kube-system", group="pg"),
               pod("basic", "team")]
    snap = gate_mode_snapshot(build_snapshot(ingest(objects), []), objects, None)  # no node: nothing placed first
    assert _gates(snap) == {"team/a": (CAPACITY_GATE,), "team/own": (), "out/b": (), "kube-system/c": (),
                            "team/basic": ()}


def test_with_a_ready_node_the_ungated_queue_is_placed_first_and_the_gang_planned_on_what_is_left():
    objects = [node("n1", cpu="4", mem="16Gi"), pod("basic", "team", cpu="3"),
               podgroup("pg", "team", min_count=2), pod("a", "team", cpu="1", group="pg"),
               pod("b", "team", cpu="1", group="pg")]
    snap = gate_mode_snapshot(build_snapshot(ingest(objects), []), objects, None)
    basic = next(g for g in snap.gangs if g.name == "basic")
    assert "no scheduling gate" in snap.decided[basic.key].reason  # the scheduler places it on n1 under every seed
    (n1,) = [v for v in snap.nodes if v.name == "n1"]
    assert n1.free["cpu"] <= 1000  # the gang sees what the basic pod leaves
