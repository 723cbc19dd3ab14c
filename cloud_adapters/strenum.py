"""`StrEnum` on every supported Python: `enum.StrEnum` from 3.11, the same contract before it.

A member is a `str` equal to its value, and `str()` and f-strings show the value (not
`Kind.NAME`), as `enum.StrEnum` does (https://docs.python.org/3/library/enum.html#enum.StrEnum).
"""

from __future__ import annotations

import sys
from enum import Enum


class StrEnumBefore311(str, Enum):
    """A str-valued enum whose `str()` and `format()` are its value: 3.10's stand-in for `enum.StrEnum`."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


if sys.version_info >= (3, 11):
    from enum import StrEnum
else:
    StrEnum = StrEnumBefore311

__all__ = ["StrEnum", "StrEnumBefore311"]
