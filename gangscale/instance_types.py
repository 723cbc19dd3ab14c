"""EC2 instance types (capacity, price, EKS allocatable), as the planner imports them.

The table and the kube-reserved formula live in `cloud_adapters.instance_types`
(node templates need them too); this is its name on the planner's side, so
dependencies point one way (gangscale → cloud_adapters).
"""

from __future__ import annotations

from cloud_adapters.instance_types import (
    MIB,
    NVIDIA_GPU_DEVICE_CLASS,
    InstanceType,
    eks_reserved_cpu_millis,
    eks_reserved_memory_mib,
    load_instance_types,
)

__all__ = [
    "MIB",
    "NVIDIA_GPU_DEVICE_CLASS",
    "InstanceType",
    "eks_reserved_cpu_millis",
    "eks_reserved_memory_mib",
    "load_instance_types",
]
