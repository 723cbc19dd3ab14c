"""Safe defaults and the smaller safety rules, in process: limits, the ceiling, scale-down opt-outs, fenced Events,
and the reasons a backed-off group and a re-booked deadline are reported with."""

from __future__ import annotations

from pathlib import Path

import pytest
from builders import group, plan_for, pod, podgroup, snapshot
from kube.conftest import _no_proxy, kubeconfig_for, make_emulator  # noqa: F401 - fixtures

from gangscale.catalog import parse_catalog
from gangscale.controller import backoff
from gangscale.controller.config import ControllerConfig, load_config
from gangscale.controller.events import EventSink
from gangscale.controller.leader import LostLeadership
from gangscale.controller.lifecycle import (
    Booked,
    EventTarget,
    Expire,
    GangFacts,
    GangState,
    Record,
    Release,
    Released,
    ReleaseOutcome,
    Rules,
    transition,
)
from gangscale.controller.limits import Usage, over_ceiling
from gangscale.controller.scaledown import (
    blocks_removal,
    protected_nodes,
    tainted_nodes,
)
from gangscale.explain import group_misfit
from gangscale.ingest import ingest
from gangscale.kube.check import check_limits
from gangscale.model import GangKey
from gangscale.planner import OFF
from gangscale.webhook.rules import Policy, check_capacity

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_800_000_000.0
API = "scheduling.k8s.io/v1alpha2"
KEY = GangKey("default", "job", API)


# ------------------------------------------------------------------ limits

LIMIT_TABLE = [  # (config, defaultNamespaceCap, clusterCeiling) as check describes them
    ({}, (64, 2000.0), "maxNodes 256, maxGPUs 512, maxDollarsPerHour 5000"),
    ({"defaultNamespaceCap": {"maxNodes": 8}}, (8, 2000.0), "maxNodes 256, maxGPUs 512, maxDollarsPerHour 5000"),
    ({"defaultNamespaceCap": {"maxNodes": "unlimited", "maxDollarsPerHour": "Unlimited"}}, (None, None),
     "maxNodes 256, maxGPUs 512, maxDollarsPerHour 5000"),
    ({"clusterCeiling": {"maxGPUs": 64}}, (64, 2000.0), "maxNodes 256, maxGPUs 64, maxDollarsPerHour 5000"),
    ({"clusterCeiling": {"maxNodes": "unlimited"}}, (64, 2000.0),
     "maxNodes unlimited, maxGPUs 512, maxDollarsPerHour 5000"),
]


@pytest.mark.parametrize("raw, cap, ceiling", LIMIT_TABLE)
def test_limits_not_written_take_the_shipped_defaults_and_only_unlimited_lifts_one(raw, cap, ceiling):
    cfg = ControllerConfig.model_validate(raw)
    assert (cfg.default_namespace_cap.max_nodes, cfg.default_namespace_cap.max_dollars_per_hour) == cap
    assert cfg.cluster_ceiling.describe() == ceiling


@pytest.mark.parametrize("raw, field", [
    ({"clusterCeiling": {"maxNodes": None}}, "clusterCeiling.maxNodes"),
    ({"defaultNamespaceCap": {"maxDollarsPerHour": None}}, "defaultNamespaceCap.maxDollarsPerHour"),
    ({"clusterCeiling": {"maxGPUs": "lots"}}, "clusterCeiling.maxGPUs"),
    ({"clusterCeiling": {"maxNodes": -1}}, "clusterCeiling.maxNodes"),
])
def test_an_empty_or_bad_limit_is_refused_naming_the_field(tmp_path, raw, field):
    path = tmp_path / "config.yaml"
    path.write_text(__import__("json").dumps(raw))
    with pytest.raises(Exception, match=field.replace(".", r"\.")):
        load_config(path)


def test_the_shipped_config_states_the_code_defaults():
    shipped = load_config(ROOT / "config" / "deploy" / "config.yaml")
    assert shipped.default_namespace_cap == ControllerConfig().default_namespace_cap
    assert shipped.cluster_ceiling == ControllerConfig().cluster_ceiling


