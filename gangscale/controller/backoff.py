"""Backing a node group off after it failed to deliver: pure functions over `{group: until}`.

Invariant: a backed-off group cannot grow (its headroom is zero for the
planner) until its time is up, so its gangs are planned on the alternatives;
a backoff is only ever extended, never shortened, by a new failure. Which
failures back a group off is decided on the typed error (`kind`, `retryable`),
never on its text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from cloud_adapters.errors import ErrorKind

from ..apply import ExecutionReport
from ..model import NodeGroup
from .lifecycle import BackOff

# Errors that say nothing about the group: a refused size (re-planned from the next discovery) or an unknown failure.
NOT_ABOUT_THE_GROUP = frozenset({ErrorKind.SIZE_LIMIT, ErrorKind.CLOUD})


def backs_off(kind: ErrorKind, retryable: bool) -> bool:
    """A failed scale-up call backs its group off when asking the same group again soon cannot help.

    Capacity is retryable, but later: the gang goes to the alternatives first. Other retryable errors
    (throttled, conflict) are about the call, not the group: it is tried again as it is. A lasting error
    (quota, permission, not-found, unsupported) backs off, unless it says nothing about the group.
    """
    if kind is ErrorKind.CAPACITY:
        return True
    return not retryable and kind not in NOT_ABOUT_THE_GROUP


def backed_off(g: NodeGroup, backoff: Mapping[str, float], now: float) -> NodeGroup:
    """The group as the planner sees it: no headroom while it is backed off."""
    until = backoff.get(g.name, 0.0)
    if until > now:
        return replace(g, max_size=min(g.max_size, g.current_size), backed_off_until=until)
    return g


def from_scale_up(report: ExecutionReport) -> list[BackOff]:
    """Groups the scale-up itself found unable to deliver (typed errors), and launches that failed after it."""
    out = [
        BackOff(a.group, a.error_kind, _with_kind(a.error_kind.value, a.message))
        for a in report.actions
        if a.status == "failed"
        and a.error_kind is not None
        and backs_off(a.error_kind, a.retryable)
    ]
    out += [BackOff(err.group, err.kind, str(err)) for err in report.launch_failures]
    return out


def _with_kind(kind: str, message: str) -> str:
    """The message led by its kind once (a CloudError's text already starts with it)."""
    return message if message.startswith(f"{kind}:") else f"{kind}: {message}"


def extend(
    backoff: Mapping[str, float], actions: Iterable[BackOff], until: float
) -> tuple[dict[str, float], list[BackOff]]:
    """The backoffs with every action's group held until `until`; and the actions that extended one."""
    new = dict(backoff)
    extended = []
    for a in actions:
        if new.get(a.group, 0.0) < until:
            extended.append(a)
        new[a.group] = until
    return new, extended
