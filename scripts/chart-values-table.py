#!/usr/bin/env python3
"""Write the values table of config/helm/gangscale/README.md from the `# --` comments of its values.yaml.

A `# -- text` comment (continued by the `# ...` lines right after it) documents the key on the next line, by its
dotted path (`image.digest`); the default is that key's value in values.yaml. The table goes between the
README's `<!-- values-table:start -->` and `<!-- values-table:end -->` lines.

    python scripts/chart-values-table.py          # rewrite the README's table
    python scripts/chart-values-table.py --check  # exit 1 when the committed table is out of date
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "config" / "helm" / "gangscale"
START, END = "<!-- values-table:start -->", "<!-- values-table:end -->"
KEY = re.compile(r"^(\s*)([A-Za-z0-9_.\-]+):(\s|$)")
DOC = re.compile(r"^\s*# -- ?(.*)$")
MORE = re.compile(r"^\s*#(?! --) ?(.*)$")
MAX_DEFAULT = 60  # longer defaults are left to values.yaml


def documented(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for every key a `# --` comment documents, in file order."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    desc: list[str] | None = None
    for line in text.splitlines():
        if m := DOC.match(line):
            desc = [m.group(1).strip()]
        elif desc is not None and (m := MORE.match(line)):
            desc.append(m.group(1).strip())
        elif m := KEY.match(line):
            indent = len(m.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, m.group(2)))
            if desc is not None:
                out.append((".".join(k for _, k in stack), " ".join(d for d in desc if d)))
            desc = None
        else:
            desc = None
    return out


def lookup(values: Any, path: str) -> Any:
    for part in path.split("."):
        values = values[part]
    return values


def type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object",
            type(None): "null"}[type(value)]


def default_cell(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return f"`{text}`" if len(text) <= MAX_DEFAULT else "see values.yaml"


def table(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    rows = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for key, desc in documented(values_text):
        value = lookup(values, key)
        rows.append(f"| `{key}` | {type_name(value)} | {default_cell(value)} | {desc.replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"


def with_table(readme: str, values_text: str) -> str:
    """The README with its table replaced; a README without both markers is a ValueError."""
    if START not in readme or END not in readme:
        raise ValueError(f"README.md needs the lines {START} and {END}")
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table(values_text)}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md's table is out of date")
    ap.add_argument("--chart", type=Path, default=CHART, help="chart directory (default config/helm/gangscale)")
    args = ap.parse_args(argv)
    readme_path = args.chart / "README.md"
    readme = readme_path.read_text()
    new = with_table(readme, (args.chart / "values.yaml").read_text())
    if args.check:
        if new != readme:
            print(f"{readme_path}: the values table is out of date: run scripts/chart-values-table.py",
                  file=sys.stderr)
            return 1
        return 0
    readme_path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
