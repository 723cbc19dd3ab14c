"""The controller as a real process against the Kubernetes API emulator and a moto server.

Reuses the live-cluster emulator (tests/kube) and the moto server with its
fault proxy (tests/cloud); the controller talks to moto through the proxy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from cloud.conftest import CLUSTER, REGION, World, _ami, _proxy, aws_env, moto_server, moto_url, proxy, world  # noqa: F401
from kube.conftest import _no_proxy  # noqa: F401
from kube.emulator import Emulator

ROOT = Path(__file__).resolve().parents[2]
STATE_NS = "gangscale-system"


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class ControllerProcess:
    """`gangscale run` in a subprocess; its JSON log lines are parsed on demand."""

    def __init__(self, tmp: Path, kubeconfig: str, config: dict[str, Any], identity: str,
                 env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.log_path = tmp / f"controller-{identity}.log"
        cfg_path = tmp / f"config-{identity}.yaml"
        cfg_path.write_text(yaml.safe_dump(config))
        self._log = open(self.log_path, "w")
        env = dict(os.environ, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost", **(env or {}))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gangscale", "run", "--kubeconfig", kubeconfig, "--config", str(cfg_path),
             "--identity", identity, "--log-level", "debug", *args],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        self.identity = identity

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(raw))
            except json.JSONDecodeError:
                out.append({"msg": raw, "level": "raw"})
        return out

    def logged(self, msg: str, **fields: Any) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line.get("msg") == msg
                and all(line.get(k) == v for k, v in fields.items())]

    def exited(self) -> int | None:
        """The exit status once the process is gone (137 after a crash hook)."""
        return self.proc.poll()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=15)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        self._log.close()

    def assert_no_tracebacks(self) -> None:
        bad = [line for line in self.lines() if "exception" in line or "Traceback" in line.get("msg", "")]
        assert not bad, bad[:3]


@pytest.fixture
def cluster() -> Iterator[Emulator]:
    emu = Emulator(release="1.36").start()
    emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": STATE_NS}})
    yield emu
    emu.stop()


@pytest.fixture
def controllers(tmp_path: Path, cluster: Emulator, proxy) -> Iterator[Callable[..., ControllerProcess]]:  # noqa: F811
    kubeconfig = cluster.kubeconfig(str(tmp_path / "kubeconfig"))
    started: list[ControllerProcess] = []

    def start(identity: str = "a", env: dict[str, str] | None = None, **overrides: Any) -> ControllerProcess:
        config = {
            "mode": "enforce", "provider": "aws-asg", "clusterName": CLUSTER, "region": REGION,
            "awsEndpointUrl": proxy.url, "metricsAddress": "127.0.0.1:0",
            "batchWindowSeconds": 0.2, "maxBatchDelaySeconds": 1.0, "resyncSeconds": 1.0,
            "solverTimeLimitSeconds": 2.0, "leaseDurationSeconds": 3.0, "leaseRenewSeconds": 0.5,
            "emptyNodeGraceSeconds": 3600, "launchFailureBackoffSeconds": 600,
        }
        config.update(overrides)
        proc = ControllerProcess(tmp_path, kubeconfig, config, identity, env)
        started.append(proc)
        return proc

    yield start
    for p in started:
        p.stop()


def events(emu: Emulator, reason: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """Event objects, by reason and by the kind they are on ("PodGroup", "Pod"; None: any)."""
    with emu._cond:
        evs = [dict(e) for e in emu._store.get("/events", {}).values()]
    return [e for e in evs if (reason is None or e["reason"] == reason)
            and (kind is None or e["involvedObject"]["kind"] == kind)]


def state_records(emu: Emulator) -> dict[str, Any]:
    """The saved records by gang: one ConfigMap each, labelled gangscale.io/records-of=gangscale-state."""
    with emu._cond:
        cms = [json.loads(json.dumps(o)) for (ns, _), o in emu._store.get("/configmaps", {}).items() if ns == STATE_NS]
    recs = [json.loads(cm["data"]["record.json"]) for cm in cms
            if (cm["metadata"].get("labels") or {}).get("gangscale.io/records-of") == "gangscale-state"]
    return {r["gang"]: r for r in recs}
