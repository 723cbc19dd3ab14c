"""Where the bundled data files (`config/`) live."""

from __future__ import annotations

import os
from pathlib import Path


def config_dir() -> Path:
    """`$GANGSCALE_CONFIG_DIR`, else the repository's `config/` (editable install)."""
    env = os.environ.get("GANGSCALE_CONFIG_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parent.parent / "config"
