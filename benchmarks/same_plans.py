"""Check that two source trees make the same plans: `gangscale plan -o json` on each backlog directory
(cluster.json + nodegroups.yaml, as `python -m benchmarks generate NAME --out DIR` writes), once per tree,
compared field by field with the timing field (`solver.seconds`) left out. Prints one line per backlog with
both wall times; exit 1 when any plan differs.

    python benchmarks/same_plans.py --old /tmp/base --new . /tmp/bl/target-10k /tmp/bl/elastic-10k ...

A performance change must pass this on the 10k backlogs and the small ones: faster, never different.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

TIMING = (
    "seconds",
    "patterns",
)  # wall time, and the pattern count its time-boxed enumeration reached


def _plan(tree: str, backlog: str) -> tuple[dict, float]:
    """The plan document of `tree`'s gangscale on `backlog`, and the whole process' wall time."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
    cmd = [
        sys.executable,
        "-m",
        "gangscale",
        "plan",
        "--cluster",
        os.path.join(backlog, "cluster.json"),
        "--nodegroups",
        os.path.join(backlog, "nodegroups.yaml"),
        "-o",
        "json",
    ]
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    wall = time.perf_counter() - t
    doc = json.loads(out)
    for k in TIMING:
        doc.get("solver", {}).pop(k, None)
    return doc, wall


def _first_difference(a: object, b: object, path: str = "") -> str | None:
    """The first path where two documents differ (None when equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}.{k} only in {'new' if k in b else 'old'}"
            d = _first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = _first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--old", required=True, help="source tree of the reference (e.g. `git archive` of main)"
    )
    p.add_argument("--new", required=True, help="source tree under test")
    p.add_argument("backlogs", nargs="+", help="backlog directories")
    args = p.parse_args(argv)
    bad = 0
    for b in args.backlogs:
        old, t_old = _plan(args.old, b)
        new, t_new = _plan(args.new, b)
        diff = _first_difference(old, new)
        bad += diff is not None
        print(
            f"{os.path.basename(b.rstrip('/')):14} {'SAME' if diff is None else 'DIFF ' + diff}  "
            f"old {t_old:.2f}s new {t_new:.2f}s  gangs {new['solver'].get('gangsStarted')} "
            f"cost {new.get('costPerHour')}",
            flush=True,
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
