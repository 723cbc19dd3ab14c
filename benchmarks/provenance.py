"""Where a benchmark or simulator result was measured: the machine and the code's commit.

Written beside every result file (`results.json`'s `environment`, the simulator's `timing.json`), so
`python -m benchmarks results` can say what each table came from. The commit is read from git when the
code runs from a checkout, else None; a tree with uncommitted changes is marked `dirty`.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def commit() -> dict[str, object] | None:
    """The checkout's HEAD commit and whether tracked files differ from it; None outside a git checkout."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            check=False,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"sha": head.stdout.strip(), "dirty": bool(status.stdout.strip())}


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), else None."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def environment() -> dict[str, object]:
    """The machine and interpreter a result was measured on, and the code's commit."""
    from importlib.metadata import version

    return {
        "python": platform.python_version(),
        "ortools": version("ortools"),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "commit": commit(),
    }
