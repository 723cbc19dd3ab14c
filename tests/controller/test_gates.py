"""Gate mode's pure decisions (gangscale/controller/gates.py): who is held, which node each released pod is narrowed
to, the patch that narrows it and lifts the gate (KEP-3521), and which released pods are stranded.

The scheduler's behaviour these used to work around is the model's (tests/scheduling/): NodeResourcesFit
LeastAllocated on cpu/memory sends a 1-GPU pod to the emptiest node, the big GPU node (issue 9). A narrowed
pod has one feasible node, so the release no longer waits for order (tests/scheduling/test_narrowed.py).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from builders import group, node, pod, podgroup
from gangscale.catalog import parse_catalog
from gangscale.controller.gates import (CAPACITY_READY, GATE_MODE_KEY, NARROWED_KEY, NOT_HELD, decide, holds,
                                        narrow_ops, narrowed, release_order, release_patch, remove_gate_patch,
                                        stranded)
from gangscale.ingest import CAPACITY_GATE, ingest
from gangscale.model import Gang, Node, Placement, Pod, Requirement
from gangscale.parse import pod_placement
from gangscale.planner import OFF, make_plan
from gangscale.snapshot import build_snapshot
from gangscale.solver.params import SolveOptions

GATE = [{"name": CAPACITY_GATE}]
KUEUE = [{"name": "kueue.x-k8s.io/admission"}]


def gated_pod(name: str, *, created: str = "2030-01-01T00:00:10Z", gates=GATE, **kw) -> dict:
    p = pod(name, schedulingGates=gates, **kw)
    p["metadata"]["creationTimestamp"] = created
    return p


def pg(name: str, created: str, **kw) -> dict:
    g = podgroup(name, **kw)
    g["metadata"]["creationTimestamp"] = created
    return g


def plan_and_decide(objs: list[dict], catalog: list[dict] | None = None, held=lambda g: True):
    groups, _ = parse_catalog(catalog or [])
    cluster = ingest(objs)
    snap = build_snapshot(cluster, groups)
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)  # the controller's default: gate mode orders the release
    return plan, decide(cluster.gangs, plan, snap, held)


def lifted(decision) -> list[str]:
    return [g.gang.name for g in decision.lifts]


def narrowed_to(decision) -> dict[str, str]:
    """Pod name -> the node its release narrows it to."""
    return {p.name: n for lift in decision.lifts for p, n in zip(lift.pods, lift.nodes)}


# ------------------------------------------------------------------------------------------ ingest

def test_a_pod_held_only_by_our_gate_is_pending_to_plan_for_and_one_held_by_kueue_is_not():
    cluster = ingest([gated_pod("ours", cpu="1"), gated_pod("kueue", cpu="1", gates=KUEUE),
                      gated_pod("both", cpu="1", gates=GATE + KUEUE)])
    pending = {p.name for g in cluster.gangs for p in g.pending}
    assert pending == {"ours"}  # the other two keep today's treatment: gated, not planned


# ------------------------------------------------------------------------------------------ opt-in

@pytest.mark.parametrize("mode, ns_label, annotation, expected", [
    ("opt-in", None, None, False),
    ("opt-in", "true", None, True),
    ("opt-in", None, "true", True),
    ("opt-in", "true", "false", False),  # the gang opts out of its namespace's choice
    ("all", None, None, True),
    ("all", "false", None, False),
    ("off", "true", "true", False),  # the switch wins
    ("opt-out", None, None, True),  # the default: every gang the webhook gates outside opted-out namespaces
    ("opt-out", "false", None, False),  # the namespace opts out (the webhook's namespaceSelector skips it too)
    ("opt-out", "false", "true", True),  # a gang opts back in
    ("opt-out", None, "false", False),
    ("opt-in", "yes", None, False),  # only "true" / "false" count
])
def test_which_gangs_gate_mode_holds(mode, ns_label, annotation, expected):
    g = Gang("team", "job", "scheduling.k8s.io/v1alpha2", annotations={GATE_MODE_KEY: annotation} if annotation else {})
    labels = {"team": {GATE_MODE_KEY: ns_label}} if ns_label else {}
    assert holds(g, mode, labels) is expected


def test_a_lone_pod_opts_in_with_its_own_annotation():
    p = gated_pod("solo")
    p["metadata"]["annotations"] = {GATE_MODE_KEY: "true"}
    (g,) = ingest([p]).gangs
    assert holds(g, "opt-in", {})


@pytest.mark.parametrize("gate_mode_label, annotation, expected", [
    (None, None, True),  # the webhook gates its pods: gate mode holds them, not lift them at once
    ("false", None, False),  # the namespace's own gate-mode label wins
    (None, "false", False),  # and the gang's annotation
])
def test_a_namespace_the_webhook_gates_is_one_gate_mode_holds_unless_it_says_false(gate_mode_label, annotation,
                                                                                     expected):
    labels = {"gangscale.io/capacity-gate": "enabled", **({GATE_MODE_KEY: gate_mode_label} if gate_mode_label else {})}
    g = Gang("team", "job", "scheduling.k8s.io/v1alpha2", annotations={GATE_MODE_KEY: annotation} if annotation else {})
    assert holds(g, "opt-in", {"team": labels}) is expected
    assert holds(g, "off", {"team": labels}) is False
    assert holds(g, "opt-in", {"team": {"gangscale.io/capacity-gate": "disabled"}}) is False


# ------------------------------------------------------------------------------------------ order

def _gang(name: str, *, gpu: int = 0, pods: int = 1, priority: int = 0, created: str = "2030-01-01T00:00:00Z") -> Gang:
    req = {"cpu": 1000, "pods": 1, **({"nvidia.com/gpu": gpu} if gpu else {})}
    members = [Pod("ns", f"{name}-{i}", "", dict(req), Placement(), priority=priority) for i in range(pods)]
    return Gang("ns", name, "v1", pending=members, created=created)


@pytest.mark.parametrize("gangs, expected", [
    ([_gang("big", gpu=8), _gang("urgent", gpu=1, priority=10)], ["urgent", "big"]),  # priority first
    ([_gang("young", created="2030-01-02T00:00:00Z"), _gang("old", created="2030-01-01T00:00:00Z")],
     ["old", "young"]),  # then the scheduler's queue order; the pod's size no longer matters: it is narrowed
    ([_gang("small", gpu=1), _gang("big", gpu=4, created="2030-01-02T00:00:00Z")], ["small", "big"]),
])
def test_release_order_is_the_scheduler_queue_order(gangs, expected):
    assert [g.name for g in release_order(gangs)] == expected


def test_the_patch_removes_our_gate_where_it_is_and_tests_it_first():
    assert remove_gate_patch(["kueue.x-k8s.io/admission", CAPACITY_GATE]) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": CAPACITY_GATE},
        {"op": "remove", "path": "/spec/schedulingGates/1"}]


# ------------------------------------------------------------------------------------------ the narrowing patch

REQ = "requiredDuringSchedulingIgnoredDuringExecution"
FIELD = {"key": "metadata.name", "operator": "In", "values": ["n7"]}


def _apply(doc: dict, ops: list[dict]) -> dict:
    """The patch as tests/kube/emulator.py applies it (RFC 6902, as the API server does)."""
    from kube.emulator import _json_patch
    return _json_patch(doc, ops)


def test_a_pod_without_affinity_gets_one_term_naming_its_node_and_keeps_its_node_selector():
    p = gated_pod("a", selector={"zone": "a"})
    out = _apply(p, release_patch(p, [CAPACITY_GATE], "n7"))
    assert out["spec"]["affinity"] == {"nodeAffinity": {REQ: {"nodeSelectorTerms": [{"matchFields": [FIELD]}]}}}
    assert out["spec"]["nodeSelector"] == {"zone": "a"}  # both must hold: nothing widened, nothing lost
    assert "schedulingGates" not in out["spec"] or out["spec"]["schedulingGates"] == []
    assert out["metadata"]["annotations"][NARROWED_KEY] == "n7"
    assert pod_placement(out["spec"]).affinity == ((Requirement("metadata.name", "In", ("n7",)),),)


def test_a_pod_with_required_affinity_gets_the_node_added_to_every_term_and_an_empty_term_left_alone():
    p = gated_pod("a", affinity=[[{"key": "zone", "operator": "In", "values": ["a"]}],
                                 [{"key": "zone", "operator": "In", "values": ["b"]}]])
    terms = p["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    terms[1]["matchFields"] = [{"key": "metadata.name", "operator": "NotIn", "values": ["bad"]}]
    terms.append({})  # matches no node: KEP-3521 lets it gain nothing, and it needs nothing
    out = _apply(p, narrow_ops(p["spec"], "n7"))
    got = out["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"]
    assert got[0] == {"matchExpressions": terms[0]["matchExpressions"], "matchFields": [FIELD]}
    assert got[1]["matchFields"] == [terms[1]["matchFields"][0], FIELD]  # appended: the old ones stay a prefix
    assert got[2] == {}
    model = narrowed(pod_placement(p["spec"]), "n7")
    assert pod_placement(out["spec"]) == model  # the model narrows exactly as the patch does


def test_a_pod_with_only_pod_affinity_or_preferred_node_affinity_gets_the_required_part_added():
    p = gated_pod("a", affinity=None)
    p["spec"]["affinity"] = {"podAntiAffinity": {"x": 1}}
    out = _apply(p, narrow_ops(p["spec"], "n7"))
    assert out["spec"]["affinity"]["podAntiAffinity"] == {"x": 1}
    assert out["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"] == [{"matchFields": [FIELD]}]
    p["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}
    out = _apply(p, narrow_ops(p["spec"], "n7"))
    assert out["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1}]
    assert out["spec"]["affinity"]["nodeAffinity"][REQ]["nodeSelectorTerms"] == [{"matchFields": [FIELD]}]


def test_the_release_is_one_patch_that_tests_the_gate_first_and_removes_it_last():
    p = gated_pod("a")
    p["metadata"]["annotations"] = {"x": "y"}
    ops = release_patch(p, [CAPACITY_GATE], "n/1")
    assert ops[0]["op"] == "test" and ops[-1] == {"op": "remove", "path": "/spec/schedulingGates/0"}
    assert {"op": "add", "path": f"/metadata/annotations/{NARROWED_KEY.replace('/', '~1')}", "value": "n/1"} in ops
    assert release_patch(p, [CAPACITY_GATE], None) == remove_gate_patch([CAPACITY_GATE])  # gateNarrowing: false


# ------------------------------------------------------------------------------------------ decide

BIG = dict(cpu="48", mem="192Gi", gpu=4)
SMALL = dict(cpu="4", mem="16Gi", gpu=1)


def gpu_gangs() -> list[dict]:
    """A 4-GPU gang (younger) and a 1-GPU gang (older): unnarrowed, the small one would take the big node."""
    return [node("g12", **BIG), node("g1", **SMALL),
            pg("big", "2030-01-01T00:00:20Z"), pg("small", "2030-01-01T00:00:10Z"),
            gated_pod("s0", cpu="1", mem="1Gi", gpu=1, group="small", created="2030-01-01T00:00:10Z"),
            gated_pod("b0", cpu="8", mem="8Gi", gpu=4, group="big", created="2030-01-01T00:00:20Z")]


def test_both_gpu_gangs_are_released_at_once_each_narrowed_to_the_node_the_plan_put_it_on():
    # the old release held the small gang until the big one had bound (LeastAllocated would send it to g12)
    plan, d = plan_and_decide(gpu_gangs())
    assert plan.existing_nodes == {"g12": ["default/b0"], "g1": ["default/s0"]}
    assert sorted(lifted(d)) == ["big", "small"] and not d.held
    assert narrowed_to(d) == {"b0": "g12", "s0": "g1"}
    assert {x.why for x in d.lifts} == {CAPACITY_READY}


def test_a_gang_is_released_narrowed_while_another_gangs_capacity_is_still_on_its_way():
    objs = gpu_gangs()
    objs.append(gated_pod("b1", cpu="8", mem="8Gi", gpu=4, group="big", created="2030-01-01T00:00:20Z"))
    objs[2]["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2
    plan, d = plan_and_decide(objs, [group("g12x", cpu="48", mem="192Gi", gpu=4, current=1)])
    by_name = {k.name: why for k, why in d.held.items()}
    assert "waiting for its capacity: 1 of the 2 pods" in by_name["big"]
    assert lifted(d) == ["small"] and narrowed_to(d) == {"s0": "g1"}  # narrowed: it cannot take g12


def test_h100_gangs_and_an_older_any_gpu_gang_are_released_together_each_on_its_own_node():
    product = "nvidia.com/gpu.product"
    big = dict(cpu="192", mem="2048Gi", gpu=8)  # the H100 nodes are the emptiest: LeastAllocated prefers them
    objs = [node("h100-a", labels={product: "H100"}, **big), node("h100-b", labels={product: "H100"}, **big),
            node("a100", cpu="96", mem="1024Gi", gpu=8, labels={product: "A100"}),
            pg("any", "2030-01-01T00:00:01Z"), pg("h1", "2030-01-01T00:00:02Z"), pg("h2", "2030-01-01T00:00:03Z"),
            gated_pod("any-0", cpu="8", mem="8Gi", gpu=8, group="any", created="2030-01-01T00:00:01Z")]
    objs += [gated_pod(f"{n}-0", cpu="8", mem="8Gi", gpu=8, group=n, created=f"2030-01-01T00:00:0{i + 2}Z",
                       selector={product: "H100"}) for i, n in enumerate(("h1", "h2"))]
    plan, d = plan_and_decide(objs)
    assert plan.existing_nodes["a100"] == ["default/any-0"]
    assert lifted(d) == ["any", "h1", "h2"] and narrowed_to(d)["any-0"] == "a100"


def test_gangs_that_fit_existing_capacity_are_released_at_once():
    objs = [node("n1", cpu="8"), node("n2", cpu="8"), pg("a", "2030-01-01T00:00:01Z"), pg("b", "2030-01-01T00:00:02Z"),
            gated_pod("a0", cpu="6", group="a"), gated_pod("b0", cpu="6", group="b")]
    _, d = plan_and_decide(objs)
    assert lifted(d) == ["a", "b"] and not d.held
    assert sorted(narrowed_to(d).values()) == ["n1", "n2"]


def test_a_deferred_gang_stays_gated():
    objs = [node("n1", cpu="8"), pg("first", "2030-01-01T00:00:01Z", priority=10),
            pg("later", "2030-01-01T00:00:00Z"),  # older: the scheduler would give it the node
            gated_pod("f0", cpu="6", group="first", priority=10), gated_pod("l0", cpu="6", group="later")]
    plan, d = plan_and_decide(objs)
    assert {g.name: g.decision for g in plan.gangs}["later"] in ("deferred", "infeasible")
    assert lifted(d) == ["first"]
    assert next(why for k, why in d.held.items() if k.name == "later").startswith(("deferred", "infeasible"))


def test_a_gang_gate_mode_does_not_hold_is_released_at_once_even_without_capacity():
    objs = [pg("x", "2030-01-01T00:00:01Z"), gated_pod("x0", cpu="6", group="x")]
    _, d = plan_and_decide(objs, [group("cpu")], held=lambda g: False)
    assert lifted(d) == ["x"] and d.lifts[0].why == NOT_HELD and d.lifts[0].nodes == ()  # not narrowed


def test_only_the_members_the_plan_placed_leave_the_gate():
    objs = [node("n1", cpu="8"), pg("elastic", "2030-01-01T00:00:01Z", min_count=1)]
    objs += [gated_pod(f"e{i}", cpu="3", group="elastic") for i in range(3)]  # two fit, the third does not
    _, d = plan_and_decide(objs)
    assert len(d.lifts) == 1 and len(d.lifts[0].pods) == 2 and set(narrowed_to(d).values()) == {"n1"}


# ------------------------------------------------------------------------------------------ ungated pods take room

def _ungated_took_the_room(spare: bool) -> tuple:
    """A gang planned on n1 and a lone ungated pod planned on n2; the scheduler (LeastAllocated) binds the lone pod
    on n1 first. n2 has room for the gang's pod when `spare`."""
    objs = [node("n1", cpu="8", mem="32Gi"), node("n2", cpu="8" if spare else "2", mem="32Gi"),
            pg("g", "2030-01-01T00:00:01Z"), gated_pod("g0", cpu="6", group="g"), pod("lone", cpu="3")]
    cluster = ingest(objs)
    snap = build_snapshot(cluster, [])
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    plan = plan.model_copy(update={"existing_nodes": {"n1": ["default/g0"], "n2": ["default/lone"]}})
    objs[-1]["spec"]["nodeName"] = "n1"  # the scheduler bound it where it liked
    cluster = ingest(objs)
    snap = build_snapshot(cluster, [])
    return decide(cluster.gangs, plan, snap, lambda g: True)


