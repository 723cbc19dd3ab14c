"""A node group's template: what one new node of the group will offer to pods.

Built from what the cloud says about the instance type (vCPU, memory, GPUs,
network limits), the EKS AMI's kube-reserved formula, a configurable extra
reserve, and the node-template tags. The price comes from the bundled table
unless the group's `gangscale.io/price-per-hour` tag says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .base import SystemReserve
from .instance_types import (
    MIB,
    eks_reserved_cpu_millis,
    eks_reserved_memory_mib,
    load_instance_types,
)
from .resources import CPU, GPU, MEMORY, PODS
from .tags import PRICE_TAG, TemplateTags
from .types import NodeGroup, Taint

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
AMD_GPU = "amd.com/gpu"
_ARCH = {
    "x86_64": "amd64",
    "x86_64_mac": "amd64",
    "arm64": "arm64",
    "arm64_mac": "arm64",
    "i386": "386",
}


class TemplateError(ValueError):
    """A group whose template cannot be built (unknown type, no price, nothing allocatable)."""


@dataclass(frozen=True, slots=True)
class MachineShape:
    """An instance type as a node sees it."""

    name: str
    vcpu: int
    memory_mib: int
    max_pods: int
    gpus: int = 0
    gpu_product: str = ""
    gpu_resource: str = GPU
    arch: str = "amd64"

    @property
    def size_key(self) -> tuple[int, int, int]:
        return (self.gpus, self.vcpu, self.memory_mib)


def eni_max_pods(network: Mapping[str, Any]) -> int:
    """The VPC CNI's max pods without prefix delegation: ENIs * (IPs per ENI - 1) + 2."""
    enis = int(network.get("MaximumNetworkInterfaces") or 0)
    ips = int(network.get("Ipv4AddressesPerInterface") or 0)
    if enis <= 0 or ips <= 1:
        return 110
    return enis * (ips - 1) + 2


def shape_from_describe(info: Mapping[str, Any]) -> MachineShape:
    """A DescribeInstanceTypes entry as a MachineShape; the bundled table wins for max pods and GPU names."""
    name = str(info["InstanceType"])
    vcpu = int(info.get("VCpuInfo", {}).get("DefaultVCpus") or 0)
    memory = int(info.get("MemoryInfo", {}).get("SizeInMiB") or 0)
    if vcpu <= 0 or memory <= 0:
        raise TemplateError(f"instance type {name}: the cloud reports no vCPU or memory")
    gpus, product, resource = 0, "", GPU
    for gpu in info.get("GpuInfo", {}).get("Gpus", []) or []:
        gpus += int(gpu.get("Count") or 0)
        maker = str(gpu.get("Manufacturer") or "")
        product = product or "-".join(x for x in (maker, str(gpu.get("Name") or "")) if x).replace(
            " ", "-"
        )
        resource = AMD_GPU if maker.upper() == "AMD" else GPU
    archs = info.get("ProcessorInfo", {}).get("SupportedArchitectures") or ["x86_64"]
    known = load_instance_types().get(name)
    max_pods = known.max_pods if known else eni_max_pods(info.get("NetworkInfo", {}))
    if known and known.gpu_product and gpus:
        product = known.gpu_product
    return MachineShape(
        name, vcpu, memory, max_pods, gpus, product, resource, _ARCH.get(str(archs[0]), "amd64")
    )


def table_price(instance_type: str) -> float | None:
    known = load_instance_types().get(instance_type)
    return known.price_per_hour if known else None


def build_template(
    name: str,
    shape: MachineShape,
    *,
    min_size: int,
    max_size: int,
    target_size: int,
    tags: TemplateTags,
    reserve: SystemReserve,
    zones: list[str],
    region: str | None,
    labels: Mapping[str, str] | None = None,
    taints: list[Taint] | None = None,
) -> NodeGroup:
    """One group's NodeGroup; raise TemplateError when it cannot be planned for."""
    if min_size < 0 or max_size < min_size:
        raise TemplateError(f"sizes are inconsistent (min {min_size}, max {max_size})")
    price = tags.price_per_hour if tags.price_per_hour is not None else table_price(shape.name)
    if price is None:
        raise TemplateError(
            f"instance type {shape.name} has no price in config/aws-instance-types.yaml; "
            f"tag the group with {PRICE_TAG}"
        )
    alloc = _allocatable(shape, tags, reserve)
    node_labels = _node_labels(shape, zones, region, labels, tags)
    all_taints: dict[tuple[str, str], Taint] = {}
    for t in [*(taints or []), *tags.taints]:
        all_taints[(t.key, t.effect)] = t
    return NodeGroup(
        name=name,
        instance_type=shape.name,
        price_per_hour=float(price),
        min_size=min_size,
        max_size=max_size,
        current_size=target_size,
        allocatable=alloc,
        labels=node_labels,
        taints=tuple(all_taints.values()),
    )


def _allocatable(shape: MachineShape, tags: TemplateTags, reserve: SystemReserve) -> dict[str, int]:
    """What a node of this shape offers pods: EKS's kube and system reserve and ours taken off, a resources/<name>
    tag winning (as in CA); TemplateError when nothing is left."""
    alloc = {
        CPU: shape.vcpu * 1000 - eks_reserved_cpu_millis(shape.vcpu) - reserve.cpu_millis,
        MEMORY: (shape.memory_mib - eks_reserved_memory_mib(shape.max_pods) - reserve.memory_mib)
        * MIB,
        PODS: shape.max_pods,
    }
    if shape.gpus:
        alloc[shape.gpu_resource] = shape.gpus
    alloc.update(tags.resources)  # an explicit resources/<name> tag wins, as in CA
    if alloc[CPU] <= 0 or alloc[MEMORY] <= 0 or alloc[PODS] <= 0:
        raise TemplateError(
            f"instance type {shape.name}: nothing left to allocate after the system reserve"
        )
    return alloc


def _node_labels(
    shape: MachineShape,
    zones: list[str],
    region: str | None,
    labels: Mapping[str, str] | None,
    tags: TemplateTags,
) -> dict[str, str]:
    """The well-known labels a node of the group gets (type, arch, os, GPU, region, the zone when it has one),
    then the group's own labels and its label tags."""
    node_labels = {
        INSTANCE_TYPE_LABEL: shape.name,
        "kubernetes.io/arch": shape.arch,
        "kubernetes.io/os": "linux",
    }
    if shape.gpus and shape.gpu_resource == GPU:
        node_labels[GPU_PRODUCT_LABEL] = shape.gpu_product
        node_labels[GPU_COUNT_LABEL] = str(shape.gpus)
    if region:
        node_labels[REGION_LABEL] = region
    if len(set(zones)) == 1:
        node_labels[ZONE_LABEL] = zones[0]
    node_labels.update(labels or {})
    node_labels.update(tags.labels)
    return node_labels
