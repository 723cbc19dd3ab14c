"""`gangscale plan --provider ... --execute` end to end against moto, and the apply logic itself."""

from __future__ import annotations

import json

import pytest

from cloud_adapters import CapacityError
from cloud_adapters.simulated import SimulatedProvider
from gangscale.cli import main
from gangscale.apply import apply_plan, atomic_units, match_node_groups
from gangscale.cli_execute import plan_from_cloud
from gangscale.ingest import ingest
from gangscale.model import NodeGroup
from gangscale.planner import SolveOptions

from .clusters import gpu_gang, node, pod, podgroup, write
from .conftest import CLUSTER, REGION
from .proxy import failed_activity, fleet_refused, query_error

GPU_TAGS = {"k8s.io/cluster-autoscaler/node-template/taint/nvidia.com/gpu": "true:NoSchedule"}


def run(capsys, proxy, cluster_file: str, provider: str = "aws-asg", *extra: str) -> tuple[int, dict | None, str]:
    code = main(["plan", "--cluster", cluster_file, "--provider", provider, "--execute", "--region", REGION,
                 "--cluster-name", CLUSTER, "--aws-endpoint-url", proxy.url, "-o", "json", "--time-limit", "5",
                 *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_execute_twice_adds_nodes_once(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8)
    world.asg("cpu", "m5.xlarge", max_size=8)
    cluster = write(tmp_path / "c.json", gpu_gang("train", 2))
    code, doc, err = run(capsys, proxy, cluster)
    assert code == 0, err
    assert doc["scaleUp"] == {"gpu": 2}
    [action] = doc["execution"]["actions"]
    assert action == {"nodeGroup": "gpu", "requested": 2, "status": "applied", "before": 0, "after": 2}
    assert world.desired("gpu") == 2
    code, doc, err = run(capsys, proxy, cluster)
    assert code == 0, err
    assert doc["scaleUp"] == {} and doc["execution"]["actions"] == []
    assert [g["decision"] for g in doc["gangs"]] == ["fits-existing"]  # on the two nodes on their way
    assert world.desired("gpu") == 2 and proxy.count("SetDesiredCapacity") == 1


def test_registered_nodes_are_matched_by_provider_id(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8, desired=1)
    [inst] = world.group("gpu")["Instances"]
    busy = node("ip-10-0-0-1", f"aws:///us-east-1a/{inst['InstanceId']}")
    objects = [busy, pod("old-0", None, gpu=4, node="ip-10-0-0-1"), *gpu_gang("train", 2)]
    code, doc, err = run(capsys, proxy, write(tmp_path / "c.json", objects))
    assert code == 0, err
    assert doc["execution"]["nodesMatched"] == 1
    # The registered node is full and no longer counts as "on its way": both members need new nodes.
    assert doc["scaleUp"] == {"gpu": 2} and world.desired("gpu") == 3


def test_fleet_execute_is_atomic_and_idempotent(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8)
    cluster = write(tmp_path / "c.json", gpu_gang("train", 3))
    code, doc, err = run(capsys, proxy, cluster, "aws-fleet")
    assert code == 0, err
    [action] = doc["execution"]["actions"]
    assert action["status"] == "applied" and len(action["instanceIds"]) == 3
    assert world.desired("gpu") == 3 and len(world.group("gpu")["Instances"]) == 3
    code, doc, err = run(capsys, proxy, cluster, "aws-fleet")
    assert code == 0 and doc["scaleUp"] == {} and proxy.count("CreateFleet") == 1


def test_fleet_capacity_error_exits_3_with_one_line(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8)
    proxy.add("CreateFleet", lambda req, fwd: fleet_refused())
    code, doc, err = run(capsys, proxy, write(tmp_path / "c.json", gpu_gang("train", 2)), "aws-fleet")
    assert code == 3
    assert err.count("\n") == 1 and err.startswith("gangscale: aws-fleet: capacity: CreateFleet gpu:")
    assert "Traceback" not in err
    assert doc["execution"]["actions"][0]["status"] == "failed"
    assert doc["execution"]["actions"][0]["errorKind"] == "capacity"
    assert world.desired("gpu") == 0 and world.instance_states() == {}


def test_launch_failure_after_scale_up_exits_3(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8)
    proxy.add("DescribeScalingActivities", lambda req, fwd: failed_activity(
        "gpu", "We currently do not have sufficient g5.12xlarge capacity in the Availability Zone you requested "
               "(us-east-1a). Launching EC2 instance failed."))
    code, doc, err = run(capsys, proxy, write(tmp_path / "c.json", gpu_gang("train", 2)))
    assert code == 3 and "capacity:" in err and "Traceback" not in err
    assert doc["execution"]["launchFailures"][0]["errorKind"] == "capacity"


def test_permission_denied_exits_3(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8)
    proxy.add("SetDesiredCapacity", lambda req, fwd: query_error(
        "AccessDenied", "User: arn:aws:sts::123456789012:assumed-role/x is not authorized to perform: "
                        "autoscaling:SetDesiredCapacity"))
    code, doc, err = run(capsys, proxy, write(tmp_path / "c.json", gpu_gang("train", 2)))
    assert code == 3 and err.startswith("gangscale: aws-asg: permission: SetDesiredCapacity gpu:")
    assert "testing" not in err  # the dummy credentials never show


def test_discovery_failure_exits_3_without_output(world, proxy, tmp_path, capsys):
    world.network()
    proxy.add("DescribeAutoScalingGroups", lambda req, fwd: query_error(
        "AccessDenied", "not authorized to perform: autoscaling:DescribeAutoScalingGroups"))
    code = main(["plan", "--cluster", write(tmp_path / "c.json", gpu_gang("t", 1)), "--provider", "aws-asg",
                 "--execute", "--region", REGION, "--cluster-name", CLUSTER, "--aws-endpoint-url", proxy.url])
    out, err = capsys.readouterr()
    assert code == 3 and out == "" and err.startswith("gangscale: aws-asg: permission: DescribeAutoScalingGroups")


def test_eks_execute_twice_adds_nodes_once(world, proxy, tmp_path, capsys):
    world.eks_cluster()
    world.nodegroup("gpu", ["g5.12xlarge"], max_size=6,
                    taints=[{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}])
    cluster = write(tmp_path / "c.json", gpu_gang("train", 2))
    code, doc, err = run(capsys, proxy, cluster, "aws-eks")
    assert code == 0, err
    assert doc["scaleUp"] == {"gpu": 2}
    code, doc, err = run(capsys, proxy, cluster, "aws-eks")
    assert code == 0 and doc["scaleUp"] == {}
    assert world.client("eks").describe_nodegroup(clusterName=CLUSTER, nodegroupName="gpu")[
        "nodegroup"]["scalingConfig"]["desiredSize"] == 2


def test_dry_run_with_a_provider_changes_nothing(world, proxy, tmp_path, capsys):
    world.asg("gpu", "g5.12xlarge", tags=GPU_TAGS, max_size=8)
    code = main(["plan", "--cluster", write(tmp_path / "c.json", gpu_gang("train", 2)), "--provider", "aws-asg",
                 "--region", REGION, "--cluster-name", CLUSTER, "--aws-endpoint-url", proxy.url, "-o", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["scaleUp"] == {"gpu": 2} and "execution" not in doc
    assert world.desired("gpu") == 0


@pytest.mark.parametrize("argv,needle", [
    (["--execute"], "--execute needs --provider"),
    (["--provider", "aws-asg"], "--cluster-name"),
    (["--provider", "simulated"], "--nodegroups"),
])
def test_usage_errors_exit_2(tmp_path, capsys, argv, needle):
    code = main(["plan", "--cluster", write(tmp_path / "c.json", gpu_gang("t", 1)), *argv])
    assert code == 2 and needle in capsys.readouterr().err


def test_simulated_execute_with_state_file_is_idempotent(tmp_path, capsys):
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text("nodeGroups:\n- name: gpu\n  instanceType: g5.12xlarge\n  maxSize: 8\n  taints:\n"
                       "  - {key: nvidia.com/gpu, value: 'true', effect: NoSchedule}\n")
    args = ["plan", "--cluster", write(tmp_path / "c.json", gpu_gang("train", 2)), "--nodegroups", str(catalog),
            "--provider", "simulated", "--simulated-state", str(tmp_path / "sim.json"), "--execute", "-o", "json",
            "--time-limit", "5"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["execution"]["actions"][0]["after"] == 2
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["scaleUp"] == {}
    assert json.loads((tmp_path / "sim.json").read_text())["groups"]["gpu"]["target"] == 2


# ------------------------------------------------------------ apply logic, no cloud needed
def _groups() -> list[NodeGroup]:
    from gangscale.catalog import parse_catalog

    groups, _ = parse_catalog([
        {"name": "cpu", "instanceType": "m5.2xlarge", "maxSize": 8},
        {"name": "gpu", "instanceType": "g5.12xlarge", "maxSize": 8,
         "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
    ])
    return groups


def _launcher_and_workers(name: str) -> list[dict]:
    return [podgroup(name, 3), pod(f"{name}-launcher", name, cpu="6", mem="20Gi", tolerate_gpu=False),
            pod(f"{name}-w0", name, gpu=4), pod(f"{name}-w1", name, gpu=4)]


class _NoGpuCapacity(SimulatedProvider):
    def increase_size(self, group, delta):
        if group == "gpu":
            raise CapacityError("no g5.12xlarge capacity", group=group, provider=self.name)
        return super().increase_size(group, delta)


def test_atomic_units_join_groups_that_share_a_gang():
    objects = _launcher_and_workers("a") + gpu_gang("b", 1)
    provider = SimulatedProvider(_groups(), atomic=True)
    plan, _ = plan_from_cloud(objects, provider, solve=SolveOptions(time_limit=5))
    units = atomic_units(plan, ingest(objects))
    assert sorted(units, key=len) == [{"gpu": 1}, {"cpu": 1, "gpu": 2}]


def test_atomic_provider_rolls_back_a_gang_whose_second_group_fails():
    objects = _launcher_and_workers("a")
    provider = _NoGpuCapacity(_groups(), atomic=True)
    plan, report = plan_from_cloud(objects, provider, solve=SolveOptions(time_limit=5), execute=True)
    statuses = {a.group: a.status for a in report.actions}
    assert statuses == {"cpu": "rolled-back", "gpu": "failed"}
    assert report.failed and provider.target_size("cpu") == 0


def test_a_group_moved_since_discovery_is_not_grown_again():
    objects = gpu_gang("train", 2)
    provider = SimulatedProvider(_groups())
    discovery = provider.discover()
    cluster, _ = match_node_groups(ingest(objects), provider)
    plan, _ = plan_from_cloud(objects, provider, solve=SolveOptions(time_limit=5))
    provider.increase_size("gpu", 2)  # another run got there first
    report = apply_plan(plan, provider, {g.name: g for g in discovery.groups}, cluster)
    assert [a.status for a in report.actions] == ["skipped"] and provider.target_size("gpu") == 2


def test_matching_nodes_to_groups_returns_a_copy_and_leaves_the_ingested_nodes_as_they_were():
    provider = SimulatedProvider(_groups())
    provider.increase_size("gpu", 1)
    iid = provider.instances("gpu")[0].id
    objects = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
                "spec": {"providerID": f"aws:///us-east-1a/{iid}"},
                "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                           "conditions": [{"type": "Ready", "status": "True"}]}}]
    ingested = ingest(objects)
    matched, count = match_node_groups(ingested, provider)
    assert count == 1 and matched.nodes[0].node_group == "gpu"
    assert ingested.nodes[0].node_group is None  # the ingested cluster is never changed