def test_a_gang_whose_planned_node_an_ungated_pod_took_is_narrowed_to_another_ready_node_with_room():
    d = _ungated_took_the_room(spare=True)
    assert narrowed_to(d) == {"g0": "n2"} and "1 to another Ready node" in d.lifts[0].message


def test_a_gang_whose_planned_room_is_gone_everywhere_stays_gated_for_the_next_plan():
    d = _ungated_took_the_room(spare=False)
    assert lifted(d) == [] and "no longer fit" in next(iter(d.held.values()))


def test_room_a_queued_ungated_pod_may_take_under_any_seed_is_not_given_to_a_release():
    # two equal Ready nodes; the lone pending pod goes to either (a random tie): neither may take the gang's 6 CPUs
    objs = [node("n1", cpu="8"), node("n2", cpu="8"), pg("g", "2030-01-01T00:00:01Z"),
            gated_pod("g0", cpu="6", group="g"), pod("lone", cpu="4")]
    cluster = ingest(objs)
    snap = build_snapshot(cluster, [])
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    plan = plan.model_copy(update={"existing_nodes": {"n1": ["default/g0"], "n2": ["default/lone"]}})
    d = decide(cluster.gangs, plan, snap, lambda g: True)
    assert lifted(d) == [] and "no longer fit" in next(iter(d.held.values()))


