"""A real moto server on 127.0.0.1 (started by the tests), a fault proxy in front of it, and AWS builders.

Setup talks to moto directly; the adapters under test talk through the proxy,
so the proxy's counts are the adapters' own calls. Moto's state is reset
before every test; moto holds only the AMIs of amis.json, so a reset rebuilds no AMI
catalogue and takes milliseconds. (Moto's default catalogue, 1,366 AMIs with a volume and a
snapshot each, is rebuilt on every reset: seconds of CPU, enough to time a reset out under load.)
"""

from __future__ import annotations

import http.client
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from cloud_adapters.aws_common import AwsClients, AwsOptions

from .proxy import FaultProxy

REGION = "us-east-1"
CLUSTER = "gang-test"
ROLE = "arn:aws:iam::123456789012:role/eks-nodes"
AMIS = Path(__file__).with_name("amis.json")
# moto reads MOTO_AMIS_PATH once, when moto.ec2 is first imported. Set here, at collection, it holds for every
# moto server of the session: tests/controller re-uses these fixtures, so one worker can start two servers.
os.environ["MOTO_AMIS_PATH"] = str(AMIS)


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    """Dummy credentials only: nothing here can reach a real AWS account."""
    mp = pytest.MonkeyPatch()
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION, "AWS_REGION": REGION,
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "MOTO_AMIS_PATH": str(AMIS),
    }.items():
        mp.setenv(key, value)
    mp.delenv("AWS_PROFILE", raising=False)
    mp.delenv("AWS_ENDPOINT_URL", raising=False)
    yield
    mp.undo()


@pytest.fixture(scope="session")
def moto_server(aws_env: None) -> Iterator[tuple[str, int]]:
    from moto.ec2.models import amis

    assert os.environ.get("MOTO_AMIS_PATH") == str(AMIS), "moto must read the one-AMI catalogue (amis.json)"
    assert len(amis.AMIS) == 1, f"moto loaded {len(amis.AMIS)} AMIs, not amis.json's one"
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield host, port
    server.stop()


@pytest.fixture(scope="session")
def _proxy(moto_server: tuple[str, int]) -> Iterator[FaultProxy]:
    p = FaultProxy(moto_server).start()
    yield p
    p.stop()


@pytest.fixture
def proxy(_proxy: FaultProxy, moto_server: tuple[str, int]) -> FaultProxy:
    """The fault proxy, with no rules and a fresh moto behind it."""
    conn = http.client.HTTPConnection(*moto_server, timeout=10)
    conn.request("POST", "/moto-api/reset")
    assert conn.getresponse().status == 200
    conn.close()
    _proxy.reset()
    return _proxy


@pytest.fixture
def moto_url(moto_server: tuple[str, int]) -> str:
    return f"http://{moto_server[0]}:{moto_server[1]}"


_CLIENTS: dict[tuple[str, str], Any] = {}
_SESSION: list[Any] = []


def shared_session() -> Any:
    """One boto3 session for the whole run: loading the EC2 model per client costs a quarter second."""
    if not _SESSION:
        import boto3

        _SESSION.append(boto3.session.Session(region_name=REGION))
    return _SESSION[0]


def fast_clients(endpoint_url: str, **kw: Any) -> AwsClients:
    return AwsClients(fast_options(endpoint_url, **kw), session=shared_session())


def fast_options(endpoint_url: str, **kw: Any) -> AwsOptions:
    """Adapter options for tests: the proxy endpoint, standard retries, no real waiting."""
    defaults: dict[str, Any] = dict(region=REGION, endpoint_url=endpoint_url, retry_mode="standard",
                                    max_attempts=4, poll_interval=0.01, update_timeout=2.0, running_timeout=2.0)
    defaults.update(kw)
    return AwsOptions(**defaults)


