"""`kill -9` at every step of a purchase bought ahead (keep.py `buy_ahead`), on aws-asg and aws-fleet.

A controller reads back a keep rule's state that has seen two gangs wait for a launch in group `a` (as a restart
would), so its first pass buys 2 nodes ahead there, and it is killed with exit 137 at one step of that purchase
(`GANGSCALE_TEST_CRASH_AT`). No Node registers for the launches (no kubelet here), so a restarted controller must
count them as on their way until the purchase's deadline, buy nothing more meanwhile, then give back what the
cloud still has on its way and back the group off. On aws-fleet, instances a CreateFleet launched but never
attached join the group by the purchase's client token. The end: the group back at 0, nothing launched outside a
group, no purchase left unsettled in the saved state, and, replaying the proxy's calls, each node bought once.
"""

from __future__ import annotations

import json
import time

import pytest

from gangscale.controller.crashpoints import EXIT_CODE

from .conftest import STATE_NS, wait_for
from .test_crash_random import bought, outside_groups

pytestmark = pytest.mark.slow

STEPS = {
    "aws-asg": ("record-saved", "after-SetDesiredCapacity", "call-sent", "call-confirmed"),
    "aws-fleet": ("record-saved", "after-CreateFleet", "after-AttachInstances", "call-confirmed"),
}
DEADLINE = 8.0  # provisioningDeadlineSeconds: the purchase lapses this long after its call


def _seen_two_gangs_wait(cluster) -> None:
    """The state ConfigMap with a keep rule's state that has watched group `a` for ten minutes and seen two gangs
    of one node each wait for a launch there: at the default $4/h wait value a node of `a` is worth buying ahead."""
    now = time.time()
    arrivals = [[now - 120, f"default/g{i}/scheduling.k8s.io/v1alpha2", {"a": 1}, ["a"]] for i in range(2)]
    keep = {"arrivals": arrivals, "boots": {}, "start": now - 600, "unused": [], "at": now - 60}
    cluster.apply({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "gangscale-state", "namespace": STATE_NS},
                   "data": {"keep.json": json.dumps(keep)}})


def _unsettled(cluster) -> list:
    cm = cluster.get("v1", "ConfigMap", STATE_NS, "gangscale-state") or {}
    return json.loads((cm.get("data") or {}).get("keep.json") or "{}").get("aheadCalls", [])


@pytest.mark.parametrize("provider, step", [(p, s) for p, steps in STEPS.items() for s in steps])
def test_a_kill_at_each_step_of_a_purchase_bought_ahead_buys_once_and_gives_back_what_never_arrived(
        cluster, world, controllers, proxy, provider, step):
    for name, itype in (("a", "m5.2xlarge"), ("b", "c5.2xlarge"), ("spare", "m7i.2xlarge")):
        world.asg(name, itype, max_size=10)
    _seen_two_gangs_wait(cluster)
    settings = dict(provider=provider, emptyNodeKeep="ski-rental", emptyNodeBuyAhead=2,
                    provisioningDeadlineSeconds=DEADLINE,
                    orphanGraceSeconds=2)
    first = controllers("first", env={"GANGSCALE_TEST_CRASH_AT": step}, **settings)
    wait_for(lambda: first.exited() is not None, timeout=20, what=f"the crash at {step}")
    assert first.exited() == EXIT_CODE
    (call,) = _unsettled(cluster)  # saved before the call: [time, group, nodes]
    assert call[1:] == ["a", 2]
    second = controllers("second", **settings)
    wait_for(lambda: second.logged("node group backed off", node_group="a") and not _unsettled(cluster)
             and world.desired("a") == 0 and not outside_groups(world),
             timeout=60, what="the launches given back at the deadline, the group backed off, nothing loose")
    time.sleep(3)  # several passes: the group is backed off, nothing is bought again
    assert world.desired("a") == 0 and outside_groups(world) == set() and not _unsettled(cluster)
    lapses = second.logged("launches bought ahead did not arrive by the deadline", node_group="a")
    # a call never made (record-saved) leaves none on its way at the deadline: no sign the group cannot deliver, so
    # it is bought ahead once more, and that purchase, whose Nodes never register either, is given back in turn
    again = step == "record-saved"
    assert [(x["nodes"], x["returned"]) for x in lapses] == ([(2, 0), (2, 2)] if again else [(2, 2)])
    assert len(second.logged("bought ahead", node_group="a")) == int(again)
    # on aws-fleet, instances launched but never attached join the group by the purchase's token
    joined = second.logged("unconfirmed purchase bought ahead settled", node_group="a")
    assert [x["adopted"] for x in joined] == ([2] if step == "after-CreateFleet" else [])
    assert bought(proxy) == {"a": 2}, dict(bought(proxy))  # each node bought once
    second.assert_no_tracebacks()


def test_a_kill_in_the_middle_of_a_give_back_leaves_the_rest_to_the_next_leader_and_nothing_else_goes(
        cluster, world, controllers, proxy):
    """The give-back is not write-ahead: killed after the first of its two terminations, the saved state still
    holds the lapsed purchase, and the next leader gives back only what the cloud still has on its way (one),
    never a node or launch beyond it."""
    for name, itype in (("a", "m5.2xlarge"), ("b", "c5.2xlarge"), ("spare", "m7i.2xlarge")):
        world.asg(name, itype, max_size=10)
    _seen_two_gangs_wait(cluster)
    settings = dict(emptyNodeKeep="ski-rental", emptyNodeBuyAhead=2, provisioningDeadlineSeconds=DEADLINE)
    first = controllers("first", env={"GANGSCALE_TEST_CRASH_AT": "after-TerminateInstanceInAutoScalingGroup"},
                        **settings)
    wait_for(lambda: first.exited() is not None, timeout=60, what="the crash after the first termination")
    assert first.exited() == EXIT_CODE and world.desired("a") == 1
    assert first.logged("bought ahead", node_group="a") and len(_unsettled(cluster)) == 1
    second = controllers("second", **settings)
    wait_for(lambda: second.logged("node group backed off", node_group="a") and not _unsettled(cluster)
             and world.desired("a") == 0, timeout=60, what="the rest given back, the group backed off")
    time.sleep(3)
    (given_back,) = second.logged("launches bought ahead did not arrive by the deadline", node_group="a")
    assert (given_back["nodes"], given_back["returned"]) == (2, 1)
    assert world.desired("a") == 0 and bought(proxy) == {"a": 2} and not second.logged("bought ahead")
    assert proxy.count("TerminateInstanceInAutoScalingGroup") == 2
    second.assert_no_tracebacks()