def test_check_reports_the_ceiling_in_force_and_warns_when_a_limit_is_lifted():
    ok = check_limits(ControllerConfig(), None)
    assert ok.verdict == "ok" and ok.summary == ("cluster ceiling in force: maxNodes 256, maxGPUs 512, "
                                                 "maxDollarsPerHour 5000")
    assert "defaultNamespaceCap: maxNodes 64, maxDollarsPerHour 2000" in ok.detail
    lifted = check_limits(ControllerConfig.model_validate({"clusterCeiling": {"maxDollarsPerHour": "unlimited"}}),
                          "cfg.yaml")
    assert lifted.verdict == "warn" and "lifted: clusterCeiling.maxDollarsPerHour" in lifted.summary


GPU8 = group("gpu", cpu="190", mem="1900Gi", gpu=8, price=50.0, max_size=200)


def _gangs(n: int, members: int, ns: str = "default") -> list[dict]:
    objs = []
    for i in range(n):
        objs.append(podgroup(f"g{i}", ns, min_count=members))
        objs += [pod(f"g{i}-{j}", ns, cpu="8", gpu=8, group=f"g{i}") for j in range(members)]
    return objs


CEILING_TABLE = [  # (gangs x members, ceiling, in use, kept gangs, held as)
    ((3, 4), {"maxGPUs": 64}, Usage(), 2, "deferred"),  # 32 GPUs each: two fit 64
    ((3, 4), {"maxGPUs": 64}, Usage(4, 32, 200.0), 1, "deferred"),  # the groups already hold 32
    ((1, 9), {"maxGPUs": 64}, Usage(), 0, "infeasible"),  # 72 GPUs: never
    ((2, 2), {"maxNodes": 3}, Usage(), 1, "deferred"),
    ((2, 2), {"maxDollarsPerHour": 150}, Usage(), 1, "deferred"),  # $100/h each
    ((2, 2), {"maxNodes": "unlimited", "maxGPUs": "unlimited", "maxDollarsPerHour": "unlimited"}, Usage(9999, 9, 9.0),
     2, None),
]


@pytest.mark.parametrize("shape, ceiling, in_use, kept, held_as", CEILING_TABLE)
def test_the_ceiling_keeps_gangs_in_order_while_the_groups_stay_within_it(shape, ceiling, in_use, kept, held_as):
    objs = _gangs(*shape)
    snap = snapshot(objs, [GPU8])
    plan = plan_for(objs, [GPU8], scheduler=OFF)
    cfg = ControllerConfig.model_validate({"clusterCeiling": ceiling})
    held = over_ceiling(plan, snap, cfg.cluster_ceiling, in_use)
    assert len(snap.gangs) - len(held) == kept
    assert {d.decision for d in held.values()} == ({held_as} if held_as else set())
    assert all("clusterCeiling" in d.reason for d in held.values())
    # an independent check: what the kept gangs' nodes add to the groups is within every limit
    kept_pods = {p.key for g in snap.gangs if g.key not in held for p in g.pending}
    nodes = [n for n in plan.new_nodes if set(n.pods) & kept_pods]
    total = in_use.plus(len(nodes), 8 * len(nodes), sum(n.price_per_hour for n in nodes))
    assert total.within(cfg.cluster_ceiling)


def test_the_webhook_refuses_a_gang_above_the_cluster_ceiling():
    groups, _ = parse_catalog([GPU8])
    cfg = ControllerConfig.model_validate({"clusterCeiling": {"maxGPUs": 16},
                                           "defaultNamespaceCap": {"maxNodes": "unlimited"}})
    member = ingest([pod("p", cpu="8", gpu=8, group="pg"), podgroup("pg", min_count=3)]).gangs[0].pending[0]
    findings = check_capacity(member, 3, "gang default/pg", Policy(cfg, tuple(groups)))
    assert [f.message for f in findings] == [
        "gang default/pg needs at least 24 nvidia.com/gpu, above the cluster ceiling (clusterCeiling.maxGPUs 16)"]


