"""Test-only crash points: kill the process at a named step of the write-ahead protocol.

Invariant: without the `GANGSCALE_TEST_CRASH_AT` environment variable (never
set in a deployment) `crash_point` does nothing. With it set to a
comma-separated list of step names, the first step reached whose name is in
the list ends the process at once with `os._exit(137)`, as `kill -9` would:
no `finally`, no lease release, no state save. The e2e tests use it to make a
crash between "record saved", "call sent" and "call confirmed" deterministic.

Step names used by the controller: `record-saved` (the write-ahead records are
in the ConfigMap, no cloud call yet), `call-sent` (a mutating cloud call
returned, its result not yet recorded), `after-<Operation>` (the same, for
one AWS operation, e.g. `after-CreateFleet`), `call-confirmed` (the scale-up
or the purchase bought ahead returned, the records saying so not yet saved).
"""

from __future__ import annotations

import logging
import os
import sys

ENV = "GANGSCALE_TEST_CRASH_AT"
EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL

log = logging.getLogger("gangscale.controller")


def crash_point(name: str) -> None:
    """End the process here when the test-only variable names this step; otherwise nothing."""
    wanted = os.environ.get(ENV)
    if not wanted or name not in {w.strip() for w in wanted.split(",")}:
        return
    log.warning("test crash point reached; exiting", extra={"crash_point": name})
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(EXIT_CODE)
