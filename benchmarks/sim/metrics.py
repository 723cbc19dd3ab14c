"""What a policy did over the trace: time-to-start, never started, dollars, stranded and wasted capacity, API calls.

Invariant: the cluster's state is constant between two engine steps, so each metric is an exact
integral of integer seconds over those intervals (money in integer micro-dollars from the cloud's
bill). The run is the trace's horizon and its drain (the engine runs on, with no arrivals, until nothing
runs and nothing is billed, or its cap): every figure is of the whole run, so each started gang's run is
billed to its end under every policy. Definitions (docs/simulate.md):

- time-to-start: a gang's arrival to the step its bound members reach minCount, in the horizon or the
  drain; a gang never started counts with the time it waited until the end of the run (a lower bound),
  and is counted apart; its two parts: the gangs that started at the first step at or after their arrival
  (on the capacity at hand: no launch waited for), and the waits of the others (`time_to_start_parts`);
- stranded node-hours: Ready nodes running no pod (pods are only bound for started gangs and basic pods);
- stranded past a deadline: stranded time of a node that has not run a pod yet, from its launch plus the
  provisioning deadline plus one scan on (capacity bought for a gang that did not start in time; what a node
  held past that point counted stays counted if a gang starts on it later);
- stranded by cause: each stretch of a node's idleness, by what came before it (a pod, or none yet) and what
  ended it (a pod, or the node going back / the horizon): `StrandedCauses`;
- GPU-hours bought (the bill) vs used (GPU requests of bound pods), and bought for no gang: billed for instances
  that never ran a pod (bought for a gang that did not start on them);
- dollars wasted: the bill of instance-seconds that ran no pod (booting, Ready and idle), by the bill's own
  per-second rule;
- the bill's parts: booting (launch to its Node's registration, or the whole life of a launch that never
  registered), running a pod, idle (the rest), each priced as the bill prices a life; they sum to the bill.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from .cloud import SimCloud
from .trace import Trace

SERIES_POINTS = 720


def percentile(sorted_values: list[int], q: float) -> int | None:
    """Nearest-rank percentile of sorted integers (None for an empty list)."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


class StrandedCauses:
    """Stranded node-seconds split by cause, so a policy's idle capacity can be argued about: a stretch of idleness
    before a node's first pod is waiting (for the gang's other nodes, the bind) or, never ended by a pod, capacity
    bought for nothing; one after a pod is a node kept empty, for a gang that came (`reused`) or for none (`gone`).
    The four add up to the stranded node-seconds."""

    KINDS = (
        "before_first_pod_then_used",
        "never_used",
        "after_a_pod_then_reused",
        "after_a_pod_then_gone",
    )

    def __init__(self) -> None:
        self.open: dict[
            str, tuple[bool, int]
        ] = {}  # node -> (ran a pod before this stretch, its seconds so far)
        self.seconds = dict.fromkeys(self.KINDS, 0)

    def idle(self, iid: str, dt: int, ran_before: bool) -> None:
        self.open[iid] = (ran_before, self.open.get(iid, (ran_before, 0))[1] + dt)

    def close(self, iid: str, used: bool) -> None:
        ran_before, s = self.open.pop(iid)
        self.seconds[self.KINDS[2 * ran_before + (not used)]] += s

    def gone(self, nodes: dict[str, Any]) -> None:
        for iid in [i for i in self.open if i not in nodes]:
            self.close(iid, used=False)

    def hours(self) -> dict[str, float]:
        """Per cause, with the stretches still open at the end counted as ended without a pod."""
        s = dict(self.seconds)
        for ran_before, sec in self.open.values():
            s[self.KINDS[2 * ran_before + 1]] += sec
        return {k: round(v / 3600, 3) for k, v in s.items()}


ON_ARRIVAL_CAPACITY = ("never_ran_a_pod", "kept_after_a_pod", "beside_other_pods")


def started_on_arrival_by_capacity(gangs: dict[str, Any]) -> dict[str, int]:
    """The gangs of `time_to_start_parts`' `started_on_arrival` by the capacity they started on (the engine's
    `GangRun.on`): a node that had never run a pod (bought for another gang, which has not started on it), a node
    kept empty after a pod, or room beside other gangs' pods (in that order when a gang's nodes differ)."""
    out = dict.fromkeys(ON_ARRIVAL_CAPACITY, 0)
    for run in gangs.values():
        if run.spec.api != "basic" and run.on is not None:
            out[run.on] += 1
    return out


