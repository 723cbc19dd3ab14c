"""Every flag and argument of every command has help text; `--version`; `gangscale bench` names itself."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

import gangscale
from benchmarks.cli import build_parser as bench_parser
from gangscale.cli import build_parser


def undocumented(parser: argparse.ArgumentParser, path: str) -> list[str]:
    """`path flag` for each action of this parser and its subcommands' without help (help/version excepted)."""
    out = []
    for action in parser._actions:  # noqa: SLF001 - argparse has no public walk
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            out += [f"{path} {name}" for name, sub in action.choices.items() if not _choice_help(action, name)]
            for name, sub in action.choices.items():
                out += undocumented(sub, f"{path} {name}")
        elif not isinstance(action, argparse._HelpAction) and not (action.help and action.help.strip()):  # noqa: SLF001
            out.append(f"{path} {'/'.join(action.option_strings) or action.dest}")
    return out


def _choice_help(action: argparse._SubParsersAction, name: str) -> str | None:  # noqa: SLF001
    return next((c.help for c in action._choices_actions if c.dest == name), None)  # noqa: SLF001


@pytest.mark.parametrize("name, parser", [("gangscale", build_parser), ("gangscale bench", bench_parser)])
def test_every_flag_of_every_command_has_help_text(name, parser):
    assert undocumented(parser(), name) == []


def test_the_walk_finds_a_flag_without_help():
    p = argparse.ArgumentParser(prog="x")
    sub = p.add_subparsers().add_parser("cmd", help="a command")
    sub.add_argument("--quiet", action="store_true")
    assert undocumented(p, "x") == ["x cmd --quiet"]


def test_version_prints_the_package_version():
    proc = subprocess.run([sys.executable, "-m", "gangscale", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == f"gangscale {gangscale.__version__}"


def test_gangscale_bench_shows_its_usage_under_that_name():
    proc = subprocess.run([sys.executable, "-m", "gangscale", "bench", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: gangscale bench ")
    proc = subprocess.run([sys.executable, "-m", "gangscale", "bench", "generate"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "usage: gangscale bench generate" in proc.stderr


def test_gangscale_help_lists_bench():
    assert "bench" in build_parser().format_help()
