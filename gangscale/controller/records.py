"""What the controller bought, for whom, and until when — kept in the cluster.

A restart must not buy twice or forget a deadline, so the provisioning
records live in ConfigMaps (optimistic concurrency on resourceVersion), not
only in memory. Capacity on its way is also visible from the cloud itself
(target minus registered nodes), which the planner counts as upcoming nodes.

Layout: one ConfigMap per gang record, named `<state>-<16 hex digits of sha256(gang)>` (deterministic from the
GangKey), labelled `gangscale.io/records-of=<state>` so one labelled list reads them all, its record in
`data["record.json"]` (the record's JSON, as `Record.to_json` writes it); and the ConfigMap `<state>` itself,
which holds the node groups' backoffs (`backoff.json`) and what the empty-node keep rule has seen (`keep.json`:
its arrivals of the last window, measured boots and the nodes that have not run a pod). A ConfigMap's data may not
exceed 1 MiB (k8s.io/kubernetes pkg/apis/core/validation `ValidateConfigMap`, `core.MaxSecretSize`): one object for
every record would pass it at 26 gangs of 1,024 pods, and a refused save stops every scale-up (it is written before
each cloud call). One object per record keeps each far below it whatever the gang count, and a save writes only the
records that changed.

Older releases kept every record in the `<state>` ConfigMap's `records.json`. `StateStore.load` migrates it:
each record to its own ConfigMap, then `records.json` is dropped; a crash part way leaves `records.json` in place,
and the next load does it again (every step is idempotent), so no in-flight booking is lost on upgrade.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.lister import list_all
from ..kube.refs import CONFIGMAPS
from ..model import GangKey
from .keep import KeepState, read_json, to_json
from .lifecycle import TERMINAL, GangState, Record

__all__ = ["ControllerState", "Record", "StateConflict", "StateStore", "read_layout", "record_name"]

log = logging.getLogger("gangscale.controller")
AUDIT_SECONDS = 24 * 3600  # terminal records are kept this long for audit, then dropped
MAX_RECORDS = 1000  # records kept beyond those holding capacity (which are all kept), the oldest dropped first
KEPT_WITHOUT_CAPACITY = (
    GangState.TIMED_OUT,
    GangState.CANCELLED,
)  # for audit, even when holding nothing
RECORD_KEY = "record.json"  # a record ConfigMap's one data key
BACKOFF_KEY = "backoff.json"  # in the `<state>` ConfigMap
KEEP_KEY = "keep.json"  # in the `<state>` ConfigMap: what the empty-node keep rule has seen (keep.py `to_json`)
# every record, in the `<state>` ConfigMap (the single-ConfigMap layout)
LEGACY_KEY = "records.json"
STORE_LABEL = "gangscale.io/records-of"  # value: the state ConfigMap's name (its digest when over 63 characters)
# the gang's namespace: `kubectl get cm -l` per tenant
NAMESPACE_LABEL = "gangscale.io/gang-namespace"
# the gang's "namespace/name/api" (too long for a label value)
GANG_ANNOTATION = "gangscale.io/gang"
_LABEL_VALUE = re.compile(
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)  # a label value (63 at most)
# the store's key of an unreadable record ConfigMap: "?" + its name (never a gang's key)
UNREADABLE = "?"
_PARSE_ERRORS = (orjson.JSONDecodeError, TypeError, ValueError, AttributeError, KeyError)


@dataclass(slots=True)
class ControllerState:
    """The leader's memory between passes: records by gang, backoffs by group, what the keep rule has seen (held
    by the reconciler)."""

    records: dict[GangKey, Record] = field(default_factory=dict)
    # node group -> backed off until (epoch)
    backoff: dict[str, float] = field(default_factory=dict)
    keep: KeepState = field(default_factory=KeepState)  # the empty-node keep rule's (keep.py)

    def prune(self, now: float) -> None:
        for key, r in list(self.records.items()):
            if r.state in TERMINAL and now - r.since > AUDIT_SECONDS:
                del self.records[key]
        if (
            len(self.records) > MAX_RECORDS
        ):  # the oldest of those holding nothing: a booking is never forgotten
            idle = sorted(
                (k for k, r in self.records.items() if not r.requested),
                key=lambda k: self.records[k].since,
            )
            for key in idle[: len(self.records) - MAX_RECORDS]:
                del self.records[key]
        self.backoff = {g: t for g, t in self.backoff.items() if t > now}


class StateConflict(KubeError):
    """A write of the state lost a race (409): another writer changed it since this replica read it."""


def kept(state: ControllerState) -> list[Record]:
    """What a save persists: records holding capacity, a shared unit's gangs while it lasts (a zero share rides
    the unit), and timed-out or cancelled ones kept for audit.

    Gangs that bought nothing are re-derived from the cluster on the next pass."""
    return [
        r
        for r in state.records.values()
        if r.requested or r.state in KEPT_WITHOUT_CAPACITY or (r.shared and r.state not in TERMINAL)
    ]


def record_name(store: str, gang: str) -> str:
    """The ConfigMap name of a gang's record: the same gang always gives the same name (a valid DNS subdomain)."""
    return f"{store[:236]}-{hashlib.sha256(gang.encode()).hexdigest()[:16]}"