def test_without_a_catalog_the_webhook_judges_on_the_groups_discovered_last():
    groups, _ = parse_catalog([GPU8])
    found: list = [()]
    policy = Policy(ControllerConfig(), discovered=lambda: found[0])
    member = ingest([pod("p", cpu="8", gpu=100, group="pg"), podgroup("pg", min_count=1)]).gangs[0].pending[0]
    assert check_capacity(member, 1, "pod default/p", policy) == []  # nothing discovered yet: nothing known
    found[0] = tuple(groups)
    [finding] = check_capacity(member, 1, "pod default/p", policy)
    assert finding.rule == "noNodeGroupFits" and "gpu: needs 100 nvidia.com/gpu, a node has 8" in finding.message


# -------------------------------------------------------------- scale-down


def _node(name: str, notes: dict | None = None, taints: list | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": notes or {}},
            "spec": {"taints": taints or []}}


PROTECT_TABLE = [
    (_node("a", {"cluster-autoscaler.kubernetes.io/scale-down-disabled": "true"}), {"a"}),
    (_node("a", {"gangscale.io/do-not-disrupt": "True"}), {"a"}),
    (_node("a", {"karpenter.sh/do-not-disrupt": "true"}), {"a"}),
    (_node("a", {"gangscale.io/do-not-disrupt": "false"}), set()),
    (_node("a", {"cluster-autoscaler.kubernetes.io/scale-down-disabled": ""}), set()),
    ({**pod("p", node="b"), "metadata": {"name": "p", "namespace": "default",
                                          "annotations": {"gangscale.io/do-not-disrupt": "true"}}}, {"b"}),
    (pod("p", node="b"), set()),
    ({"kind": "Node", "metadata": "garbage"}, set()),
    ({"kind": "Pod", "metadata": {"annotations": {"gangscale.io/do-not-disrupt": "true"}}, "spec": "garbage"}, set()),
]


@pytest.mark.parametrize("obj, protected", PROTECT_TABLE)
def test_opt_out_annotations_on_a_node_or_a_pod_there_protect_the_node(obj, protected):
    assert set(protected_nodes([obj])) == protected


