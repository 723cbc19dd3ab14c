"""The IAM policy's scope: gangscale may change only its own cluster's resources, in its own region.

The intent is tested over config/iam-policy.json with a small evaluator
(`iam_sim.py`); the code side (discovery by `gangscale.io/cluster`, or by
`gangscale.io/enabled` with `gangscale.io/<cluster>`, fleet instances tagged
with the first, `gangscale check` naming groups the policy would refuse and
groups Cluster Autoscaler also manages) against moto and the Kubernetes emulator.
Discovery and policy agree: the groups the default tags find are exactly the
ones the policy lets gangscale scale.
"""

from __future__ import annotations

import json
import re
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
ENABLED = {"gangscale.io/enabled": "true", f"gangscale.io/{CLUSTER}": "owned"}


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


@pytest.mark.parametrize("action", ASG_ACTIONS)
def test_asg_scaling_is_allowed_on_groups_enabled_for_our_cluster_by_gangscales_own_tags(policy, action):
    assert decide(policy, action, asg_arn("ours"), ctx(resource=ENABLED)) == ALLOW
    assert decide(policy, action, asg_arn("ours"), ctx(resource={**ENABLED, **CA_ONLY})) == ALLOW
    assert decide(policy, action, asg_arn("other"),
                  ctx(resource={"gangscale.io/enabled": "true", "gangscale.io/other-cluster": "owned"})) == DENY
    assert decide(policy, action, asg_arn("off"), ctx(resource={**ENABLED, "gangscale.io/enabled": "false"})) == DENY
    assert decide(policy, action, asg_arn("half"), ctx(resource={"gangscale.io/enabled": "true"})) == DENY
    assert decide(policy, action, asg_arn("ours", OTHER_REGION), ctx(OTHER_REGION, resource=ENABLED)) == DENY


def test_eks_node_group_updates_need_our_cluster_tag_and_region(policy):
    ng = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/{CLUSTER}/gpu/uuid"
    assert decide(policy, "eks:UpdateNodegroupConfig", ng, ctx(resource=OWN)) == ALLOW
    assert decide(policy, "eks:UpdateNodegroupConfig", ng,
                  ctx(resource={"k8s.io/cluster-autoscaler/enabled": "true"})) == DENY
    other = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/other-cluster/gpu/uuid"
    assert decide(policy, "eks:UpdateNodegroupConfig", other, ctx(resource={"gangscale.io/cluster": CLUSTER})) == DENY
    ng_far = f"arn:aws:eks:{OTHER_REGION}:{ACCOUNT}:nodegroup/{CLUSTER}/gpu/uuid"
    assert decide(policy, "eks:UpdateNodegroupConfig", ng_far, ctx(OTHER_REGION, resource=OWN)) == DENY
    enabled = {"gangscale.io/enabled": "true"}  # the ARN names the cluster already
    assert decide(policy, "eks:UpdateNodegroupConfig", ng, ctx(resource=enabled)) == ALLOW
    assert decide(policy, "eks:UpdateNodegroupConfig", other, ctx(resource=enabled)) == DENY
    assert decide(policy, "eks:UpdateNodegroupConfig", ng, ctx(resource={"gangscale.io/enabled": "no"})) == DENY


