"""Issue 17, "Done when" (aws-asg part): seeded kill points during a mixed workload of 10 gangs.

The real `gangscale run` is started again and again; each run is killed at a seeded point — inside
the write-ahead window (`GANGSCALE_TEST_CRASH_AT=record-saved|call-sent`) or by SIGKILL after a
random delay — while gangs arrive in batches and some are deleted. A last, clean run settles.
Then: the groups' desired capacity is exactly what the surviving gangs need, every surviving gang's
record owns exactly its own nodes (no gang bought twice), and no SetDesiredCapacity ever asked for
more than every gang created so far could need.

CI runs 5 kill points (about a minute). The full run of 50 is
`GANGSCALE_CRASH_POINTS=50 pytest tests/controller/test_crash_random.py` (and `GANGSCALE_CRASH_SEED`
picks another seed).
"""

from __future__ import annotations

import os
import random
import re
import time

from builders import pod, podgroup

from .conftest import state_records, wait_for

API = "scheduling.k8s.io/v1alpha2"
KILL_POINTS = int(os.environ.get("GANGSCALE_CRASH_POINTS", "5"))
SEED = int(os.environ.get("GANGSCALE_CRASH_SEED", "17"))
STEPS = ("record-saved", "call-sent", "sigkill")


def _create(emu, name: str, members: int) -> None:
    emu.apply(podgroup(name, min_count=members))
    for i in range(members):
        emu.apply(pod(f"{name}-{i}", cpu="6", mem="4Gi", group=name))  # one m5.2xlarge node per pod


def _delete(emu, name: str, members: int) -> None:
    for i in range(members):
        emu.delete("v1", "Pod", "default", f"{name}-{i}")
    emu.delete(API, "PodGroup", "default", name)


def _desired_calls(proxy) -> list[int]:
    return [int(m.group(1)) for b in proxy.bodies.get("SetDesiredCapacity", [])
            for m in [re.search(rb"DesiredCapacity=(\d+)", b)] if m]


def test_seeded_kills_during_a_mixed_workload_never_buy_twice_and_settle_on_what_survivors_need(
        cluster, world, controllers, proxy):
    rng = random.Random(SEED)
    world.asg("cpu", "m5.2xlarge", max_size=40)
    sizes = {f"job{i}": rng.randint(1, 3) for i in range(10)}
    doomed = set(rng.sample(sorted(sizes), 2))  # deleted some time after they are created
    waiting, live, created = list(sizes), [], 0
    fast = dict(leaseDurationSeconds=1.5, leaseRenewSeconds=0.3, cancelGraceSeconds=1)
    plan = []
    for k in range(KILL_POINTS):
        for _ in range(rng.randint(1, 2) if waiting else 0):
            name = waiting.pop(0)
            _create(cluster, name, sizes[name])
            live.append(name)
            created += sizes[name]
        for name in [n for n in live if n in doomed and rng.random() < 0.5]:
            _delete(cluster, name, sizes[name])
            live.remove(name)
            doomed.discard(name)
        step = rng.choice(STEPS)
        plan.append(step)
        env = {} if step == "sigkill" else {"GANGSCALE_TEST_CRASH_AT": step}
        ctl = controllers(f"k{k}", env=env, **fast)
        try:
            wait_for(lambda: ctl.exited() is not None, timeout=rng.uniform(1.0, 6.0), what="a crash")
        except AssertionError:
            ctl.kill()  # nothing to buy in time (or SIGKILL chosen): kill -9 wherever it is
        assert max(_desired_calls(proxy), default=0) <= created, (plan, _desired_calls(proxy))
    for name in waiting:  # the rest of the workload arrives; a clean run settles everything
        _create(cluster, name, sizes[name])
        live.append(name)
    final = controllers("final", **fast)
    need = sum(sizes[n] for n in live)
    wait_for(lambda: world.desired("cpu") == need, timeout=60, what=f"desired {need} (kills: {plan})")
    time.sleep(3)
    assert world.desired("cpu") == need, plan
    recs = state_records(cluster)
    for name in live:
        assert recs[f"default/{name}/{API}"]["requested"] == {"cpu": sizes[name]}, (name, plan)
    assert max(_desired_calls(proxy)) <= sum(sizes.values()), plan
    final.assert_no_tracebacks()
    print(f"kill points: {plan}; SetDesiredCapacity: {_desired_calls(proxy)}")