def _own_node_and_other(zones: tuple[str, str] | None = None):
    """A held gang the plan put on `other`, a free node the cluster had, while `mine` arrived for it (reserved)."""
    from gangscale.snapshot import SnapshotPolicy
    zone = "topology.kubernetes.io/zone"
    labels = [{zone: z} for z in zones] if zones else [{}, {}]
    objs = [node("other", cpu="8", mem="32Gi", labels=labels[0]), node("mine", cpu="8", mem="32Gi", labels=labels[1]),
            pg("g", "2030-01-01T00:00:01Z", topology=[zone] if zones else None), gated_pod("g0", cpu="6", group="g")]
    cluster = ingest(objs)
    snap = build_snapshot(cluster, [], policy=SnapshotPolicy(reserved_nodes={"mine": cluster.gangs[0].key}))
    plan = make_plan(snap, SolveOptions(time_limit=5), OFF)
    plan = plan.model_copy(update={"existing_nodes": {"other": ["default/g0"]}})
    return decide(cluster.gangs, plan, snap, lambda g: True)


def test_a_held_gang_the_plan_put_on_another_free_node_is_narrowed_to_the_empty_node_that_arrived_for_it():
    # busy-1k: a re-plan put a held gang on free nodes the cluster already had (to the solver they cost as little
    # as the gang's own), and the nodes bought for it stayed empty and billing
    d = _own_node_and_other()
    assert narrowed_to(d) == {"g0": "mine"} and "1 to another Ready node" in d.lifts[0].message
    assert narrowed_to(_own_node_and_other(("a", "b"))) == {"g0": "other"}  # never out of its topology domain


