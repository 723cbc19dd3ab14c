"""Typed cloud errors: what went wrong, in terms a planner or controller can act on.

Callers branch on the class (capacity: try another group; quota: stop asking;
throttled: slow down; not-found: re-discover; permission: tell the operator),
never on AWS error-code strings. Messages carry the cloud's own text, which
never contains credentials.
"""

from __future__ import annotations

from typing import ClassVar

from cloud_adapters.strenum import StrEnum


class ErrorKind(StrEnum):
    """What kind of failure a CloudError is; the values are the strings logs, metrics and JSON show."""

    CLOUD = "cloud"
    CAPACITY = "capacity"
    QUOTA = "quota"
    THROTTLED = "throttled"
    NOT_FOUND = "not-found"
    PERMISSION = "permission"
    CONFLICT = "conflict"
    UNSUPPORTED = "unsupported"
    SIZE_LIMIT = "size-limit"


class CloudError(Exception):
    """A cloud call that did not do what was asked."""

    kind: ClassVar[ErrorKind] = ErrorKind.CLOUD
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        message: str,
        *,
        code: str = "",
        operation: str = "",
        group: str = "",
        provider: str = "",
    ):
        super().__init__(message)
        self.message = message
        self.code = code
        self.operation = operation
        self.group = group
        self.provider = provider

    def __str__(self) -> str:
        where = " ".join(x for x in (self.operation, self.group) if x)
        code = f" [{self.code}]" if self.code else ""
        return f"{self.kind}: {where + ': ' if where else ''}{self.message}{code}"


class CapacityError(CloudError):
    """The cloud has no capacity of this shape now; another group or a later retry may."""

    kind = ErrorKind.CAPACITY
    retryable = True


class QuotaError(CloudError):
    """An account limit (vCPU quota, instance limit) stops the launch until raised."""

    kind = ErrorKind.QUOTA


class ThrottledError(CloudError):
    """The API rate limit held after every retry; back off and try again."""

    kind = ErrorKind.THROTTLED
    retryable = True


class NotFoundError(CloudError):
    """The group, template or instance is gone: discover again."""

    kind = ErrorKind.NOT_FOUND


class PermissionError_(CloudError):  # noqa: N801 - the builtin PermissionError stays unshadowed
    """The credentials may not do this (IAM policy, missing or expired credentials)."""

    kind = ErrorKind.PERMISSION


class ConflictError(CloudError):
    """Another change is in flight on the group (scaling activity, update, concurrent run)."""

    kind = ErrorKind.CONFLICT
    retryable = True


class UnsupportedError(CloudError):
    """The provider cannot do this for this group (e.g. atomic launches on a plain ASG)."""

    kind = ErrorKind.UNSUPPORTED


class SizeLimitError(CloudError):
    """The request would take the group past its min or max size."""

    kind = ErrorKind.SIZE_LIMIT


# AWS error codes (EC2, Auto Scaling, EKS) by the class they mean.
_CODES: dict[type[CloudError], frozenset[str]] = {
    CapacityError: frozenset(
        {
            "InsufficientInstanceCapacity",
            "InsufficientCapacity",
            "InsufficientHostCapacity",
            "InsufficientReservedInstanceCapacity",
            "InsufficientCapacityOnHost",
            "InsufficientFreeAddressesInSubnet",
            "InsufficientFreeAddresses",
            "IpNotAvailable",
            "EniLimitReached",
            "SpotMaxPriceTooLow",
            "UnfulfillableCapacity",
            "Unsupported",
        }
    ),
    QuotaError: frozenset(
        {
            "InstanceLimitExceeded",
            "VcpuLimitExceeded",
            "LimitExceeded",
            "LimitExceededException",
            "ServiceQuotaExceededException",
            "MaxSpotInstanceCountExceeded",
            "ResourceLimitExceeded",
            "MaxFleetCountExceeded",
            "FleetLimitExceeded",
            "IamLimitExceeded",
        }
    ),
    ThrottledError: frozenset(
        {
            "Throttling",
            "ThrottlingException",
            "ThrottledException",
            "RequestThrottled",
            "RequestThrottledException",
            "RequestLimitExceeded",
            "TooManyRequestsException",
            "SlowDown",
            "BandwidthLimitExceeded",
            "EC2ThrottledException",
            "ProvisionedThroughputExceededException",
        }
    ),
    NotFoundError: frozenset(
        {
            "ResourceNotFoundException",
            "NotFoundException",
            "InvalidInstanceID.NotFound",
            "InvalidInstanceID.Malformed",
            "InvalidLaunchTemplateId.NotFound",
            "InvalidLaunchTemplateName.NotFoundException",
            "InvalidLaunchTemplateId.VersionNotFound",
            "InvalidLaunchTemplateId.Malformed",
            "InvalidSubnetID.NotFound",
            "InvalidAMIID.NotFound",
            "InvalidInstanceType",
            "AutoScalingGroupNotFound",
            "Ec2LaunchTemplateNotFound",
            "Ec2SubnetNotFound",
            "SubnetNotFound",
            "SecurityGroupNotFound",
            "K8sResourceNotFound",
        }
    ),
    PermissionError_: frozenset(
        {
            "AccessDenied",
            "AccessDeniedException",
            "UnauthorizedOperation",
            "AuthFailure",
            "UnrecognizedClientException",
            "InvalidClientTokenId",
            "ExpiredToken",
            "ExpiredTokenException",
            "SignatureDoesNotMatch",
            "OptInRequired",
            "Blocked",
            "OperationNotPermitted",
            "InvalidSignatureException",
            "MissingAuthenticationToken",
        }
    ),
    ConflictError: frozenset(
        {
            "ScalingActivityInProgress",
            "ScalingActivityInProgressFault",
            "ResourceContention",
            "ResourceContentionFault",
            "ResourceInUse",
            "ResourceInUseException",
            "ResourceInUseFault",
            "IncorrectState",
            "IncorrectInstanceState",
            "ConcurrentModificationException",
            "IdempotentParameterMismatch",
        }
    ),
}
_BY_CODE: dict[str, type[CloudError]] = {
    code: cls for cls, codes in _CODES.items() for code in codes
}

# Words in free-text failure messages (scaling activities, node-group health) by class.
_MESSAGE_HINTS: tuple[tuple[type[CloudError], tuple[str, ...]], ...] = (
    (
        QuotaError,
        (
            "instancelimitexceeded",
            "vcpulimitexceeded",
            "vcpu limit",
            "quota",
            "limit exceeded",
            "instance limit",
        ),
    ),
    (
        CapacityError,
        (
            "insufficientinstancecapacity",
            "do not have sufficient",
            "insufficient",
            "capacity-not-available",
            "unfulfillable",
            "no capacity",
            "not supported in your requested availability zone",
        ),
    ),
    (
        PermissionError_,
        ("accessdenied", "unauthorizedoperation", "not authorized", "access denied"),
    ),
)


def error_class(code: str) -> type[CloudError]:
    """The typed error for an AWS error code (CloudError when unknown)."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if (
        code.endswith(".NotFound")
        or code.endswith("NotFoundException")
        or code.endswith("NotFound")
    ):
        return NotFoundError
    return CloudError


def classify_message(text: str, code: str = "") -> type[CloudError]:
    """The typed error for a failure known only by its code and message (scaling activity, health issue)."""
    if code and code in _BY_CODE:
        return _BY_CODE[code]
    low = f"{code} {text}".lower()
    for cls, hints in _MESSAGE_HINTS:
        if any(h in low for h in hints):
            return cls
    return CloudError
