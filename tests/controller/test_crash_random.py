"""Issue 17, "Done when": seeded kill points during a mixed workload of 10 gangs, two replicas at once.

For each provider (aws-asg: SetDesiredCapacity; aws-fleet: CreateFleet then AttachInstances) two
`gangscale run` replicas run at once with short leases, and one is killed at each seeded point:
inside the write-ahead protocol (`GANGSCALE_TEST_CRASH_AT` = record-saved, call-sent,
after-<Operation>, call-confirmed) or by SIGKILL of the leader after a random delay. A replacement
starts after each kill, so two replicas are always up. Gangs arrive spread over the kill points
(two per kill point in CI, one every fifth in the full run); eight live gangs are pinned to
groups `a` and `b` (shared), two doomed ones to `spare` and deleted along the way. Two clean
replicas then settle, and:

- the final desired capacity of every group is exactly what the surviving gangs need (`spare`: 0);
- no instance is left outside an Auto Scaling group (the janitor's grace is 2 s here);
- no gang is bought twice: replaying the proxy's recorded calls in order, the nodes bought in `a`
  and `b` (desired-capacity increases, CreateFleet capacities) are exactly the live gangs' sizes,
  in `spare` at most the doomed gangs' sizes, and each live gang's record owns exactly its nodes;
- every TriggeredScaleUp Event names the gang's own group and at most its size (item 8), and the
  clean replicas log each of a gang's state changes once (item 7).

CI runs 5 kill points per provider. The full run is `GANGSCALE_CRASH_POINTS=50 pytest
tests/controller/test_crash_random.py` (`GANGSCALE_CRASH_SEED` picks another seed).
"""

from __future__ import annotations

import os
import random
import re
import time
from collections import Counter
from urllib.parse import parse_qs

import pytest

from builders import pod, podgroup

from .conftest import STATE_NS, events, state_records, wait_for

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"
KILL_POINTS = int(os.environ.get("GANGSCALE_CRASH_POINTS", "5"))
SEED = int(os.environ.get("GANGSCALE_CRASH_SEED", "17"))
GROUPS = {"a": "m5.2xlarge", "b": "c5.2xlarge", "spare": "m7i.2xlarge"}  # 8 vCPU each: one 6-CPU pod per node
STEPS = {
    "aws-asg": ("record-saved", "call-sent", "after-SetDesiredCapacity", "call-confirmed", "sigkill"),
    "aws-fleet": ("record-saved", "call-sent", "after-CreateFleet", "after-AttachInstances", "call-confirmed",
                  "sigkill"),
}
FAST = dict(leaseDurationSeconds=1.5, leaseRenewSeconds=0.3, cancelGraceSeconds=1, orphanGraceSeconds=2)


def _create(emu, name: str, members: int, group: str) -> None:
    emu.apply(podgroup(name, min_count=members))
    for i in range(members):
        emu.apply(pod(f"{name}-{i}", cpu="6", mem="4Gi", group=name,
                      selector={"node.kubernetes.io/instance-type": GROUPS[group]}))


def _delete(emu, name: str, members: int) -> None:
    for i in range(members):
        emu.delete("v1", "Pod", "default", f"{name}-{i}")
    emu.delete(API, "PodGroup", "default", name)


def _calls(proxy) -> list[tuple[str, dict[str, list[str]]]]:
    """Every AWS call the controllers made, in the order the proxy saw them, with its form fields."""
    with proxy._lock:
        seen, bodies = list(proxy.seen), {a: list(b) for a, b in proxy.bodies.items()}
    nth: Counter[str] = Counter()
    out = []
    for _, action in seen:
        body = bodies[action][nth[action]]
        nth[action] += 1
        out.append((action, parse_qs(body.decode(errors="replace")) if body else {}))
    return out


def _fleet_group(form: dict[str, list[str]]) -> str:
    for k, v in form.items():
        if k.endswith(".Key") and v == ["gangscale.io/node-group"]:
            return form[k[:-len("Key")] + "Value"][0]
    return ""


def bought(proxy) -> Counter[str]:
    """Nodes bought per group: replay desired capacity (set, attach, decrement) and count each rise once."""
    desired: Counter[str] = Counter()
    out: Counter[str] = Counter()
    for action, form in _calls(proxy):
        one = lambda k: form.get(k, [""])[0]  # noqa: E731
        group = one("AutoScalingGroupName")
        if action == "SetDesiredCapacity":
            new = int(one("DesiredCapacity"))
            out[group] += max(0, new - desired[group])
            desired[group] = new
        elif action == "AttachInstances":
            desired[group] += sum(1 for k in form if k.startswith("InstanceIds.member."))
        elif action == "TerminateInstanceInAutoScalingGroup" and one("ShouldDecrementDesiredCapacity") == "true":
            desired[group] -= 1
        elif action == "CreateFleet":
            out[_fleet_group(form)] += int(one("TargetCapacitySpecification.TotalTargetCapacity"))
    return out


def leader(emu) -> str:
    lease = emu.get("coordination.k8s.io/v1", "Lease", STATE_NS, "gangscale-leader") or {}
    return (lease.get("spec") or {}).get("holderIdentity") or ""


