"""Seeded traces for the simulator (`hour`, `week`): gang arrivals, run times, crashes, restarts, outages, slow clouds.

Invariant: a trace is a pure function of (kind, seed, gangs, failures); every policy replays the same
trace, and everything policy-dependent (when a gang starts, which pods a crash hits) is stated
relative to the gang's own start. Times are integer seconds from the start of the simulation.

The shape follows published GPU-cluster traces (docs/simulate.md cites them): most jobs ask for one
GPU and a few ask for 8 or more, which hold most of the GPU time; run times are heavy-tailed (roughly
log-normal, minutes to days); arrivals follow a daily wave, quieter at weekends. The parameters
below are ours, chosen to give that shape, not fitted to any one trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from ..generate import (
    A10G,
    GPU_TAINT,
    H100,
    L4,
    PRODUCT_KEY,
    ZONES,
    PodT,
    _a100_any,
    _cpu_pod,
    _h100,
    _launcher,
)

HOUR, DAY = 3600, 86400
WEEK_GANGS = 5000  # the week's gangs (`--gangs` sets another count)
GANG_APIS = (("native", 6), ("cosched", 3), ("volcano", 1))  # as the standard benchmark's backlogs

# (instance type, maxSize per zone, provisioning delay median seconds, log-normal sigma)
CATALOG = (
    ("m5.2xlarge", 40, 100, 0.35),
    ("c5.4xlarge", 20, 100, 0.35),
    ("g6.xlarge", 12, 150, 0.45),
    ("g5.xlarge", 12, 150, 0.45),
    ("p4d.24xlarge", 8, 300, 0.5),
    ("p5.48xlarge", 6, 300, 0.5),
)
MIN_DELAY, MAX_DELAY = 45, 1200  # a launch takes 45 s to 20 min

# Sizing the week's groups (the hour's sizes above are its floor): a family's maxSize per zone is
# HEADROOM x the trace's peak concurrent demand for it (every gang counted from its arrival for its run
# time, as if it started at once) over the zones. Below the peak the queue grows without bound while the
# wave is up and every pass re-plans the whole backlog; the headroom covers launches in flight, nodes
# draining, packing loss and a zone out in an outage. CPU pods of any gang go to the CPU groups, sized in
# m5.2xlarge-equivalents (7 cores and 28 GiB a node, after the kubelet's reserve). Integers throughout.
HEADROOM = (5, 4)  # 1.25
CPU_NODE_MILLICORES, CPU_NODE_MIB = 7000, 28 * 1024


@dataclass(frozen=True, slots=True)
class GangSpec:
    """One gang of the trace: its pods, quorum, arrival and how long it runs once started."""

    name: str
    namespace: str
    family: str  # llm | gpu-mix | cpu-mpi | basic
    api: str  # native | cosched | volcano | basic
    roles: tuple[tuple[str, int, PodT], ...]
    min_count: int
    arrival: int
    runtime: int  # seconds from start to completion (all pods removed)
    crash_after: int | None = None  # seconds after start one member fails and is recreated pending
    crash_member: int = 0

    @property
    def size(self) -> int:
        return sum(n for _, n, _ in self.roles)

    @property
    def gpus(self) -> int:
        return sum(n * t.gpus for _, n, t in self.roles)


@dataclass(frozen=True, slots=True)
class Outage:
    """Every launch in `group` between start and end fails (InsufficientInstanceCapacity); with `probability` below
    1, each fails with that probability (an ICE burst), drawn from the group's own burst stream."""

    group: str
    start: int
    end: int
    probability: float = 1.0

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"group": self.group, "start": self.start, "end": self.end}
        if self.probability < 1:
            out["probability"] = self.probability
        return out


