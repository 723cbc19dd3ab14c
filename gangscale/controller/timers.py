"""When the controller's own timers next fall due, so that a pass runs then, not at the next watch event or resync.

Invariant: a pass run at or after `next_due(...)` acts on that timer, and none of these timers falls due before
it (after the given pass). Each timer keeps its rule's own comparison: a provisioning deadline passes strictly
after its time (`lifecycle._expire`: `now > deadline`), so it is due a tick later; the cancel grace, a timed-out
gang's cooling (`lifecycle.cooling`), a group's backoff (`backoff.backed_off`), ageing (`limits.gang_limits`) and
an empty node's keep (`keep.keep_until`: the ski-rental rule's give-back time, or the fixed grace) end at their time.
Without these wake-ups a timer would be acted on only at the next change or resync (30 s), billing a node that long
past its deadline or keep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .config import ControllerConfig
from .lifecycle import GangState, Record

TICK = 0.001  # how long after a strict deadline a pass acts on it


def next_due(
    records: Iterable[Record],
    backoff: Mapping[str, float],
    empty_since: Mapping[str, float],
    cfg: ControllerConfig,
    after: float,
    empty_until: Mapping[str, float] | None = None,
) -> float | None:
    """The earliest time after `after` (the last pass) at which one of the timers falls due; None: none will.

    A record's timers are all listed whatever its state (a timer that does not apply only costs a pass);
    only the earliest is kept, so none is collected in a list (the store keeps up to `records.MAX_RECORDS`)."""
    first, second = sorted((cfg.cancel_grace_seconds, cfg.launch_failure_backoff_seconds))
    ageing, running = cfg.ageing_seconds, GangState.RUNNING
    soonest: float | None = None
    for r in records:
        since = r.since
        if (t := since + first) > after or (t := since + second) > after:  # the earlier one first
            soonest = t if soonest is None or t < soonest else soonest
        if r.deadline and (t := r.deadline + TICK) > after:
            soonest = t if soonest is None or t < soonest else soonest
        if r.state != running and (t := r.first_seen + ageing) > after:
            soonest = t if soonest is None or t < soonest else soonest
    grace = cfg.empty_node_grace_seconds
    until = (
        empty_until if empty_until is not None else {n: s + grace for n, s in empty_since.items()}
    )
    for t in (*backoff.values(), *until.values()):
        if t > after and (soonest is None or t < soonest):
            soonest = t
    return soonest


def overdue_empty(
    empty_since: Mapping[str, float],
    cfg: ControllerConfig,
    last_pass: float,
    empty_until: Mapping[str, float] | None = None,
) -> bool:
    """An empty node was past its grace at the last pass and outlived it (its removal failed, or its group is at
    minSize): no timer of its own is left, so only a resync tries it again."""
    if empty_until is not None:
        return any(empty_until.get(n, s) <= last_pass for n, s in empty_since.items())
    grace = cfg.empty_node_grace_seconds
    return any(s + grace <= last_pass for s in empty_since.values())
