"""The standard and quick suites: which backlogs, and which of them are timed repeatedly."""

from __future__ import annotations

from dataclasses import dataclass

from .generate import BacklogSpec


@dataclass(frozen=True, slots=True)
class Case:
    spec: BacklogSpec
    timing_runs: int = 1  # `gangscale plan` runs (median reported); >1 for the timing targets
    # the wall-time target for this backlog (docs/benchmarks.md)
    target_seconds: float | None = None
    target_mb: float | None = None  # the peak-memory target
    yaml_runs: int = 0  # also time the same cluster written as YAML
    # `gangscale plan --time-limit` for this backlog (None: the run's default)
    time_limit: float | None = None
    # time `gangscale plan` with no solver flags at all (the shipped defaults)
    default_flags: bool = False
    # also one run at this --time-limit (--relative-gap 0): the reference
    long_time_limit: float | None = None
    # observe mode's timed runs when they serve no target (None: timing_runs)
    observe_runs: int | None = None


def _s(
    name: str,
    family: str,
    pods: int,
    groups: int,
    nodes: int = 0,
    gangs: int | None = None,
    supply: float = 0.8,
    seed: int = 1,
) -> BacklogSpec:
    """Every backlog of the suites runs the EKS GPU cluster's DaemonSets (`generate.daemonsets`; `bench run
    --daemonsets off` leaves them out, to measure what they cost)."""
    return BacklogSpec(name, family, pods, groups, nodes, gangs, supply, seed, daemonsets=True)


STANDARD: list[Case] = [
    Case(_s("llm-100", "llm", 100, 12, supply=0.7)),
    Case(_s("llm-1k", "llm", 1000, 24, supply=0.7)),
    Case(_s("gpumix-300", "gpu-mix", 300, 36, supply=0.8)),
    Case(_s("gpumix-3k", "gpu-mix", 3000, 36, supply=0.8)),
    Case(_s("cpumpi-1k", "cpu-mpi", 1000, 15, supply=1.0)),
    Case(_s("cpumpi-10k", "cpu-mpi", 10000, 30, supply=0.9)),
    Case(_s("mixed-100", "mixed", 100, 5, supply=1.5)),
    Case(_s("mixed-1k", "mixed", 1000, 30, supply=0.9)),
    Case(_s("busy-1k", "busy", 1000, 30, nodes=300, supply=0.8)),
    Case(_s("busy-5k", "busy", 5000, 45, nodes=2000, supply=0.8)),
    Case(
        _s("target-10k", "mixed", 10000, 50, nodes=1000, gangs=500, supply=0.9),
        timing_runs=5,
        target_seconds=2.0,
        yaml_runs=1,
        default_flags=True,
        long_time_limit=60.0,
    ),
    Case(
        _s("target-100k", "mixed", 100000, 60, nodes=5000, gangs=5000, supply=0.9),
        timing_runs=5,
        target_seconds=15.0,
        target_mb=2048.0,
        default_flags=True,
        long_time_limit=60.0,
        observe_runs=1,
    ),  # observe mode at 100k: ~3 min a run and no target; the targets time the default
    # elastic gangs (80% minCount < size), 8 shapes incl. 1/4/8-GPU pods, tight maxSize, 30-90% used nodes
    Case(
        _s("elastic-10k", "elastic", 10000, 50, nodes=1000, gangs=500, supply=0.7),
        timing_runs=5,
        target_seconds=2.0,
        default_flags=True,
        long_time_limit=60.0,
    ),
]

QUICK: list[Case] = [
    Case(_s("q-llm", "llm", 60, 9, supply=0.7)),
    Case(_s("q-gpumix", "gpu-mix", 80, 15, supply=0.8)),
    Case(_s("q-cpumpi", "cpu-mpi", 200, 6, supply=1.0)),
    Case(_s("q-mixed", "mixed", 150, 12, supply=0.9)),
    Case(_s("q-busy", "busy", 200, 15, nodes=60, supply=0.8)),
    Case(_s("q-elastic", "elastic", 300, 15, nodes=40, gangs=30, supply=0.7)),
]

SUITES = {"standard": STANDARD, "quick": QUICK}
