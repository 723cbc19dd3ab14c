"""argparse `type=` functions for every numeric flag of every command.

Invariant: a numeric flag that parses is finite and inside the range its
consumer accepts (CP-SAT's 32-bit seed, a worker count OR-Tools does not abort
on, a deadline `time.monotonic()` can add); anything else stops at parse time
with argparse's one-line usage error and exit 2, never a traceback later.
Import-light: only the standard library.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_SECONDS = 7 * 24 * 3600.0  # a week: far above any useful budget or timeout, far below overflow
MAX_WORKERS = 256  # CP-SAT aborts the process on thousands of workers
MAX_SEED = 2**31 - 1  # CP-SAT's random_seed is an int32


def _number(text: str, kind: Callable[[str], float | int]) -> float | int:
    try:
        return kind(text.strip())
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def float_in(low: float, high: float, *, low_open: bool = False) -> Callable[[str], float]:
    """A finite float within [low, high] (or (low, high] when `low_open`)."""

    def parse(text: str) -> float:
        v = float(_number(text, float))
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if v > high or v < low or (low_open and v == low):
            lo = f"({low:g}" if low_open else f"[{low:g}"
            raise argparse.ArgumentTypeError(f"{text!r} is outside {lo}, {high:g}]")
        return v

    parse.__name__ = "number"  # argparse names the type in "invalid number value"
    return parse


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An integer within [low, high], written in decimal digits."""

    def parse(text: str) -> int:
        if not text.strip().lstrip("+-").isascii():  # int() accepts "١٢"; a flag should not
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
        v = int(_number(text, int))
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is outside [{low}, {high}]")
        return v

    parse.__name__ = "integer"
    return parse


seconds = float_in(0.0, MAX_SECONDS, low_open=True)  # a positive, finite duration


def time_limit(text: str) -> float | None:
    """`auto` (None: the planner sizes the budget by what is pending) or positive, finite seconds."""
    return None if text.strip().lower() == "auto" else seconds(text)


time_limit.__name__ = "seconds or 'auto'"
fraction = float_in(0.0, 1.0)  # e.g. a relative gap
workers = int_in(0, MAX_WORKERS)  # 0: one per core
seed = int_in(0, MAX_SEED)
