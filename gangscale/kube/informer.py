"""List + watch into a local cache: an informer in spirit, for raw JSON objects.

One thread per resource lists it (paginated), then watches from the list's
resourceVersion with bookmarks, so a reconnect resumes where it stopped
instead of re-reading everything. 410 Gone re-lists at once; any other failure
(server down, stream cut mid-event) reconnects with capped exponential
backoff. The cache is replaced or updated only under a lock, so `snapshot()`
is always one consistent view: never half a re-list.

Reused by the controller: `start()`, `wait_synced()`, `snapshot()`,
`stop()`, and `on_change(ref, event_type, obj)` for every change.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client import KubeClient, WatchStream
from .errors import GoneError, KubeError
from .lister import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_PAGES,
    DEFAULT_PAGE_SIZE,
    Transform,
    list_all,
    strip_managed_fields,
)
from .refs import NODES, PODS, ResourceRef, object_key, resource_version
from .scope import in_scope

log = logging.getLogger("gangscale.kube")

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
SYNCED = "SYNCED"  # after every (re-)list; obj is None
ChangeHandler = Callable[[ResourceRef, str, "dict[str, Any] | None"], None]


@dataclass(slots=True)
class Backoff:
    """Capped exponential backoff with jitter, so many clients do not reconnect in step."""

    initial: float = 0.5
    maximum: float = 30.0
    factor: float = 2.0
    jitter: float = 0.2
    _current: float = field(default=0.0, init=False)

    def next(self) -> float:
        self._current = (
            self.initial if self._current <= 0 else min(self.maximum, self._current * self.factor)
        )
        return self._current * (1.0 + random.uniform(0.0, self.jitter))

    def reset(self) -> None:
        self._current = 0.0


@dataclass(slots=True)
class InformerStats:
    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    gone: int = 0  # 410s: re-lists forced by a too-old resourceVersion
    errors: int = 0  # failures that cost a backoff
    malformed: int = 0  # events or items that could not be read
    last_error: str = ""


class Informer:
    """Keeps every object of one resource (in one namespace, or all) in memory."""

    def __init__(
        self,
        client: KubeClient,
        ref: ResourceRef,
        *,
        namespace: str | None = None,
        on_change: ChangeHandler | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        backoff: Backoff | None = None,
        watch_timeout: float = 300.0,
        read_grace: float = 30.0,
        transform: Transform | None = strip_managed_fields,
        max_items: int = DEFAULT_MAX_ITEMS,
        max_pages: int = DEFAULT_MAX_PAGES,
        optional: bool = False,
    ) -> None:
        self.client = client
        # optional: a list the server refuses (403, 404) syncs the cache empty, `unreadable` says why, and the list is
        # tried again with backoff (RBAC may be granted later); a required informer stays unsynced until it lists
        self.optional = optional
        self.unreadable = ""
        # bounds of each (re-)list: a looping server costs a backoff, not memory
        self.max_items = max_items
        self.max_pages = max_pages
        self.ref = ref
        self.namespace = namespace if ref.namespaced else None
        self.on_change = on_change
        self.page_size = page_size
        self.backoff = backoff or Backoff()
        self.watch_timeout = watch_timeout
        self.read_grace = read_grace
        self.transform = transform
        self.stats = InformerStats()
        self.lock = threading.RLock()  # guards _items and _rv; ClusterCache takes it too
        self._items: dict[tuple[str, str], dict[str, Any]] = {}
        self._rv = ""
        self._synced = threading.Event()
        self._stopping = threading.Event()
        self._stream: WatchStream | None = None
        self._stream_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ public API

    def start(self) -> Informer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name=f"informer-{self.ref.label}", daemon=True
            )
            self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """Its thread is alive (False before `start` and once `stop` has ended it)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        self._signal_stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _signal_stop(self) -> None:
        """Ask the thread to end, and unblock its watch read; does not wait."""
        self._stopping.set()
        with self._stream_lock:
            if self._stream is not None:
                self._stream.close()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is in the cache."""
        return self._synced.wait(timeout)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        with self.lock:
            return self._rv

    def snapshot(self) -> list[dict[str, Any]]:
        """The cached objects, sorted by namespace/name. Treat them as read-only."""
        with self.lock:
            return self._snapshot_locked()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            return self._items.get((namespace if self.ref.namespaced else "", name))

    def _snapshot_locked(self) -> list[dict[str, Any]]:
        return [self._items[k] for k in sorted(self._items)]

    # ------------------------------------------------------------- the loop

    def _run(self) -> None:
        need_list = True
        gone_streak = 0  # 410s in a row with no watch event between them
        while not self._stopping.is_set():
            seen = self.stats.events + self.stats.bookmarks
            try:
                if need_list:
                    self._relist()
                    need_list = False
                self._watch()
            except GoneError as exc:
                self.stats.gone += 1
                gone_streak = (
                    0 if self.stats.events + self.stats.bookmarks > seen else gone_streak + 1
                )
                need_list = True
                if gone_streak <= 1:  # the usual case: the watch fell behind; re-list at once
                    log.info("%s: %s; listing again", self.ref.label, exc)
                else:  # a server answering 410 to every watch: do not hammer it with full lists
                    self._failed(f"{exc} ({gone_streak} times in a row)")
            except KubeError as exc:
                if self._stopping.is_set():
                    break
                if self.optional and need_list and exc.status in (403, 404):
                    self._refused(str(exc))
                self._failed(str(exc))
            except Exception as exc:  # noqa: BLE001 - a bug must not kill the cache silently
                if self._stopping.is_set():
                    break
                log.exception("%s: unexpected error", self.ref.label)
                self._failed(f"{type(exc).__name__}: {exc}")

    def _refused(self, message: str) -> None:
        """An optional resource the server will not list: an empty, synced cache that says why."""
        with self.lock:
            old, self._items, self._rv = self._items, {}, ""
            self.unreadable = message
        self._synced.set()
        self._emit_diff(old, {})

    def _failed(self, message: str) -> None:
        self.stats.errors += 1
        self.stats.last_error = message
        delay = self.backoff.next()
        log.warning("%s: %s; retrying in %.1fs", self.ref.label, message, delay)
        self._stopping.wait(delay)

    def _relist(self) -> None:
        result = list_all(
            self.client,
            self.ref,
            self.namespace,
            page_size=self.page_size,
            transform=self.transform,
            max_items=self.max_items,
            max_pages=self.max_pages,
        )
        self.stats.lists += 1
        for message in result.skipped:
            self._skip(message)
        fresh: dict[tuple[str, str], dict[str, Any]] = {}
        for obj in result.items:
            key = object_key(obj)
            if key is None:
                self._skip("a listed object has no metadata.name")
                continue
            fresh[key] = obj
        with self.lock:
            old, self._items, self._rv = self._items, fresh, result.resource_version
            self.unreadable = ""
        self._synced.set()
        self.backoff.reset()
        self._emit_diff(old, fresh)

    def _emit_diff(
        self, old: dict[tuple[str, str], dict[str, Any]], new: dict[tuple[str, str], dict[str, Any]]
    ) -> None:
        """A re-list replaces the cache; tell the handler what that changed."""
        if self.on_change is None:
            return
        for key, obj in old.items():
            if key not in new:
                self._notify(DELETED, obj)
        for key, obj in new.items():
            before = old.get(key)
            if before is None:
                self._notify(ADDED, obj)
            elif resource_version(before) != resource_version(obj):
                self._notify(MODIFIED, obj)
        self._notify(SYNCED, None)

    def _watch(self) -> None:
        timeout = self.watch_timeout * random.uniform(
            1.0, 2.0
        )  # spread reconnects, as client-go does
        query = {
            "watch": "true",
            "resourceVersion": self._rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(max(1, int(timeout))),
        }
        stream = self.client.watch(
            self.ref.path(self.namespace),
            query,
            read_timeout=timeout + self.read_grace,
            on_malformed=self._malformed_line,
        )
        with self._stream_lock:
            if self._stopping.is_set():
                stream.close()
                return
            self._stream = stream
        self.stats.watches += 1
        try:
            for event in stream:
                if self._stopping.is_set():
                    return
                self._apply(event)
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
        # The server ended the watch (its timeout): resume from the last version.

    def _malformed_line(self, line: bytes) -> None:
        self._skip(f"a watch event that is not a JSON object: {line!r:.80}")

    def _skip(self, what: str) -> None:
        """Count and log an event or item that cannot be read; the cache goes on without it."""
        self.stats.malformed += 1
        log.warning("%s: skipped %s", self.ref.label, what)

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            self._skip(f"a {kind!r:.20} watch event without an object")
            return
        if kind == "ERROR":
            code = obj.get("code")
            message = str(obj.get("message") or obj.get("reason") or "watch error")
            if code == 410 or obj.get("reason") in ("Expired", "Gone"):
                raise GoneError(message)
            raise KubeError(
                f"watch {self.ref.label}: {message}", int(code) if isinstance(code, int) else 0
            )
        rv = resource_version(obj)
        if kind == "BOOKMARK":
            self.stats.bookmarks += 1
            if rv:
                with self.lock:
                    self._rv = rv
            return
        key = object_key(obj)
        if kind not in (ADDED, MODIFIED, DELETED) or key is None:
            self._skip(
                f"a {kind!r:.20} watch event"
                + ("" if key else " whose object has no metadata.name")
            )
            return
        obj = self.ref.typed(obj)
        if self.transform is not None:
            obj = self.transform(obj)
        with self.lock:
            if kind == DELETED:
                self._items.pop(key, None)
            else:
                self._items[key] = obj
            if rv:
                self._rv = rv
        self.stats.events += 1
        self.backoff.reset()
        self._notify(kind, obj)

    def _notify(self, kind: str, obj: dict[str, Any] | None) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(self.ref, kind, obj)
        except Exception:  # noqa: BLE001 - a handler's bug must not stop the cache
            log.exception("%s: on_change handler failed", self.ref.label)


class ClusterCache:
    """Informers for nodes, pods and the gang resources, read as one cluster view.

    Pods are watched once for the whole cluster (bound pods of every namespace
    use node capacity); with a namespace, `snapshot()` keeps that namespace's
    objects plus the bound pods elsewhere.
    """

    def __init__(
        self,
        client: KubeClient,
        gang_refs: Sequence[ResourceRef],
        *,
        namespace: str | None = None,
        pods_cluster_wide: bool = True,
        on_change: ChangeHandler | None = None,
        optional_refs: Sequence[ResourceRef] = (),
        **informer_options: Any,
    ) -> None:
        """`optional_refs`: resources read cluster-wide whose list may be refused (`Informer.optional`): DaemonSets."""
        self.namespace = namespace
        pods_ns = None if pods_cluster_wide else namespace
        refs: list[tuple[ResourceRef, str | None]] = [(NODES, None), (PODS, pods_ns)]
        refs += [(r, namespace) for r in gang_refs if r not in (NODES, PODS)]
        self.informers = [
            Informer(client, ref, namespace=ns, on_change=on_change, **informer_options)
            for ref, ns in refs
        ] + [
            Informer(client, ref, on_change=on_change, optional=True, **informer_options)
            for ref in optional_refs
        ]

    def start(self) -> ClusterCache:
        for inf in self.informers:
            inf.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        for inf in self.informers:
            inf._signal_stop()  # stop all first, then wait: shutdown takes one timeout, not N
        for inf in self.informers:
            inf.stop(timeout)

    def __enter__(self) -> ClusterCache:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_synced(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        for inf in self.informers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not inf.wait_synced(left):
                return False
        return True

    @property
    def synced(self) -> bool:
        return all(inf.synced for inf in self.informers)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every cached object (apiVersion/kind set), taken under all locks at once."""
        with contextlib.ExitStack() as stack:
            for inf in self.informers:  # always in the same order: no lock-order deadlock
                stack.enter_context(inf.lock)
            objs: Iterable[dict[str, Any]] = [
                o for inf in self.informers for o in inf._snapshot_locked()
            ]
        return [o for o in objs if in_scope(o, self.namespace)]

    def unreadable(self) -> dict[ResourceRef, str]:
        """Optional resources the server refuses to list, and its answer."""
        return {inf.ref: inf.unreadable for inf in self.informers if inf.unreadable}

    def stats(self) -> dict[str, InformerStats]:
        return {inf.ref.label: inf.stats for inf in self.informers}
