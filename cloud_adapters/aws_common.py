"""What every AWS adapter shares: clients with retries, error translation, cached type lookups.

Clients use botocore's `adaptive` (or `standard`) retry mode so throttling is
retried with backoff before it surfaces as a ThrottledError. Credentials come
from boto3's default chain and are never read, printed or logged here.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from .base import Discovery, NodeGroupProvider, SystemReserve
from .cache import TTLMemo
from .errors import CloudError, NotFoundError, PermissionError_, ThrottledError, error_class
from .redact import redact_text, redact_url  # noqa: F401 - redact_url is this module's name for it too
from .tags import TagError
from .template import MachineShape, TemplateError, shape_from_describe
from .types import NodeGroup

log = logging.getLogger("gangscale.cloud")

# The AWS services the adapters call (and the IAM policies in config/iam/ allow).
AwsService = Literal["autoscaling", "ec2", "eks"]

RetryMode = Literal["standard", "adaptive", "legacy"]


@dataclass(slots=True)
class AwsOptions:
    """Connection, retry, cache and wait settings for the AWS adapters."""

    region: str | None = None
    endpoint_url: str | None = None  # tests point this at a local moto server
    retry_mode: RetryMode = "adaptive"
    max_attempts: int = 8
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    groups_ttl: float = 10.0  # DescribeAutoScalingGroups / DescribeNodegroup: changes often
    templates_ttl: float = 300.0  # launch templates, launch configurations, subnets
    instance_types_ttl: float = 3600.0  # DescribeInstanceTypes: fixed per type
    reserve: SystemReserve = field(default_factory=SystemReserve)
    poll_interval: float = 5.0  # between DescribeUpdate / DescribeInstances polls
    update_timeout: float = 600.0  # EKS UpdateNodegroupConfig
    running_timeout: float = 600.0  # aws-fleet: instances running before AttachInstances
    sleep: Callable[[float], None] = time.sleep
    # CA-style `asg:tag=<key>[=<value>],...` discovery filters; empty: gangscale's own tags (tags.py)
    auto_discovery: tuple[str, ...] = ()


class AwsClients:
    """Lazily built boto3 clients sharing one session and one retry configuration."""

    def __init__(self, options: AwsOptions, session: Any | None = None):
        import boto3
        from botocore.config import Config

        self.options = options
        self._session = session or boto3.session.Session(region_name=options.region)
        self._config = Config(
            retries={"mode": options.retry_mode, "total_max_attempts": options.max_attempts},
            connect_timeout=options.connect_timeout,
            read_timeout=options.read_timeout,
            user_agent_extra="gangscale",
        )
        self._clients: dict[str, Any] = {}

    @property
    def region(self) -> str | None:
        return self.options.region or self._session.region_name

    def client(self, service: AwsService) -> Any:
        if service not in self._clients:
            from botocore.exceptions import NoRegionError

            try:
                self._clients[service] = self._session.client(
                    service,
                    endpoint_url=self.options.endpoint_url,
                    config=self._config,
                    region_name=self.options.region,
                )
            except NoRegionError:
                raise CloudError(
                    "no AWS region: pass --region or set AWS_REGION", code="NoRegion"
                ) from None
            log.debug(
                "aws client %s endpoint=%s",
                service,
                redact_url(self.options.endpoint_url) or "default",
            )
        return self._clients[service]


@contextmanager
def translated(provider: str, operation: str, group: str = "") -> Iterator[None]:
    """Turn botocore exceptions into typed CloudErrors (message and code only, never request parameters)."""
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {}) if isinstance(exc.response, dict) else {}
        code = str(err.get("Code") or "")
        message = str(err.get("Message") or code or "request failed")
        status = (
            exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if isinstance(exc.response, dict)
            else None
        )
        cls = error_class(code)
        if cls is CloudError and status == 404:
            cls = NotFoundError
        if cls is CloudError and status == 403:
            cls = PermissionError_
        raise cls(
            redact_text(message), code=code, operation=operation, group=group, provider=provider
        ) from None
    except (NoCredentialsError, PartialCredentialsError) as exc:
        raise PermissionError_(
            f"no usable AWS credentials ({type(exc).__name__})",
            code=type(exc).__name__,
            operation=operation,
            group=group,
            provider=provider,
        ) from None
    except BotoCoreError as exc:
        # botocore quotes the endpoint URL (EndpointConnectionError): drop any user:password in it
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise CloudError(
            redact_text(first)[:300],
            code=type(exc).__name__,
            operation=operation,
            group=group,
            provider=provider,
        ) from None


def aws_call(
    clients: AwsClients,
    provider: str,
    service: AwsService,
    operation: str,
    group: str = "",
    **params: Any,
) -> Any:
    """One API call by its operation name (`SetDesiredCapacity`), errors typed."""
    client = clients.client(service)
    method = getattr(client, _snake(operation))
    log.debug("%s %s %s", service, operation, group)
    with translated(provider, operation, group):
        return method(**params)


def aws_pages(
    clients: AwsClients, provider: str, service: AwsService, operation: str, key: str, **params: Any
) -> list[Any]:
    """Every item under `key` across all pages."""
    client = clients.client(service)
    out: list[Any] = []
    with translated(provider, operation):
        for page in client.get_paginator(_snake(operation)).paginate(**params):
            out.extend(page.get(key, []))
    return out


def _snake(operation: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation).lower()


def _fatal(exc: CloudError) -> bool:
    """Errors no per-type fallback can help with: missing permissions, throttling, conflicts."""
    return isinstance(exc, PermissionError_) or exc.retryable


class InstanceTypes:
    """DescribeInstanceTypes, batched and cached for `instance_types_ttl` seconds."""

    def __init__(self, clients: AwsClients, provider: str):
        self._clients = clients
        self._provider = provider
        self._memo: TTLMemo[MachineShape | str] = TTLMemo(clients.options.instance_types_ttl)

    def _describe(self, names: list[str]) -> list[dict[str, Any]]:
        return aws_call(
            self._clients, self._provider, "ec2", "DescribeInstanceTypes", InstanceTypes=names
        )["InstanceTypes"]

    def prefetch(self, names: set[str]) -> None:
        """One call for every type not cached yet; a bad name falls back to one call per type."""
        missing = sorted(n for n in names if self._memo.peek(n) is None)
        for i in range(0, len(missing), 100):
            try:
                infos = self._describe(missing[i : i + 100])
            except CloudError as exc:
                if _fatal(exc):
                    raise
                continue  # one unknown name spoils the batch: shape() asks one by one
            for info in infos:
                self._memo.put(info["InstanceType"], self._shape_or_reason(info))

    def shape(self, name: str) -> MachineShape:
        value = self._memo.get(name, lambda: self._describe_one(name))
        if isinstance(value, str):
            raise TemplateError(value)
        return value

    def smallest(self, names: Iterable[str]) -> MachineShape:
        """The smallest of a group's types: a pod that fits it fits whichever type the group launches."""
        return min((self.shape(n) for n in names), key=lambda s: s.size_key)

    def _describe_one(self, name: str) -> MachineShape | str:
        """The shape, or (cached as well) why the type cannot be used; other failures are not cached."""
        try:
            infos = self._describe([name])
        except NotFoundError as exc:
            return f"instance type {name!r} is unknown to EC2 ({exc.message})"
        except CloudError as exc:
            if _fatal(exc):
                raise
            raise TemplateError(
                f"instance type {name!r} could not be described ({exc.message})"
            ) from None
        if not infos:
            return f"instance type {name!r} is unknown to EC2"
        return self._shape_or_reason(infos[0])

    @staticmethod
    def _shape_or_reason(info: dict[str, Any]) -> MachineShape | str:
        try:
            return shape_from_describe(info)
        except TemplateError as exc:
            return str(exc)


