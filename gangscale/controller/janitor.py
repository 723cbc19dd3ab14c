"""Instances launched outside any group: whose they are after a restart, and when an orphan goes.

Invariant: an instance gangscale launched (aws-fleet tags it with the cluster,
the group and the call's client token) that is in no group is either claimed
by a record's unconfirmed call (`Record.calls`: the restart adopts or
terminates it) or an orphan, terminated once it is older than the grace
period. Pure functions; the reconciler does the I/O through the actuator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cloud_adapters.base import LooseInstance

from ..model import GangKey
from .lifecycle import TERMINAL, Record


@dataclass(frozen=True, slots=True)
class PendingCall:
    """One record's share of a scale-up call that was sent (or about to be) and never confirmed."""

    key: GangKey
    group: str
    nodes: int
    wanted: bool  # the record's gang generation is still listed and the record still holds it


def unconfirmed_calls(
    records: Iterable[Record], listed: Mapping[GangKey, str]
) -> dict[str, list[PendingCall]]:
    """Client token -> the records' shares of that call; `listed` maps listed gangs to their generation."""
    out: dict[str, list[PendingCall]] = {}
    for rec in records:
        if not rec.calls:  # (most records: none in flight; their key is not even built)
            continue
        wanted = listed.get(rec.key) == rec.generation and rec.state not in TERMINAL
        for group, (token, n) in sorted(rec.calls.items()):
            out.setdefault(token, []).append(PendingCall(rec.key, group, n, wanted))
    return out


def launched_by(loose: Iterable[LooseInstance], token: str) -> list[str]:
    """The loose instances one call launched (by its client-token tag)."""
    return sorted(i.id for i in loose if i.token and i.token == token)


def deal(adopted: Sequence[str], shares: Sequence[PendingCall]) -> list[tuple[str, ...]]:
    """The instances one call's settlement adopted, dealt to its records' shares in order, each at most its
    nodes: a record holds the adopted instances by id."""
    out, rest = [], list(adopted)
    for s in shares:
        out.append(tuple(rest[: s.nodes]))
        rest = rest[s.nodes :]
    return out


def orphans_due(
    loose: Iterable[LooseInstance], claimed: set[str], now: float, grace: float
) -> list[LooseInstance]:
    """Loose instances no record claims, launched more than `grace` seconds ago (unknown launch time: due)."""
    return [i for i in loose if i.token not in claimed and now - i.launched >= grace]


def orphan_message(due: Iterable[LooseInstance], grace: float) -> str:
    """The OrphanInstancesTerminated Event's text: how many, which, in which groups, and why they were orphans."""
    due = list(due)
    groups = ", ".join(sorted({i.group for i in due}))
    return (
        f"terminated {len(due)} instance(s) gangscale launched for {groups} that joined no Auto Scaling group "
        f"and that no record claims, older than {grace:g}s: {', '.join(i.id for i in due)}"
    )
