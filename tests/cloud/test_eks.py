"""aws-eks: managed node groups through DescribeNodegroup / UpdateNodegroupConfig / DescribeUpdate."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from cloud_adapters import CapacityError, PermissionError_
from cloud_adapters.aws_eks import EksProvider
from gangscale.model import Node

from .conftest import CLUSTER, fast_clients
from .proxy import json_answer, json_rewrite


def provider(proxy, **kw) -> EksProvider:
    clients = fast_clients(proxy.url, **kw)
    return EksProvider(CLUSTER, clients.options, clients)


def test_discovery_and_gpu_template(world, proxy):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.xlarge"], labels={"team": "ml"}, desired=1, max_size=4,
                    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}],
                    tags={"gangscale.io/price-per-hour": "0.9"})
    world.nodegroup("cpu", ["m5.2xlarge", "m5.xlarge"], zones=("us-east-1a", "us-east-1b"))
    world.nodegroup("off", ["m5.xlarge"], tags={"gangscale.io/enabled": "no"})
    world.nodegroup("ca-only", ["m5.xlarge"], own_tags=False)
    found = provider(proxy).discover()
    groups = {g.name: g for g in found.groups}
    assert sorted(groups) == ["cpu", "gpu"]
    assert any("off" in w and "'no'" in w for w in found.warnings)
    assert not any("ca-only" in w for w in found.warnings)
    gpu = groups["gpu"]
    assert (gpu.min_size, gpu.max_size, gpu.current_size) == (0, 4, 1)
    assert gpu.allocatable["nvidia.com/gpu"] == 1 and gpu.labels["nvidia.com/gpu.product"] == "NVIDIA-A10G"
    assert gpu.labels["team"] == "ml" and gpu.labels["eks.amazonaws.com/nodegroup"] == "gpu"
    assert gpu.labels["eks.amazonaws.com/capacityType"] == "ON_DEMAND"
    assert gpu.labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert [(t.key, t.value, t.effect) for t in gpu.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    assert gpu.price_per_hour == pytest.approx(0.9)
    assert groups["cpu"].instance_type == "m5.xlarge"  # the smaller of the two
    assert "topology.kubernetes.io/zone" not in groups["cpu"].labels


def test_untagged_node_groups_are_not_ours(world, proxy):
    world.eks_cluster()
    world.client("eks").create_nodegroup(clusterName=CLUSTER, nodegroupName="plain", nodeRole=
                                         "arn:aws:iam::123456789012:role/eks-nodes",
                                         subnets=[world.subnets["us-east-1a"]], instanceTypes=["m5.xlarge"])
    found = provider(proxy).discover()
    assert found.groups == [] and found.warnings == []


def test_increase_size_updates_the_node_group(world, proxy):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.xlarge"], desired=1, max_size=4)
    p = provider(proxy)
    p.discover()
    res = p.increase_size("gpu", 2)
    assert (res.before, res.after) == (1, 3)
    assert p.target_size("gpu") == 3
    [body] = proxy.bodies["UpdateNodegroupConfig"]
    assert json.loads(body)["scalingConfig"] == {"minSize": 0, "maxSize": 4, "desiredSize": 3}
    assert p.decrease_target_size("gpu", 1).after == 2  # no instances registered: all unfulfilled


def test_waits_for_the_update_to_finish(world, proxy):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.xlarge"], max_size=4)
    p = provider(proxy)
    p.discover()

    def in_progress(doc):
        doc["update"]["status"] = "InProgress"

    proxy.add("UpdateNodegroupConfig", json_rewrite(in_progress))
    states = iter(["InProgress", "Successful"])
    proxy.add("DescribeUpdate", lambda req, fwd: json_answer(
        {"update": {"id": "u-1", "status": next(states), "type": "ConfigUpdate", "errors": []}}))
    p.increase_size("gpu", 2)
    assert proxy.count("DescribeUpdate") == 2


@pytest.mark.parametrize("code,cls", [("InsufficientFreeAddresses", CapacityError), ("AccessDenied", PermissionError_)])
def test_a_failed_update_is_a_typed_error(world, proxy, code, cls):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.xlarge"], max_size=4)
    p = provider(proxy)
    p.discover()
    proxy.add("UpdateNodegroupConfig", json_rewrite(lambda d: d["update"].update(status="InProgress")))
    proxy.add("DescribeUpdate", lambda req, fwd: json_answer({"update": {
        "id": "u-1", "status": "Failed", "type": "ConfigUpdate",
        "errors": [{"errorCode": code, "errorMessage": f"{code} happened", "resourceIds": []}]}}))
    with pytest.raises(cls) as info:
        p.increase_size("gpu", 1)
    assert info.value.code == code


def test_health_issues_are_launch_failures(world, proxy):
    world.eks_cluster()
    world.nodegroup("gpu", ["p5.48xlarge"], max_size=4)
    p = provider(proxy)
    proxy.add("DescribeNodegroup", json_rewrite(lambda d: d["nodegroup"]["health"].update(issues=[{
        "code": "AsgInstanceLaunchFailures",
        "message": "Could not launch On-Demand Instances. InsufficientInstanceCapacity - We currently do not have "
                   "sufficient p5.48xlarge capacity in the Availability Zone you requested.",
        "resourceIds": ["eks-gpu"]}])))
    [failure] = p.launch_failures("gpu", datetime.now(timezone.utc))
    assert isinstance(failure.error, CapacityError) and failure.error.code == "AsgInstanceLaunchFailures"


def test_throttled_eks_calls_are_retried(world, proxy):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.xlarge"], max_size=4)
    proxy.throttle("DescribeNodegroup", times=1)
    assert [g.name for g in provider(proxy).discover().groups] == ["gpu"]
    assert proxy.count("DescribeNodegroup") == 2


def test_nodes_match_by_node_group_label(world, proxy):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.xlarge"], max_size=4)
    p = provider(proxy)
    p.discover()
    node = Node("n1", {"eks.amazonaws.com/nodegroup": "gpu"}, (), {})
    stranger = Node("n2", {"eks.amazonaws.com/nodegroup": "not-discovered"}, (), {})
    assert p.group_of_node(node, {}) == "gpu"
    assert p.group_of_node(stranger, {}) is None
