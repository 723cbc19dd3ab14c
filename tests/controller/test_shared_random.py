"""Seeded mixes of gangs whose pods share new nodes, with `kill -9` at random points, on aws-asg and aws-fleet.

Each run draws 2-6 gangs over three namespaces, each 1-3 pods of 4 GPUs, on p5.48xlarge (8 GPUs, tainted):
every node holds two pods, so gangs with an odd number of pods share nodes with each other. Some gangs are
there before the first pass (one pass books several, shared units and separate calls alike), the rest
arrive while the controller is down. The controller is killed twice, each time at a write-ahead crash
point drawn from the seed (`GANGSCALE_TEST_CRASH_AT`) or by SIGKILL after a random delay; a clean one
then settles, and:

- the nodes bought (replaying the proxy's calls) and the group's desired capacity are exactly what the
  final plan needs: the nodes on their way it puts pods on (its log line), buying none more; and, counted
  independently (two 4-GPU pods per 8-GPU node), at least ceil(pods / 2) and at most ceil(early pods / 2) +
  ceil(late pods / 2) (a node bought for an early gang that it half fills is not repacked for a late one);
- no instance is outside a group;
- no namespace's records hold more than its cap (maxNodes = the sum of its gangs' pods // 2 + 1, the most
  a share can round up to), and the records hold, all together, exactly the nodes bought.

CI runs 2 seeds per provider; `GANGSCALE_SHARED_SEEDS=20 pytest tests/controller/test_shared_random.py`
runs all 20.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter

import pytest

from builders import pod, podgroup

from .conftest import state_records, wait_for
from .test_crash_random import bought

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"
SEEDS = int(os.environ.get("GANGSCALE_SHARED_SEEDS", "2"))
GPU_TAINT = {"k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu": "true:NoSchedule"}
NAMESPACES = ("team-a", "team-b", "team-c")
STEPS = {
    "aws-asg": ("record-saved", "call-sent", "after-SetDesiredCapacity", "call-confirmed", "sigkill"),
    "aws-fleet": ("record-saved", "call-sent", "after-CreateFleet", "after-AttachInstances", "call-confirmed",
                  "sigkill"),
}
FAST = dict(cancelGraceSeconds=1, orphanGraceSeconds=2)


def _gang(emu, ns: str, name: str, members: int) -> None:
    emu.apply(podgroup(name, ns, min_count=members))
    for i in range(members):
        emu.apply(pod(f"{name}-{i}", ns, cpu="8", mem="32Gi", gpu=4, group=name))


def _outside(world) -> set[str]:
    alive = {i for i, s in world.instance_states().items() if s in ("pending", "running")}
    return alive - {i["InstanceId"] for i in world.group("p5")["Instances"]}


def _settled(emu, gangs: dict[tuple[str, str], int]) -> bool:
    """Every gang's record is provisioning, with no booking left unconfirmed (the clean controller has passed)."""
    recs = state_records(emu)
    return all((r := recs.get(f"{ns}/{name}/{API}", {})).get("state") == "provisioning" and not r.get("unconfirmed")
               and not r.get("calls") for ns, name in gangs)


def _mix(rng: random.Random) -> tuple[dict[tuple[str, str], int], set[tuple[str, str]]]:
    """(namespace, name) -> pods, and the gangs that arrive while the controller is down."""
    count = rng.randint(2, 6)
    gangs = {(NAMESPACES[i % len(NAMESPACES)], f"job{i}"): rng.randint(1, 3) for i in range(count)}
    late = set(rng.sample(sorted(gangs), rng.randint(0, count - 2)))
    return gangs, late


def _crash(rng: random.Random, controllers, provider: str, round_: int, caps: dict):
    step = rng.choice(STEPS[provider])
    env = {} if step == "sigkill" else {"GANGSCALE_TEST_CRASH_AT": step}
    proc = controllers(f"r{round_}", env=env, provider=provider, namespaceCaps=caps, **FAST)
    delay = rng.uniform(0.5, 5.0)
    wait_for(lambda: proc.exited() is not None or proc.logged("leading"), timeout=60, what="the controller leading")
    try:
        wait_for(lambda: proc.exited() is not None, timeout=delay, what="a crash")
    except AssertionError:
        proc.kill()  # SIGKILL: nothing reached the crash point in time, or SIGKILL was drawn
    return step


@pytest.mark.parametrize("provider, seed", [(p, s) for p in sorted(STEPS) for s in range(SEEDS)])
def test_seeded_mixes_of_gangs_sharing_nodes_killed_at_random_points_buy_what_the_final_plan_needs(
        cluster, world, controllers, proxy, provider, seed):
    rng = random.Random(f"shared-{seed}-{provider}")
    world.asg("p5", "p5.48xlarge", max_size=40, tags=GPU_TAINT)
    for ns in NAMESPACES:
        cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    gangs, late = _mix(rng)
    caps = {ns: {"maxNodes": sum(n // 2 + 1 for (g_ns, _), n in gangs.items() if g_ns == ns)} for ns in NAMESPACES}
    for (ns, name), n in sorted(gangs.items()):
        if (ns, name) not in late:
            _gang(cluster, ns, name, n)
    kills = [_crash(rng, controllers, provider, 1, caps)]
    created = sum(n for g, n in gangs.items() if g not in late)
    assert bought(proxy)["p5"] <= -(-created // 2), (kills, dict(bought(proxy)))  # never more than needed so far
    for (ns, name), n in sorted(gangs.items()):
        if (ns, name) in late:
            _gang(cluster, ns, name, n)
    kills.append(_crash(rng, controllers, provider, 2, caps))
    need = -(-sum(gangs.values()) // 2)  # the fewest nodes that hold every pod
    most = -(-created // 2) + -(-sum(n for g, n in gangs.items() if g in late) // 2)  # what two passes buy at most
    assert bought(proxy)["p5"] <= most, (kills, dict(bought(proxy)))
    final = controllers("final", provider=provider, namespaceCaps=caps, **FAST)
    what = f"nothing outside a group, every gang provisioning (gangs {gangs}, kills {kills})"
    wait_for(lambda: len(final.logged("plan")) >= 2 and not _outside(world) and _settled(cluster, gangs),
             timeout=120, what=what)  # (the clean controller's own passes, not an earlier one's settling)
    time.sleep(3)  # several passes: nothing more is bought
    assert _outside(world) == set(), (gangs, kills)
    got = bought(proxy)["p5"]
    assert got == world.desired("p5"), (gangs, kills, got)
    last = final.logged("plan")[-1]["plan"]
    assert last["scaleUp"] == {} and last["upcomingUsed"] == {"p5": got}, (last, gangs, kills, got)
    assert need <= got <= most, (gangs, kills, got, need, most)
    recs = state_records(cluster)
    held: Counter[str] = Counter()
    for (ns, name) in gangs:
        rec = recs.get(f"{ns}/{name}/{API}", {})
        assert rec.get("state") == "provisioning" and not rec.get("unconfirmed"), (ns, name, rec, kills)
        held[ns] += sum(rec.get("requested", {}).values())
    assert sum(held.values()) == got, (dict(held), gangs, kills)  # every node bought is booked once
    assert all(held[ns] <= caps[ns]["maxNodes"] for ns in NAMESPACES), (dict(held), caps, kills)
    final.assert_no_tracebacks()
    print(f"{provider} seed {seed}: gangs {gangs} (late {sorted(late)}); kills {kills}; bought {got}, "
          f"fewest {need}, at most {most}")
