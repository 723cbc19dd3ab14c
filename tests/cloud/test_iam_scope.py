"""The IAM policy's scope: gangscale may change only its own cluster's resources, in its own region.

The intent is tested over config/iam-policy.json with a small evaluator
(`iam_sim.py`); the code side (discovery by `gangscale.io/cluster`, fleet
instances tagged with it, `gangscale check` naming groups the policy would
refuse) against moto and the Kubernetes emulator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cloud_adapters.aws_asg import AsgProvider
from cloud_adapters.aws_eks import EksProvider
from cloud_adapters.aws_fleet import FleetProvider
from gangscale.cli import main

from .conftest import CLUSTER, REGION, fast_clients
from .iam_sim import ALLOW, DENY, Request, evaluate, load_policy

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "123456789012"
OTHER_REGION = "eu-west-1"
VALUES = {"ACCOUNT_ID": ACCOUNT, "CLUSTER_NAME": CLUSTER, "REGION": REGION, "NODE_ROLE_NAME": "eks-nodes"}
OWN = {"gangscale.io/cluster": CLUSTER}


@pytest.fixture(scope="module")
def policy() -> dict[str, Any]:
    return load_policy(ROOT / "config" / "iam-policy.json", VALUES)


def asg_arn(name: str, region: str = REGION) -> str:
    return f"arn:aws:autoscaling:{region}:{ACCOUNT}:autoScalingGroup:uuid-1:autoScalingGroupName/{name}"


def ec2_arn(kind: str, rid: str, region: str = REGION) -> str:
    return f"arn:aws:ec2:{region}:{ACCOUNT}:{kind}/{rid}"


def ctx(region: str = REGION, resource: dict[str, str] | None = None, request: dict[str, str] | None = None,
        **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"aws:RequestedRegion": region, **extra}
    out.update({f"aws:ResourceTag/{k}": v for k, v in (resource or {}).items()})
    out.update({f"aws:RequestTag/{k}": v for k, v in (request or {}).items()})
    return out


def decide(policy: dict[str, Any], action: str, resource: str, context: dict[str, Any]) -> str:
    return evaluate(policy, Request(action, resource, context))[0]


CA_ONLY = {"k8s.io/cluster-autoscaler/enabled": "true", f"k8s.io/cluster-autoscaler/{CLUSTER}": "owned"}
ASG_ACTIONS = ("autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup",
               "autoscaling:AttachInstances")


# ----------------------------------------------------------------- the policy's intent


@pytest.mark.parametrize("action", ASG_ACTIONS)
def test_asg_scaling_is_allowed_only_on_our_clusters_tagged_group_in_our_region(policy, action):
    assert decide(policy, action, asg_arn("ours"), ctx(resource={**CA_ONLY, **OWN})) == ALLOW
    assert decide(policy, action, asg_arn("theirs"),
                  ctx(resource={"gangscale.io/cluster": "other-cluster"})) == DENY
    assert decide(policy, action, asg_arn("ca-only"), ctx(resource=CA_ONLY)) == DENY
    assert decide(policy, action, asg_arn("ours", OTHER_REGION), ctx(OTHER_REGION, resource=OWN)) == DENY
    assert decide(policy, action, asg_arn("ours"), ctx(OTHER_REGION, resource=OWN)) == DENY


def test_eks_node_group_updates_need_our_cluster_tag_and_region(policy):
    ng = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/{CLUSTER}/gpu/uuid"
    assert decide(policy, "eks:UpdateNodegroupConfig", ng, ctx(resource=OWN)) == ALLOW
    assert decide(policy, "eks:UpdateNodegroupConfig", ng,
                  ctx(resource={"k8s.io/cluster-autoscaler/enabled": "true"})) == DENY
    other = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/other-cluster/gpu/uuid"
    assert decide(policy, "eks:UpdateNodegroupConfig", other, ctx(resource={"gangscale.io/cluster": CLUSTER})) == DENY
    ng_far = f"arn:aws:eks:{OTHER_REGION}:{ACCOUNT}:nodegroup/{CLUSTER}/gpu/uuid"
    assert decide(policy, "eks:UpdateNodegroupConfig", ng_far, ctx(OTHER_REGION, resource=OWN)) == DENY


def test_terminate_instances_only_gives_back_our_clusters_fleet_instances_in_our_region(policy):
    ours = {"gangscale.io/node-group": "gpu", **OWN}
    instance = ec2_arn("instance", "i-0123")
    assert decide(policy, "ec2:TerminateInstances", instance, ctx(resource=ours)) == ALLOW
    assert decide(policy, "ec2:TerminateInstances", instance,
                  ctx(resource={"gangscale.io/node-group": "gpu", "gangscale.io/cluster": "other-cluster"})) == DENY
    assert decide(policy, "ec2:TerminateInstances", instance,
                  ctx(resource={"gangscale.io/node-group": "gpu"})) == DENY  # any node-group tag is not enough
    assert decide(policy, "ec2:TerminateInstances", instance, ctx(resource=OWN)) == DENY  # not launched by a fleet
    far = ec2_arn("instance", "i-0123", OTHER_REGION)
    assert decide(policy, "ec2:TerminateInstances", far, ctx(OTHER_REGION, resource=ours)) == DENY


LAUNCH_TAGS = {"gangscale.io/node-group": "gpu", "gangscale.io/cluster": CLUSTER}


@pytest.mark.parametrize("action", ["ec2:CreateFleet", "ec2:RunInstances"])
def test_launches_need_a_template_tagged_for_the_cluster_and_instances_tagged_at_launch(policy, action):
    template = ec2_arn("launch-template", "lt-0abc")
    instance = ec2_arn("instance", "*")
    assert decide(policy, action, template, ctx(resource=OWN)) == ALLOW
    assert decide(policy, action, template, ctx()) == DENY  # an untagged template
    assert decide(policy, action, template, ctx(resource={"gangscale.io/cluster": "other-cluster"})) == DENY
    assert decide(policy, action, instance, ctx(request=LAUNCH_TAGS)) == ALLOW
    assert decide(policy, action, instance, ctx(request={"gangscale.io/node-group": "gpu"})) == DENY
    assert decide(policy, action, instance, ctx(request={**LAUNCH_TAGS, "gangscale.io/cluster": "x"})) == DENY
    assert decide(policy, action, ec2_arn("subnet", "subnet-1"), ctx()) == ALLOW
    assert decide(policy, action, ec2_arn("subnet", "subnet-1", OTHER_REGION), ctx(OTHER_REGION)) == DENY
    assert decide(policy, action, ec2_arn("launch-template", "lt-0abc", OTHER_REGION),
                  ctx(OTHER_REGION, resource=OWN)) == DENY


def test_every_mutating_statement_is_scoped_to_the_cluster_tag_or_region(policy):
    raw = json.loads((ROOT / "config" / "iam-policy.json").read_text())
    for st in raw["Statement"]:
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        if all(":Describe" in a or ":List" in a for a in actions) or st["Sid"] == "FleetPassNodeRoleToEc2":
            continue
        cond = json.dumps(st.get("Condition", {}))
        assert '"aws:RequestedRegion": "${REGION}"' in cond, st["Sid"]
        for res in st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]:
            assert ":${REGION}:" in res, (st["Sid"], res)


def test_the_simulator_refuses_a_policy_with_an_unfilled_placeholder():
    with pytest.raises(KeyError, match="REGION"):
        load_policy(ROOT / "config" / "iam-policy.json", {k: v for k, v in VALUES.items() if k != "REGION"})


# ------------------------------------------------------- the code side, against moto


def asg_provider(proxy, cls=AsgProvider):
    clients = fast_clients(proxy.url)
    return cls(CLUSTER, clients.options, clients)


def test_asg_discovery_finds_groups_by_the_gangscale_cluster_tag_and_still_by_ca_tags(world, proxy):
    world.asg("own", ca_tags=False, tags=OWN)
    world.asg("both", tags=OWN)
    world.asg("ca-only")
    world.asg("theirs", ca_tags=False, tags={"gangscale.io/cluster": "other-cluster"})
    world.asg("confused", tags={"gangscale.io/cluster": "other-cluster"})  # CA tags for us, our tag for them
    p = asg_provider(proxy)
    found = p.discover()
    assert sorted(g.name for g in found.groups) == ["both", "ca-only", "own"]
    assert sorted(p.iam_unscoped) == ["ca-only"]
    assert any("confused" in w and "names another cluster" in w for w in found.warnings)
    assert not any("theirs" in w for w in found.warnings)


def test_eks_discovery_finds_node_groups_by_the_gangscale_cluster_tag(world, proxy):
    world.eks_cluster()
    world.nodegroup("own", ["m5.xlarge"], ca_tags=False, tags=OWN)
    world.nodegroup("ca-only", ["m5.xlarge"])
    world.nodegroup("untagged", ["m5.xlarge"], ca_tags=False)
    clients = fast_clients(proxy.url)
    p = EksProvider(CLUSTER, clients.options, clients)
    assert sorted(g.name for g in p.discover().groups) == ["ca-only", "own"]
    assert p.iam_unscoped == ["ca-only"]


def test_fleet_instances_carry_the_cluster_tag_the_policy_lets_us_terminate(world, proxy, policy):
    world.asg("gpu", "g5.12xlarge", max_size=4, tags=OWN,
              propagate={"gangscale.io/node-group": "spoofed"})
    p = asg_provider(proxy, FleetProvider)
    p.discover()
    res = p.increase_size("gpu", 1)
    tags = {t["Key"]: t["Value"] for t in world.client("ec2").describe_tags(
        Filters=[{"Name": "resource-id", "Values": [res.instance_ids[0]]}])["Tags"]}
    assert tags["gangscale.io/cluster"] == CLUSTER and tags["gangscale.io/node-group"] == "gpu"
    instance = ec2_arn("instance", res.instance_ids[0])
    assert decide(policy, "ec2:RunInstances", ec2_arn("instance", "*"), ctx(request=tags)) == ALLOW
    assert decide(policy, "ec2:TerminateInstances", instance, ctx(resource=tags)) == ALLOW


def test_check_reports_groups_the_policy_would_not_let_gangscale_scale(world, proxy, tmp_path, capsys):
    from tests.kube.emulator import Emulator

    world.asg("own", ca_tags=False, tags=OWN)
    world.asg("ca-only")
    emu = Emulator(release="1.36").start()
    try:
        kc = emu.kubeconfig(str(tmp_path / "kc"))
        code = main(["check", "--kubeconfig", kc, "-o", "json", "--provider", "aws-asg", "--cluster-name", CLUSTER,
                     "--region", REGION, "--aws-endpoint-url", proxy.url])
    finally:
        emu.stop()
    report = json.loads(capsys.readouterr().out)
    scope = next(r for r in report["results"] if r["name"] == "iam-scope")
    assert code == 0 and scope["verdict"] == "warn"
    assert scope["summary"] == (f"1 of 2 aws-asg node groups lack tag gangscale.io/cluster={CLUSTER}: "
                                "config/iam-policy.json denies scaling them: ca-only")


def test_the_evaluator_follows_deny_over_allow_wildcards_and_condition_rules():
    from .iam_sim import allowed

    pol = {"Statement": [
        {"Sid": "A", "Effect": "Allow", "Action": "ec2:Describe*", "Resource": "*"},
        {"Sid": "B", "Effect": "Allow", "Action": ["autoscaling:SetDesiredCapacity"], "Resource": "arn:x:*",
         "Condition": {"StringLike": {"aws:ResourceTag/team": "ml-*"}, "Null": {"aws:ResourceTag/bad": "true"}}},
        {"Sid": "C", "Effect": "Deny", "Action": "*", "Resource": "arn:x:blocked",
         "Condition": {"ForAnyValue:StringEquals": {"aws:TagKeys": ["forbidden"]}}},
    ]}
    assert allowed(pol, "EC2:DescribeInstances", "anything")  # actions are case-insensitive
    assert not allowed(pol, "ec2:RunInstances", "anything")  # implicit deny
    assert allowed(pol, "autoscaling:SetDesiredCapacity", "arn:x:g", {"aws:ResourceTag/team": "ml-a"})
    assert not allowed(pol, "autoscaling:SetDesiredCapacity", "arn:x:g", {"aws:ResourceTag/team": "web"})
    assert not allowed(pol, "autoscaling:SetDesiredCapacity", "arn:x:g", {})  # a missing key fails StringLike
    assert not allowed(pol, "autoscaling:SetDesiredCapacity", "arn:x:g",
                       {"aws:ResourceTag/team": "ml-a", "aws:ResourceTag/bad": "1"})
    ok = {"aws:ResourceTag/team": "ml-a", "aws:TagKeys": ["a", "b"]}
    assert allowed(pol, "autoscaling:SetDesiredCapacity", "arn:x:blocked", ok)
    assert not allowed(pol, "autoscaling:SetDesiredCapacity", "arn:x:blocked", {**ok, "aws:TagKeys": ["forbidden"]})
