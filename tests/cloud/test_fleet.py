"""aws-fleet: every node of a request arrives in one zone and joins the group, or none does."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from cloud_adapters import CapacityError, QuotaError, ThrottledError
from cloud_adapters.aws_fleet import FleetProvider

from .conftest import CLUSTER, fast_clients
from .proxy import PartialFleet, fleet_refused


def provider(proxy, **kw) -> FleetProvider:
    clients = fast_clients(proxy.url, **kw)
    p = FleetProvider(CLUSTER, clients.options, clients)
    p.discover()
    return p


def test_fleet_launches_all_nodes_in_one_zone_and_attaches_them(world, proxy):
    world.asg("gpu", "g5.12xlarge", max_size=8, zones=("us-east-1a", "us-east-1b"),
              propagate={"kubernetes.io/cluster/gang-test": "owned"})
    p = provider(proxy)
    res = p.increase_size("gpu", 3)
    assert (res.before, res.after) == (0, 3) and len(res.instance_ids) == 3
    group = world.group("gpu")
    assert group["DesiredCapacity"] == 3
    assert {i["InstanceId"] for i in group["Instances"]} == set(res.instance_ids)
    [body] = proxy.bodies["CreateFleet"]
    params = {k: v[0] for k, v in parse_qs(body.decode()).items()}
    assert params["Type"] == "instant"
    assert params["TargetCapacitySpecification.TotalTargetCapacity"] == "3"
    assert params["OnDemandOptions.MinTargetCapacity"] == "3"
    assert params["OnDemandOptions.SingleAvailabilityZone"] == "true"
    assert params["OnDemandOptions.SingleInstanceType"] == "true"
    assert params["ClientToken"].startswith("gangscale-")
    assert {v for k, v in params.items() if "Overrides" in k and k.endswith("InstanceType")} == {"g5.12xlarge"}
    tags = world.client("ec2").describe_tags(Filters=[{"Name": "resource-id", "Values": [res.instance_ids[0]]}])["Tags"]
    tag_map = {t["Key"]: t["Value"] for t in tags}
    assert tag_map["gangscale.io/node-group"] == "gpu"
    assert tag_map["kubernetes.io/cluster/gang-test"] == "owned"
    assert "k8s.io/cluster-autoscaler/enabled" not in tag_map  # not PropagateAtLaunch
    assert p.atomic and p.atomic_increase_size("gpu", 1).after == 4


def test_min_target_capacity_not_met_launches_nothing(world, proxy):
    world.asg("gpu", "p5.48xlarge", max_size=8)
    p = provider(proxy)
    proxy.add("CreateFleet", lambda req, fwd: fleet_refused())
    with pytest.raises(CapacityError) as info:
        p.increase_size("gpu", 4)
    assert "0 of 4" in info.value.message and info.value.code == "InsufficientInstanceCapacity"
    assert world.desired("gpu") == 0
    assert world.instance_states() == {}
    assert proxy.count("AttachInstances") == 0


def test_a_partial_fleet_is_given_back(world, proxy):
    world.asg("gpu", "g5.12xlarge", max_size=8)
    p = provider(proxy)
    partial = PartialFleet(keep=1)
    proxy.add("CreateFleet", partial)
    with pytest.raises(CapacityError) as info:
        p.increase_size("gpu", 3)
    assert "1 of 3" in info.value.message
    states = world.instance_states()
    assert states[partial.kept[0]] in ("shutting-down", "terminated")
    assert world.desired("gpu") == 0 and world.group("gpu")["Instances"] == []
    assert proxy.count("AttachInstances") == 0


def test_quota_errors_from_the_fleet_are_typed(world, proxy):
    world.asg("gpu", "p5.48xlarge", max_size=8)
    p = provider(proxy)
    proxy.add("CreateFleet", lambda req, fwd: fleet_refused("VcpuLimitExceeded", "You have requested more vCPU "
                                                            "capacity than your current vCPU limit of 0 allows"))
    with pytest.raises(QuotaError):
        p.increase_size("gpu", 2)


def test_a_failed_attach_rolls_the_launch_back(world, proxy):
    world.asg("gpu", "g5.12xlarge", max_size=8)
    p = provider(proxy, max_attempts=1)
    proxy.throttle("AttachInstances", times=5)
    with pytest.raises(ThrottledError) as info:
        p.increase_size("gpu", 2)
    assert "AttachInstances" in str(info.value)
    assert set(world.instance_states().values()) <= {"shutting-down", "terminated"}
    assert world.desired("gpu") == 0


def test_groups_without_a_launch_template_are_not_fleet_groups(world, proxy):
    world.asg("legacy", "c5.xlarge", launch_configuration=True)
    world.asg("multi", "c5.xlarge", zones=("us-east-1a", "us-east-1b"))
    clients = fast_clients(proxy.url)
    found = FleetProvider(CLUSTER, clients.options, clients).discover()
    assert [g.name for g in found.groups] == ["multi"]
    assert any("legacy" in w and "launch configuration" in w for w in found.warnings)
    assert any("multi" in w and "AZRebalance" in w for w in found.warnings)


def test_a_fleet_that_answers_with_more_instances_than_asked_keeps_only_the_plan(world, proxy):
    world.asg("gpu", "g5.12xlarge", max_size=8)
    p = provider(proxy)

    def one_more(req, forward):  # a cloud that launches more than the total asked for
        req.body = req.body.replace(b"TargetCapacitySpecification.TotalTargetCapacity=2",
                                    b"TargetCapacitySpecification.TotalTargetCapacity=3")
        return forward()

    proxy.add("CreateFleet", one_more, times=1)
    res = p.increase_size("gpu", 2)
    assert len(res.instance_ids) == 2 and world.desired("gpu") == 2
    ended = [s for s in world.instance_states().values() if s in ("terminated", "shutting-down")]
    assert len(ended) == 1  # the extra one was given back