def outside_groups(world) -> set[str]:
    alive = {i for i, s in world.instance_states().items() if s in ("pending", "running")}
    return alive - {i["InstanceId"] for g in GROUPS for i in world.group(g)["Instances"]}


def _kill_one(rng, emu, replicas: dict) -> None:
    """SIGKILL the leader (a random replica when none leads)."""
    name = leader(emu)
    victim = replicas.get(name) or replicas[rng.choice(sorted(replicas))]
    victim.kill()


@pytest.mark.parametrize("provider", sorted(STEPS))
def test_seeded_kills_of_two_replicas_never_buy_twice_never_orphan_and_settle_on_what_survivors_need(
        provider, cluster, world, controllers, proxy):
    rng = random.Random(f"{SEED}-{provider}")
    for group, itype in GROUPS.items():
        world.asg(group, itype, max_size=40)
    names = [f"job{i}" for i in range(10)]
    sizes = {n: rng.randint(1, 3) for n in names}
    doomed = set(rng.sample(names, 2))  # deleted some time after they are created
    home = {n: "spare" if n in doomed else rng.choice(("a", "b")) for n in names}
    arrives = {n: i * KILL_POINTS // len(names) for i, n in enumerate(names)}  # spread over the kill points
    waiting, live, created = list(names), [], Counter()
    replicas: dict = {}
    kills, started = [], 0
    for k in range(KILL_POINTS):
        for name in [n for n in waiting if arrives[n] == k]:
            waiting.remove(name)
            _create(cluster, name, sizes[name], home[name])
            live.append(name)
            created[home[name]] += sizes[name]
        for name in [n for n in live if n in doomed and arrives[n] < k and rng.random() < 0.5]:
            _delete(cluster, name, sizes[name])
            live.remove(name)
        step = rng.choice(STEPS[provider])
        kills.append(step)
        env = {} if step == "sigkill" else {"GANGSCALE_TEST_CRASH_AT": step}
        while len(replicas) < 2:  # a replacement for each replica that died: two always run
            started += 1
            replicas[f"r{started}"] = controllers(f"r{started}", env=env, provider=provider, **FAST)
        try:
            wait_for(lambda: any(p.exited() is not None for p in replicas.values()),
                     timeout=rng.uniform(1.0, 6.0), what="a crash")
        except AssertionError:
            _kill_one(rng, cluster, replicas)  # nothing reached the crash point in time (or SIGKILL chosen)
        replicas = {n: p for n, p in replicas.items() if p.exited() is None}
        over = {g: n for g, n in bought(proxy).items() if n > created[g]}
        assert not over, (kills, over, dict(created))  # never more than every gang created so far could need
    for p in replicas.values():
        p.kill()
    for name in waiting:  # the rest of the workload arrives; the doomed are gone; two clean replicas settle
        _create(cluster, name, sizes[name], home[name])
        live.append(name)
    for name in [n for n in live if n in doomed]:
        _delete(cluster, name, sizes[name])
        live.remove(name)
    finals = [controllers(f"final-{x}", provider=provider, **FAST) for x in "ab"]
    need = {g: sum(sizes[n] for n in live if home[n] == g) for g in GROUPS}
    settled = lambda: all(world.desired(g) == need[g] for g in GROUPS) and not outside_groups(world)  # noqa: E731
    wait_for(settled, timeout=90, what=f"desired {need}, nothing outside a group (kills: {kills})")
    time.sleep(3)  # and it stays so
    assert {g: world.desired(g) for g in GROUPS} == need, kills
    assert outside_groups(world) == set(), kills
    got = bought(proxy)
    assert got["a"] == need["a"] and got["b"] == need["b"], (kills, dict(got), need)  # each live gang once
    assert got["spare"] <= sum(sizes[n] for n in doomed), (kills, dict(got))  # each doomed gang at most once
    recs = state_records(cluster)
    for name in live:
        assert recs.get(f"default/{name}/{API}", {}).get("requested") == {home[name]: sizes[name]}, (name, kills)
    _events_name_the_gangs_own_group(cluster, sizes, home)
    for p in finals:
        p.assert_no_tracebacks()
        changes = [(ln["gang"], ln["from"], ln["to"]) for ln in p.logged("gang state")]
        assert len(changes) == len(set(changes)), (p.identity, changes)  # each state change logged once
        assert not [ln for ln in p.lines() if "capacity: capacity:" in str(ln.get("error", ""))]
    print(f"{provider}: kill points {kills}; bought {dict(got)}; need {need}; replicas started {started + 2}")


def _events_name_the_gangs_own_group(emu, sizes: dict[str, int], home: dict[str, str]) -> None:
    """Every TriggeredScaleUp Event (a restart's included) is on the gang it bought for: its group, its size."""
    for e in events(emu, "TriggeredScaleUp", kind="PodGroup"):  # member pods carry the same bought-for text
        gang = e["involvedObject"]["name"]
        bought_for = re.findall(r"(\w+) \+(\d+)", e["message"].split(";")[0])
        assert bought_for, e["message"]
        for group, n in bought_for:
            assert group == home[gang] and int(n) <= sizes[gang], (gang, e["message"])