def store_label(store: str) -> str:
    """The `gangscale.io/records-of` value of a store's record ConfigMaps (label values stop at 63 characters)."""
    return store if len(store) <= 63 else hashlib.sha256(store.encode()).hexdigest()[:32]


def record_text(rec: Record) -> str:
    return orjson.dumps(rec.to_json()).decode()


@dataclass(slots=True)
class Stored:
    """One record ConfigMap as last read or written: its name, resourceVersion and record (normalised JSON)."""

    name: str
    rv: str
    text: str


@dataclass(slots=True)
class Layout:
    """What the cluster holds for one store, as read (`read_layout`)."""

    index: dict[str, Any] | None  # the `<state>` ConfigMap; None: absent
    objects: dict[str, Stored] = field(default_factory=dict)  # record ConfigMaps by gang
    records: dict[str, Record] = field(default_factory=dict)  # their records by gang
    # record ConfigMaps that hold no readable record
    unreadable: list[Stored] = field(default_factory=list)
    # the single-ConfigMap layout's records.json; None: not there
    legacy: dict[str, Record] | None = None
    legacy_error: str = ""  # why records.json could not be read

    @property
    def current(self) -> dict[str, Record]:
        """The records in force: records.json while it exists (migration not finished: it is the whole state)."""
        return self.legacy if self.legacy is not None else self.records


def _legacy(layout: Layout) -> None:
    data = (layout.index or {}).get("data") or {}
    if LEGACY_KEY not in data:
        return
    try:
        raw = orjson.loads(data[LEGACY_KEY])
        layout.legacy = {r.gang: r for r in (Record.from_json(v) for v in raw.values())}
    except _PARSE_ERRORS as exc:
        layout.legacy_error = f"{type(exc).__name__}: {exc}"


def read_layout(client: KubeClient, namespace: str, name: str) -> Layout:
    """The store's ConfigMaps, read only; API errors are raised (KubeError), unreadable records listed."""
    try:
        layout = Layout(client.get(CONFIGMAPS.path(namespace, name)))
    except KubeError as exc:
        if exc.status != 404:
            raise
        layout = Layout(None)
    listed = list_all(
        client, CONFIGMAPS, namespace, label_selector=f"{STORE_LABEL}={store_label(name)}"
    )
    for obj in listed.items:
        meta = obj.get("metadata") or {}
        name, rv = str(meta.get("name")), str(meta.get("resourceVersion") or "")
        try:
            rec = Record.from_json(orjson.loads((obj.get("data") or {})[RECORD_KEY]))
        except _PARSE_ERRORS:
            layout.unreadable.append(Stored(name, rv, ""))
            continue
        layout.records[rec.gang] = rec
        layout.objects[rec.gang] = Stored(name, rv, record_text(rec))
    _legacy(layout)
    return layout


def _backoff(index: dict[str, Any] | None) -> tuple[dict[str, float], str]:
    text = ((index or {}).get("data") or {}).get(BACKOFF_KEY, "{}")
    try:
        return {str(k): float(v) for k, v in orjson.loads(text).items()}, text
    except _PARSE_ERRORS:
        return {}, text


