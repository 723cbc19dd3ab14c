"""Every side effect the controller makes, as a frozen value: the decide step returns them, `execute` runs them.

Invariant: a change to the cloud, to a pod, a node, a PodGroup's status, an Event or the status ConfigMap is
one of the `Action` kinds below, and only `execute.Executor` carries them out. An action names everything
its run needs that the decide step knows; the executor adds only the pass's cluster and clock (`Context`).
`save_first(action)` says which kinds are write-ahead: the loop saves the records before it runs them, so
a crash between the save and the call leaves the client tokens that let the next leader settle the call
(`janitor.py`). The scale-up and the purchase bought ahead are such kinds.

The kinds, each with the outcome the executor reports for it (`execute.Outcome`):

- `ScaleUp` (lifecycle `ApplyScaleUp`): grow the groups by the plan's scale-up, with the records' tokens;
- `BuyAhead`: grow one group for no gang yet (keep.py, `buy_ahead`), with its own token;
- `ReturnAhead`: give back the launches bought ahead that did not register by their purchase's deadline;
- `ReleaseCapacity`: give back what a record holds (lifecycle `Release`), sparing the nodes and launches
  other gangs wait for;
- `ScaleDown`: remove empty nodes, never a group below minSize;
- `Adopt`: settle an unconfirmed call: its loose instances join their group, or are terminated;
- `TerminateLoose`: terminate orphan instances past their grace;
- `Cordon` / `Uncordon`: the scale-down's NoSchedule taint on, with the node's pods read back, and off;
- `LiftGate`: remove `gangscale.io/capacity` from a gang's pods, each narrowed to its planned node;
- `DeleteStrandedPod`: delete a released pod whose narrowed-to node is gone, so its owner recreates it;
- `WriteConditions`: the `gangscale.io/CapacityReady` condition on PodGroups whose condition changed;
- `EmitEvent`: a Kubernetes Event on a gang (`EventTarget`) or on another object (`on`);
- `PublishStatus`: the leader's status ConfigMap.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cloud_adapters.base import LooseInstance

from ..model import GangKey, Pod
from .lifecycle import ApplyScaleUp, EventTarget, GangEvent, Release
from .scaledown import EmptyNode

ScaleUp = ApplyScaleUp


@dataclass(frozen=True, slots=True)
class BuyAhead:
    """Grow `group` by `nodes` for the gangs likely to come (keep.py's `buy_ahead`), the call's `token` saved first
    with the keep rule's state (an unconfirmed call's instances outside the group are orphans, `janitor.py`)."""

    group: str
    nodes: int
    token: str
    at: float  # when it was decided: its purchase in the keep rule's state (keep.py `requests`)


@dataclass(frozen=True, slots=True)
class ReturnAhead:
    """Give back up to `nodes` launches of `group` bought ahead before `since` that did not register by their
    purchase's deadline (keep.py's `lapsed`): only launches on their way, never a registered node nor a launch of
    `keep_instances` (a gang's named one), and never more than the group has on its way beyond `counted` (the
    launches gangs and the purchases bought ahead still in time count on)."""

    group: str
    nodes: int
    since: float
    counted: int
    keep_instances: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ReleaseCapacity:
    """Give back what `release` names; never a node of `keep` (arrived for a gang still waiting for it), nor a
    launch of `keep_instances` (another gang's named launch)."""

    release: Release
    keep: frozenset[str] = frozenset()
    keep_instances: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ScaleDown:
    """Remove these empty nodes' instances, in order, never taking a group below its minSize."""

    nodes: tuple[EmptyNode, ...]


@dataclass(frozen=True, slots=True)
class Adopt:
    """Settle one unconfirmed call: its launched instances `ids` join `group` when `wanted`, else are terminated."""

    group: str
    token: str
    ids: tuple[str, ...]
    wanted: bool


@dataclass(frozen=True, slots=True)
class TerminateLoose:
    """Terminate instances that are in no group (orphans past their grace)."""

    instances: tuple[LooseInstance, ...]


@dataclass(frozen=True, slots=True)
class Cordon:
    """Taint an empty node NoSchedule for its removal, then read its pods again."""

    node: EmptyNode


@dataclass(frozen=True, slots=True)
class Uncordon:
    """Take the scale-down taint off a node that stays; `why` is for the log."""

    node: str
    why: str


@dataclass(frozen=True, slots=True)
class PodPatch:
    """One pod's gate removal: its JSON patch (gate off, and narrowed to its node when it has one)."""

    pod: Pod
    ops: tuple[Mapping[str, Any], ...]


@dataclass(frozen=True, slots=True)
class LiftGate:
    """Remove the capacity gate from one gang's pods (`gates.Lift`), each with its own patch."""

    gang: GangKey
    target: EventTarget
    why: str
    message: str
    nodes: tuple[str, ...]
    patches: tuple[PodPatch, ...]


@dataclass(frozen=True, slots=True)
class DeleteStrandedPod:
    """Delete a released pod narrowed to a node that is gone (its owner recreates it, gated again)."""

    pod: Pod
    why: str
    target: EventTarget


@dataclass(frozen=True, slots=True)
class ConditionWrite:
    gang: str
    obj: Mapping[str, Any]
    condition: Mapping[str, Any]
    mode: str


@dataclass(frozen=True, slots=True)
class WriteConditions:
    """Write these PodGroups' conditions (one fence for the batch)."""

    writes: tuple[ConditionWrite, ...]


@dataclass(frozen=True, slots=True)
class EmitEvent:
    """A Kubernetes Event on a gang (`target`) or, when `on` is set, on that object (e.g. the state ConfigMap)."""

    reason: str
    message: str
    warning: bool = False
    target: EventTarget | None = None
    on: Mapping[str, Any] | None = None
    about: str = ""  # the pod or node it reports on, when not the target (for the loop's log line)

    @classmethod
    def of(cls, e: GangEvent) -> EmitEvent:
        return cls(e.reason, e.message, e.warning, target=e.target)


@dataclass(frozen=True, slots=True)
class PublishStatus:
    data: Mapping[str, str]
    now: float


Action = (
    ScaleUp
    | BuyAhead
    | ReturnAhead
    | ReleaseCapacity
    | ScaleDown
    | Adopt
    | TerminateLoose
    | Cordon
    | Uncordon
    | LiftGate
    | DeleteStrandedPod
    | WriteConditions
    | EmitEvent
    | PublishStatus
)

# write-ahead kinds: the records are saved before they run
SAVE_FIRST: tuple[type, ...] = (ScaleUp, BuyAhead)


def save_first(action: Action) -> bool:
    """Whether the loop saves the records before running `action` (write-ahead)."""
    return isinstance(action, SAVE_FIRST)
