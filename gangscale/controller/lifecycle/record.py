"""One gang generation's record (persisted) and the pure rules over records alone: pod prints, client
tokens, what a record holds, and the deadline rule stated once (`past_deadline`, `spares_expired`)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ...model import GangKey
from .states import GangState


@dataclass(frozen=True, slots=True)
class Record:
    """One gang generation's provisioning, as the controller last saw it (persisted as JSON), keyed by its gang."""

    key: GangKey
    generation: str  # PodGroup uid (or pod uid for a lone pod); a new one restarts provisioning
    state: GangState
    reason: str
    since: float  # when the state was entered (epoch seconds)
    first_seen: float = 0.0  # when the gang was first pending (queue latency)
    # node group -> nodes bought for it and not used yet (running: those it started without, `on_applied._spare`)
    requested: Mapping[str, int] = field(default_factory=dict)
    requested_at: float = 0.0
    deadline: float = 0.0  # give back unused nodes when the gang is not running by then
    booked_at: float = 0.0  # when the purchase `deadline` counts from was booked (a re-booking keeps both); 0: unknown
    # the pods this generation was planned for, as prints of their uids (`pod_prints`; whole uids in the records
    # of older controllers): enough to tell a gang whose pods were all replaced (`current_record`)
    pods: tuple[str, ...] = ()
    attempt: int = 0  # scale-ups booked for this generation (part of their client tokens)
    # group -> (token, nodes): unconfirmed
    calls: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    # write-ahead: group -> (desired capacity below this record's share, nodes booked) for a cloud call whose
    # outcome is not recorded yet; settled by `Confirmed` (a restart) or by `Applied` (the same pass)
    unconfirmed: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # group -> names of the registered nodes of `requested` that arrived for this record (never more than
    # requested there): reserved for the gang while it waits, so no later plan gives them away
    nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # group -> instance ids of its launches still on their way, when the cloud named them (aws-fleet, simulated;
    # an ASG does not): an arrival, a failed launch or a give-back of one of them is this record's and no other's
    launches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # group -> how many of its launches on their way were judged late (`on_overdue`) and covered by a new launch;
    # set once per purchase: no plan counts on them, and whichever launches arrive first serve the gang
    covered: Mapping[str, int] = field(default_factory=dict)
    # the unit of new nodes this gang shares with other gangs (`shares.unit_id`), '' when none: the unit's nodes are
    # reserved for all its gangs, whichever record holds them, and its gangs share one deadline
    shared: str = ""

    @property
    def gang(self) -> str:
        """The gang as "namespace/name/api" (`str(GangKey)`): the stored records' and the client tokens' form."""
        return str(self.key)

    @property
    def namespace(self) -> str:
        return self.key.namespace

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def api(self) -> str:
        return self.key.api

    def to_json(self) -> dict[str, Any]:
        """The stored form: the key as its four strings (`gang`, `namespace`, `name`, `api`), as always written."""
        out: dict[str, Any] = {
            "gang": self.gang,
            "namespace": self.namespace,
            "name": self.name,
            "api": self.api,
            "generation": self.generation,
            "state": self.state.value,
            "reason": self.reason,
            "since": self.since,
            "first_seen": self.first_seen,
            "requested": dict(self.requested),
            "requested_at": self.requested_at,
            "deadline": self.deadline,
            "pod_prints": "".join(pod_prints(self.pods)),
        }
        if self.attempt:  # written only when set: records of older controllers round-trip unchanged
            out["attempt"] = self.attempt
        if self.calls:
            out["calls"] = {g: [t, n] for g, (t, n) in self.calls.items()}
        if self.unconfirmed:
            out["unconfirmed"] = {g: [base, n] for g, (base, n) in self.unconfirmed.items()}
        if self.nodes:
            out["nodes"] = {g: list(names) for g, names in self.nodes.items()}
        if self.launches:
            out["launches"] = {g: list(ids) for g, ids in self.launches.items()}
        if self.covered:
            out["covered"] = dict(self.covered)
        if self.booked_at:
            out["booked_at"] = self.booked_at
        if self.shared:
            out["shared"] = self.shared
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Record:
        known = {k: raw[k] for k in cls.__slots__ if k in raw}
        known["key"] = GangKey(str(raw["namespace"]), str(raw["name"]), str(raw["api"]))
        known["state"] = GangState(known.get("state", "new"))
        known["requested"] = {str(g): int(n) for g, n in dict(known.get("requested") or {}).items()}
        prints = str(
            raw.get("pod_prints") or ""
        )  # "pods" (whole uids): records of older controllers
        known["pods"] = tuple(
            prints[i : i + PRINT_DIGITS] for i in range(0, len(prints), PRINT_DIGITS)
        ) or pod_prints(str(p) for p in known.get("pods") or ())
        known["attempt"] = int(known.get("attempt") or 0)
        known["calls"] = {
            str(g): (str(c[0]), int(c[1])) for g, c in dict(known.get("calls") or {}).items()
        }
        known["unconfirmed"] = {
            str(g): (int(v[0]), int(v[1])) for g, v in dict(known.get("unconfirmed") or {}).items()
        }
        known["nodes"] = {
            str(g): tuple(str(n) for n in names)
            for g, names in dict(known.get("nodes") or {}).items()
        }
        known["launches"] = {
            str(g): tuple(str(i) for i in ids)
            for g, ids in dict(known.get("launches") or {}).items()
        }
        known["covered"] = {str(g): int(n) for g, n in dict(known.get("covered") or {}).items()}
        known["shared"] = str(known.get("shared") or "")
        return cls(**known)

    def arrived(self, group: str) -> int:
        """How many of the nodes bought for it in `group` have registered (and are attributed to it)."""
        return len(self.nodes.get(group, ()))

    def late(self, group: str) -> int:
        """Its launches on their way in `group` that a cover replaced (never more than are on their way)."""
        return max(
            0, min(self.covered.get(group, 0), self.requested.get(group, 0) - self.arrived(group))
        )

    def unnamed(self, group: str) -> int:
        """Its launches on their way in `group` whose instance the cloud did not name (attributed by count)."""
        return (
            self.requested.get(group, 0) - self.arrived(group) - len(self.launches.get(group, ()))
        )