def _keep(index: dict[str, Any] | None) -> tuple[KeepState, str | None]:
    """The keep rule's saved state and its text (None: not saved; unreadable: an empty state, and a warning)."""
    text = ((index or {}).get("data") or {}).get(KEEP_KEY)
    if not text:
        return KeepState(), text
    try:
        state = read_json(orjson.loads(text))
    except _PARSE_ERRORS:
        state = None
    if state is None:
        log.warning(
            "keep.json of the state ConfigMap is unreadable: the empty-node keep rule starts afresh",
            extra={"configmap": str(((index or {}).get("metadata") or {}).get("name", ""))},
        )
    return state or KeepState(), text


class StateStore:
    """The ControllerState in one ConfigMap per record (and one for the backoffs); a write that finds the object
    changed since this replica read or wrote it raises `StateConflict` (409)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        fence: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.fence = fence  # checked before the migration's writes (a save is fenced by its caller)
        self._objects: dict[str, Stored] = {}
        self._index_rv = ""  # "" while the `<state>` ConfigMap does not exist
        self._backoff_text: str | None = None
        self._keep_text: str | None = None
        # ConfigMap writes (create, update, delete) made: a save writes only what changed
        self.writes = 0

    def load(self) -> ControllerState:
        """The saved state, the single-ConfigMap layout migrated first; an unreadable record is skipped (the cloud
        and the cluster show what it held), an API error raised."""
        layout = read_layout(self.client, self.namespace, self.name)
        for (
            bad
        ) in layout.unreadable:  # replaced by its gang's next record, or deleted by the next save
            log.warning(
                "a record ConfigMap holds no readable record: skipped",
                extra={"configmap": bad.name},
            )
            layout.objects[UNREADABLE + bad.name] = bad
        if layout.legacy is not None or layout.legacy_error:
            self._migrate(layout)
        self._objects = layout.objects
        self._index_rv = str(
            ((layout.index or {}).get("metadata") or {}).get("resourceVersion") or ""
        )
        backoff, self._backoff_text = _backoff(layout.index)
        keep, self._keep_text = _keep(layout.index)
        if layout.index is None:
            self._backoff_text = None
        return ControllerState({r.key: r for r in layout.records.values()}, backoff, keep)

    def save(self, state: ControllerState) -> None:
        """Persist what a restart needs (`kept`): each changed record's ConfigMap created or updated, those of
        records no longer kept deleted, the backoffs when they changed. Nothing unchanged is written."""
        state.prune(time.time())
        wanted = {r.gang: r for r in kept(state)}
        for gang, rec in sorted(wanted.items()):
            text = record_text(rec)
            stored = self._stored(self._objects, gang)
            if stored is None:
                self._objects[gang] = self._create(rec, text)
            elif stored.text != text:
                self._objects[gang] = self._update(rec, stored, text)
        for gang in sorted(set(self._objects) - set(wanted)):
            self._delete(self._objects[gang])
            del self._objects[gang]
        text = orjson.dumps(state.backoff).decode()
        keep = orjson.dumps(to_json(state.keep)).decode()
        if text != self._backoff_text or keep != self._keep_text:
            self._write_index(text, keep=keep)

    def _stored(self, objects: dict[str, Stored], gang: str) -> Stored | None:
        """The gang's record ConfigMap as known: its record's, or an unreadable one at its name (taken over)."""
        return objects.get(gang) or objects.pop(UNREADABLE + record_name(self.name, gang), None)

    # ------------------------------------------------------------------ writes

    def _body(self, rec: Record, name: str, text: str) -> dict[str, Any]:
        labels = {"app.kubernetes.io/name": "gangscale", STORE_LABEL: store_label(self.name)}
        if _LABEL_VALUE.fullmatch(rec.namespace):
            labels[NAMESPACE_LABEL] = rec.namespace
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": labels,
                "annotations": {GANG_ANNOTATION: rec.gang},
            },
            "data": {RECORD_KEY: text},
        }

    def _write(self, call: Callable[[], dict[str, Any]]) -> str:
        """One write; its new resourceVersion. A 409 is a `StateConflict`."""
        try:
            obj = call()
        except KubeError as exc:
            if exc.status == 409:
                raise StateConflict(str(exc), 409, exc.reason) from None
            raise
        self.writes += 1
        return str((obj.get("metadata") or {}).get("resourceVersion") or "")

    def _create(self, rec: Record, text: str) -> Stored:
        name = record_name(self.name, rec.gang)
        rv = self._write(
            lambda: self.client.post(CONFIGMAPS.path(self.namespace), self._body(rec, name, text))
        )
        return Stored(name, rv, text)

    def _update(self, rec: Record, stored: Stored, text: str) -> Stored:
        body = self._body(rec, stored.name, text)
        body["metadata"]["resourceVersion"] = stored.rv
        rv = self._write(
            lambda: self.client.put(CONFIGMAPS.path(self.namespace, stored.name), body)
        )
        return Stored(stored.name, rv, text)

    def _delete(self, stored: Stored) -> None:
        """The record's ConfigMap deleted, unless it changed since (409); already gone is fine."""
        try:
            self._write(
                lambda: self.client.delete(
                    CONFIGMAPS.path(self.namespace, stored.name),
                    body={"preconditions": {"resourceVersion": stored.rv}},
                )
            )
        except StateConflict:
            raise
        except KubeError as exc:
            if exc.status != 404:
                raise

    def _write_index(
        self, backoff_text: str, data: dict[str, str] | None = None, keep: str | None = None
    ) -> None:
        """The `<state>` ConfigMap: the backoffs, the keep rule's state (`keep`; None: as last read or written), and
        where the records are (for a reader who opens it)."""
        keep = keep if keep is not None else self._keep_text
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {"app.kubernetes.io/name": "gangscale"},
            },
            "data": {
                **(data or {}),
                BACKOFF_KEY: backoff_text,
                **({KEEP_KEY: keep} if keep is not None else {}),
                "records": f"one ConfigMap per gang, labelled {STORE_LABEL}={store_label(self.name)}",
            },
        }
        if self._index_rv:
            body["metadata"]["resourceVersion"] = self._index_rv
            self._index_rv = self._write(
                lambda: self.client.put(CONFIGMAPS.path(self.namespace, self.name), body)
            )
        else:
            self._index_rv = self._write(
                lambda: self.client.post(CONFIGMAPS.path(self.namespace), body)
            )
        self._backoff_text, self._keep_text = backoff_text, keep

    # --------------------------------------------------------------- migration

    def _migrate(self, layout: Layout) -> None:
        """The single-ConfigMap layout's records, one ConfigMap each, then `records.json` dropped from `<state>`.

        A readable records.json is the whole state (the layout's writer saved every record at once): a record
        ConfigMap it does not list is stale and deleted. Every step is idempotent, and records.json goes last: a
        crash part way leaves it, and the next load migrates again with the same result."""
        if self.fence is not None:
            self.fence("migrate the records")
        old = layout.legacy
        if old is None:
            log.warning(
                "records.json of the state ConfigMap is unreadable: dropped, the cloud and cluster show "
                "what it held",
                extra={"configmap": self.name, "error": layout.legacy_error},
            )
        for gang, rec in sorted((old or {}).items()):
            text, stored = record_text(rec), self._stored(layout.objects, gang)
            if stored is None:
                layout.objects[gang] = self._create(rec, text)
            elif stored.text != text:
                layout.objects[gang] = self._update(rec, stored, text)
        for gang in sorted(set(layout.objects) - set(layout.objects if old is None else old)):
            self._delete(layout.objects.pop(gang))
        if old is not None:
            layout.records = dict(old)
        index = layout.index or {}
        self._index_rv = str((index.get("metadata") or {}).get("resourceVersion") or "")
        data = {k: v for k, v in (index.get("data") or {}).items() if k != LEGACY_KEY}
        self._write_index(str(data.pop(BACKOFF_KEY, "{}")), data)
        layout.index = {
            **index,
            "data": {**data, BACKOFF_KEY: self._backoff_text},
            "metadata": {**(index.get("metadata") or {}), "resourceVersion": self._index_rv},
        }
        log.info(
            "records moved to one ConfigMap per gang",
            extra={"records": len(old or {}), "configmap": self.name},
        )
