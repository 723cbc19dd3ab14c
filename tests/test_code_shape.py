"""The shape rules of the code that acts on the cloud: small functions, one way to name a gang."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 60
PACKAGES = ("gangscale/controller", "cloud_adapters")


def long_functions(package: str) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {lines} lines")
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_longer_than_60_lines(package):
    assert long_functions(package) == []


def test_the_controller_never_builds_a_gang_key_by_hand_or_parses_upcoming_node_names():
    for path in sorted((ROOT / "gangscale/controller").rglob("*.py")):
        text = path.read_text()
        assert '"/".join(' not in text, path
        assert "/upcoming-" not in text, path
        assert '.split(":", 1)' not in text, path
