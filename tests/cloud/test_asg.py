"""aws-asg against a real moto server: discovery, templates, scaling, failures, throttling."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cloud_adapters import CapacityError, NotFoundError, QuotaError, SizeLimitError, ThrottledError
from cloud_adapters.aws_asg import AsgProvider
from cloud_adapters.base import SystemReserve
from gangscale.instance_types import MIB, eks_reserved_cpu_millis, eks_reserved_memory_mib

from .conftest import CLUSTER, REGION, fast_clients
from .proxy import failed_activity


def provider(proxy, **kw) -> AsgProvider:
    clients = fast_clients(proxy.url, **kw)
    return AsgProvider(CLUSTER, clients.options, clients)


def by_name(groups):
    return {g.name: g for g in groups}


CA_DISCOVERY = (f"asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/{CLUSTER}",)


def test_discovery_by_cluster_autoscaler_tags_when_configured(world, proxy):
    world.asg("cpu", "m5.xlarge", own_tags=False)
    world.asg("other-cluster", "m5.xlarge", cluster="someone-else", own_tags=False)
    world.asg("untagged", "m5.xlarge", cluster=None)
    world.asg("disabled", "m5.xlarge", tags={"k8s.io/cluster-autoscaler/enabled": "false"}, own_tags=False)
    clients = fast_clients(proxy.url)
    clients.options.auto_discovery = CA_DISCOVERY
    found = AsgProvider(CLUSTER, clients.options, clients).discover()
    assert [g.name for g in found.groups] == ["cpu"]
    assert any("disabled" in w and "'false'" in w for w in found.warnings)
    assert not any("other-cluster" in w or "untagged" in w for w in found.warnings)


def test_gpu_template_from_describe_instance_types(world, proxy):
    world.asg("gpu", "g5.12xlarge", tags={
        "k8s.io/cluster-autoscaler/node-template/label/team": "ml",
        "k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu": "true:NoSchedule",
        "k8s.io/cluster-autoscaler/node-template/resources/ephemeral-storage": "100Gi",
    }, desired=1, max_size=6)
    g = by_name(provider(proxy).discover().groups)["gpu"]
    assert g.instance_type == "g5.12xlarge"
    assert (g.min_size, g.max_size, g.current_size) == (0, 6, 1)
    assert g.allocatable["nvidia.com/gpu"] == 4
    assert g.allocatable["cpu"] == 48000 - eks_reserved_cpu_millis(48)
    assert g.allocatable["memory"] == (196608 - eks_reserved_memory_mib(737)) * MIB
    assert g.allocatable["pods"] == 737  # the bundled table's max pods
    assert g.allocatable["ephemeral-storage"] == 100 * 2**30
    assert g.labels["nvidia.com/gpu.product"] == "NVIDIA-A10G"
    assert g.labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert g.labels["topology.kubernetes.io/region"] == REGION
    assert g.labels["team"] == "ml"
    assert [(t.key, t.value, t.effect) for t in g.taints] == [("nvidia.com/gpu", "true", "NoSchedule")]
    assert g.price_per_hour == pytest.approx(5.672)


def test_type_outside_the_table_uses_eni_formula_and_needs_a_price_tag(world, proxy):
    world.asg("priced", "g4dn.2xlarge", tags={"gangscale.io/price-per-hour": "0.752"})
    world.asg("unpriced", "g4dn.2xlarge")
    found = provider(proxy, reserve=SystemReserve(cpu_millis=100, memory_mib=256)).discover()
    g = by_name(found.groups)["priced"]
    assert g.price_per_hour == pytest.approx(0.752)
    assert g.allocatable["pods"] == 3 * (10 - 1) + 2  # g4dn.2xlarge: 3 ENIs x 10 IPv4
    assert g.allocatable["cpu"] == 8000 - eks_reserved_cpu_millis(8) - 100
    assert g.allocatable["memory"] == (32768 - eks_reserved_memory_mib(29) - 256) * MIB
    assert g.allocatable["nvidia.com/gpu"] == 1
    assert g.labels["nvidia.com/gpu.product"] == "NVIDIA-T4"
    assert "unpriced" not in by_name(found.groups)
    assert any("unpriced" in w and "gangscale.io/price-per-hour" in w for w in found.warnings)


@pytest.mark.parametrize("tag,value,needle", [
    ("k8s.io/cluster-autoscaler/node-template/taint/dedicated", "gpu:Sometimes", "effect"),
    ("k8s.io/cluster-autoscaler/node-template/taint/dedicated", "gpu", "value:Effect"),
    ("k8s.io/cluster-autoscaler/node-template/resources/example.com/fpga", "lots", "not a quantity"),
    ("k8s.io/cluster-autoscaler/node-template/label/bad key", "x", "label key"),
    ("gangscale.io/price-per-hour", "cheap", "not a number"),
    ("gangscale.io/price-per-hour", "-1", "non-negative"),
])
def test_a_bad_tag_skips_that_group_only(world, proxy, tag, value, needle):
    world.asg("good", "m5.xlarge")
    world.asg("bad", "m5.xlarge", tags={tag: value})
    found = provider(proxy).discover()
    assert [g.name for g in found.groups] == ["good"]
    [warning] = [w for w in found.warnings if "bad" in w]
    assert "skipped" in warning and needle in warning


def test_mixed_instances_use_the_smallest_type_and_multi_zone_has_no_zone_label(world, proxy):
    world.asg("mixed", mixed=["m5.2xlarge", "m5.xlarge"], zones=("us-east-1a", "us-east-1b"))
    world.asg("legacy", "c5.xlarge", launch_configuration=True)
    groups = by_name(provider(proxy).discover().groups)
    assert groups["mixed"].instance_type == "m5.xlarge"
    assert "topology.kubernetes.io/zone" not in groups["mixed"].labels
    assert groups["legacy"].instance_type == "c5.xlarge"


def test_unknown_instance_type_is_skipped_with_a_warning(world, proxy):
    world.asg("good", "m5.xlarge")
    world.asg("typo", "m5.hyperlarge")
    found = provider(proxy).discover()
    assert [g.name for g in found.groups] == ["good"]
    assert any("typo" in w and "m5.hyperlarge" in w for w in found.warnings)


def test_describe_instance_types_is_cached(world, proxy):
    world.asg("a", "m5.xlarge")
    world.asg("b", "m5.xlarge")
    p = provider(proxy)
    p.discover()
    p.discover()
    assert proxy.count("DescribeInstanceTypes") == 1
    assert proxy.count("DescribeLaunchTemplateVersions") == 2  # one per template, then cached


def test_increase_delete_and_decrease(world, proxy):
    world.asg("cpu", "m5.xlarge", max_size=5)
    p = provider(proxy)
    p.discover()
    res = p.increase_size("cpu", 3)
    assert (res.before, res.after) == (0, 3)
    assert world.desired("cpu") == 3 and p.target_size("cpu") == 3
    instances = p.instances("cpu")
    assert len(instances) == 3 and {i.group for i in instances} == {"cpu"}
    assert set(p.instance_groups()) <= {i.id for i in instances}  # discovery-time map: none yet
    p.discover()
    assert set(p.instance_groups()) == {i.id for i in instances}
    gone = instances[0].id
    res = p.delete_instances("cpu", [gone])
    assert (res.before, res.after) == (3, 2) and world.desired("cpu") == 2
    assert world.instance_states()[gone] in ("shutting-down", "terminated")
    with pytest.raises(SizeLimitError):
        p.decrease_target_size("cpu", 1)  # every remaining slot has an instance
    with pytest.raises(SizeLimitError):
        p.increase_size("cpu", 4)  # past max size 5
    with pytest.raises(NotFoundError):
        p.delete_instances("cpu", ["i-00000000000000000"])


def test_not_found_is_typed(world, proxy):
    world.network()
    with pytest.raises(NotFoundError):
        provider(proxy).target_size("nope")


@pytest.mark.parametrize("message,cls", [
    ("We currently do not have sufficient g5.12xlarge capacity in the Availability Zone you requested "
     "(us-east-1a). Our system will be working on provisioning additional capacity. Launching EC2 instance failed.",
     CapacityError),
    ("You have requested more vCPU capacity than your current vCPU limit of 32 allows for the instance bucket "
     "that the specified instance type belongs to. Launching EC2 instance failed.", QuotaError),
])
def test_launch_failures_from_scaling_activities_are_typed(world, proxy, message, cls):
    world.asg("gpu", "g5.12xlarge")
    p = provider(proxy)
    proxy.add("DescribeScalingActivities", lambda req, fwd: failed_activity("gpu", message))
    since = datetime.now(timezone.utc) - timedelta(minutes=1)
    [failure] = p.launch_failures("gpu", since)
    assert isinstance(failure.error, cls)
    assert failure.group == "gpu" and "Launching EC2 instance failed" in failure.error.message
    assert p.launch_failures("gpu", datetime.now(timezone.utc) + timedelta(minutes=5)) == []


def test_throttling_is_retried(world, proxy):
    world.asg("cpu", "m5.xlarge")
    p = provider(proxy)
    p.discover()
    proxy.throttle("SetDesiredCapacity", times=2)
    p.increase_size("cpu", 2)
    assert proxy.count("SetDesiredCapacity") == 3  # two throttled, the third went through
    assert world.desired("cpu") == 2


def test_throttling_in_adaptive_mode_is_retried(world, proxy):
    world.asg("cpu", "m5.xlarge")
    proxy.throttle("DescribeInstanceTypes", times=1)
    found = provider(proxy, retry_mode="adaptive").discover()
    assert [g.name for g in found.groups] == ["cpu"]
    assert proxy.count("DescribeInstanceTypes") == 2


def test_throttling_beyond_the_retries_is_a_typed_error(world, proxy):
    world.asg("cpu", "m5.xlarge")
    p = provider(proxy, max_attempts=2)
    p.discover()
    proxy.throttle("SetDesiredCapacity", times=10)
    with pytest.raises(ThrottledError) as info:
        p.increase_size("cpu", 1)
    assert proxy.count("SetDesiredCapacity") == 2
    assert info.value.retryable and info.value.code == "Throttling"
    assert world.desired("cpu") == 0


def test_debug_logs_name_calls_but_never_credentials(world, proxy, caplog, monkeypatch):
    import logging
    import os

    world.asg("cpu", "m5.xlarge")
    caplog.set_level(logging.DEBUG, logger="gangscale.cloud")
    p = provider(proxy)
    p.discover()
    p.increase_size("cpu", 1)
    text = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("gangscale"))
    assert "SetDesiredCapacity cpu" in text
    for secret in (os.environ["AWS_SECRET_ACCESS_KEY"], os.environ["AWS_SESSION_TOKEN"], "Credential=",
                   "Authorization"):
        assert secret not in text


def test_an_unknown_error_on_one_groups_template_skips_only_that_group(world, proxy):
    from .proxy import query_error

    world.asg("good", "m5.xlarge")
    world.asg("odd", "m5.xlarge")
    odd_lt = world.group("odd")["LaunchTemplate"]["LaunchTemplateId"].encode()
    proxy.add("DescribeLaunchTemplateVersions", lambda req, fwd: query_error(
        "InvalidLaunchTemplateName.MalformedException", "The launch template name is malformed", 400)
        if odd_lt in req.body else None)
    found = provider(proxy).discover()
    assert [g.name for g in found.groups] == ["good"]
    assert any("odd" in w and "skipped" in w and "malformed" in w for w in found.warnings)
