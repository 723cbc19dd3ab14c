"""`gangscale_build_info`: one definition (gangscale/build_info.py), exposed the same by every server's /metrics."""

from __future__ import annotations

import platform
from pathlib import Path

from prometheus_client import generate_latest

from gangscale import __version__
from gangscale.controller.metrics import Metrics
from gangscale.webhook.metrics import WebhookMetrics

ROOT = Path(__file__).resolve().parent.parent


def build_info_lines(exposition: bytes) -> list[str]:
    """The exposition's lines about gangscale_build_info: its HELP, its TYPE and its samples."""
    return [line for line in exposition.decode().splitlines() if "gangscale_build_info" in line]


def test_the_controller_and_the_webhook_expose_the_same_build_info():
    controller = build_info_lines(generate_latest(Metrics().registry))
    webhook = build_info_lines(WebhookMetrics().render())
    sample = f'gangscale_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
    assert controller == webhook
    assert [line.split(" ", 2)[1] for line in controller if line.startswith("#")] == ["HELP", "TYPE"]
    assert controller[-1] == sample


def test_the_build_info_gauge_is_defined_in_one_module_only():
    defining = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "gangscale").rglob("*.py")
        if '"gangscale_build_info"' in p.read_text()
    )
    assert defining == ["gangscale/build_info.py"]
