"""A cloud provider whose failed calls are counted: `gangscale_cloud_api_errors_total{kind, operation}`.

Every CloudError a provider method raises is counted by its kind (`cloud_adapters.errors.ErrorKind`) and the
call (the error's own operation, else the method's name), then raised unchanged: the controller handles it as
before. Attributes that are not methods pass through, and attributes set on it are set on the provider.
"""

from __future__ import annotations

import functools
from typing import Any

from prometheus_client import Counter

from cloud_adapters.errors import CloudError


class CountedProvider:
    """Wraps a NodeGroupProvider; behaves as it, and counts its CloudErrors on `counter`."""

    def __init__(self, provider: Any, counter: Counter) -> None:
        object.__setattr__(self, "_provider", provider)
        object.__setattr__(self, "_counter", counter)

    def __setattr__(self, name: str, value: Any) -> None:
        """Set on the provider itself: the actuator installs its fence and crash hooks
        (`before_mutation`, `after_mutation`) there, where every mutating call runs them."""
        setattr(self._provider, name, value)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._provider, name)
        if not callable(attr):
            return attr
        counter = self._counter

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return attr(*args, **kwargs)
            except CloudError as exc:
                counter.labels(exc.kind.value, exc.operation or name).inc()
                raise

        return call