def launch_template_instance_type(
    clients: AwsClients, provider: str, group: str, ref: dict[str, str], version: str
) -> str | None:
    """The instance type a launch template version names (`ref`: LaunchTemplateId or LaunchTemplateName)."""
    versions = aws_call(
        clients, provider, "ec2", "DescribeLaunchTemplateVersions", group, **ref, Versions=[version]
    )["LaunchTemplateVersions"]
    itype = versions[0].get("LaunchTemplateData", {}).get("InstanceType") if versions else None
    return str(itype) if itype else None


MUTATING_OPERATIONS = frozenset(
    {  # every AWS call that changes something: fenced by the controller's hook
        "SetDesiredCapacity",
        "TerminateInstanceInAutoScalingGroup",
        "CreateFleet",
        "AttachInstances",
        "TerminateInstances",
        "UpdateNodegroupConfig",
    }
)


class AwsProvider(NodeGroupProvider):
    """What every AWS provider shares: a cluster name, options, clients, the EC2 type table, and one `_call`
    that runs the controller's fence hooks around every mutating operation."""

    no_cluster_name = "a cluster name is needed (--cluster-name)"

    def __init__(
        self,
        cluster_name: str,
        options: AwsOptions | None = None,
        clients: AwsClients | None = None,
    ):
        super().__init__()
        if not cluster_name:
            raise CloudError(self.no_cluster_name, code="NoClusterName", provider=self.name)
        self.cluster_name = cluster_name
        self.options = options or AwsOptions()
        self.clients = clients or AwsClients(self.options)
        self.types = InstanceTypes(self.clients, self.name)
        self._raw: dict[str, dict[str, Any]] = {}
        self.iam_unscoped: list[
            str
        ] = []  # discovered groups without gangscale.io/cluster: IAM denies scaling

    def _call(self, service: AwsService, operation: str, group: str = "", **params: Any) -> Any:
        mutating = operation in MUTATING_OPERATIONS
        if mutating:
            self._before_mutation(operation, group)
        out = aws_call(self.clients, self.name, service, operation, group, **params)
        if mutating:
            self._after_mutation(operation, group)
        return out

    def _adopt(
        self,
        out: Discovery,
        what: str,
        name: str,
        raw: dict[str, Any],
        build: Callable[[], NodeGroup],
    ) -> None:
        """One discovered group into `out`; an odd one (an unknown AWS error code, a field missing) is skipped with
        a warning and never hides the others, an account-wide error (permissions, throttling) is raised once."""
        try:
            out.groups.append(build())
            self._raw[name] = raw
        except (PermissionError_, ThrottledError):
            raise
        except (TagError, TemplateError, CloudError, KeyError, TypeError, ValueError) as exc:
            out.warnings.append(f"{self.name} {what} {name}: skipped: {exc}")
