"""EC2 instance types: capacity, price and the allocatable kubelet reports.

The table is data (`config/aws-instance-types.yaml`); the kube-reserved
formula is the EKS AMI's, so a template matches what a real node advertises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

try:  # libyaml's scanner: the same documents as the pure-Python SafeLoader, ~7x faster (~20 ms of every plan)
    from yaml import CSafeLoader as _SafeLoader
except ImportError:  # pragma: no cover - libyaml missing
    from yaml import SafeLoader as _SafeLoader  # type: ignore[assignment]

from .config_dir import config_dir
from .resources import CPU, GPU, MEMORY, PODS

MIB = 2**20
# NVIDIA's DRA driver (github.com/NVIDIA/k8s-dra-driver-gpu) publishes every full GPU as a device of
# driver `gpu.nvidia.com`, requested through the DeviceClass of the same name (MIG slices use
# `mig.nvidia.com`, not modelled). A table entry with `gpus: N` offers N such devices to DRA claims when the
# catalog opts in (`devices: {gpu.nvidia.com: auto}`); otherwise its GPUs are the device plugin's `nvidia.com/gpu`.
NVIDIA_GPU_DEVICE_CLASS = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class InstanceType:
    name: str
    vcpu: int
    memory_mib: int
    max_pods: int
    price_per_hour: float
    gpus: int = 0
    gpu_product: str = ""

    def allocatable(self) -> dict[str, int]:
        alloc = {
            CPU: self.vcpu * 1000 - eks_reserved_cpu_millis(self.vcpu),
            MEMORY: (self.memory_mib - eks_reserved_memory_mib(self.max_pods)) * MIB,
            PODS: self.max_pods,
        }
        if self.gpus:
            alloc[GPU] = self.gpus
        return alloc

    def devices(self) -> dict[str, int]:
        """DRA devices per DeviceClass a node of this type offers (NVIDIA GPUs: `gpu.nvidia.com`)."""
        if self.gpus and self.gpu_product.startswith("NVIDIA"):
            return {NVIDIA_GPU_DEVICE_CLASS: self.gpus}
        return {}

    def labels(self) -> dict[str, str]:
        labels = {
            "node.kubernetes.io/instance-type": self.name,
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
        }
        if self.gpus:
            labels["nvidia.com/gpu.product"] = self.gpu_product
            labels["nvidia.com/gpu.count"] = str(self.gpus)
        return labels


def eks_reserved_cpu_millis(vcpu: int) -> int:
    """kube-reserved CPU on the EKS AMI: 6% of core 1, 1% of core 2, 0.5% of 3-4, 0.25% above."""
    steps = ((1, 60.0), (1, 10.0), (2, 5.0))
    left, reserved = vcpu, 0.0
    for cores, millis in steps:
        take = min(left, cores)
        reserved += take * millis
        left -= take
    reserved += max(left, 0) * 2.5
    return math.ceil(reserved)


def eks_reserved_memory_mib(max_pods: int) -> int:
    """kube-reserved memory (255Mi + 11Mi per pod) plus the 100Mi hard eviction threshold."""
    return 255 + 11 * max_pods + 100


@lru_cache(maxsize=4)
def load_instance_types(path: Path | None = None) -> dict[str, InstanceType]:
    raw = yaml.load(
        (path or config_dir() / "aws-instance-types.yaml").read_text(), Loader=_SafeLoader
    )
    out = {}
    for name, spec in raw["instanceTypes"].items():
        out[name] = InstanceType(
            name=name,
            vcpu=int(spec["vcpu"]),
            memory_mib=int(spec["memoryMiB"]),
            max_pods=int(spec["maxPods"]),
            price_per_hour=float(spec["pricePerHour"]),
            gpus=int(spec.get("gpus", 0)),
            gpu_product=str(spec.get("gpuProduct", "")),
        )
    return out
