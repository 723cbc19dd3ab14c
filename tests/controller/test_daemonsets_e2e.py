"""End to end: `gangscale run` watches DaemonSets and buys room for their pods beside the pods it plans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import pod
from kube.emulator import Emulator

from .conftest import STATE_NS, wait_for


def _cluster(**kw: Any) -> Emulator:
    emu = Emulator(release="1.36", **kw).start()
    for ns in (STATE_NS, "kube-system", "default"):
        emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    return emu


@pytest.fixture
def cluster(request) -> Iterator[Emulator]:
    """Overrides conftest's `cluster` (which `controllers` connects to); `forbidden` by indirect parametrisation."""
    emu = _cluster(forbidden=set(getattr(request, "param", ())))
    yield emu
    emu.stop()


def _catalog(tmp: Path) -> str:
    path = tmp / "nodegroups.yaml"
    path.write_text(yaml.safe_dump([{"name": "m5-large", "instanceType": "m5.large", "maxSize": 10},
                                    {"name": "m5-xlarge", "instanceType": "m5.xlarge", "maxSize": 10}]))
    return str(path)


LOG_AGENT = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "log-agent", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"app": "log-agent"}}, "template": {
                 "metadata": {"labels": {"app": "log-agent"}},
                 "spec": {"containers": [{"name": "agent", "resources": {"requests": {"cpu": "1"}}}]}}}}


def _plans(ctl) -> list[dict[str, Any]]:
    return [line["plan"] for line in ctl.logged("plan") if line["plan"]["scaleUp"]]


@pytest.mark.parametrize("cluster, bought, warned", [
    ((), {"m5-xlarge": 1}, False),
    ({("apps", "daemonsets")}, {"m5-large": 1}, True),
], indirect=["cluster"], ids=["daemonsets-read", "daemonsets-forbidden"])
def test_the_controller_buys_room_for_the_daemon_pod_beside_the_pod_or_says_it_cannot_read_them(
        cluster, controllers, tmp_path, bought, warned):
    emu = cluster
    emu.apply(LOG_AGENT)
    ctl = controllers(provider="simulated", mode="dry-run", nodegroups=_catalog(tmp_path))
    wait_for(lambda: ctl.logged("leading"), what="leadership")
    emu.apply(pod("app", cpu="1", mem="1Gi"))
    wait_for(lambda: _plans(ctl), timeout=30, what="a plan with a scale-up")
    plan = _plans(ctl)[0]
    assert plan["scaleUp"] == bought
    assert any("assumes no DaemonSet pod runs on the new nodes" in w for w in plan["warnings"]) == warned
    ctl.assert_no_tracebacks()
