"""Reference text states what is: no dates and no issue numbers in README.md, docs/ or config/.

History (what changed, when, and the measurements of the day) belongs in CHANGELOG.md, which is exempt.
Data is not history: an RFC 3339 timestamp in an example object or sample output (`2026-11-30T11:02:41Z`) is
allowed, and so are the fixed version strings listed in ALLOWED (a policy language or API version, not a day).
Quantities, software versions and Kubernetes releases (`1.35`, `10 s`, `v1beta1`, `$2,000`) match no pattern.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MONTH = (r"(?:Jan(?:uary)?|Feb(?:ruary)?|Mar(?:ch)?|Apr(?:il)?|May|June?|July?|Aug(?:ust)?|Sep(?:t(?:ember)?)?|"
         r"Oct(?:ober)?|Nov(?:ember)?|Dec(?:ember)?)\b\.?")
PATTERNS = {
    "day and month": re.compile(rf"\b\d{{1,2}}(?:st|nd|rd|th)? {MONTH}(?![a-z])"),
    "month and day": re.compile(rf"\b{MONTH} \d{{1,2}}(?:st|nd|rd|th)?\b(?![.,]\d)"),
    "month and year": re.compile(rf"\b{MONTH},? (?:19|20)\d\d\b"),
    "ISO date": re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b(?!T\d)"),
    "time of day": re.compile(r"\b\d{1,2}:\d\d(?::\d\d)? ?(?:UTC|GMT|am|pm)\b|\bon the (?:morning|afternoon|evening) of\b"),
    "issue number": re.compile(r"\b(?:[Ii]ssues?|PR|[Pp]ull request) #?\d+"),
    "#number": re.compile(r"(?<![\w/&.\]])#\d+\b(?!-)"),
}
# Fixed version strings that look like dates: the IAM policy language version, and botocore's EKS API version in
# the path of the service model docs/scheduling.md cites.
ALLOWED = ("2012-10-17", "eks/2017-11-01/")
TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".json", ".tpl", ".txt", ".toml", ".cfg", ".ini", ""}


def checked_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for top in ("docs", "config"):
        files += sorted(p for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    return files


def offences(text: str) -> list[str]:
    """Each date or issue number in the text, as `line N: <kind>: <match>`."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        clean = line
        for allowed in ALLOWED:
            clean = clean.replace(allowed, "")
        for kind, pattern in PATTERNS.items():
            found += [f"line {n}: {kind}: {m.group(0)!r}" for m in pattern.finditer(clean)]
    return found


@pytest.mark.parametrize("path", checked_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_reference_text_carries_no_date_and_no_issue_number(path):
    assert offences(path.read_text(encoding="utf-8", errors="replace")) == []


@pytest.mark.parametrize("text", [
    "measured 1-2 Dec", "on the morning of 2 Dec", "Before 2 Dec 2026 a timer", "(600 until 1 Dec 2026)",
    "as issue 10 asks", "issue 9's targets", "Issues 9 and 10", "fixed in #123", "measured 2026-11-30 (seed 17)",
    "after the June 2025 reduction", "Dec 2, 17:30", "two runs (05:38 and 06:04 UTC)", "see PR 42",
    "30 November", "Nov. 30",
])
def test_each_form_of_history_is_caught(text):
    assert offences(text), text


@pytest.mark.parametrize("text", [
    "alpha in 1.35 and 1.36, beta in 1.37", "10 s, not 600 s", "$1,524.51 per hour", "2,000 MB",
    "the 10k backlog: 10,003 pods", "KEP-3521 and KEP-5732", "Last Transition Time:  2026-11-30T11:02:41Z",
    '"Version": "2012-10-17"', "botocore's eks/2017-11-01/service-2.json", "`scheduling.k8s.io/v1beta1`",
    "[the tags](cloud.md#the-tags)", "[step 7](#7-turn-it-on)", "p95 of 30.1 min", "May the gang start",
    "kubernetes/autoscaler#5118", "&#160;", "seed 4, 38/38 gangs", "one per 5 minutes", "0.5 s + 40 µs per pod",
    "decide March's plan", "Decimal 2", "Market 3 of 5", "Octal 7", "Junction 4", "Mayhem 1",
])
def test_quantities_versions_and_anchors_are_not_history(text):
    assert offences(text) == [], text
