"""The mutating hook: the capacity gate as a JSONPatch, applied to the pod; idempotent; other controllers' pods alone."""

from __future__ import annotations

import jsonpatch
import pytest

from tests.builders import pod

from .conftest import patch_of

GATE = {"name": "gangscale.io/capacity"}


def gated(hook, obj: dict) -> dict:
    """The pod as the API server stores it after applying the hook's patch."""
    r = hook.review(obj, path="/mutate")
    assert r["allowed"]
    patch = patch_of(r)
    return jsonpatch.apply_patch(obj, patch) if patch else obj


def test_a_gang_pod_gets_the_capacity_gate_and_a_second_pass_adds_nothing(hook):
    p = pod("p", group="pg")
    once = gated(hook, p)
    assert once["spec"]["schedulingGates"] == [GATE]
    assert "schedulingGates" not in p["spec"]  # the patch, not the hook, changed it
    r = hook.review(once, path="/mutate")  # reinvocation or a retried review
    assert patch_of(r) is None
    assert gated(hook, once)["spec"]["schedulingGates"] == [GATE]


def test_every_gang_flavour_is_gated(hook):
    for p in (pod("a", volcano="pg"), pod("b", cosched="pg"), pod("c", workload={"name": "wl", "podGroup": "w"})):
        assert gated(hook, p)["spec"]["schedulingGates"] == [GATE]


def test_a_pod_gated_by_kueue_or_queued_in_kueue_is_left_alone_unless_configured(hook_factory):
    hook = hook_factory()
    kueue_gated = pod("k", group="pg", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    assert patch_of(hook.review(kueue_gated, path="/mutate")) is None
    queued = pod("q", group="pg")
    queued["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    assert patch_of(hook.review(queued, path="/mutate")) is None
    along = hook_factory(gateAlongside=["kueue.x-k8s.io/admission", "kueue.x-k8s.io/queue-name"])
    assert gated(along, kueue_gated)["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}, GATE]
    assert gated(along, queued)["spec"]["schedulingGates"] == [GATE]


def test_pods_outside_gangs_bound_pods_and_updates_are_not_patched(hook):
    assert patch_of(hook.review(pod("alone"), path="/mutate")) is None
    assert patch_of(hook.review(pod("bound", group="pg", node="n1"), path="/mutate")) is None
    assert patch_of(hook.review(pod("u", group="pg"), path="/mutate", operation="UPDATE")) is None
    assert patch_of(hook.review(pod("bad", group="pg", cpu="lots"), path="/mutate")) is not None  # size is not its job


def test_a_pod_with_an_empty_gate_list_gets_the_gate_appended(hook):
    assert gated(hook, pod("p", group="pg", schedulingGates=[]))["spec"]["schedulingGates"] == [GATE]


def test_a_pod_that_opts_out_of_gate_mode_is_not_gated_and_the_key_is_the_controllers(hook):
    from gangscale.controller.gates import GATE_MODE_KEY
    from gangscale.webhook.admission import GATE_MODE_KEY as WEBHOOK_KEY

    assert WEBHOOK_KEY == GATE_MODE_KEY
    p = pod("p", group="pg")
    p["metadata"]["annotations"] = {GATE_MODE_KEY: "false"}
    assert patch_of(hook.review(p, path="/mutate")) is None  # the controller would lift it at once
    p["metadata"]["annotations"] = {GATE_MODE_KEY: "true"}
    assert gated(hook, p)["spec"]["schedulingGates"] == [GATE]


# --------------------------------------------------------------- where a gate is set: only where it will be lifted


def test_with_gate_mode_off_the_hook_sets_no_gate(hook_factory):
    """gateMode off: the controller lifts every gangscale gate at once (docs/scheduling.md), so a gate set here would
    only cost the pod a write and a pass; the hook sets none, whatever its namespaceSelector lets through."""
    off = hook_factory(top={"gateMode": "off"})
    for p in (pod("a", group="pg"), pod("b", volcano="pg"), pod("c", workload={"name": "wl", "podGroup": "w"})):
        assert patch_of(off.review(p, path="/mutate")) is None
    assert gated(hook_factory(top={"gateMode": "opt-in"}), pod("d", group="pg"))["spec"]["schedulingGates"] == [GATE]


def test_a_dry_run_install_sets_no_gate_since_nothing_would_lift_it(hook_factory):
    """In dry-run the controller lifts no gate, and its lease stays fresh, so the webhook's fail-open would never lift
    one either (KEP-3521: a gated pod is not scheduled until its gates are removed): the hook gates nothing."""
    dry = hook_factory(top={"mode": "dry-run"})
    assert patch_of(dry.review(pod("p", group="pg"), path="/mutate")) is None
    assert gated(hook_factory(top={"mode": "enforce"}), pod("p", group="pg"))["spec"]["schedulingGates"] == [GATE]


@pytest.mark.parametrize("namespace", ["kube-system", "kube-public", "kube-node-lease", "gangscale-system", "ops"])
def test_no_pod_of_a_system_namespace_or_gangscales_own_is_gated(hook_factory, namespace):
    hook = hook_factory(top={"stateNamespace": "ops"})
    p = pod("p", namespace, group="pg")
    expected = None if namespace != "gangscale-system" else [GATE]  # gangscale's own namespace here is `ops`
    stored = gated(hook, p)
    assert stored["spec"].get("schedulingGates") == expected


def test_the_shipped_defaults_gate_every_gang_flavour_and_never_a_basic_pod(hook):
    """The default config (`gateMode: opt-out`, the hook's fixture at mode enforce) gates a gang pod of any API the
    ingest reads and leaves pods outside gangs alone."""
    from gangscale.controller.config import ControllerConfig

    assert ControllerConfig().gate_mode == "opt-out" and hook.server.policy.config.gate_mode == "opt-out"
    gangs = [pod("a", group="pg"), pod("b", volcano="pg"), pod("c", cosched="pg"),
             pod("d", workload={"name": "wl", "podGroup": "w"})]
    for p in gangs:
        assert gated(hook, p)["spec"]["schedulingGates"] == [GATE]
    assert patch_of(hook.review(pod("alone"), path="/mutate")) is None