@dataclass(slots=True)
class Trace:
    kind: str
    seed: int
    gangs: list[GangSpec]
    catalog: list[dict[str, Any]]  # node-group catalog entries (gangscale's catalog format)
    delays: dict[str, tuple[float, float]]  # group -> (median seconds, sigma) of its launch delay
    failures: float  # probability that one launch fails
    outages: list[Outage]
    restarts: list[int]  # controller restarts (seconds)
    horizon: int  # arrivals end by here; the engine then drains (runs on until nothing runs or is billed)
    # provisioningDeadlineSeconds (gangscale's default), also the stranded-hours yardstick
    deadline: int = 900
    notes: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        fams: dict[str, int] = {}
        for g in self.gangs:
            fams[g.family] = fams.get(g.family, 0) + 1
        return {
            "kind": self.kind,
            "seed": self.seed,
            "gangs": len(self.gangs),
            "families": dict(sorted(fams.items())),
            "pods": sum(g.size for g in self.gangs),
            "gpus": sum(g.gpus for g in self.gangs),
            "failures": self.failures,
            "horizon_seconds": self.horizon,
            "outages": [o.summary() for o in self.outages],
            "restarts": list(self.restarts),
            "node_groups": len(self.catalog),
            **self.notes,
        }


def catalog(
    sizes: dict[str, int] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, tuple[float, float]]]:
    """Catalog entries in three zones and each group's launch-delay distribution; `sizes`: maxSize per zone
    by instance type where it differs from CATALOG's (the week's, from `week_sizes`)."""
    entries, delays = [], {}
    for itype, max_size, median, sigma in CATALOG:
        max_size = (sizes or {}).get(itype, max_size)
        gpu = itype[0] in "gp"
        for z in ZONES:
            name = f"{itype.replace('.', '-')}-{z[-2:]}"
            e: dict[str, Any] = {
                "name": name,
                "instanceType": itype,
                "zone": z,
                "minSize": 0,
                "maxSize": max_size,
                "currentSize": 0,
            }
            if gpu:
                e["taints"] = [dict(GPU_TAINT)]
            entries.append(e)
            delays[name] = (float(median), sigma)
    return entries, delays


def _instance_type(t: PodT) -> str | None:
    """The catalog's instance type a GPU pod of the trace runs on (None: a CPU pod, any CPU group)."""
    if t.gpus == 8:
        return "p5.48xlarge" if t.selector.get(PRODUCT_KEY) == H100 else "p4d.24xlarge"
    if t.gpus == 1:
        return "g6.xlarge" if t.selector.get(PRODUCT_KEY) == L4 else "g5.xlarge"
    return None


def _milli_or_mib(q: str) -> int:
    """The trace's own quantities as integers: cores in millicores ("250m", "2"), memory in MiB ("512Mi", "4Gi")."""
    for suffix, scale in (("Mi", 1), ("Gi", 1024), ("m", 1)):
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) * scale
    return int(q) * 1000