def _pod_on(owner: str | None = None, phase: str = "Running", mirror: bool = False) -> dict:
    p = pod("x", node="n")
    p["status"] = {"phase": phase}
    if owner:
        p["metadata"]["ownerReferences"] = [{"kind": owner, "name": "o", "apiVersion": "v1", "uid": "u"}]
    if mirror:
        p["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return p


@pytest.mark.parametrize("p, blocks", [
    (_pod_on(), True), (_pod_on("ReplicaSet"), True), (_pod_on("DaemonSet"), False),
    (_pod_on(phase="Succeeded"), False), (_pod_on(phase="Failed"), False), (_pod_on(mirror=True), False),
    (_pod_on("Node"), False), (_pod_on(phase="Pending"), True),
])
def test_a_pod_read_on_a_node_about_to_go_keeps_it_unless_it_is_a_daemonset_mirror_or_finished_pod(p, blocks):
    assert blocks_removal(p) is blocks


def test_only_nodes_with_the_disruption_taint_are_seen_as_tainted():
    nodes = [_node("a", taints=[{"key": "gangscale.io/disruption", "effect": "NoSchedule"}]),
             _node("b", taints=[{"key": "other", "effect": "NoSchedule"}]), _node("c")]
    assert tainted_nodes(ingest(nodes).nodes) == {"a"}


# ------------------------------------------------------------------ events


def test_a_sink_whose_fence_refuses_writes_no_event_and_does_not_raise():
    class Client:
        def __init__(self) -> None:
            self.posts = 0

        def post(self, path, body):
            self.posts += 1

    leading = [True]

    def fence(what: str) -> None:
        if not leading[0]:
            raise LostLeadership(f"not the leader any more; {what} not done")

    client = Client()
    sink = EventSink(client, fence=fence)  # type: ignore[arg-type]
    sink.emit(EventTarget(KEY, members=(("job-0", "u0"),)), "TriggeredScaleUp", "pod group triggered scale-up: x")
    assert client.posts == 2  # the group and its member
    leading[0] = False
    sink.emit(EventTarget(KEY, members=(("job-0", "u0"),)), "TriggeredScaleUp", "pod group triggered scale-up: y")
    assert client.posts == 2 and sink.fenced == 2


# ----------------------------------------------------------------- reasons


def test_a_backed_off_group_is_reported_as_backed_off_not_as_at_max_size_zero():
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    held = backoff.backed_off(groups[0], {"cpu": NOW + 300}, NOW)
    member = ingest([pod("p", cpu="1")]).gangs[0].pending[0]
    assert group_misfit(member, held) == ("backed off until 2027-01-15T08:05:00Z: it recently failed to deliver "
                                          "nodes (launchFailureBackoffSeconds)")
    assert group_misfit(member, backoff.backed_off(groups[0], {"cpu": NOW - 1}, NOW)) is None


def test_a_deadline_kept_across_a_rebooking_is_reported_from_the_first_booking():
    facts = GangFacts(KEY, "uid-1", ("p1",), frozenset({"default/job-0"}), 30.0, EventTarget(KEY))
    first, _, _ = transition({}, None, Booked((facts,), {KEY: {"cpu": 2}}), NOW)
    again, _, _ = transition(first, None, Booked((facts,), {KEY: {"gpu": 1}}), NOW + 27)  # after a failed launch
    assert again[KEY].deadline == NOW + 30 and again[KEY].booked_at == NOW
    assert Record.from_json(again[KEY].to_json()) == again[KEY]
    rules = Rules(enforce_mode=True, backoff_seconds=120.0, cancel_grace_seconds=60.0)
    expired, _, _ = transition(again, None, Expire(rules), NOW + 31)
    assert expired[KEY].state == GangState.TIMED_OUT
    released, _, _ = transition(expired, None, Released((ReleaseOutcome(Release(KEY, {"cpu": 2, "gpu": 1},
                                                                                   "timed-out"), 3),)), NOW + 31)
    assert released[KEY].reason == "not all nodes arrived within 30s; gave back 3 unused nodes"


def test_discovery_keeps_the_last_groups_when_a_refresh_fails_and_the_same_tuple_while_nothing_changed():
    from gangscale.webhook.discovered import DiscoveredGroups

    groups, _ = parse_catalog([GPU8])
    answers: list = [groups, RuntimeError("throttled"), list(groups)]

    def discover():
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    d = DiscoveredGroups(discover)
    assert d.current() == () and d.refresh()
    first = d.current()
    assert first == tuple(groups)
    assert not d.refresh() and d.current() is first  # a failure keeps what was known
    assert d.refresh() and d.current() is first  # equal groups: the same tuple, so policies built on it are reused


def test_only_the_due_nodes_above_a_groups_min_size_are_taken_for_removal():
    from dataclasses import replace

    from gangscale.controller.scaledown import EmptyNode, above_min_size

    groups, _ = parse_catalog([group("a", max_size=10, current=3), group("b", max_size=10, current=1)])
    a, b = (replace(next(g for g in groups if g.name == name), min_size=1) for name in ("a", "b"))
    due = [EmptyNode(f"{g.name}{i}", g, f"i-{g.name}{i}", NOW) for g in (a, b) for i in range(3)]
    assert [e.node for e in above_min_size(due)] == ["a0", "a1"]  # a: 3 - 1; b: already at its minimum


def test_the_check_command_reports_the_limits_of_the_config_it_is_given(make_emulator, kubeconfig_for, capsys,  # noqa: F811
                                                                          tmp_path):
    from kube.test_live_cli import run_check

    emu = make_emulator(release="1.36")
    _, r = run_check(emu, kubeconfig_for, capsys)
    assert r["limits"]["verdict"] == "ok" and "maxGPUs 512" in r["limits"]["summary"]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("clusterCeiling: {maxGPUs: unlimited, maxNodes: 1000}\n")
    _, r = run_check(emu, kubeconfig_for, capsys, "--config", str(cfg))
    assert r["limits"]["verdict"] == "warn"
    assert r["limits"]["summary"] == ("cluster ceiling in force: maxNodes 1000, maxGPUs unlimited, "
                                      "maxDollarsPerHour 5000; lifted: clusterCeiling.maxGPUs")
