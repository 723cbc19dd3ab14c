"""gangscale's own condition on a gang's PodGroup status, built from its record (pure).

Invariant: one condition of type `gangscale.io/CapacityReady` per PodGroup, owned by
gangscale alone (field manager `gangscale`, see `kube/podgroupstatus.py`); its `reason`
is one of five states, its `message` names the nodes requested, and its
`lastTransitionTime` moves only when the state (`reason`) or `status` does, so
`kubectl describe` says since when the gang has been in it. The builder reads the
condition already on the object, so a restarted controller keeps the old time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..model import API_PODGROUP_V1ALPHA2, API_PODGROUP_V1BETA1, API_VOLCANO, GangKey
from ..rfc3339 import format_time
from .lifecycle import GangState, Record

# a valid metav1.Condition type: DNS prefix / CamelCase name
CONDITION_TYPE = "gangscale.io/CapacityReady"
MAX_MESSAGE = 32768  # metav1.Condition.message limit

# The five states the condition shows (its `reason`, CamelCase as metav1.Condition requires).
WAITING = "WaitingForCapacity"
REQUESTED = "NodesRequested"
PROVISIONED = "Provisioned"
TIMED_OUT = "TimedOut"
RELEASED = "Released"

_STATES: dict[GangState, tuple[str, str]] = {  # record state -> (reason, status)
    GangState.PROVISIONING: (REQUESTED, "False"),
    GangState.READY: (PROVISIONED, "True"),
    GangState.RUNNING: (PROVISIONED, "True"),
    GangState.TIMED_OUT: (TIMED_OUT, "False"),
    GangState.CANCELLED: (RELEASED, "False"),
}

# Which group APIs have a `status.conditions` gangscale may write, and how:
# "apply": server-side apply (conditions is a map-list keyed by `type`: only our entry is ours);
# "patch": a JSON patch of only our entry (an atomic list in a CRD: an apply would own the whole list).
# scheduler-plugins' PodGroupStatus has no conditions, and the 1.35 Workload has no status: neither is written.
WRITE_MODE: dict[str, str] = {
    API_PODGROUP_V1ALPHA2: "apply",
    API_PODGROUP_V1BETA1: "apply",
    API_VOLCANO: "patch",
}


def state_of(rec: Record) -> tuple[str, str]:
    """(reason, status) for a record: the gang's state as the condition names it."""
    return _STATES.get(rec.state, (WAITING, "False"))


def message_of(rec: Record) -> str:
    """The nodes requested first (what `kubectl describe` readers look for), then the record's reason."""
    n = sum(rec.requested.values())
    groups = ", ".join(f"{g}={k}" for g, k in sorted(rec.requested.items()))
    head = f"nodes requested: {n}" + (f" ({groups})" if groups else "")
    return f"{head}; {rec.reason}"[:MAX_MESSAGE] if rec.reason else head


stamp = format_time  # a condition's lastTransitionTime


def current(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """gangscale's condition as it is on the object now (None when absent or the status is malformed)."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return None
    return next(
        (c for c in conditions if isinstance(c, dict) and c.get("type") == CONDITION_TYPE), None
    )


def build(rec: Record, obj: Mapping[str, Any], api: str) -> dict[str, Any]:
    """The condition for `rec` on `obj`; `lastTransitionTime` kept from the object while the state holds."""
    reason, status = state_of(rec)
    old = current(obj)
    same = old is not None and old.get("reason") == reason and old.get("status") == status
    kept = old.get("lastTransitionTime") if same and old is not None else None
    since = str(kept) if kept else stamp(rec.since)
    cond: dict[str, Any] = {
        "type": CONDITION_TYPE,
        "status": status,
        "reason": reason,
        "message": message_of(rec),
        "lastTransitionTime": since,
    }
    generation = (obj.get("metadata") or {}).get("generation")
    if WRITE_MODE.get(api) == "apply" and isinstance(generation, int):
        # metav1.Condition only; Volcano's condition has no such field
        cond["observedGeneration"] = generation
    return cond


def needs_write(cond: Mapping[str, Any], obj: Mapping[str, Any]) -> bool:
    """Whether the object lacks exactly this condition (no write when nothing changed)."""
    old = current(obj)
    return old is None or any(old.get(k) != v for k, v in cond.items())


def writable_groups(objects: list[dict[str, Any]]) -> dict[GangKey, dict[str, Any]]:
    """The PodGroups whose status gangscale writes, by gang key; malformed ones skipped."""
    out: dict[GangKey, dict[str, Any]] = {}
    for obj in objects:
        if (
            not isinstance(obj, dict)
            or obj.get("kind") != "PodGroup"
            or obj.get("apiVersion") not in WRITE_MODE
        ):
            continue
        meta = obj.get("metadata")
        if (
            isinstance(meta, dict)
            and isinstance(meta.get("name"), str)
            and isinstance(meta.get("namespace"), str)
        ):
            out[GangKey(meta["namespace"], meta["name"], obj["apiVersion"])] = obj
    return out


def due(
    records: Iterable[Record], objects: list[dict[str, Any]]
) -> list[tuple[Record, dict[str, Any], dict[str, Any], str]]:
    """(record, object, condition, write mode) for every PodGroup whose condition is missing or out of date.

    A record of an earlier generation (the PodGroup was recreated: another uid) writes nothing."""
    groups = writable_groups(objects)
    out = []
    for rec in records:
        obj = groups.get(rec.key)
        if obj is None or (obj["metadata"].get("uid") or "-") != rec.generation:
            continue
        cond = build(rec, obj, rec.api)
        if needs_write(cond, obj):
            out.append((rec, obj, cond, WRITE_MODE[rec.api]))
    return out
