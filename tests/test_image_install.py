"""The image has what every documented mode needs: the Dockerfile's build stage, run as written (its COPY lines
into a fresh directory, its `pip install` lines into a fresh virtualenv instead of `--prefix=/install`), installs a
gangscale whose webhook can make its self-signed pair and patch caBundle (`gangscale webhook --self-signed`), and
whose `ungate` and `run` commands start. Every dependency comes from PyPI by the hashes in requirements.lock.

One slow test: it downloads the locked dependencies (the pip cache makes a second run quick)."""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
import venv
from pathlib import Path

import pytest
import yaml

from tests.kube.emulator import Emulator

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PIP_TIMEOUT = 1500


def build_stage() -> list[str]:
    """The Dockerfile's instructions from the first FROM to the second, joined across line continuations."""
    lines = ROOT.joinpath("Dockerfile").read_text().replace("\\\n", " ").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("FROM ")]
    return [line for line in lines[starts[0] + 1:starts[1]] if line.strip() and not line.startswith("#")]


def copy_sources(stage: list[str], dest: Path) -> None:
    """The stage's COPY lines, from the repository into `dest` (its WORKDIR)."""
    for line in stage:
        if line.startswith("COPY "):
            *sources, _ = shlex.split(line)[1:]
            for s in sources:
                src = ROOT / s
                if src.is_dir():
                    shutil.copytree(src, dest / s, ignore=shutil.ignore_patterns("__pycache__", "results"))
                else:
                    shutil.copy(src, dest / s)


def pip_commands(stage: list[str], python: Path) -> list[list[str]]:
    """The stage's `RUN pip install ...` lines, for `python`'s pip, without --prefix (the venv is the prefix)."""
    out = []
    for line in stage:
        if line.startswith("RUN pip install"):
            args = [a for a in shlex.split(line)[3:] if not a.startswith("--prefix=")]
            out.append([str(python), "-m", "pip", "install", *args])
    assert len(out) == 3, out  # the build backend, the locked dependencies, the package
    return out


def clean_pip_env() -> dict[str, str]:
    """A pip that reads no machine-wide config, constraints or local wheel directories: PyPI, as in the image."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_INDEX_URL="https://pypi.org/simple",
               PIP_DEFAULT_TIMEOUT="120", PYTHONPATH="")
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.timeout(PIP_TIMEOUT + 300)
def test_the_dockerfile_install_runs_the_self_signed_webhook_and_every_command(tmp_path):
    stage = build_stage()
    src = tmp_path / "src"
    src.mkdir()
    copy_sources(stage, src)
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    env = clean_pip_env()
    for cmd in pip_commands(stage, python):
        done = subprocess.run(cmd, check=False, cwd=src, env=env, capture_output=True, text=True, timeout=PIP_TIMEOUT)
        assert done.returncode == 0, f"{' '.join(cmd)}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    check = subprocess.run([str(python), "-m", "pip", "check"], check=False, env=env, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout
    gangscale = str(tmp_path / "venv" / "bin" / "gangscale")
    run_env = {**env, "PYTHONPATH": ""}
    for args in (["--version"], ["run", "--help"], ["ungate", "--help"], ["webhook", "--help"]):
        done = subprocess.run([gangscale, *args], check=False, env=run_env, capture_output=True, text=True, cwd=tmp_path,
                              timeout=120)
        assert done.returncode == 0, (args, done.stderr[-2000:])
    code = "import gangscale.webhook.certs as c, cryptography; print(c.__file__)"
    imported = subprocess.run([str(python), "-c", code], check=False, env=run_env, capture_output=True, text=True,
                              cwd=tmp_path)
    assert imported.returncode == 0 and str(tmp_path / "venv") in imported.stdout, imported.stderr
    self_signed_webhook_serves(gangscale, run_env, tmp_path)


def self_signed_webhook_serves(gangscale: str, env: dict[str, str], tmp_path: Path) -> None:
    """`gangscale webhook --self-signed` from the installed package: it patches caBundle and serves with that CA."""
    hooks = [d for d in yaml.safe_load_all((ROOT / "config/deploy/webhook/webhooks.yaml").read_text()) if d]
    emu = Emulator(release="1.36").start()
    port = free_port()
    proc = None
    try:
        emu.apply_all(hooks)
        kc = emu.kubeconfig(str(tmp_path / "kc"))
        proc = subprocess.Popen([gangscale, "webhook", "--self-signed", "--kubeconfig", kc, "--config",
                                 str(ROOT / "config/deploy/config.yaml"), "--cert-dir", str(tmp_path / "tls"),
                                 "--listen", f"127.0.0.1:{port}", "--no-discovery", "--no-group-lookup"],
                                env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        ca = b""
        while time.monotonic() < deadline and not ca:
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            cfg = emu.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "", "gangscale")
            ca = base64.b64decode(cfg["webhooks"][0]["clientConfig"].get("caBundle") or "")
            time.sleep(0.2)
        assert ca.startswith(b"-----BEGIN CERTIFICATE-----"), "caBundle was not patched"
        ctx = ssl.create_default_context(cadata=ca.decode())
        ctx.check_hostname = False  # the pair names the Service, and this connects to 127.0.0.1
        body = None
        while time.monotonic() < deadline and body is None:
            try:
                body = urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=5).read()
            except OSError:
                time.sleep(0.2)
        assert body is not None and b"ok" in body
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        emu.stop()
