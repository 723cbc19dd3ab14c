"""Times as the Kubernetes API writes them (RFC 3339, UTC, `Z`): read into and written from epoch seconds.

`parse_time` never raises: a missing, non-string or unreadable stamp is None, so one bad object's timestamp
cannot stop a pass. `format_time` writes whole seconds, the form of `creationTimestamp` and condition times.
"""

from __future__ import annotations

from datetime import datetime, timezone


def parse_time(stamp: object) -> float | None:
    """RFC 3339 in epoch seconds; None when missing, not a string, or unreadable."""
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(epoch: float) -> str:
    """Epoch seconds as `YYYY-MM-DDTHH:MM:SSZ` (UTC)."""
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
