"""aws-fleet: two gangs booked in one pass, the controller killed between the pass's two CreateFleet calls.

The first call (one gang's nodes) launched and attached, the second never went out. A restarted
`gangscale run` must settle each booking by the `gangscale.io/client-token` tags of the instances in
the group, not by desired capacity in gang order (the calls went out in the plan's node order): in
the end the nodes bought (replaying the proxy's calls) are exactly what the two gangs need, and each
gang's record holds exactly its own instances, by id, all launched by one call of its own.
"""

from __future__ import annotations

import time

import pytest

from gangscale.controller.crashpoints import EXIT_CODE

from .conftest import state_records, wait_for
from .test_crash_random import _create, bought, outside_groups

pytestmark = pytest.mark.slow

API = "scheduling.k8s.io/v1alpha2"
TOKEN_TAG = "gangscale.io/client-token"


def tokens_of(world, ids: list[str]) -> dict[str, str]:
    """Instance id -> its client-token tag."""
    if not ids:
        return {}
    res = world.client("ec2").describe_instances(InstanceIds=ids)["Reservations"]
    return {i["InstanceId"]: next((t["Value"] for t in i.get("Tags", []) if t["Key"] == TOKEN_TAG), "")
            for r in res for i in r["Instances"]}


@pytest.mark.parametrize("sizes", [(2, 3), (3, 2)], ids=["smaller-gang-first-by-name", "larger-gang-first-by-name"])
def test_a_kill_between_two_fleet_calls_of_one_pass_buys_each_gang_once_and_each_record_holds_its_own_instances(
        cluster, world, controllers, proxy, sizes):
    world.asg("a", "m5.2xlarge", max_size=10)
    for name in ("b", "spare"):  # outside_groups() looks at every group of the seeded test
        world.asg(name, "c5.2xlarge" if name == "b" else "m7i.2xlarge", max_size=10)
    gangs = dict(zip(("aa-first", "zz-second"), sizes))
    for name, n in gangs.items():  # both listed before the first pass: one pass books both
        _create(cluster, name, n, "a")
    first = controllers("first", env={"GANGSCALE_TEST_CRASH_AT": "after-AttachInstances"}, provider="aws-fleet")
    wait_for(lambda: first.exited() is not None, timeout=60, what="the crash after the first call's attach")
    assert first.exited() == EXIT_CODE
    assert sum(bought(proxy).values()) < sum(sizes)  # the second call never went out
    second = controllers("second", provider="aws-fleet", orphanGraceSeconds=2)
    need = sum(sizes)
    wait_for(lambda: world.desired("a") >= need and not outside_groups(world), timeout=60, what="both gangs bought")
    time.sleep(3)  # several passes: nothing more is bought
    assert world.desired("a") == need and outside_groups(world) == set()
    assert bought(proxy)["a"] == need, dict(bought(proxy))
    recs = state_records(cluster)
    owned: dict[str, set[str]] = {}
    for name, n in gangs.items():
        rec = recs[f"default/{name}/{API}"]
        assert rec["requested"] == {"a": n} and not rec.get("unconfirmed") and not rec.get("calls"), (name, rec)
        ids = rec.get("launches", {}).get("a", [])
        assert len(ids) == n, (name, rec)  # held by id, not by count
        tokens = set(tokens_of(world, ids).values())
        assert len(tokens) == 1 and "" not in tokens, (name, tokens)  # all from one call
        owned[name] = tokens
    assert owned["aa-first"] != owned["zz-second"]  # each from a call of its own
    members = {i["InstanceId"] for i in world.group("a")["Instances"]}
    assert set().union(*(set(recs[f"default/{g}/{API}"]["launches"]["a"]) for g in gangs)) == members
    second.assert_no_tracebacks()
