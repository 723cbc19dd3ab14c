"""Where a command's output goes: stdout, or `--output-file` (a write failure is one sentence, exit 2)."""

from __future__ import annotations

import sys
from pathlib import Path

from .loader import InputError


def output_format(chosen: str | None, output_file: str | None) -> str:
    """`-o` when given; else a table on a terminal and JSON for pipes and files."""
    return chosen or ("table" if sys.stdout.isatty() and not output_file else "json")


def emit(data: str | bytes, output_file: str | None) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not output_file:
        sys.stdout.buffer.write(raw) if hasattr(sys.stdout, "buffer") else sys.stdout.write(raw.decode())
        sys.stdout.flush()
        return
    try:
        Path(output_file).write_bytes(raw)
    except OSError as exc:
        raise InputError(f"{output_file}: cannot write: {exc.strerror or exc}") from None