PRINT_DIGITS = 12  # 48 bits: two disjoint 1,024-pod sets share a print with odds of 4 in a billion


@lru_cache(maxsize=1 << 17)
def pod_print(uid: str) -> str:
    """A pod uid as a record saves it: 12 hex digits of its sha256, a third of the uid's 36 characters (a record
    of a large gang lists every pod; the overlap test of `pods_overlap` needs no more). A print maps to itself."""
    if len(uid) == PRINT_DIGITS and all(c in "0123456789abcdef" for c in uid):
        return uid
    return hashlib.sha256(uid.encode()).hexdigest()[:PRINT_DIGITS]


def pod_prints(uids: Iterable[str]) -> tuple[str, ...]:
    """A record's pods as it keeps them: their prints, sorted, each once."""
    return tuple(sorted({pod_print(u) for u in uids}))


def pods_overlap(pending: Iterable[str], recorded: Iterable[str]) -> bool:
    """Any pending pod (uid) among a record's pods (uids, or prints once loaded)."""
    rec = {pod_print(p) for p in recorded}
    return any(pod_print(p) in rec for p in pending)


def client_token(members: Iterable[Record], group: str, unit: Mapping[str, int]) -> str:
    """The idempotency token of one scale-up call: the same records and attempt always give the same token."""
    basis = ";".join(sorted(f"{r.gang}#{r.generation}#{r.attempt}" for r in members))
    basis += "|" + group + "|" + ",".join(f"{g}={n}" for g, n in sorted(unit.items()))
    return "gangscale-" + hashlib.sha256(basis.encode()).hexdigest()[:40]


Records = Mapping[GangKey, Record]


def holds(rec: Record) -> bool:
    """The record owns capacity (nodes bought for it, not yet used or given back), whatever its state."""
    return bool(rec.requested)


def cooling(rec: Record | None, generation: str, now: float, backoff_seconds: float) -> bool:
    """A gang that just timed out waits one backoff period before it is bought for again."""
    return (
        rec is not None
        and rec.state == GangState.TIMED_OUT
        and rec.generation == generation
        and now - rec.since < backoff_seconds
    )


TICK = 0.001  # how long after a strict deadline a pass acts on it


def past_deadline(deadline: float, now: float) -> bool:
    """The deadline rule, stated once: a purchase's deadline (0: none) has passed strictly after its time."""
    return bool(deadline) and now > deadline


def deadline_due_at(rec: Record) -> float | None:
    """The first time a pass finds the record past its deadline (`past_deadline`); None: it has none."""
    return rec.deadline + TICK if rec.deadline else None


def grace_due_at(rec: Record, grace: float) -> float:
    """When a grace counted from the record's state change ends (`on_expire`'s cancel grace, `cooling`): at its
    time, as both compare `now - since` with `>=` or `<`."""
    return rec.since + grace


def spares_expired(rec: Record, now: float) -> bool:
    """A running gang still holding what it started without, past its purchase's deadline: those go back now
    (`on_expire._spares_due`, the scale-down, and no plan counts on them: `reservations.expired_spares`)."""
    return rec.state == GangState.RUNNING and holds(rec) and past_deadline(rec.deadline, now)


def spare_until(records: Iterable[Record]) -> dict[str, float]:
    """Node name -> the deadline of the purchase it came from, for the nodes a running gang did not use (each
    goes at `past_deadline` of it)."""
    return {
        name: rec.deadline
        for rec in records
        if rec.state == GangState.RUNNING and rec.deadline
        for names in rec.nodes.values()
        for name in names
    }


def named_launches(records: Iterable[Record]) -> set[str]:
    """The instance ids of the records' launches the cloud named that have not arrived (`Record.launches`)."""
    return {i for r in records for ids in r.launches.values() for i in ids}
