"""When the controller's rules next fall due: each rule's own wake-up time, and the earliest of them.

Invariant: a pass run at or after `next_due(state, after)` acts on that rule, and no rule falls due before it
(after the pass at `after`). Each wake-up comes from its rule's module, which states its comparison once: a
provisioning deadline (`lifecycle.deadline_due_at`: strict, a tick after it), the cancel grace and a
timed-out gang's cooling (`lifecycle.grace_due_at`), a group's backoff (`backoff.backed_off`: its time),
ageing (`limits.gang_limits`: `first_seen` plus `ageingSeconds`), late launches (`lifecycle.late_due_at`), the
empty-node keep time (`scaledown.falls_due_at`), a node bought ahead's purchase deadline (strict, as a record's: it
is a spare, `keep.ahead_due_at`), the same deadline for its launches that have not registered (they go back,
`keep.ahead_calls_due_at`) and a stranded pod's grace (`gates.stranded_due_at`, from when the
pod was first seen stranded). Without these a rule would be acted on only at the next change or resync, billing a
node that long past its deadline or keep time, buying a late launch again that much later, or leaving a gang's pod
stuck that long; as Karpenter's reconcilers return `RequeueAfter`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from ..model import GangKey
from .config import ControllerConfig
from .gates import stranded_due_at
from .keep import KeepState, ahead_calls_due_at, ahead_due_at
from .lifecycle import GangState, Record, deadline_due_at, grace_due_at, late_due_at
from .scaledown import falls_due_at


class Timed(Protocol):
    """What the wake-ups read of a decide state (`decide.State`)."""

    @property
    def settings(self) -> ControllerConfig: ...
    @property
    def records(self) -> Mapping[GangKey, Record]: ...
    @property
    def backoff(self) -> Mapping[str, float]: ...
    @property
    def empty_since(self) -> Mapping[str, float]: ...
    @property
    def empty_until(self) -> Mapping[str, float]: ...
    @property
    def stranded_since(self) -> Mapping[str, float]: ...
    @property
    def keep(self) -> KeepState: ...


def record_due(rec: Record, cfg: ControllerConfig) -> tuple[float, ...]:
    """A record's wake-ups, whatever its state (one that does not apply only costs a pass): the cancel grace and
    the cooling from `since`, its deadline, its ageing while it is not running, and when its launches turn late
    (`lateLaunchSeconds`)."""
    due: tuple[float, ...] = (
        grace_due_at(rec, cfg.cancel_grace_seconds),
        grace_due_at(rec, cfg.launch_failure_backoff_seconds),
    )
    if (t := deadline_due_at(rec)) is not None:
        due += (t,)
    if rec.state != GangState.RUNNING:
        due += (rec.first_seen + cfg.ageing_seconds,)
        # only a provisioning record's launches turn late
        if (t := late_due_at(rec, cfg.late_launch_seconds)) is not None:
            due += (t,)
    return due


def next_due(state: Timed, after: float) -> float | None:
    """The earliest wake-up after `after`; None: no rule will fall due. Only the earliest is kept, so none is
    collected in a list (the store keeps up to `records.MAX_RECORDS`)."""
    cfg = state.settings
    soonest: float | None = None
    for r in state.records.values():
        for t in record_due(r, cfg):
            if t > after and (soonest is None or t < soonest):
                soonest = t
    grace, narrowed = cfg.empty_node_grace_seconds, cfg.narrowed_node_grace_seconds
    for t in (
        *state.backoff.values(),
        *(falls_due_at(s, state.empty_until.get(n), grace) for n, s in state.empty_since.items()),
        *(stranded_due_at(s, narrowed) for s in state.stranded_since.values()),
        *ahead_due_at(state.keep),
        *ahead_calls_due_at(state.keep, cfg.provisioning_deadline_seconds),
    ):
        if t > after and (soonest is None or t < soonest):
            soonest = t
    return soonest


def overdue_empty(
    empty_since: Mapping[str, float],
    empty_until: Mapping[str, float],
    cfg: ControllerConfig,
    last_pass: float,
) -> bool:
    """An empty node was past its keep time at the last pass and outlived it (its removal failed, or its group is
    at minSize): no wake-up of its own is left, so only a resync tries it again."""
    grace = cfg.empty_node_grace_seconds
    return any(
        falls_due_at(s, empty_until.get(n), grace) <= last_pass for n, s in empty_since.items()
    )
