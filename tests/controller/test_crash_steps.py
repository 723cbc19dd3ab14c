"""Issue 17, "Done when": `kill -9` at every step of the write-ahead protocol, on aws-asg and aws-fleet.

One test per (provider, step), deterministic (the seeded crash test draws steps at random and may
miss some): the controller is killed with exit 137 at the step (`GANGSCALE_TEST_CRASH_AT`) while
buying for a first gang, a second gang arrives while it is down, and a restarted controller must
end with the group at exactly both gangs' size, every node bought once (replaying the proxy's
calls), nothing outside the group, each record owning exactly its own gang's nodes and no
booking left unsettled.
"""

from __future__ import annotations

import time

import pytest

from gangscale.controller.crashpoints import EXIT_CODE

from .conftest import state_records, wait_for
from .test_crash_random import _create, bought, outside_groups

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"
STEPS = {
    "aws-asg": ("record-saved", "call-sent", "after-SetDesiredCapacity", "call-confirmed"),
    "aws-fleet": ("record-saved", "call-sent", "after-CreateFleet", "after-AttachInstances", "call-confirmed"),
}


@pytest.mark.parametrize("provider, step", [(p, s) for p, steps in STEPS.items() for s in steps])
def test_a_kill_at_each_write_ahead_step_buys_each_gang_once_and_leaves_nothing_outside_a_group(
        cluster, world, controllers, proxy, provider, step):
    world.asg("a", "m5.2xlarge", max_size=10)
    for name in ("b", "spare"):  # outside_groups() looks at every group of the seeded test
        world.asg(name, "c5.2xlarge" if name == "b" else "m7i.2xlarge", max_size=10)
    first = controllers("first", env={"GANGSCALE_TEST_CRASH_AT": step}, provider=provider)
    _create(cluster, "zz-first", 3, "a")  # sorts last: attribution by name order would hand its nodes away
    wait_for(lambda: first.exited() is not None, timeout=60, what=f"the crash at {step}")
    assert first.exited() == EXIT_CODE
    _create(cluster, "aa-second", 2, "a")  # arrives while no controller runs
    second = controllers("second", provider=provider, orphanGraceSeconds=2)
    wait_for(lambda: world.desired("a") == 5 and not outside_groups(world), timeout=60,
             what="both gangs bought, nothing loose")
    time.sleep(3)  # several passes: nothing more is bought
    assert world.desired("a") == 5 and outside_groups(world) == set()
    assert bought(proxy)["a"] == 5, dict(bought(proxy))  # each node bought once
    recs = state_records(cluster)
    for name, n in (("zz-first", 3), ("aa-second", 2)):
        rec = recs[f"default/{name}/{API}"]
        assert rec["requested"] == {"a": n} and rec["state"] == "provisioning", (name, rec)
        assert not rec.get("unconfirmed") and not rec.get("calls"), (name, rec)
    second.assert_no_tracebacks()
