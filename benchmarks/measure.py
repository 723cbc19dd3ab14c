"""Run `gangscale ...` in this process, then print its own peak RSS on stderr.

`os.wait4`'s ru_maxrss for a child includes what the child held before exec
(with fork or vfork from the runner, the runner's own memory), so it
overstates a small process started by a large one. VmHWM in /proc/self/status
starts afresh at exec: it is the planner process's own peak.
"""

from __future__ import annotations

import sys

MARK = "gangscale-peak-kb="


def peak_kb() -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


if __name__ == "__main__":
    from gangscale.cli import end_process, main

    code = main(sys.argv[1:])
    sys.stderr.write(f"\n{MARK}{peak_kb() or ''}\n")
    if sys.argv[1:2] == ["plan"] and not any(
        a.startswith(("--provider", "--execute")) for a in sys.argv
    ):
        end_process(code)  # as `gangscale plan` ends: no interpreter teardown (gangscale/cli.py)
    sys.exit(code)
