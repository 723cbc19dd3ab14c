"""The webhook's own Prometheus metrics, served on its HTTPS port at /metrics.

`gangscale_webhook_requests_total{webhook, result}` counts answered POSTs: webhook is `validate`, `mutate` or
`other` (any other path, so a scanner cannot grow the label set); result is `allowed`, `denied` or `patched`
(a mutating answer that gates the pod) for a review, else the HTTP code (`400`, `404`, `411`, `413`, `500`).
`gangscale_webhook_request_duration_seconds{webhook}` is the time from the request line to the answer.
The fail-open loop's metrics (failopen.py) join every server's registry through `PROCESS_COLLECTORS`.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from ..build_info import register_build_info

WEBHOOKS = {"/validate": "validate", "/mutate": "mutate"}
# collectors of the process's background loops (failopen.py), registered in every server's registry
PROCESS_COLLECTORS: list[Any] = []
# the API server's timeoutSeconds is 1-5 s: the buckets resolve well below it
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def result_of(code: int, doc: dict[str, Any]) -> str:
    """What an answer said: the review's verdict, or the HTTP code when it is not a review."""
    response = doc.get("response") if code == 200 else None
    if not isinstance(response, dict):
        return str(code)
    if not response.get("allowed", False):
        return "denied"
    return "patched" if response.get("patch") else "allowed"


class WebhookMetrics:
    """One registry per server."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)
        register_build_info(r)
        self.requests = Counter(
            "gangscale_webhook_requests_total",
            "Admission requests answered, by webhook and result",
            ["webhook", "result"],
            registry=r,
        )
        self.latency = Histogram(
            "gangscale_webhook_request_duration_seconds",
            "Time to answer an admission request",
            ["webhook"],
            buckets=BUCKETS,
            registry=r,
        )
        for collector in PROCESS_COLLECTORS:
            r.register(collector)

    def observe(self, path: str, code: int, doc: dict[str, Any], seconds: float) -> None:
        webhook = WEBHOOKS.get(path, "other")
        self.requests.labels(webhook, result_of(code, doc)).inc()
        self.latency.labels(webhook).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
