"""Gangs whose pods the plan packs onto the same new nodes are bought those nodes once, as one unit.

The real `gangscale run` against the emulator and moto. Two gangs in two namespaces, each 2 pods x 4 GPUs,
on p5.48xlarge (8 GPUs, tainted): the cheapest plan is two p5 nodes, whichever way it pairs the pods. Each
gang must be booked (provisioning), the group's desired must be exactly 2 and stay 2, and each namespace's
cap is charged its share of the nodes, not the whole of a node it shares.
"""

from __future__ import annotations

import time

import pytest

from builders import pod, podgroup

from .conftest import events, state_records, wait_for

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"
GPU_TAINT = {"k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu": "true:NoSchedule"}


def gpu_gang(emu, ns: str, name: str, members: int, gpus: int = 4) -> None:
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    emu.apply(podgroup(name, ns, min_count=members))
    for i in range(members):
        emu.apply(pod(f"{name}-{i}", ns, cpu="8", mem="32Gi", gpu=gpus, group=name))


@pytest.mark.parametrize("capped", [False, True], ids=["no-caps", "a-one-node-cap-per-namespace"])
def test_two_gangs_that_share_two_new_nodes_are_bought_two_nodes_and_both_provisioned(
        cluster, world, controllers, proxy, capped):
    world.asg("p5", "p5.48xlarge", max_size=10, tags=GPU_TAINT)
    gpu_gang(cluster, "team-a", "train", 2)
    gpu_gang(cluster, "team-b", "train", 2)
    caps = {"team-a": {"maxNodes": 1}, "team-b": {"maxNodes": 1}}  # each gang's share is one node: room enough
    ctl = controllers("a", namespaceCaps=caps if capped else {})
    wait_for(lambda: world.desired("p5") >= 2, timeout=60, what="the scale-up")
    time.sleep(4)  # several passes: nothing more is bought
    assert world.desired("p5") == 2
    recs = state_records(cluster)
    mine = {ns: recs.get(f"{ns}/train/{API}", {}) for ns in ("team-a", "team-b")}
    assert {ns: r.get("state") for ns, r in mine.items()} == {"team-a": "provisioning", "team-b": "provisioning"}
    assert sum(sum(r.get("requested", {}).values()) for r in mine.values()) == 2  # the nodes bought, once
    assert all(sum(r.get("requested", {}).values()) <= 1 for r in mine.values())  # each charged its share
    assert mine["team-a"].get("shared") and mine["team-a"].get("shared") == mine["team-b"].get("shared")
    said = {ev["involvedObject"]["namespace"]: ev["message"].split(";")[0]
            for ev in events(cluster, "TriggeredScaleUp", kind="PodGroup")}
    assert said == {"team-a": "pod group triggered scale-up: p5 +1", "team-b": "pod group triggered scale-up: p5 +1"}
    ctl.assert_no_tracebacks()