def test_gate_mode_plans_an_ungated_pod_where_the_scheduler_puts_it_and_keeps_its_room_wherever_a_seed_may():
    from gangscale.controller.gates import SCHEDULED_FIRST, scheduled_first
    # two equal Ready nodes: the lone pod goes to either (a random tie), so neither keeps the gang's 6 CPUs
    objs = [node("n1", cpu="8"), node("n2", cpu="8"), pg("g", "2030-01-01T00:00:01Z"),
            gated_pod("g0", cpu="6", group="g"), pod("lone", cpu="4")]
    groups, _ = parse_catalog([group("cpu", cpu="8")])
    snap = build_snapshot(ingest(objs), groups)
    first = scheduled_first(snap, lambda g: True)
    assert {k.name: (d.decision, d.reason) for k, d in first.decided.items()} == {"lone": SCHEDULED_FIRST}
    assert {v.name: v.free["cpu"] for v in first.nodes if not v.upcoming} == {"n1": 4000, "n2": 4000}
    plan = make_plan(first, SolveOptions(time_limit=5), OFF)
    assert plan.scale_up == {"cpu": 1} and {g.name: g.decision for g in plan.gangs} == {
        "g": "scale-up", "lone": "fits-existing"}
    assert scheduled_first(snap, lambda g: False) is snap  # nothing held: planned as before