@dataclass
class World:
    """Builds VPCs, launch templates, Auto Scaling groups and EKS node groups directly in moto."""

    url: str
    subnets: dict[str, str] = field(default_factory=dict)
    ami: str = ""

    def client(self, service: str) -> Any:
        key = (self.url, service)
        if key not in _CLIENTS:
            _CLIENTS[key] = shared_session().client(service, endpoint_url=self.url, region_name=REGION)
        return _CLIENTS[key]

    def network(self) -> None:
        ec2 = self.client("ec2")
        vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        for i, zone in enumerate(("us-east-1a", "us-east-1b")):
            self.subnets[zone] = ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.0.{i}.0/24",
                                                   AvailabilityZone=zone)["Subnet"]["SubnetId"]
        self.ami = self.ami or ec2.describe_images(Owners=["amazon"], MaxResults=5)["Images"][0]["ImageId"]

    def launch_template(self, name: str, instance_type: str | None) -> str:
        data: dict[str, Any] = {"ImageId": self.ami}
        if instance_type:
            data["InstanceType"] = instance_type
        return self.client("ec2").create_launch_template(LaunchTemplateName=name, LaunchTemplateData=data)[
            "LaunchTemplate"]["LaunchTemplateId"]

    def asg(self, name: str, instance_type: str | None = "m5.xlarge", *, tags: dict[str, str] | None = None,
            cluster: str | None = CLUSTER, zones: tuple[str, ...] = ("us-east-1a",), desired: int = 0,
            max_size: int = 10, min_size: int = 0, mixed: list[str] | None = None,
            launch_configuration: bool = False, propagate: dict[str, str] | None = None,
            ca_tags: bool = True, own_tags: bool = True) -> None:
        """An ASG tagged for discovery by gangscale (`own_tags`) and by Cluster Autoscaler (`ca_tags`)."""
        if not self.subnets:
            self.network()
        all_tags = {"k8s.io/cluster-autoscaler/enabled": "true"} if ca_tags else {}
        if cluster and ca_tags:
            all_tags[f"k8s.io/cluster-autoscaler/{cluster}"] = "owned"
        if cluster and own_tags:
            all_tags.update({"gangscale.io/enabled": "true", f"gangscale.io/{cluster}": "owned"})
        all_tags.update(tags or {})
        tag_list = [{"Key": k, "Value": v, "PropagateAtLaunch": False, "ResourceId": name,
                     "ResourceType": "auto-scaling-group"} for k, v in all_tags.items()]
        tag_list += [{"Key": k, "Value": v, "PropagateAtLaunch": True, "ResourceId": name,
                      "ResourceType": "auto-scaling-group"} for k, v in (propagate or {}).items()]
        params: dict[str, Any] = dict(AutoScalingGroupName=name, MinSize=min_size, MaxSize=max_size,
                                      DesiredCapacity=desired, Tags=tag_list,
                                      VPCZoneIdentifier=",".join(self.subnets[z] for z in zones))
        if launch_configuration:
            self.client("autoscaling").create_launch_configuration(
                LaunchConfigurationName=f"{name}-lc", ImageId=self.ami, InstanceType=instance_type)
            params["LaunchConfigurationName"] = f"{name}-lc"
        elif mixed:
            lt = self.launch_template(f"{name}-lt", None)
            params["MixedInstancesPolicy"] = {"LaunchTemplate": {
                "LaunchTemplateSpecification": {"LaunchTemplateId": lt, "Version": "$Latest"},
                "Overrides": [{"InstanceType": t} for t in mixed]}}
        else:
            self.launch_template(f"{name}-lt", instance_type)
            params["LaunchTemplate"] = {"LaunchTemplateName": f"{name}-lt", "Version": "$Latest"}
        self.client("autoscaling").create_auto_scaling_group(**params)

    def desired(self, name: str) -> int:
        return self.group(name)["DesiredCapacity"]

    def group(self, name: str) -> dict[str, Any]:
        return self.client("autoscaling").describe_auto_scaling_groups(
            AutoScalingGroupNames=[name])["AutoScalingGroups"][0]

    def instance_states(self) -> dict[str, str]:
        res = self.client("ec2").describe_instances()["Reservations"]
        return {i["InstanceId"]: i["State"]["Name"] for r in res for i in r["Instances"]}

    def eks_cluster(self, name: str = CLUSTER) -> None:
        if not self.subnets:
            self.network()
        self.client("eks").create_cluster(name=name, roleArn=ROLE,
                                          resourcesVpcConfig={"subnetIds": list(self.subnets.values())})

    def nodegroup(self, name: str, instance_types: list[str], *, cluster: str = CLUSTER,
                  tags: dict[str, str] | None = None, labels: dict[str, str] | None = None,
                  taints: list[dict[str, str]] | None = None, desired: int = 0, max_size: int = 10,
                  zones: tuple[str, ...] = ("us-east-1a",), ca_tags: bool = True, own_tags: bool = True) -> None:
        base = {"k8s.io/cluster-autoscaler/enabled": "true"} if ca_tags else {}
        if own_tags:
            base["gangscale.io/enabled"] = "true"
        self.client("eks").create_nodegroup(
            clusterName=cluster, nodegroupName=name, nodeRole=ROLE, subnets=[self.subnets[z] for z in zones],
            instanceTypes=instance_types, scalingConfig={"minSize": 0, "maxSize": max_size, "desiredSize": desired},
            labels=labels or {}, taints=taints or [],
            tags={**base, **(tags or {})})


@pytest.fixture(scope="session")
def _ami(moto_server: tuple[str, int]) -> str:
    """The one Amazon AMI of amis.json: moto loads it again after every reset, under the same id."""
    return World(f"http://{moto_server[0]}:{moto_server[1]}").client("ec2").describe_images(
        Owners=["amazon"])["Images"][0]["ImageId"]


@pytest.fixture
def world(proxy: FaultProxy, moto_url: str, _ami: str) -> World:
    return World(moto_url, ami=_ami)