def peak_demand(specs: list[GangSpec]) -> dict[str, int]:
    """Peak concurrent nodes each instance type would run if every gang started at its arrival: one node per
    GPU pod (the trace's GPU pods fill their instance's GPUs), CPU pods in m5.2xlarge-equivalents."""
    deltas: dict[int, dict[str, int]] = {}
    for g in specs:
        need: dict[str, int] = {}
        for _, n, t in g.roles:
            itype = _instance_type(t)
            if itype is not None:
                need[itype] = need.get(itype, 0) + n
            else:
                need["cpu-milli"] = need.get("cpu-milli", 0) + n * _milli_or_mib(t.cpu)
                need["cpu-mib"] = need.get("cpu-mib", 0) + n * _milli_or_mib(t.memory)
        for at, sign in ((g.arrival, 1), (g.arrival + g.runtime, -1)):
            d = deltas.setdefault(at, {})
            for k, v in need.items():
                d[k] = d.get(k, 0) + sign * v
    now: dict[str, int] = {}
    peak: dict[str, int] = {}
    for at in sorted(deltas):
        for k, v in deltas[at].items():
            now[k] = now.get(k, 0) + v
            peak[k] = max(peak.get(k, 0), now[k])
    out = {k: v for k, v in peak.items() if not k.startswith("cpu-")}
    out["m5.2xlarge"] = max(
        -(-peak.get("cpu-milli", 0) // CPU_NODE_MILLICORES),
        -(-peak.get("cpu-mib", 0) // CPU_NODE_MIB),
    )
    return out


def week_sizes(specs: list[GangSpec]) -> dict[str, int]:
    """maxSize per zone by instance type: HEADROOM x the peak demand over the zones, never below the hour's."""
    peak = peak_demand(specs)
    num, den = HEADROOM
    return {
        itype: max(size, -(-num * peak.get(itype, 0) // (den * len(ZONES))))
        for itype, size, _, _ in CATALOG
    }


def _one_gpu(product: str) -> PodT:
    return PodT("3", "12Gi", 1, {PRODUCT_KEY: product}, gpu_toleration=True)


def _lognormal(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(max(lo, min(hi, round(rng.lognormvariate(math.log(median), sigma)))))


def _api(rng: random.Random) -> str:
    return rng.choices([a for a, _ in GANG_APIS], [w for _, w in GANG_APIS])[0]


def _gang(
    rng: random.Random, i: int, arrival: int, max_runtime: int, crash_rate: float = 0.08
) -> GangSpec:
    """One gang: the family, its pods, and a heavy-tailed run time (bigger GPU gangs run longer)."""
    fam = rng.choices(["gpu-mix", "llm", "cpu-mpi", "basic"], [40, 25, 25, 10])[0]
    roles: list[tuple[str, int, PodT]]
    if fam == "gpu-mix":  # most GPU jobs: one GPU, sometimes a few replicas of it
        n = rng.choices([1, 2, 4], [60, 25, 15])[0]
        roles = [("worker", n, _one_gpu(rng.choice([L4, A10G])))]
        median = 1200.0
    elif (
        fam == "llm"
    ):  # a few jobs with many 8-GPU workers; half with a CPU launcher in the same gang
        n = rng.choices([1, 2, 4, 8, 16], [40, 30, 17, 9, 4])[0]
        h100 = rng.random() < 0.4 and n <= 8  # 16 H100 nodes exceed the catalog's p5 groups
        roles = [("worker", n, (_h100 if h100 else _a100_any)())]
        if rng.random() < 0.5:
            roles.insert(0, ("launcher", 1, _launcher()))
        median = 3600.0 * n**0.3
    elif fam == "cpu-mpi":
        n = _lognormal(rng, 8, 0.7, 2, 64)
        roles = [("rank", n, _cpu_pod(rng, small=True))]
        median = 900.0
    else:  # basic groups: independent pods
        n = _lognormal(rng, 4, 0.8, 1, 32)
        roles = [("task", n, _cpu_pod(rng, small=rng.random() < 0.7))]
        median = 600.0
    size = sum(k for _, k, _ in roles)
    api = "basic" if fam == "basic" else _api(rng)
    runtime = _lognormal(rng, median, 1.3, 120, max_runtime)
    crash_after = int(runtime * rng.uniform(0.1, 0.9)) if rng.random() < crash_rate else None
    ns = {"gpu-mix": "inference", "llm": "ml-research", "cpu-mpi": "hpc", "basic": "batch"}[fam]
    return GangSpec(
        f"{fam}-{i:05d}",
        ns,
        fam,
        api,
        tuple(roles),
        size if api != "basic" else 1,
        arrival,
        runtime,
        crash_after,
        rng.randrange(size),
    )


def _wave(t: float, weekly: bool) -> float:
    """Relative arrival rate: a daily wave peaking at 14:00, half as busy at weekends."""
    hour = (t % DAY) / HOUR
    rate = 1.0 + 0.7 * math.cos(2 * math.pi * (hour - 14) / 24)
    if weekly and (t // DAY) % 7 >= 5:
        rate *= 0.5
    return rate


def _arrivals(rng: random.Random, n: int, span: int, weekly: bool, start_hour: int) -> list[int]:
    """n arrival times in [0, span), drawn by rejection from the daily wave (starting at `start_hour`)."""
    out: list[int] = []
    while len(out) < n:
        t = rng.uniform(0, span)
        if rng.random() * 1.7 <= _wave(t + start_hour * HOUR, weekly):
            out.append(int(t))
    return sorted(out)


def make_trace(
    kind: str = "hour",
    seed: int = 0,
    gangs: int | None = None,
    failures: float = 0.1,
    hours: int | None = None,
) -> Trace:
    """The `hour` smoke trace (40 gangs at the afternoon peak) or the `week` (5,000 gangs from Monday 00:00).

    `hours`: only the first hours of the trace (its arrivals, outages and restarts), the horizon one hour
    after them (the engine then drains: docs/simulate.md)."""
    trace = _make_trace(kind, seed, gangs, failures)
    if hours is None:
        return trace
    cut = hours * HOUR
    trace.gangs = [g for g in trace.gangs if g.arrival < cut]
    trace.outages = [o for o in trace.outages if o.start < cut]
    trace.restarts = [t for t in trace.restarts if t < cut]
    trace.horizon = min(trace.horizon, cut + HOUR)
    trace.notes["first_hours"] = hours
    return trace


def _make_trace(kind: str, seed: int, gangs: int | None, failures: float) -> Trace:
    if kind == "scarce":
        return _scarce(seed, gangs, failures)
    if kind not in ("hour", "week"):
        raise ValueError(f"unknown trace {kind!r}; expected hour, week or scarce")
    rng = random.Random(f"gangscale-sim/{kind}/{seed}")
    entries, delays = catalog()
    notes: dict[str, Any] = {}
    gpu_groups = [e["name"] for e in entries if "taints" in e]
    if kind == "hour":
        n, span, horizon = gangs or 40, HOUR, HOUR + HOUR // 2
        times = _arrivals(rng, n, span, False, 14)
        specs = [_gang(rng, i, t, 4 * HOUR) for i, t in enumerate(times)]
        outages = [Outage(rng.choice(gpu_groups), 900, 2100)]
        restarts = [1800]
    else:
        n, span, horizon = gangs or WEEK_GANGS, 7 * DAY, 7 * DAY + 6 * HOUR
        times = _arrivals(rng, n, span, True, 0)
        specs = [_gang(rng, i, t, 3 * DAY) for i, t in enumerate(times)]
        notes["max_size_per_zone"] = sizes = week_sizes(specs)
        entries, delays = catalog(sizes)  # the same groups, sized for the week's load
        outages = sorted(
            (
                Outage(g, s, s + 2 * HOUR)
                for g, s in (
                    (rng.choice(gpu_groups), rng.randrange(span - 2 * HOUR)) for _ in range(3)
                )
            ),
            key=lambda o: o.start,
        )
        restarts = sorted(rng.randrange(span) for _ in range(7))
    return Trace(
        kind, seed, specs, entries, delays, failures, outages, restarts, horizon, notes=notes
    )


SCARCE_CAP = (
    50,
    70,
)  # a GPU type's maxSize over the zones: this share (%) of its peak demand, drawn per type
SCARCE_CRASHES = 0.25  # the share of gangs one of whose members crashes once while running
ICE_BURST = 0.3  # launches of a GPU group fail with this probability in its bursts


def _scarce(seed: int, gangs: int | None, failures: float) -> Trace:
    """The hour's arrivals under scarcity: each GPU type capped at 50-70% of its peak demand (over three zones, at
    least one node a zone), ICE bursts (two 10-minute windows per GPU group in which a launch fails with 30%), one
    zone's GPU groups out for 20 minutes, and a member crash in a quarter of the gangs."""
    rng = random.Random(f"gangscale-sim/scarce/{seed}")
    n, span, horizon = gangs or 40, HOUR, HOUR + HOUR // 2
    times = _arrivals(rng, n, span, False, 14)
    specs = [_gang(rng, i, t, 4 * HOUR, SCARCE_CRASHES) for i, t in enumerate(times)]
    peak = peak_demand(specs)
    gpu_types = [itype for itype, *_ in CATALOG if itype[0] in "gp"]
    sizes = {
        t: max(1, rng.randint(*SCARCE_CAP) * peak.get(t, 0) // (100 * len(ZONES)))
        for t in gpu_types
    }
    entries, delays = catalog(sizes)
    gpu_groups = [e["name"] for e in entries if "taints" in e]
    bursts = [
        Outage(g, s, s + 600, ICE_BURST)
        for g in gpu_groups
        for s in sorted(rng.randrange(0, span) for _ in range(2))
    ]
    zone = rng.choice(ZONES)[-2:]
    start = rng.randrange(600, span - 1200)
    down = [Outage(g, start, start + 1200) for g in gpu_groups if g.endswith(zone)]
    notes = {"max_size_per_zone": sizes, "peak_demand": {t: peak.get(t, 0) for t in gpu_types}}
    return Trace(
        "scarce",
        seed,
        specs,
        entries,
        delays,
        failures,
        [*down, *bursts],
        [1800],
        horizon,
        notes=notes,
    )


def launch_delay(rng: random.Random, median: float, sigma: float) -> int:
    """One launch's seconds until the node is Ready: log-normal around the group's median, capped."""
    return _lognormal(rng, median, sigma, MIN_DELAY, MAX_DELAY)
