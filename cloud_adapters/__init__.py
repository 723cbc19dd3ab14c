"""Cloud adapters: one narrow NodeGroupProvider interface; AWS (ASG, EKS, EC2 Fleet) and a simulated cloud.

Adapters take and return `gangscale.model.NodeGroup` templates and plain
ints. They never import the solver or Kubernetes clients.
"""

from .base import (
    Discovery,
    Instance,
    LaunchFailure,
    NodeGroupProvider,
    ScaleResult,
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
    "SizeLimitError",
    "SystemReserve",
    "ThrottledError",
    "UnsupportedError",
    "create_provider",
    "instance_id_from_provider_id",
]
