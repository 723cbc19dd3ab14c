"""How and where a command's output is written: one `render(doc, fmt)` for every command.

Invariant: every document gangscale prints or saves (plans, `--execute` reports,
`check`, `dump`, benchmark results and baselines) is serialised here, so JSON is
always two-space indented with a final newline and YAML always keeps key order.
Output goes to stdout, or `--output-file` (a write failure is one sentence, exit 2).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from .loader import InputError
from .plan import Plan, render_markdown, render_table

TEXT_FORMATS = ("table", "markdown")


def render(
    doc: Any, fmt: str, text: Callable[[str], str] | None = None, *, header: Sequence[str] = ()
) -> str:
    """`doc` as `json` or `yaml`; `table`/`markdown` are the command's own `text(fmt)` (JSON when it has none).

    `header` lines become YAML comments (JSON has no comments: they are left out there).
    numpy scalars and arrays are written as numbers (benchmark results carry them).
    """
    if fmt in TEXT_FORMATS and text is not None:
        return text(fmt)
    if fmt == "yaml":
        comments = "".join(f"# {line}\n" for line in header)
        return comments + yaml.safe_dump(doc, sort_keys=False)
    return (
        orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode() + "\n"
    )


def render_plan(plan: Plan, fmt: str, execution: Any = None) -> str:
    """A plan; after `--execute` its report (an `apply.ExecutionReport`) as an `execution` key or text section."""
    doc = plan.to_dict()
    if execution is not None:
        doc["execution"] = execution.to_dict()

    def text(kind: str) -> str:
        shown = render_markdown(plan) if kind == "markdown" else render_table(plan)
        return shown if execution is None else shown + "\n" + execution.render_text()

    return render(doc, fmt, text)


def output_format(chosen: str | None, output_file: str | None) -> str:
    """`-o` when given; else a table on a terminal and JSON for pipes and files."""
    return chosen or ("table" if sys.stdout.isatty() and not output_file else "json")


def emit(data: str | bytes, output_file: str | None) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if not output_file:
        sys.stdout.buffer.write(raw) if hasattr(sys.stdout, "buffer") else sys.stdout.write(
            raw.decode()
        )
        sys.stdout.flush()
        return
    try:
        Path(output_file).write_bytes(raw)
    except OSError as exc:
        raise InputError(f"{output_file}: cannot write: {exc.strerror or exc}") from None
