"""A thread-safe TTL memo over cachetools: describe calls are asked once per TTL, not once per loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from cachetools import TTLCache

V = TypeVar("V")
_MISSING: Any = object()


class TTLMemo(Generic[V]):
    """`get(key, load)` returns the cached value younger than `ttl` seconds, else loads and keeps it."""

    def __init__(self, ttl: float, maxsize: int = 1024, timer: Callable[[], float] | None = None):
        self._cache: TTLCache = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer or time.monotonic)
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], V]) -> V:
        with self._lock:
            # one lookup: `in` then `[]` read the clock twice and could straddle the expiry (KeyError)
            value = self._cache.get(key, _MISSING)
        if value is not _MISSING:
            return value
        value = load()  # outside the lock: a slow cloud call must not serialise unrelated keys
        with self._lock:
            self._cache[key] = value
        return value

    def peek(self, key: Hashable) -> V | None:
        with self._lock:
            return self._cache.get(key)

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._cache[key] = value

    def invalidate(self, key: Hashable | None = None) -> None:
        with self._lock:
            if key is None:
                self._cache.clear()
            else:
                self._cache.pop(key, None)
