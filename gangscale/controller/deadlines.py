"""How long a gang's nodes may take, and how long a timed-out gang waits before it is bought for again.

Invariant: a deadline is always a positive number of seconds (a bad annotation
falls back to the configured default with a warning), and a gang that just
timed out is held `deferred` for one backoff period, so the same failing
purchase is not repeated at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from ..model import Gang, GangKey
from ..snapshot import PreDecision
from .lifecycle import GangState, Record, cooling

log = logging.getLogger("gangscale.controller")

DEADLINE_ANNOTATION = "gangscale.io/provisioning-deadline-seconds"


def _annotated(g: Gang) -> float | None:
    """The annotation's value when it is a positive number of seconds."""
    try:
        value = float(g.annotations.get(DEADLINE_ANNOTATION, ""))
    except ValueError:
        return None
    return value if value > 0 else None


def deadline_seconds(g: Gang, default: float) -> float:
    """The gang's own deadline (annotation on its group object), else the default."""
    return _annotated(g) or default


def warn_bad_deadlines(gangs: Iterable[Gang]) -> None:
    """One warning per gang whose annotation is set but not a positive number (the default applies)."""
    for g in gangs:
        raw = g.annotations.get(DEADLINE_ANNOTATION)
        if raw and _annotated(g) is None:
            log.warning(
                "bad deadline annotation; using the default",
                extra={"gang": str(g.key), "annotation": DEADLINE_ANNOTATION, "value": raw},
            )


def cooling_holds(
    records: Mapping[GangKey, Record], gangs: Iterable[Gang], now: float, backoff_seconds: float
) -> dict[GangKey, PreDecision]:
    """Gangs that timed out within the backoff period: deferred, saying when they are retried."""
    held = {}
    for g in gangs:
        rec = records.get(g.key)
        if rec is not None and cooling(rec, g.uid or "-", now, backoff_seconds):
            left = rec.since + backoff_seconds - now
            held[g.key] = PreDecision(
                GangState.DEFERRED.value, f"{rec.reason}; retrying in {left:.0f}s"
            )
    return held
