"""Warnings with a cap: the plan's size follows what is pending, not how much junk the input holds.

Invariant: a WarningLog (and `summarise`) keeps at most PER_KIND lines of one kind and TOTAL
lines overall, each at most MAX_CHARS long; whatever is dropped is counted in one
"... and N more like this" line after the kept lines of its kind (or, for kinds with no line
kept, in one final "... and N more warnings"), so the output is at most 2 * TOTAL + 1 lines
whatever the input: a 20 MB list of integers gives 11 lines instead of ten million.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

PER_KIND = 10  # first lines kept of each kind of warning
TOTAL = 500  # lines kept overall, summaries included
MAX_CHARS = 500  # one warning line; a 10 MB object name must not make a 10 MB warning

_SUMMARY = re.compile(r"^\.\.\. and ([0-9,]+) more ")
_DIGITS = re.compile(r"[0-9]+")
_SUMMARY_KIND = "\0summary"  # lines that already summarise others: kept as they are


def _clip(message: str) -> str:
    return message if len(message) <= MAX_CHARS else message[: MAX_CHARS - 3] + "..."


def kind_of(message: str) -> str:
    """A guess at the kind of a free-text warning: the text with its numbers blanked out."""
    return _DIGITS.sub("#", message[:120])


class WarningLog:
    """Collects warnings, keeping the first PER_KIND of each kind and counting the rest."""

    def __init__(self, per_kind: int = PER_KIND, total: int = TOTAL) -> None:
        self.per_kind = per_kind
        self.total = total
        self._kept: list[tuple[str, str]] = []  # (kind, line)
        self._seen: Counter[str] = Counter()  # kind -> messages offered
        self._dropped_total = 0  # messages of kinds with no line kept (TOTAL was reached first)
        self._kept_kinds: set[str] = set()

    def wants(self, kind: str) -> bool:
        """Whether a message of `kind` would be kept: callers skip formatting one that would only be counted."""
        return self._seen[kind] < self.per_kind and (
            kind in self._kept_kinds or len(self._kept) < self.total
        )

    def add(self, message: str, kind: str | None = None) -> None:
        kind = kind if kind is not None else kind_of(message)
        if kind not in self._kept_kinds and len(self._kept) >= self.total:
            self._dropped_total += 1
            return
        self._seen[kind] += 1
        if self._seen[kind] > self.per_kind:
            return  # counted: its summary line follows the kind's kept lines
        if len(self._kept) >= self.total:
            self._seen[kind] -= 1
            self._dropped_total += 1
            return
        self._kept_kinds.add(kind)
        self._kept.append((kind, _clip(message)))

    def extend(self, messages: Iterable[str]) -> None:
        for m in messages:
            self.add_line(m)

    def add_line(self, message: str) -> None:
        """A line that may already be a summary ("... and N more ..."): keep its count, do not re-cap it."""
        m = _SUMMARY.match(message)
        if m is None:
            self.add(message)
        elif len(self._kept) < self.total:
            self._kept.append((_SUMMARY_KIND, _clip(message)))
        else:
            self._dropped_total += int(m.group(1).replace(",", ""))

    def lines(self) -> list[str]:
        """The kept warnings in arrival order, each over-full kind followed by its summary line."""
        last_of_kind = {kind: i for i, (kind, _) in enumerate(self._kept)}
        out: list[str] = []
        for i, (kind, line) in enumerate(self._kept):
            out.append(line)
            extra = self._seen[kind] - self.per_kind if kind != _SUMMARY_KIND else 0
            if extra > 0 and last_of_kind[kind] == i:
                out.append(f"... and {extra:,} more like this")
        if self._dropped_total:
            out.append(f"... and {self._dropped_total:,} more warnings")
        return out


def summarise(messages: Iterable[str]) -> list[str]:
    """Cap a list of warnings from anywhere (summary lines already in it keep their counts)."""
    log = WarningLog()
    log.extend(messages)
    return log.lines()
