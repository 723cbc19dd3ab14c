"""Pure pieces: error typing, tag parsing, providerID parsing, max pods, the IAM policy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cloud_adapters import (
    CapacityError,
    CloudError,
    ConflictError,
    NotFoundError,
    PermissionError_,
    QuotaError,
    ThrottledError,
    instance_id_from_provider_id,
)
from cloud_adapters.errors import classify_message, error_class
from cloud_adapters.tags import TagError, discovery_state, parse_auto_discovery, parse_template_tags
from cloud_adapters.template import eni_max_pods

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("code,cls", [
    ("InsufficientInstanceCapacity", CapacityError), ("VcpuLimitExceeded", QuotaError),
    ("InstanceLimitExceeded", QuotaError), ("Throttling", ThrottledError), ("RequestLimitExceeded", ThrottledError),
    ("ThrottlingException", ThrottledError), ("ResourceNotFoundException", NotFoundError),
    ("InvalidInstanceID.NotFound", NotFoundError), ("InvalidGroup.NotFound", NotFoundError),
    ("AccessDenied", PermissionError_), ("UnauthorizedOperation", PermissionError_),
    ("ExpiredToken", PermissionError_), ("ScalingActivityInProgress", ConflictError),
    ("ValidationError", CloudError),
])
def test_error_codes_map_to_typed_errors(code, cls):
    assert error_class(code) is cls


def test_typed_errors_say_what_and_where():
    err = CapacityError("no g5 capacity", code="InsufficientInstanceCapacity", operation="CreateFleet", group="gpu")
    assert str(err) == "capacity: CreateFleet gpu: no g5 capacity [InsufficientInstanceCapacity]"
    assert err.retryable and isinstance(err, CloudError) and not QuotaError.retryable
    assert not issubclass(PermissionError_, PermissionError)  # the builtin stays itself


def test_free_text_failures_are_classified():
    assert classify_message("Could not launch: VcpuLimitExceeded - You have requested more vCPU capacity") is QuotaError
    assert classify_message("We currently do not have sufficient p5.48xlarge capacity") is CapacityError
    assert classify_message("something odd") is CloudError


def test_template_tags():
    t = parse_template_tags({
        "k8s.io/cluster-autoscaler/node-template/label/nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "k8s.io/cluster-autoscaler/node-template/taint/dedicated": ":NoExecute",
        "k8s.io/cluster-autoscaler/node-template/resources/hugepages-1Gi": "4Gi",
        "k8s.io/cluster-autoscaler/node-template/autoscaling-options/scaledownunneededtime": "1m",
        "k8s.io/cluster-autoscaler/node-template/weird/x": "y",
        "gangscale.io/price-per-hour": "12.5",
        "Name": "ignored",
    })
    assert t.labels == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert [(x.key, x.value, x.effect) for x in t.taints] == [("dedicated", "", "NoExecute")]
    assert t.resources == {"hugepages-1Gi": 4 * 2**30}
    assert t.price_per_hour == 12.5
    assert len(t.notes) == 1 and "weird" in t.notes[0]
    with pytest.raises(TagError):
        parse_template_tags({"k8s.io/cluster-autoscaler/node-template/label/": "x"})


def test_discovery_state():
    tags = {"k8s.io/cluster-autoscaler/enabled": "TRUE", "k8s.io/cluster-autoscaler/c1": "owned"}
    ca = (parse_auto_discovery("asg:tag=k8s.io/cluster-autoscaler/enabled,k8s.io/cluster-autoscaler/c1"),)
    assert discovery_state(tags, "c1", filters=ca) is None
    assert discovery_state(tags, "c1") == "untagged"  # CA's tags alone: not gangscale's by default
    assert "not 'true'" in discovery_state({**tags, "k8s.io/cluster-autoscaler/enabled": "0"}, "c1", filters=ca)
    own = {"gangscale.io/enabled": "true", "gangscale.io/c1": "owned"}
    assert discovery_state(own, "c1") is None and discovery_state(own, "c2") == "untagged"
    assert discovery_state({"gangscale.io/cluster": "c1"}, "c1") is None
    assert "not 'true'" in discovery_state({**own, "gangscale.io/enabled": "yes"}, "c1")
    assert "names another cluster" in discovery_state({**own, "gangscale.io/cluster": "c2"}, "c1")
    assert discovery_state({"gangscale.io/enabled": "true"}, "c1", ca_cluster_tag=False) is None  # EKS


@pytest.mark.parametrize("spec", ["asg:tag=", "mig:tag=a", "asg:a=b", "tag=a", "asg:tag=a,,b"])
def test_a_bad_auto_discovery_filter_is_one_sentence_naming_it(spec):
    with pytest.raises(TagError, match="auto-discovery"):
        parse_auto_discovery(spec)


def test_auto_discovery_filters_read_keys_and_values_as_cluster_autoscaler_does():
    f = parse_auto_discovery("asg:tag=k8s.io/cluster-autoscaler/enabled,team=ml")
    assert f.tags == (("k8s.io/cluster-autoscaler/enabled", None), ("team", "ml"))
    assert f.matches({"k8s.io/cluster-autoscaler/enabled": "x", "team": "ml"})
    assert not f.matches({"k8s.io/cluster-autoscaler/enabled": "x", "team": "web"})
    assert str(f) == "asg:tag=k8s.io/cluster-autoscaler/enabled,team=ml"


def test_provider_ids_and_eni_max_pods():
    assert instance_id_from_provider_id("aws:///us-east-1a/i-0abc123") == "i-0abc123"
    assert instance_id_from_provider_id("") == "" and instance_id_from_provider_id("i-0abc") == ""
    assert eni_max_pods({"MaximumNetworkInterfaces": 3, "Ipv4AddressesPerInterface": 10}) == 29
    assert eni_max_pods({}) == 110


def _operations_called() -> set[str]:
    """Every AWS API the adapters call, read from their source ("service", "Operation")."""
    ops = set()
    for path in (ROOT / "cloud_adapters").glob("aws_*.py"):
        for service, op in re.findall(r'"(autoscaling|ec2|eks)",\s*"([A-Z][A-Za-z]+)"', path.read_text()):
            ops.add(f"{service}:{op}")
    return ops


def _list(value):
    return value if isinstance(value, list) else [value]


def test_iam_policy_allows_every_call_and_conditions_scaling_on_the_cluster_tag():
    policy = json.loads((ROOT / "config" / "iam-policy.json").read_text())
    assert policy["Version"] == "2012-10-17"
    allowed: set[str] = set()
    for st in policy["Statement"]:
        assert st["Effect"] == "Allow" and st["Sid"] and st["Resource"]
        actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
        assert not any("*" in a for a in actions), st["Sid"]  # least privilege: no wildcards
        allowed.update(actions)
        mutating = [a for a in actions if a in ("autoscaling:SetDesiredCapacity", "autoscaling:AttachInstances",
                                                "autoscaling:TerminateInstanceInAutoScalingGroup",
                                                "eks:UpdateNodegroupConfig")]
        if mutating:  # gangscale.io/cluster=<cluster>, or gangscale.io/enabled=true (+ <cluster> in tag or ARN)
            cond = json.dumps(st.get("Condition", {}))
            by_cluster = '"aws:ResourceTag/gangscale.io/cluster": "${CLUSTER_NAME}"' in cond
            by_enabled = '"aws:ResourceTag/gangscale.io/enabled": "true"' in cond and (
                '"aws:ResourceTag/gangscale.io/${CLUSTER_NAME}": "false"' in cond
                or all("/${CLUSTER_NAME}/" in r for r in _list(st["Resource"])))
            assert by_cluster or by_enabled, st["Sid"]
    called = _operations_called()
    assert {"autoscaling:SetDesiredCapacity", "ec2:CreateFleet", "eks:UpdateNodegroupConfig"} <= called
    assert called <= allowed, sorted(called - allowed)


def test_endpoint_credentials_are_redacted_for_logs():
    from cloud_adapters.aws_common import redact_url

    assert redact_url("http://user:secret@127.0.0.1:5000/") == "http://***@127.0.0.1:5000/"
    assert redact_url("http://127.0.0.1:5000") == "http://127.0.0.1:5000"


def test_the_instance_table_read_with_libyamls_scanner_is_the_table_the_pure_python_loader_reads(tmp_path):
    import yaml

    from cloud_adapters.instance_types import load_instance_types

    table = ROOT / "config" / "aws-instance-types.yaml"
    tricky = tmp_path / "types.yaml"  # YAML 1.1 forms both loaders must read alike: octal-looking, on/off, floats
    tricky.write_text(table.read_text() + "  x1.tiny: {vcpu: 010, memoryMiB: 1_024, maxPods: 0x1f, pricePerHour: .5e1,"
                                          " gpus: 0, gpuProduct: on}\n")
    for path in (table, tricky):
        raw = yaml.load(path.read_text(), Loader=yaml.SafeLoader)["instanceTypes"]
        got = load_instance_types(path)
        assert sorted(got) == sorted(raw)
        assert all(got[n].vcpu == int(s["vcpu"]) and got[n].price_per_hour == float(s["pricePerHour"])
                   and got[n].gpu_product == str(s.get("gpuProduct", "")) for n, s in raw.items())
    assert load_instance_types(tricky)["x1.tiny"].gpu_product == "True" and load_instance_types(tricky)["x1.tiny"].vcpu == 8