def time_to_start_parts(gangs: dict[str, Any]) -> dict[str, Any]:
    """Time-to-start in two parts: the started gangs that started at the first step at or after their arrival (on the
    capacity at hand, without waiting for a launch: the engine's `GangRun.on` is set), and the p50 and p95 wait of
    the others. A policy that keeps empty nodes starts more gangs on arrival; the others' waits are launches,
    failures and queueing."""
    on_arrival, later = 0, []
    for run in gangs.values():
        if run.spec.api == "basic" or run.start is None:
            continue
        if run.on is not None:
            on_arrival += 1
        else:
            later.append(run.start - run.spec.arrival)
    later.sort()
    return {
        "started_on_arrival": on_arrival,
        "waited_p50_seconds": percentile(later, 0.5),
        "waited_p95_seconds": percentile(later, 0.95),
    }


class Recorder:
    def __init__(self, trace: Trace, cloud: SimCloud, group_gpus: dict[str, int]) -> None:
        self.trace = trace
        self.cloud = cloud
        self.group_gpus = group_gpus
        self.last = 0
        self.stranded_s = 0
        self.past_deadline_s = 0
        self.gpu_used_s = 0
        self.ever_used: set[str] = set()
        self.used_s: dict[str, int] = {}  # per instance: seconds it ran a pod
        self.ready_at: dict[str, int] = {}
        self.causes = StrandedCauses()
        self.series: list[dict[str, Any]] = []
        self.every = max(10, trace.horizon // SERIES_POINTS)
        self.next_sample = 0
        # the bill at the horizon (set by the engine as it passes it)
        self.micro_by_horizon: int | None = None
        self._bound_at: tuple[int, tuple[set[str], int, int]] = (
            -1,
            (set(), 0, 0),
        )  # `account`'s sums, by version

    def node_ready(self, iid: str, t: int) -> None:
        self.ready_at[iid] = t

    def account(
        self,
        t: int,
        nodes: dict[str, Any],
        pods: dict[str, dict],
        templates: dict[str, Any],
        version: int | None = None,
    ) -> None:
        """Integrate [last step, t) with the state that held there (the engine calls this before changing it).

        `version`: the engine's version of its objects (None: unknown); the bound pods' nodes, count and GPUs are
        summed once per version, not once per step (a step that changed nothing has the same pods)."""
        dt = t - self.last
        if version is not None and version == self._bound_at[0]:
            used, running, gpus = self._bound_at[1]
        else:
            used = set()
            running = gpus = 0
            for key, p in pods.items():
                node = p["spec"].get("nodeName")
                if node:
                    used.add(node)
                    running += 1
                    gpus += templates[key].gpus
            self._bound_at = (-1 if version is None else version, (used, running, gpus))
        cut_after = self.trace.deadline + 10
        for iid in nodes:
            if iid in used:
                self.used_s[iid] = self.used_s.get(iid, 0) + dt
                if iid in self.causes.open:
                    self.causes.close(iid, used=True)
                continue
            self.stranded_s += dt
            self.causes.idle(iid, dt, iid in self.ever_used)
            if iid not in self.ever_used:
                bill = self.cloud.bill.get(iid)
                cut = (bill.start if bill else self.ready_at.get(iid, 0)) + cut_after
                self.past_deadline_s += max(0, t - max(self.last, cut))
        self.causes.gone(nodes)
        self.ever_used |= used
        self.gpu_used_s += dt * gpus
        if t >= self.next_sample:
            self.next_sample = t + self.every
            billed = len(self.cloud.open)  # an ended bill ended at or before its step
            self.series.append(
                {
                    "t": t,
                    "nodes": len(nodes),
                    "billed": billed,
                    "running_pods": running,
                    "dollars": self.cloud.micro_dollars(t) / 1e6,
                    "stranded_node_hours": round(self.stranded_s / 3600, 3),
                }
            )
        self.last = t

    def _gpu_hours_bought(self, end: int) -> float:
        s = sum(
            ((b.end if b.end is not None else end) - b.start) * self.group_gpus.get(b.group, 0)
            for b in self.cloud.bill.values()
        )
        return round(s / 3600, 2)

    def _gpu_hours_for_no_gang(self, end: int) -> float:
        """GPU-hours billed for instances that never ran a pod: bought for a gang that did not start on them (it
        could not complete, or started elsewhere), booting included."""
        s = sum(
            ((b.end if b.end is not None else end) - b.start) * self.group_gpus.get(b.group, 0)
            for iid, b in self.cloud.bill.items()
            if iid not in self.ever_used
        )
        return round(s / 3600, 2)

    def _rates(self) -> dict[str, int]:
        return {
            g.name: round(g.price_per_hour * 1_000_000) for g in self.cloud.groups_by_name.values()
        }

    def _booting(self, end: int) -> Iterator[tuple[str, int]]:
        """Each billed instance's group and its seconds from launch to its Node's registration (or its bill's end:
        a launch that never registered boots all its life, to `end` while still billed)."""
        for iid, b in self.cloud.bill.items():
            life_end = b.end if b.end is not None else end
            yield b.group, min(self.ready_at.get(iid, life_end), life_end) - b.start

    def _booting_hours(self, end: int) -> float:
        """Billed node-hours before a node was Ready (or its bill ended): launches are paid for while they boot."""
        return round(sum(s for _, s in self._booting(end)) / 3600, 3)

    def _micro_wasted(self, micro: int) -> int:
        """The bill less its instance-seconds that ran a pod (each priced as `SimCloud._micro` prices a life)."""
        rate = self._rates()
        used = sum(
            rate[self.cloud.bill[i].group] * s // 3600
            for i, s in self.used_s.items()
            if i in self.cloud.bill
        )
        return micro - used

    def _micro_booting(self, end: int) -> int:
        """The bill's instance-seconds from launch to the Node's registration (each priced as `SimCloud._micro` prices
        a life); a launch that never registered boots all its life."""
        rate = self._rates()
        return sum(rate[group] * s // 3600 for group, s in self._booting(end))

    def result(
        self,
        policy,
        gangs: dict[str, Any],
        horizon: int,
        end: int,
        scans: int,
        steps: int,
    ) -> dict[str, Any]:
        """The run's figures; `horizon`: the trace's (arrivals end there), `end`: the run's (drained, or the cap)."""
        waits, started, never, basic_started, by_horizon = [], 0, 0, 0, 0
        for run in gangs.values():
            if run.spec.api == "basic":
                basic_started += run.start is not None
                continue
            if run.start is not None:
                started += 1
                by_horizon += run.start <= horizon
                waits.append(run.start - run.spec.arrival)
            else:
                never += 1
                waits.append(end - run.spec.arrival)
        waits.sort()
        micro = self.cloud.micro_dollars(end)
        wasted, booting = self._micro_wasted(micro), self._micro_booting(end)
        parts = {"booting": booting, "idle": wasted - booting, "running_pods": micro - wasted}
        at_horizon = self.micro_by_horizon if self.micro_by_horizon is not None else micro
        calls = dict(sorted(self.cloud.calls.items()))
        return {
            "policy": policy.name,
            "gangs": started + never,
            "started": started,
            "never_started": never,
            "basic_groups_started": basic_started,
            "started_by_horizon": by_horizon,
            "started_after_horizon": started - by_horizon,
            "horizon_seconds": horizon,
            "end_seconds": end,
            "drained": not self.cloud.open,
            "instances_billed_at_end": len(self.cloud.open),
            "gangs_running_at_end": sum(
                1 for r in gangs.values() if r.start is not None and not r.done
            ),
            "time_to_start_seconds": {
                "p50": percentile(waits, 0.5),
                "p95": percentile(waits, 0.95),
                "p99": percentile(waits, 0.99),
                "max": waits[-1] if waits else None,
            },
            "time_to_start_parts": time_to_start_parts(gangs),
            "started_on_arrival_by_capacity": started_on_arrival_by_capacity(gangs),
            "micro_dollars": micro,
            "dollars": round(micro / 1e6, 2),
            "dollars_by_horizon": round(at_horizon / 1e6, 2),
            "bill_micro_dollars": parts,
            "bill_dollars": {k: round(v / 1e6, 2) for k, v in parts.items()},
            "dollars_per_started_gang": round(micro / started / 1e6, 2) if started else None,
            "wasted_dollars": round(wasted / 1e6, 2),
            "wasted_dollars_per_started_gang": round(wasted / started / 1e6, 2)
            if started
            else None,
            "stranded_node_hours": round(self.stranded_s / 3600, 3),
            "stranded_node_hours_past_deadline": round(self.past_deadline_s / 3600, 3),
            "stranded_node_hours_by_cause": self.causes.hours(),
            "booting_node_hours": self._booting_hours(end),
            "nodes_given_back_at_deadlines": policy.given_back_at_deadlines(),
            "gpu_hours_bought": self._gpu_hours_bought(end),
            "gpu_hours_used": round(self.gpu_used_s / 3600, 2),
            "gpu_hours_for_no_gang": self._gpu_hours_for_no_gang(end),
            "instances_launched": len(self.cloud.bill),
            "cloud_calls": calls,
            "cloud_calls_total": sum(calls.values()),
            "cloud_mutations": sum(
                calls.get(k, 0)
                for k in ("increase_size", "delete_instances", "decrease_target_size")
            ),
            "scans": scans,
            "steps": steps,
            "waits": waits,
            "series": self.series,
        }