# ------------------------------------------------------------------------------------------ recovery

def _released(name: str, to: str | None = "n1", **kw) -> Pod:
    return Pod("ns", name, "uid", {"cpu": 1}, Placement(), annotations={NARROWED_KEY: to} if to else {},
               **kw)


def test_a_released_pod_whose_node_is_gone_or_not_ready_is_stranded_and_others_are_not():
    nodes = [Node("n1", {}, (), {}), Node("n2", {}, (), {}, ready=False)]
    pods = [_released("gone", "n9"), _released("notready", "n2"), _released("fine", "n1"),
            _released("plain", None), _released("bound", "n9", node_name="n1"),
            _released("gated", "n9", scheduling_gates=(CAPACITY_GATE,))]
    out = {p.name: why for p, why in stranded(pods, nodes)}
    assert out == {"gone": "node n9, the one node it was narrowed to, is gone",
                   "notready": "node n2, the one node it was narrowed to, is not Ready"}



def _kueue_gated_release() -> tuple:
    """A pending pod gate mode narrowed to n1 with gangscale's gate gone and Kueue's still on; the same pod with both."""
    from gangscale.ingest_kueue import ADMISSION_GATE

    cluster = ingest([node("n1"), podgroup("job", min_count=1), pod("job-0", group="job")])
    (g,) = cluster.gangs
    (p,) = g.pending
    kueue_only = replace(p, annotations={NARROWED_KEY: "n1"}, scheduling_gates=(ADMISSION_GATE,))
    both = replace(kueue_only, scheduling_gates=(CAPACITY_GATE, ADMISSION_GATE))
    return cluster, g, kueue_only, both


