"""Cloud adapters: one narrow NodeGroupProvider interface; AWS (ASG, EKS, EC2 Fleet) and a simulated cloud.

Adapters take and return `cloud_adapters.types.NodeGroup` templates (which the
planner re-exports as `gangscale.model.NodeGroup`) and plain ints. This is the
lowest package: it imports nothing from gangscale or benchmarks.
"""

from .base import (
    Discovery,
    Instance,
    LaunchFailure,
    NodeGroupProvider,
    ScaleResult,
    SchedulerScoring,
    SystemReserve,
    instance_id_from_provider_id,
)
from .errors import (
    CapacityError,
    CloudError,
    ConflictError,
    ErrorKind,
    NotFoundError,
    PermissionError_,
    QuotaError,
    SizeLimitError,
    ThrottledError,
    UnsupportedError,
)
from .registry import PROVIDERS, create_provider

__all__ = [
    "PROVIDERS",
    "CapacityError",
    "CloudError",
    "ConflictError",
    "Discovery",
    "ErrorKind",
    "Instance",
    "LaunchFailure",
    "NodeGroupProvider",
    "NotFoundError",
    "PermissionError_",
    "QuotaError",
    "ScaleResult",
    "SchedulerScoring",
    "SizeLimitError",
    "SystemReserve",
    "ThrottledError",
    "UnsupportedError",
    "create_provider",
    "instance_id_from_provider_id",
]
