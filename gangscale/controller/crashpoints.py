"""Test-only crash hook: die like `kill -9` at a named step of the write-ahead protocol.

Invariant: with `GANGSCALE_TEST_CRASH_AT` unset (every real deployment) `crash_point`
does nothing. Set to a step's name, the process exits at once with status 137 (no
cleanup, no lease release, no flush beyond what is already written) when it reaches
that step, so the end-to-end tests can kill the controller exactly inside the window
between saving a record and confirming the cloud call. Steps: "record-saved" (the
records are saved, the cloud not called yet) and "call-sent" (the cloud call
returned, its outcome not recorded yet).
"""

from __future__ import annotations

import os

ENV = "GANGSCALE_TEST_CRASH_AT"


def crash_point(name: str) -> None:
    """Exit with 137 here when the environment names this step."""
    if os.environ.get(ENV) == name:
        os._exit(137)
