"""The `gangscale_build_info` gauge every gangscale server exposes: one definition, so the controller's and the
webhook's /metrics say the same (name, help, labels). A constant 1 labelled with the build, the shape of
client_golang's `go_build_info` (prometheus/collectors/collectors.go `NewBuildInfoCollector`).

Imports only the version and prometheus_client: any server module may use it (tests/test_import_graph.py)."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge

from . import __version__

NAME = "gangscale_build_info"
LABELS = ("version", "python")


def register_build_info(registry: CollectorRegistry) -> Gauge:
    """Register the gauge in `registry`, set to 1 for the running gangscale and Python versions."""
    gauge = Gauge(
        NAME,
        "Always 1, labelled with the running gangscale and Python versions",
        list(LABELS),
        registry=registry,
    )
    gauge.labels(__version__, platform.python_version()).set(1)
    return gauge
