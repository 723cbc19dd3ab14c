"""The group object a pod names, read through the API server for its minCount (cached, never raising).

A native PodGroup or Workload carries no pod shape, so the webhook judges such a gang when its
pods arrive: minCount pods like the pod under review. That needs the group's minCount, which this
reads with one GET per group per TTL_SECONDS (hits and misses alike), bounded to MAX_ENTRIES. A
failed or slow read (LOOKUP_TIMEOUT_SECONDS) answers None and the pod is judged alone, as without
a lookup: admission never waits on more than one short call.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..model import API_COSCHEDULING, API_VOLCANO, API_WORKLOAD
from ..parse import (
    FAMILY_COSCHED,
    FAMILY_NATIVE,
    FAMILY_VOLCANO,
    FAMILY_WORKLOAD,
    NATIVE_PODGROUP_APIS,
)

TTL_SECONDS = 10.0
MAX_ENTRIES = 10_000
LOOKUP_TIMEOUT_SECONDS = 1.0
NAME = re.compile(
    r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
)  # a DNS subdomain: a pod's reference is put in a URL path

# family -> (apiVersion, plural) to try, in order
SOURCES: dict[str, tuple[tuple[str, str], ...]] = {
    FAMILY_NATIVE: tuple((api, "podgroups") for api in NATIVE_PODGROUP_APIS),
    FAMILY_WORKLOAD: ((API_WORKLOAD, "workloads"),),
    FAMILY_COSCHED: ((API_COSCHEDULING, "podgroups"),),
    FAMILY_VOLCANO: ((API_VOLCANO, "podgroups"),),
}


class GroupRef(NamedTuple):
    """The group object a pod names: ingest's object key (family, namespace, name), not a gang's key."""

    family: str
    namespace: str
    name: str


class GroupLookup:
    """`(family, namespace, name) -> group object or None`, through `get(path)` (a KubeClient's, or a test's)."""

    def __init__(
        self,
        get: Callable[[str], Mapping[str, Any]],
        served: frozenset[str] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._get, self._served, self._clock = get, served, clock
        self._lock = threading.Lock()
        self._cache: dict[GroupRef, tuple[float, Mapping[str, Any] | None]] = {}

    def __call__(self, family: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        if not (NAME.fullmatch(namespace) and NAME.fullmatch(name)) or ".." in name:
            return None  # no object can have that name: never a request
        key = GroupRef(family, namespace, name)
        now = self._clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        obj = self._read(family, namespace, name)
        with self._lock:
            if len(self._cache) >= MAX_ENTRIES:
                self._cache.clear()  # bounded: a flood of names costs a re-read, never memory
            self._cache[key] = (now + TTL_SECONDS, obj)
        return obj

    def _read(self, family: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        for api, plural in SOURCES.get(family, ()):
            if self._served is not None and api not in self._served:
                continue
            try:
                obj = self._get(f"/apis/{api}/namespaces/{namespace}/{plural}/{name}")
            except Exception:  # noqa: BLE001 - not found, forbidden, slow: judge the pod alone
                continue
            if isinstance(obj, Mapping) and isinstance(obj.get("metadata"), Mapping):
                kind = "Workload" if plural == "workloads" else "PodGroup"
                return {
                    **obj,
                    "apiVersion": obj.get("apiVersion") or api,
                    "kind": obj.get("kind") or kind,
                }
        return None


def kube_lookup(client: Any, served: frozenset[str] | None) -> GroupLookup:
    """A lookup through a KubeClient with a short timeout per read."""
    return GroupLookup(lambda path: client.get(path, timeout=LOOKUP_TIMEOUT_SECONDS), served)
