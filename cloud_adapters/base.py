"""The one narrow interface every cloud implements (after Cluster Autoscaler's NodeGroup).

Adapters speak in `types.NodeGroup` templates and plain ints; they
know nothing of pods or the solver. A template's `current_size` is the
group's *target* size, so the snapshot counts target-minus-registered nodes
as capacity already on its way.

Every mutating cloud call an adapter makes passes `_before_mutation(op, group)`
first and `_after_mutation(op, group)` once it returned: the controller hooks
its leadership fence (and test crash points) there, so a deposed leader's
call is never sent. A scale-up may carry an idempotency `token` (derived from
the controller's write-ahead record); adapters that launch instances themselves
(aws-fleet) send it as the client token and tag the instances with it, so a
restart can find what a call launched (`loose_instances`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar, Literal

from .errors import CloudError, NotFoundError, UnsupportedError
from .types import Node, NodeGroup

InstanceState = Literal["launching", "running", "deleting", "failed"]


@dataclass(frozen=True, slots=True)
class Instance:
    """One machine of a group, as the cloud sees it (CA's cloudprovider.Instance)."""

    id: str
    group: str
    state: InstanceState
    zone: str = ""
    error: str = ""


@dataclass(frozen=True, slots=True)
class LaunchFailure:
    """A launch the cloud tried and gave up on, with the typed error it means."""

    group: str
    when: datetime | None
    error: CloudError


@dataclass(frozen=True, slots=True)
class LooseInstance:
    """An instance this controller launched that is in no group (yet): adopt it or terminate it."""

    id: str
    group: str  # the group it was launched for (its gangscale.io/node-group tag)
    token: str  # the scale-up's client token (its gangscale.io/client-token tag), '' when untagged
    launched: float  # epoch seconds
    state: str = "running"  # EC2's state name: pending or running


MutationHook = Callable[[str, str], None]  # (operation, group)


@dataclass(frozen=True, slots=True)
class SchedulerScoring:
    """The cluster's kube-scheduler `NodeResourcesFit` scoring strategy, as a managed control plane reports it.

    Either `strategy` is set (`resources` empty: none named, upstream's cpu 1 / memory 1 apply) or `unknown`
    says in one sentence why it could not be read; the planner then assumes upstream defaults and says so.
    """

    strategy: str = ""  # LeastAllocated | MostAllocated
    resources: tuple[tuple[str, int], ...] = ()  # (resource name, weight 1..100)
    unknown: str = ""
    source: str = ""  # where it was read, e.g. "EKS cluster prod (DescribeCluster)"


@dataclass(slots=True)
class Discovery:
    """The groups a provider found, and why any others were skipped."""

    groups: list[NodeGroup] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ScaleResult:
    """A size change as applied: target before and after, instances when known."""

    group: str
    before: int
    after: int
    instance_ids: tuple[str, ...] = ()

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass(frozen=True, slots=True)
class SystemReserve:
    """Capacity held back on every node beyond the EKS AMI's kube-reserved (daemonsets, OS)."""

    cpu_millis: int = 0
    memory_mib: int = 0


def instance_id_from_provider_id(provider_id: str) -> str:
    """`aws:///us-east-1a/i-0abc` -> `i-0abc`; `sim:///zone/sim-1` -> `sim-1`; '' when absent."""
    if not provider_id or "://" not in provider_id:
        return ""
    return provider_id.rstrip("/").rsplit("/", 1)[-1]


class NodeGroupProvider(ABC):
    """Discover groups, read and change their target size, report launches in flight or failed."""

    name: ClassVar[str] = "abstract"
    #: True when `increase_size` itself is all-or-nothing (every node arrives or none).
    atomic: ClassVar[bool] = False
    #: True when the provider launches instances itself before they join a group (`loose_instances`).
    launches_outside_groups: ClassVar[bool] = False

    def __init__(self) -> None:
        self._templates: dict[str, NodeGroup] = {}
        # the controller's fence; may raise to stop the call
        self.before_mutation: MutationHook | None = None
        self.after_mutation: MutationHook | None = None

    def _before_mutation(self, op: str, group: str) -> None:
        if self.before_mutation is not None:
            self.before_mutation(op, group)

    def _after_mutation(self, op: str, group: str) -> None:
        if self.after_mutation is not None:
            self.after_mutation(op, group)

    # ------------------------------------------------------------ discovery
    @abstractmethod
    def _discover(self) -> Discovery:
        """Ask the cloud for the groups; one bad group becomes a warning, not an exception."""

    def discover(self) -> Discovery:
        found = self._discover()
        self._templates = {g.name: g for g in found.groups}
        return found

    def discovered(self) -> list[NodeGroup]:
        """The groups the last `discover()` found (none before the first)."""
        return list(self._templates.values())

    def template(self, group: str) -> NodeGroup:
        """The node template of a discovered group (CA's TemplateNodeInfo)."""
        if group not in self._templates:
            self.discover()
        try:
            return self._templates[group]
        except KeyError:
            raise NotFoundError(
                f"no discovered node group named {group!r}", group=group, provider=self.name
            ) from None

    # --------------------------------------------------------------- sizing
    @abstractmethod
    def target_size(self, group: str) -> int:
        """The group's target (desired) size, read fresh from the cloud."""

    @abstractmethod
    def increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        """Raise the target by `delta`; nodes may arrive one by one, or some not at all.

        `token` identifies the request for idempotency where the cloud supports it (else ignored).
        """

    def atomic_increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        """Add `delta` nodes all together or none (CA's AtomicIncreaseSize)."""
        if self.atomic:
            return (
                self.increase_size(group, delta, token)
                if token
                else self.increase_size(group, delta)
            )
        raise UnsupportedError(
            f"{self.name} cannot add nodes atomically; use aws-fleet",
            group=group,
            provider=self.name,
        )

    @abstractmethod
    def delete_instances(self, group: str, instance_ids: list[str]) -> ScaleResult:
        """Give back these instances and lower the target by as many (CA's DeleteNodes)."""

    @abstractmethod
    def decrease_target_size(self, group: str, delta: int) -> ScaleResult:
        """Lower the target by `delta` without touching registered instances (CA's DecreaseTargetSize)."""

    # ---------------------------------------------------------- observation
    @abstractmethod
    def instances(self, group: str) -> list[Instance]:
        """The group's instances, with launches in flight and failed ones."""

    @abstractmethod
    def launch_failures(self, group: str, since: datetime) -> list[LaunchFailure]:
        """Launches that failed at or after `since`, each with its typed error."""

    @abstractmethod
    def instance_groups(self) -> dict[str, str]:
        """Instance id -> group name for every instance of every discovered group."""

    def group_of_node(self, node: Node, instance_groups: dict[str, str]) -> str | None:
        """The discovered group a Kubernetes Node belongs to, matched through spec.providerID."""
        return instance_groups.get(instance_id_from_provider_id(node.provider_id))

    # ------------------------------------------------- launched, not joined
    def loose_instances(self) -> list[LooseInstance]:
        """Instances launched for this cluster that are in no group; only aws-fleet has any."""
        return []

    def launched_tokens(self) -> dict[str, tuple[str, ...]] | None:
        """Client token -> the ids of the instances in the discovered groups that the call with that token launched
        (its `gangscale.io/client-token` tag); None when the provider does not tag its launches (an ASG's
        desired capacity names no call)."""
        return None

    def adopt(self, group: str, instance_ids: list[str]) -> ScaleResult:
        """Put loose instances into their group (raising its target by as many)."""
        raise UnsupportedError(
            f"{self.name} launches no instances outside its groups", group=group, provider=self.name
        )

    def terminate_loose(self, instance_ids: list[str]) -> None:
        """Terminate loose instances (never a group member)."""
        raise UnsupportedError(
            f"{self.name} launches no instances outside its groups", provider=self.name
        )

    def scheduler_scoring(self) -> SchedulerScoring | None:
        """The cluster's scheduler scoring strategy where the cloud runs the control plane (aws-eks); None: the
        provider cannot know it (self-managed kube-scheduler: name its file with --scheduler-config)."""
        return None

    def close(self) -> None:  # noqa: B027 - an optional hook, not abstract: most providers hold nothing
        """Release connections or persist state; the default has nothing to do."""

    @staticmethod
    def _check_delta(group: str, delta: int, provider: str) -> None:
        if not isinstance(delta, int) or isinstance(delta, bool) or delta <= 0:
            raise CloudError(
                f"size delta must be a positive integer, got {delta!r}",
                code="InvalidDelta",
                group=group,
                provider=provider,
            )