def test_reading_the_clusters_scheduler_configuration_is_allowed_on_our_cluster_only(policy):
    cluster = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}"
    assert decide(policy, "eks:DescribeCluster", cluster, ctx()) == ALLOW
    assert decide(policy, "eks:DescribeCluster", f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/other-cluster", ctx()) == DENY
    assert decide(policy, "eks:DescribeCluster", f"arn:aws:eks:{OTHER_REGION}:{ACCOUNT}:cluster/{CLUSTER}",
                  ctx(OTHER_REGION)) == DENY
    assert decide(policy, "eks:UpdateClusterConfig", cluster, ctx()) == DENY  # gangscale recommends, never sets it


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
# the condition keys EC2 sets on every resource of a launch from a template (docs.aws.amazon.com AWSEC2 UserGuide,
# "Use launch templates to control launching instances"): which template, and whether the resource came from it
FROM_TEMPLATE = {"ec2:LaunchTemplate": ec2_arn("launch-template", "lt-0abc"), "ec2:IsLaunchTemplateResource": "true"}


@pytest.mark.parametrize("action", ["ec2:CreateFleet", "ec2:RunInstances"])
def test_launches_need_a_template_tagged_for_the_cluster_and_instances_tagged_at_launch(policy, action):
    template = ec2_arn("launch-template", "lt-0abc")
    instance = ec2_arn("instance", "*")
    assert decide(policy, action, template, ctx(resource=OWN)) == ALLOW
    assert decide(policy, action, template, ctx()) == DENY  # an untagged template
    assert decide(policy, action, template, ctx(resource={"gangscale.io/cluster": "other-cluster"})) == DENY
    assert decide(policy, action, instance, ctx(request=LAUNCH_TAGS, **FROM_TEMPLATE)) == ALLOW
    assert decide(policy, action, instance, ctx(request={"gangscale.io/node-group": "gpu"}, **FROM_TEMPLATE)) == DENY
    assert decide(policy, action, instance, ctx(request={**LAUNCH_TAGS, "gangscale.io/cluster": "x"},
                                                **FROM_TEMPLATE)) == DENY
    assert decide(policy, action, ec2_arn("subnet", "subnet-1"), ctx(**FROM_TEMPLATE)) == ALLOW
    assert decide(policy, action, ec2_arn("subnet", "subnet-1", OTHER_REGION), ctx(OTHER_REGION,
                                                                                  **FROM_TEMPLATE)) == DENY
    assert decide(policy, action, ec2_arn("launch-template", "lt-0abc", OTHER_REGION),
                  ctx(OTHER_REGION, resource=OWN)) == DENY


PROVIDERS = ("aws-asg", "aws-eks", "aws-fleet")
# the adapter modules each provider's calls come from (its class and the classes it extends)
PROVIDER_MODULES = {"aws-asg": ("aws_common", "aws_asg"), "aws-eks": ("aws_common", "aws_eks"),
                    "aws-fleet": ("aws_common", "aws_asg", "aws_fleet")}
FLEET_ONLY = ("ec2:RunInstances", "ec2:CreateFleet", "iam:PassRole", "ec2:TerminateInstances", "ec2:CreateTags",
              "autoscaling:AttachInstances")


def provider_policy(provider: str) -> dict[str, Any]:
    return load_policy(ROOT / "config" / "iam" / f"{provider}.json", VALUES)


def operations_called(provider: str) -> set[str]:
    """Every AWS API the provider's adapter calls, read from its source ("service", "Operation")."""
    ops = set()
    for module in PROVIDER_MODULES[provider]:
        text = (ROOT / "cloud_adapters" / f"{module}.py").read_text()
        ops |= {f"{svc}:{op}" for svc, op in re.findall(r'"(autoscaling|ec2|eks)",\s*"([A-Z][A-Za-z]+)"', text)}
    return ops


def granted(policy: dict[str, Any]) -> set[str]:
    return {a for st in policy["Statement"] for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_each_providers_policy_grants_exactly_the_calls_its_adapter_makes(provider):
    pol = provider_policy(provider)
    wanted = operations_called(provider)
    if provider == "aws-fleet":  # CreateFleet's own needs: the instances it runs, their tags, the node role
        wanted |= {"ec2:RunInstances", "ec2:CreateTags", "iam:PassRole"}
    assert granted(pol) == wanted, (sorted(granted(pol) - wanted), sorted(wanted - granted(pol)))


@pytest.mark.parametrize("provider", ["aws-asg", "aws-eks"])
def test_only_the_fleet_policy_can_launch_terminate_or_pass_the_node_role(provider):
    pol = provider_policy(provider)
    ours = {"gangscale.io/node-group": "gpu", **OWN}
    assert decide(pol, "ec2:RunInstances", ec2_arn("instance", "*"), ctx(request=LAUNCH_TAGS, **FROM_TEMPLATE)) == DENY
    assert decide(pol, "ec2:CreateFleet", ec2_arn("launch-template", "lt-0abc"), ctx(resource=OWN)) == DENY
    assert decide(pol, "ec2:TerminateInstances", ec2_arn("instance", "i-0123"), ctx(resource=ours)) == DENY
    assert decide(pol, "iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/eks-nodes",
                  ctx(**{"iam:PassedToService": "ec2.amazonaws.com"})) == DENY
    assert decide(pol, "autoscaling:AttachInstances", asg_arn("ours"), ctx(resource=OWN)) == DENY
    assert not set(FLEET_ONLY) & granted(pol)


def test_the_asg_policy_cannot_touch_eks_node_groups_and_the_eks_policy_cannot_resize_an_asg():
    ng = f"arn:aws:eks:{REGION}:{ACCOUNT}:nodegroup/{CLUSTER}/gpu/uuid"
    assert decide(provider_policy("aws-asg"), "eks:UpdateNodegroupConfig", ng, ctx(resource=OWN)) == DENY
    assert decide(provider_policy("aws-asg"), "autoscaling:SetDesiredCapacity", asg_arn("ours"),
                  ctx(resource=OWN)) == ALLOW
    assert decide(provider_policy("aws-eks"), "eks:UpdateNodegroupConfig", ng, ctx(resource=OWN)) == ALLOW
    assert decide(provider_policy("aws-eks"), "autoscaling:SetDesiredCapacity", asg_arn("ours"),
                  ctx(resource=OWN)) == DENY  # the node group's size is EKS's to set
    assert decide(provider_policy("aws-eks"), "autoscaling:TerminateInstanceInAutoScalingGroup", asg_arn("ours"),
                  ctx(resource=OWN)) == ALLOW  # giving back one named node


@pytest.mark.parametrize("source", ["union", "aws-fleet"])
def test_a_run_instances_without_a_launch_template_is_denied(policy, source):
    pol = policy if source == "union" else provider_policy("aws-fleet")
    instance = ec2_arn("instance", "*")
    # the request tags alone, as before: any AMI, subnet or security group could be launched with the node role
    assert decide(pol, "ec2:RunInstances", instance, ctx(request=LAUNCH_TAGS)) == DENY
    for kind in ("subnet", "network-interface", "volume", "security-group"):
        assert decide(pol, "ec2:RunInstances", ec2_arn(kind, "x-1"), ctx()) == DENY, kind
    assert decide(pol, "ec2:RunInstances", f"arn:aws:ec2:{REGION}::image/ami-1", ctx()) == DENY
    # from a template, but with an image or security group the request put in place of the template's
    overridden = {**FROM_TEMPLATE, "ec2:IsLaunchTemplateResource": "false"}
    assert decide(pol, "ec2:RunInstances", f"arn:aws:ec2:{REGION}::image/ami-1", ctx(**overridden)) == DENY
    assert decide(pol, "ec2:RunInstances", ec2_arn("security-group", "sg-1"), ctx(**overridden)) == DENY
    assert decide(pol, "ec2:RunInstances", f"arn:aws:ec2:{REGION}::image/ami-1", ctx(**FROM_TEMPLATE)) == ALLOW
    assert decide(pol, "ec2:RunInstances", ec2_arn("subnet", "subnet-1"), ctx(**overridden)) == ALLOW  # overrides
    # a template of another account or region is not the cluster's
    assert decide(pol, "ec2:RunInstances", instance, ctx(request=LAUNCH_TAGS, **{
        **FROM_TEMPLATE, "ec2:LaunchTemplate": f"arn:aws:ec2:{REGION}:999999999999:launch-template/lt-1"})) == DENY


def test_the_union_policy_is_exactly_the_per_provider_statements_together():
    union = {st["Sid"]: st for st in json.loads((ROOT / "config" / "iam-policy.json").read_text())["Statement"]}
    seen: dict[str, set[str]] = {}
    for provider in PROVIDERS:
        for st in json.loads((ROOT / "config" / "iam" / f"{provider}.json").read_text())["Statement"]:
            assert st["Sid"] in union, (provider, st["Sid"])
            whole = union[st["Sid"]]
            assert {k: v for k, v in st.items() if k != "Action"} == {k: v for k, v in whole.items() if k != "Action"}
            seen.setdefault(st["Sid"], set()).update(st["Action"])
    assert {sid: set(st["Action"]) for sid, st in union.items()} == seen


@pytest.mark.parametrize("name", ["iam-policy.json", *(f"iam/{p}.json" for p in PROVIDERS)])
def test_every_mutating_statement_is_scoped_to_the_cluster_tag_or_region(name):
    raw = json.loads((ROOT / "config" / name).read_text())
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


CA_DISCOVERY = f"asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/{CLUSTER}"


def test_asg_discovery_with_default_tags_finds_gangscale_groups_and_leaves_ca_only_groups_alone(world, proxy):
    world.asg("own", ca_tags=False, own_tags=False, tags=OWN)  # gangscale.io/cluster=<cluster>
    world.asg("enabled", ca_tags=False)  # gangscale.io/enabled + gangscale.io/<cluster>
    world.asg("both")  # gangscale's tags and CA's
    world.asg("ca-only", own_tags=False)
    world.asg("other-enabled", ca_tags=False, cluster="other-cluster")
    world.asg("theirs", ca_tags=False, own_tags=False, tags={"gangscale.io/cluster": "other-cluster"})
    world.asg("confused", ca_tags=False, tags={"gangscale.io/cluster": "other-cluster"})  # enabled for us, not
    p = asg_provider(proxy)
    found = p.discover()
    assert sorted(g.name for g in found.groups) == ["both", "enabled", "own"]
    assert p.iam_unscoped == []  # what the default tags find, the policy lets gangscale scale
    assert p.ca_managed == ["both"]
    assert any("confused" in w and "names another cluster" in w for w in found.warnings)
    assert not any("ca-only" in w or "theirs" in w or "other-enabled" in w for w in found.warnings)
    assert world.desired("ca-only") == 0 and "ca-only" not in p._raw  # noqa: SLF001 - never read as ours


def test_asg_discovery_by_configured_ca_filters_finds_ca_groups_the_policy_does_not_trust(world, proxy):
    world.asg("own", ca_tags=False, own_tags=False, tags=OWN)
    world.asg("ca-only", own_tags=False)
    world.asg("both")
    clients = fast_clients(proxy.url)
    clients.options.auto_discovery = (CA_DISCOVERY,)
    p = AsgProvider(CLUSTER, clients.options, clients)
    assert sorted(g.name for g in p.discover().groups) == ["both", "ca-only"]
    assert p.iam_unscoped == ["ca-only"]


def test_eks_discovery_finds_node_groups_by_gangscales_own_tags_only(world, proxy):
    world.eks_cluster()
    world.nodegroup("own", ["m5.xlarge"], ca_tags=False, own_tags=False, tags=OWN)
    world.nodegroup("enabled", ["m5.xlarge"], ca_tags=False)
    world.nodegroup("ca-only", ["m5.xlarge"], own_tags=False)
    world.nodegroup("untagged", ["m5.xlarge"], ca_tags=False, own_tags=False)
    clients = fast_clients(proxy.url)
    p = EksProvider(CLUSTER, clients.options, clients)
    assert sorted(g.name for g in p.discover().groups) == ["enabled", "own"]
    assert p.iam_unscoped == [] and p.ca_managed == []


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
    lt_id = world.client("ec2").describe_launch_templates(LaunchTemplateNames=["gpu-lt"])["LaunchTemplates"][0][
        "LaunchTemplateId"]
    template = ec2_arn("launch-template", lt_id)
    launch = {"ec2:LaunchTemplate": template, "ec2:IsLaunchTemplateResource": "true"}
    assert decide(policy, "ec2:RunInstances", ec2_arn("instance", "*"), ctx(request=tags, **launch)) == ALLOW
    assert decide(policy, "ec2:TerminateInstances", instance, ctx(resource=tags)) == ALLOW


def test_check_reports_groups_the_policy_would_not_let_gangscale_scale(world, proxy, tmp_path, capsys):
    from tests.kube.emulator import Emulator

    world.asg("own", ca_tags=False, own_tags=False, tags=OWN)
    world.asg("ca-only", own_tags=False)
    emu = Emulator(release="1.36").start()
    try:
        kc = emu.kubeconfig(str(tmp_path / "kc"))
        code = main(["check", "--kubeconfig", kc, "-o", "json", "--provider", "aws-asg", "--cluster-name", CLUSTER,
                     "--region", REGION, "--aws-endpoint-url", proxy.url,
                     "--node-group-auto-discovery", f"asg:tag=gangscale.io/cluster={CLUSTER}",
                     "--node-group-auto-discovery", CA_DISCOVERY])
    finally:
        emu.stop()
    report = json.loads(capsys.readouterr().out)
    scope = next(r for r in report["results"] if r["name"] == "iam-scope")
    assert code == 0 and scope["verdict"] == "warn"
    assert scope["summary"] == (
        f"1 of 2 aws-asg node groups lack gangscale's tags (gangscale.io/cluster={CLUSTER}, or gangscale.io/enabled="
        f"true with gangscale.io/{CLUSTER}): config/iam/aws-asg.json denies scaling them: ca-only")


def test_check_says_which_groups_cluster_autoscaler_also_manages_and_what_to_do(world, proxy, tmp_path, capsys):
    from tests.kube.emulator import Emulator

    world.asg("both")
    world.asg("mine", ca_tags=False)
    world.asg("ca-only", own_tags=False)
    emu = Emulator(release="1.36").start()
    try:
        code = main(["check", "--kubeconfig", emu.kubeconfig(str(tmp_path / "kc")), "-o", "json", "--provider",
                     "aws-asg", "--cluster-name", CLUSTER, "--region", REGION, "--aws-endpoint-url", proxy.url])
    finally:
        emu.stop()
    results = {r["name"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert code == 0 and results["iam-scope"]["verdict"] == "ok"
    overlap = results["ca-overlap"]
    assert overlap["verdict"] == "warn" and overlap["summary"].endswith(": both")
    assert any(d.startswith("fix: remove k8s.io/cluster-autoscaler/enabled") for d in overlap["detail"])


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
