"""`gangscale run` as a process: one poisoned object beside a good gang never stops the good gang's scale-up."""

from __future__ import annotations

from builders import node, pod

from .conftest import events, wait_for
from .test_controller_e2e import gang


def test_a_pod_asking_for_10P_cpu_gets_its_reason_and_the_good_gang_is_still_scaled_up(cluster, world, controllers):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers()
    cluster.apply(pod("poison", cpu="10P"))  # a valid quantity to the API server, 10**16 millicores to gangscale
    huge = node("huge-node")
    huge["status"]["allocatable"]["memory"] = str(2**63)  # above int64: the node is skipped, not the pass
    cluster.apply(huge)
    gang(cluster, "good", 2)
    wait_for(lambda: world.desired("cpu") == 2, what="the good gang scaled up beside the poisoned pod")
    poisoned = wait_for(lambda: [e for e in events(cluster, "NotTriggerScaleUp")
                                 if e["involvedObject"]["name"] == "poison"], what="the poisoned pod's event")
    assert "spec.containers[0].resources.requests.cpu" in poisoned[0]["message"]
    assert poisoned[0]["type"] == "Warning"
    plans = [line["plan"] for line in ctl.lines() if line.get("msg") == "plan"]
    assert any(w.startswith("ignored Node huge-node: status.allocatable.memory") for p in plans for w in p["warnings"])
    assert not ctl.logged("reconcile failed")
    ctl.assert_no_tracebacks()
