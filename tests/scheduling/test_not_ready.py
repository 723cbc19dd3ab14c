"""NotReady nodes, as kube-scheduler and Cluster Autoscaler see them.

- The node lifecycle controller taints a NotReady node `node.kubernetes.io/not-ready:NoSchedule`
  (TaintNodesByCondition: pkg/controller/nodelifecycle/node_lifecycle_controller.go), and the
  TaintToleration filter (pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go) rejects a
  pod without a toleration for it: such a node is no capacity while the taint is on.
- A node that has not started yet (CA clusterstate.go: NotStarted) is on its way: an upcoming node, Ready once
  it arrives. One that started and went NotReady (CA: Unready) is neither capacity nor on its way.
"""

from __future__ import annotations

from dataclasses import replace

from builders import group, node, plan_for, pod, snapshot

from gangscale.model import Placement, Taint, Toleration
from gangscale.scheduling import simulate
from gangscale.snapshot import still_starting

from .helpers import lone, mkpod
from .helpers import node as sim_node

NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
REGISTERED = "2025-01-01T00:00:00Z"


def _not_ready(name: str, since: str) -> dict:
    """A NotReady node of group `g` registered at REGISTERED, NotReady since `since`, tainted as the lifecycle
    controller taints it."""
    obj = node(name, group="g", taints=[NOT_READY], ready=False)
    obj["metadata"]["creationTimestamp"] = REGISTERED
    obj["status"]["conditions"][0]["lastTransitionTime"] = since
    return obj


def test_a_node_that_went_not_ready_after_it_started_is_no_capacity_and_the_plan_buys_a_node():
    objs = [_not_ready("n1", "2025-01-01T02:00:00Z"), pod("web", cpu="2", mem="2Gi")]
    catalog = [group("g", current=1)]
    snap = snapshot(objs, catalog)
    assert [v.name for v in snap.nodes] == []  # neither a Ready view nor an upcoming one stands for it
    assert plan_for(objs, catalog, time_limit=3.0).scale_up == {"g": 1}


def test_a_node_not_ready_since_it_registered_is_on_its_way_and_nothing_is_bought_for_the_pod_it_fits():
    objs = [_not_ready("n1", "2025-01-01T00:00:20Z"), pod("web", cpu="2", mem="2Gi")]
    catalog = [group("g", current=1)]
    snap = snapshot(objs, catalog)
    assert [v.upcoming for v in snap.nodes] == [True]
    assert plan_for(objs, catalog, time_limit=3.0).scale_up == {}


def test_without_timestamps_a_not_ready_node_is_taken_as_starting():
    objs = [node("n1", group="g", taints=[NOT_READY], ready=False)]
    n = snapshot(objs, [group("g", current=1)]).all_nodes[0]
    assert still_starting(n) and not still_starting(snapshot([node("n2")], []).all_nodes[0])


def test_the_model_places_no_pod_on_a_node_carrying_the_not_ready_taint_unless_the_pod_tolerates_it():
    taint = Taint("node.kubernetes.io/not-ready", "", "NoSchedule")
    nodes = [sim_node("n1", 4000, 16, kind="existing", taints=(taint,))]
    plain = lone(mkpod("plain", 1000, 1))
    res = simulate(nodes, [plain])
    assert res.placement == {} and "taints" in res.outcomes[plain.key].reason
    tol = Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoSchedule")
    tolerant = lone(replace(plain.pending[0], placement=Placement(tolerations=(tol,))))
    assert simulate(nodes, [tolerant]).placement == {"team-a/plain": "n1"}