def test_a_pod_with_gangscales_gate_lifted_but_kueues_still_on_is_released_to_its_node_for_the_scale_down_and_the_recovery():
    """One reading of "released" for both callers: the scale-down keeps the node the pod was narrowed to, and the
    recovery finds the pod stranded when that node is gone, while Kueue's gate still holds it (KEP-3521: the pod is not
    scheduled until every gate is gone, and then only onto that node)."""
    from gangscale.controller.scaledown import released_to

    cluster, g, kueue_only, both = _kueue_gated_release()
    with_pod = replace(cluster, gangs=[replace(g, pending=(kueue_only,))])
    assert released_to(with_pod) == {"n1"}  # the scale-down's busy nodes: n1 stays
    assert released_to(replace(cluster, gangs=[replace(g, pending=(both,))])) == set()
    assert stranded([kueue_only], with_pod.nodes) == []  # its node is there
    assert [p.name for p, _ in stranded([kueue_only], [])] == ["job-0"]
    assert stranded([both], []) == []  # still behind gangscale's gate: not released


def test_a_pod_is_released_once_gangscales_gate_is_gone_and_schedulable_only_once_every_gate_is():
    from gangscale.controller.gates import released_node, schedulable
    from gangscale.ingest_kueue import ADMISSION_GATE

    _, _, kueue_only, both = _kueue_gated_release()
    assert released_node(kueue_only) == "n1" and not schedulable(kueue_only)
    assert released_node(both) is None and not schedulable(both)
    open_pod = replace(kueue_only, scheduling_gates=())
    assert released_node(open_pod) == "n1" and schedulable(open_pod)
    assert released_node(replace(open_pod, node_name="n1")) is None  # bound: nothing left to release
    assert [why for _, why in stranded([kueue_only], [])] == [
        f"node n1, the one node it was narrowed to, is gone (it also waits for {ADMISSION_GATE})"]
