"""`simulated`: an in-memory cloud for the bundled example, the benchmarks and tests.

Groups are seeded from node-group templates (the CLI reads them from a catalog
with `gangscale.providers.open_provider`). Each launch takes
`provisioning_delay` seconds of the injectable clock and fails with
`failure_probability` (seeded RNG, so runs repeat). A failed launch drops
out of the target size and is reported as a CapacityError, as a cloud with
no room would; `atomic=True` makes a scale-up all-or-nothing instead.
State can be saved to a JSON file so separate CLI runs see the same cloud.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from .base import Discovery, Instance, LaunchFailure, NodeGroupProvider, ScaleResult
from .errors import CapacityError, NotFoundError, SizeLimitError
from .types import NodeGroup

# per group: the simulated cloud keeps one record per instance (~1 KB each)
MAX_SEEDED_INSTANCES = 100_000


@dataclass(slots=True)
class _SimInstance:
    id: str
    ready_at: float
    fails: bool
    zone: str = ""


@dataclass(slots=True)
class _SimGroup:
    template: NodeGroup
    target: int
    instances: list[_SimInstance]
    failures: list[tuple[float, str]]


class SimulatedProvider(NodeGroupProvider):
    """A cloud that always answers, slowly and sometimes with no capacity."""

    name = "simulated"

    def __init__(
        self,
        groups: list[NodeGroup],
        *,
        provisioning_delay: float = 0.0,
        failure_probability: float = 0.0,
        seed: int = 0,
        clock: Callable[[], float] = time.time,
        atomic: bool = False,
        state_file: str | Path | None = None,
    ):
        super().__init__()
        if not 0.0 <= failure_probability <= 1.0:
            raise ValueError(
                f"failure_probability must be within [0, 1], got {failure_probability}"
            )
        self.provisioning_delay = max(0.0, provisioning_delay)
        self.failure_probability = failure_probability
        self.clock = clock
        self._atomic = atomic
        self._rng = random.Random(seed)
        self._seq = 0
        self._state_file = Path(state_file) if state_file else None
        self._groups: dict[str, _SimGroup] = {}
        now = clock()
        too_big = [g for g in groups if g.current_size > MAX_SEEDED_INSTANCES]
        if too_big:  # a catalog's currentSize of millions would be millions of records (and a state file to match)
            g = too_big[0]
            raise ValueError(
                f"node group {g.name}: currentSize {g.current_size:,} is more instances than the simulated "
                f"cloud seeds ({MAX_SEEDED_INSTANCES:,} per group, one record each)"
            )
        for g in groups:
            zone = g.labels.get("topology.kubernetes.io/zone", "")
            members = [
                _SimInstance(self._new_id(g.name), now, False, zone) for _ in range(g.current_size)
            ]
            self._groups[g.name] = _SimGroup(
                replace(g, labels=dict(g.labels)), g.current_size, members, []
            )
        if self._state_file and self._state_file.exists():
            self._load(self._state_file)

    @property
    def atomic(self) -> bool:  # type: ignore[override]
        return self._atomic

    def _new_id(self, group: str) -> str:
        self._seq += 1
        return f"sim-{group}-{self._seq:06d}"

    def _get(self, group: str) -> _SimGroup:
        try:
            return self._groups[group]
        except KeyError:
            raise NotFoundError(
                "no such simulated group", group=group, provider=self.name
            ) from None

    def _settle(self) -> None:
        """Launches whose delay has passed either run or fail now."""
        now = self.clock()
        for g in self._groups.values():
            keep = []
            for inst in g.instances:
                if inst.fails and inst.ready_at <= now:
                    g.target -= 1
                    g.failures.append((inst.ready_at, inst.id))
                else:
                    keep.append(inst)
            g.instances = keep

    # ------------------------------------------------------------ interface
    def _discover(self) -> Discovery:
        self._settle()
        return Discovery(
            [
                replace(g.template, current_size=g.target, labels=dict(g.template.labels))
                for g in self._groups.values()
            ],
            [],
        )

    def target_size(self, group: str) -> int:
        self._settle()
        return self._get(group).target

    def _launch_fails(self, group: str, delta: int) -> list[bool]:
        """Whether each of `delta` new launches of `group` fails: one seeded stream for the whole provider."""
        return [self._rng.random() < self.failure_probability for _ in range(delta)]

    def increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        self._check_delta(group, delta, self.name)
        self._settle()
        g = self._get(group)
        if g.target + delta > g.template.max_size:
            raise SizeLimitError(
                f"target {g.target} + {delta} exceeds max size {g.template.max_size}",
                group=group,
                provider=self.name,
            )
        fails = self._launch_fails(group, delta)
        if self._atomic and any(fails):
            raise CapacityError(
                f"{sum(fails)} of {delta} nodes unavailable; none launched (atomic)",
                code="InsufficientInstanceCapacity",
                group=group,
                provider=self.name,
            )
        ready = self.clock() + self.provisioning_delay
        zone = g.template.labels.get("topology.kubernetes.io/zone", "")
        new = [_SimInstance(self._new_id(group), ready, f, zone) for f in fails]
        g.instances.extend(new)
        before = g.target
        g.target += delta
        self._save()
        return ScaleResult(group, before, g.target, tuple(i.id for i in new))

    def delete_instances(self, group: str, instance_ids: list[str]) -> ScaleResult:
        self._settle()
        g = self._get(group)
        members = {i.id for i in g.instances}
        strangers = [i for i in instance_ids if i not in members]
        if strangers:
            raise NotFoundError(
                f"instances {', '.join(strangers)} are not in the group",
                group=group,
                provider=self.name,
            )
        if g.target - len(instance_ids) < g.template.min_size:
            raise SizeLimitError("would go below min size", group=group, provider=self.name)
        before = g.target
        gone = set(instance_ids)
        g.instances = [i for i in g.instances if i.id not in gone]
        g.target -= len(instance_ids)
        self._save()
        return ScaleResult(group, before, g.target, tuple(instance_ids))

    def decrease_target_size(self, group: str, delta: int) -> ScaleResult:
        self._check_delta(group, delta, self.name)
        self._settle()
        g = self._get(group)
        if g.target - delta < max(len(g.instances), g.template.min_size):
            raise SizeLimitError(
                "would remove instances the group has, or go below min size",
                group=group,
                provider=self.name,
            )
        before = g.target
        g.target -= delta
        self._save()
        return ScaleResult(group, before, g.target)

    # ------------------------------------------------------- fault injection
    def fail_launches_in_flight(self, group: str, count: int | None = None) -> int:
        """Every launch of the group still in flight (or the first `count`) fails when it is due (a cloud that
        ran out of room)."""
        self._settle()
        now = self.clock()
        pending = [i for i in self._get(group).instances if i.ready_at > now][:count]
        for inst in pending:
            inst.fails = True
        self._save()
        return len(pending)

    def add_unlaunched_slots(self, group: str, delta: int) -> ScaleResult:
        """Raise the target without launching anything, as an ASG whose launches lag behind its desired size."""
        self._check_delta(group, delta, self.name)
        g = self._get(group)
        before = g.target
        g.target += delta
        self._save()
        return ScaleResult(group, before, g.target)

    def instances(self, group: str) -> list[Instance]:
        self._settle()
        now = self.clock()
        return [
            Instance(i.id, group, "running" if i.ready_at <= now else "launching", i.zone)
            for i in self._get(group).instances
        ]

    def launch_failures(self, group: str, since: datetime) -> list[LaunchFailure]:
        self._settle()
        start = since.timestamp()
        return [
            LaunchFailure(
                group,
                datetime.fromtimestamp(t, timezone.utc),
                CapacityError(
                    f"launch of {iid} failed: no capacity",
                    code="InsufficientInstanceCapacity",
                    group=group,
                    provider=self.name,
                ),
            )
            for t, iid in self._get(group).failures
            if t >= start
        ]

    def instance_groups(self) -> dict[str, str]:
        self._settle()
        return {i.id: name for name, g in self._groups.items() for i in g.instances}

    def close(self) -> None:
        self._save()

    # ---------------------------------------------------------- persistence
    def _save(self) -> None:
        if not self._state_file:
            return
        state = {
            "seq": self._seq,
            "groups": {
                name: {
                    "target": g.target,
                    "instances": [[i.id, i.ready_at, i.fails, i.zone] for i in g.instances],
                    "failures": g.failures,
                }
                for name, g in self._groups.items()
            },
        }
        tmp = self._state_file.with_suffix(self._state_file.suffix + ".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self._state_file)

    def _load(self, path: Path) -> None:
        """Targets and instances from an earlier run; groups no longer in the catalog are dropped."""
        try:
            state = json.loads(path.read_text())
            if not isinstance(state, dict) or not isinstance(state.get("groups", {}), dict):
                raise ValueError("expected a JSON object whose 'groups' is an object")
            self._seq = int(state.get("seq", 0))
            for name, s in state.get("groups", {}).items():
                if name in self._groups:
                    g = self._groups[name]
                    g.target = int(s["target"])
                    g.instances = [
                        _SimInstance(str(i[0]), float(i[1]), bool(i[2]), str(i[3]))
                        for i in s["instances"]
                    ]
                    g.failures = [(float(t), str(i)) for t, i in s.get("failures", [])]
        except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError) as exc:
            raise ValueError(f"{path}: not a simulated-cloud state file ({exc})") from None
