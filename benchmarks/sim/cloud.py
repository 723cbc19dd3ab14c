"""The simulator's cloud: `SimulatedProvider` with per-group launch delays, outages, a bill and a call count.

Invariant: it only adds to `cloud_adapters.simulated.SimulatedProvider` (through its `_launch_fails` hook and
nothing else): after each `increase_size` the new launches get a delay
drawn from their group's distribution, and a launch that fails (the per-launch failure probability,
or an outage of its group) fails fast, as InsufficientInstanceCapacity does. Both draws come from the
group's own seeded streams, so the k-th launch of a group is the same under every policy. Every call
through the provider interface is counted; the engine reads instance state through `launches()`, which
is not a cloud call.
Money is integer micro-dollars: an instance is billed per second from its launch to its end.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cloud_adapters.base import ScaleResult
from cloud_adapters.simulated import SimulatedProvider
from cloud_adapters.types import NodeGroup

from .trace import Outage, launch_delay

ICE_SECONDS = 20  # a launch without capacity is refused within seconds, not after the boot time
COUNTED = (
    "discover",
    "target_size",
    "increase_size",
    "delete_instances",
    "decrease_target_size",
    "instances",
    "launch_failures",
    "instance_groups",
)


@dataclass(slots=True)
class Billed:
    """One instance's life on the bill."""

    id: str
    group: str
    start: int
    end: int | None = None  # None: still running at the end of the simulation


class SimCloud(SimulatedProvider):
    """A simulated cloud that launches slowly (per group), fails per launch and in outages, and bills."""

    def __init__(
        self,
        groups: list[NodeGroup],
        *,
        delays: dict[str, tuple[float, float]],
        failure_probability: float,
        outages: list[Outage],
        seed: int,
        clock: Callable[[], float],
        t0: float,
    ) -> None:
        super().__init__(groups, failure_probability=failure_probability, seed=seed, clock=clock)
        self.delays = delays
        self.outages = outages
        self.t0 = t0
        self.seed = seed
        self._delay_rngs: dict[str, random.Random] = {}
        self._fail_rngs: dict[str, random.Random] = {}
        self._burst_rngs: dict[str, random.Random] = {}
        self.calls: Counter[str] = Counter()
        self.bill: dict[str, Billed] = {}
        # bills still running: the bill so far is their time plus `closed_micro`
        self.open: set[str] = set()
        # micro-dollars of the ended bills (a week launches thousands of instances)
        self.closed_micro = 0
        self.groups_by_name = {g.name: g for g in groups}

    def _stream(self, streams: dict[str, random.Random], kind: str, group: str) -> random.Random:
        """The seeded random stream of one kind of draw for one group (common random numbers): the k-th launch of
        a group gets the same delay and the same failure draw under every policy, whatever the other groups
        launched before it. With one stream for all groups, a policy's extra CPU launch would shift which later GPU
        launch draws the slow tail, and the policies' bills would differ by that luck."""
        rng = streams.get(group)
        if rng is None:
            rng = streams[group] = random.Random(f"{kind}/{self.seed}/{group}")
        return rng

    def _launch_fails(self, group: str, delta: int) -> list[bool]:
        rng = self._stream(self._fail_rngs, "failures", group)
        return [rng.random() < self.failure_probability for _ in range(delta)]

    def _now(self) -> int:
        return int(self.clock() - self.t0)

    def _in_outage(self, group: str, t: int) -> bool:
        """Whether a launch of `group` at `t` fails for an outage or an ICE burst (a burst's draw comes from the
        group's own burst stream, drawn only inside a burst: other traces' draws are not moved)."""
        hit = [o for o in self.outages if o.group == group and o.start <= t < o.end]
        if any(o.probability >= 1 for o in hit):
            return True
        burst = self._stream(self._burst_rngs, "bursts", group) if hit else None
        return burst is not None and burst.random() < max(o.probability for o in hit)

    # ---------------------------------------------------------- counted calls
    def discover(self):
        self.calls["discover"] += 1
        return super().discover()

    def target_size(self, group: str) -> int:
        self.calls["target_size"] += 1
        return super().target_size(group)

    def increase_size(self, group: str, delta: int, token: str = "") -> ScaleResult:
        self.calls["increase_size"] += 1
        res = super().increase_size(group, delta, token)
        now, t = self.clock(), self._now()
        median, sigma = self.delays.get(group, (120.0, 0.4))
        new = set(res.instance_ids)
        for inst in self._groups[group].instances:
            if inst.id not in new:
                continue
            inst.fails = inst.fails or self._in_outage(group, t)  # each launch of a burst draws
            delays = self._stream(self._delay_rngs, "delays", group)
            inst.ready_at = now + (
                ICE_SECONDS if inst.fails else launch_delay(delays, median, sigma)
            )
            if not inst.fails:
                self.bill[inst.id] = Billed(inst.id, group, t)
                self.open.add(inst.id)
        return res

    def delete_instances(self, group: str, instance_ids: list[str]) -> ScaleResult:
        self.calls["delete_instances"] += 1
        res = super().delete_instances(group, instance_ids)
        for iid in instance_ids:
            if iid in self.bill and self.bill[iid].end is None:
                b = self.bill[iid]
                b.end = self._now()
                self.open.discard(iid)
                self.closed_micro += self._micro(b, b.end)
        return res

    def decrease_target_size(self, group: str, delta: int) -> ScaleResult:
        self.calls["decrease_target_size"] += 1
        return super().decrease_target_size(group, delta)

    def instances(self, group: str):
        self.calls["instances"] += 1
        return super().instances(group)

    def launch_failures(self, group, since):
        self.calls["launch_failures"] += 1
        return super().launch_failures(group, since)

    def instance_groups(self) -> dict[str, str]:
        self.calls["instance_groups"] += 1
        return super().instance_groups()

    # ------------------------------------------------------- the engine's view
    def launches(self) -> list[tuple[str, str, float, bool]]:
        """(instance id, group, ready at (epoch), fails) of every instance the groups hold; not a cloud call."""
        self._settle()
        return [
            (i.id, name, i.ready_at, i.fails)
            for name, g in sorted(self._groups.items())
            for i in g.instances
        ]

    def failure_count(self) -> int:
        """Launch failures so far (all groups): a change wakes the policies that watch them."""
        self._settle()
        return sum(len(g.failures) for g in self._groups.values())

    def next_change(self) -> float | None:
        """The earliest time a launch in flight becomes Ready or fails (epoch), None when none is in flight."""
        now = self.clock()
        due = [i.ready_at for g in self._groups.values() for i in g.instances if i.ready_at > now]
        return min(due) if due else None

    def _micro(self, b: Billed, end: int) -> int:
        """One instance's bill from its launch to `end`: integer micro-dollars, per second."""
        return (
            round(self.groups_by_name[b.group].price_per_hour * 1_000_000) * (end - b.start) // 3600
        )

    def micro_dollars(self, end: int) -> int:
        """The bill so far: integer micro-dollars, per second of every instance's life (running ones until `end`)."""
        return self.closed_micro + sum(self._micro(self.bill[i], end) for i in self.open)
