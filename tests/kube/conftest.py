"""Fixtures for the live-cluster tests: emulated API servers on 127.0.0.1, kubeconfigs, fixture objects."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from gangscale.kube.client import KubeClient, connect

from .emulator import Emulator

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kube"
RELEASE_FIXTURE = {"1.35": "v1alpha1-workload.yaml", "1.36": "v1alpha2-podgroup.yaml", "1.37": "v1beta1-podgroup.yaml"}


def load_fixture(name: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((FIXTURES / name).read_text())
    return list(doc["items"]) if doc.get("kind") == "List" else [doc]


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client honours *_PROXY variables: never send test traffic anywhere but loopback."""
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture
def make_emulator() -> Iterator[Callable[..., Emulator]]:
    started: list[Emulator] = []

    def make(**kwargs: Any) -> Emulator:
        emu = Emulator(**kwargs).start()
        started.append(emu)
        return emu

    yield make
    for emu in started:
        emu.stop()


@pytest.fixture
def emulator(make_emulator: Callable[..., Emulator]) -> Emulator:
    """A 1.36 server with the native API on, no CRDs."""
    return make_emulator(release="1.36")


@pytest.fixture
def kubeconfig_for(tmp_path: Path) -> Callable[[Emulator], str]:
    def write(emu: Emulator, token: str | None = None) -> str:
        return emu.kubeconfig(str(tmp_path / f"kubeconfig-{emu.url.rsplit(':', 1)[1]}"), token=token)

    return write


@pytest.fixture
def client_for(kubeconfig_for: Callable[[Emulator], str]) -> Iterator[Callable[[Emulator], KubeClient]]:
    clients: list[KubeClient] = []

    def make(emu: Emulator) -> KubeClient:
        c = connect(kubeconfig_for(emu), timeout=5.0)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@pytest.fixture
def client(emulator: Emulator, client_for: Callable[[Emulator], KubeClient]) -> KubeClient:
    return client_for(emulator)


@pytest.fixture(autouse=True, scope="session")
def _clean_env() -> Iterator[None]:
    """No user kubeconfig leaks into the tests."""
    old = os.environ.pop("KUBECONFIG", None)
    yield
    if old is not None:
        os.environ["KUBECONFIG"] = old
