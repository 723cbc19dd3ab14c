"""The autoscalers a simulation runs: gangscale's real controller, and dynamic versions of the baselines.

Invariant: a policy sees only what its real counterpart sees (the cluster's objects and the cloud
through the provider interface) and acts only through the provider (and, in gate mode, by lifting
scheduling gates). `gangscale-observe` / `gangscale-gate` run `gangscale.controller.Reconciler` itself,
with its records in an in-memory store that survives restarts; `ca`, `ca-atomic` and `karpenter` re-run
their one-shot baseline (benchmarks/baselines) on each scan, with the backoff and scale-down rules of
the real ones (defaults below). A scan that could change nothing (no new objects, no timer due) is
skipped: `next_wake` says when one could.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Protocol

import orjson

from cloud_adapters.base import instance_id_from_provider_id
from gangscale.api import SolveOptions
from gangscale.controller import keep, wakes
from gangscale.controller.config import ControllerConfig
from gangscale.controller.gates import NARROWED_KEY
from gangscale.controller.lifecycle import IN_FLIGHT, Record
from gangscale.controller.metrics import Metrics
from gangscale.controller.reconciler import Deps, Reconciler
from gangscale.controller.records import KEPT_WITHOUT_CAPACITY, ControllerState
from gangscale.ingest import CAPACITY_GATE, DEFAULT_NODE_GROUP_LABEL, Cluster, ingest
from gangscale.parse import ParseCache
from gangscale.snapshot import NodeViews, build_snapshot

from ..baselines import BASELINES
from ..world import build_world
from .cloud import SimCloud

# the controller settings `simulate --controller-config FILE` sets for both gangscale policies, as JSON in the
# environment so that the policies' worker processes see them too (`controller_overrides`)
CONTROLLER_CONFIG_ENV = "GANGSCALE_SIM_CONTROLLER_CONFIG"
POLICY_KEYS = ("apiVersion", "kind", "mode", "gateMode")  # what the policy itself decides

POLICIES = ("gangscale-observe", "gangscale-gate", "ca", "ca-atomic", "karpenter")
RESYNC = 600  # a safety scan this often while anything is pending; otherwise scans run on a change or a due timer

# the real ones' defaults: CA backs a group off 5 min after a failed scale-up, scales down a node unneeded
# for 10 min but not within 10 min of a scale-up; Karpenter marks an offering unavailable for 3 min and
# removes an empty node 15-25 s after it empties (kubernetes-sigs/karpenter pkg/controllers/disruption: the
# disruption loop polls every 10 s, `pollingPeriod`, with consolidateAfter 0s; its emptiness command waits
# `commandValidationDelay`, 15 s, then checks the nodes are still empty and not nominated, emptiness.go and
# validation.go): here 15 s from the scan that first saw it empty, i.e. at the scan 20 s on, the mean
BASELINE_RULES = {"ca": (300, 600, 600), "ca-atomic": (300, 600, 600), "karpenter": (180, 15, 0)}
# CA's node-group backoff and scale-up requests (kubernetes/autoscaler cluster-autoscaler/main.go flags
# --initial-node-group-backoff-duration 5m, --max-node-group-backoff-duration 30m,
# --node-group-backoff-reset-timeout 3h, --max-node-provision-time 15m; CABackoff below)
CA_BACKOFF_MAX, CA_BACKOFF_RESET, CA_MAX_PROVISION = 1800, 3 * 3600, 900


class CABackoff:
    """Cluster Autoscaler's backoff of node groups, as its ClusterStateRegistry keeps it.

    kubernetes/autoscaler, cluster-autoscaler/clusterstate/clusterstate.go and utils/backoff/exponential_backoff.go:
    - a scale-up registers a request per group (`registerOrUpdateScaleUpNoLock`: increase, time, expected by
      time + max-node-provision-time); a later scale-up of the group adds to it and moves both times;
    - launches that failed (`handleInstanceCreationErrorsForNodeGroup`: instances with an error, on AWS the ASG's
      placeholders after a Failed scaling activity) while the group is scaling up take their count off the
      request and back the group off (`registerFailedScaleUpNoLock` → `Backoff`);
    - `Backoff`: the initial duration, doubled (up to the max) when the group's previous backoff had already
      expired; a new failure during a backoff restarts it at the initial duration;
    - `updateScaleRequests`, every loop: a group with no upcoming node left (target <= provisioned) finished its
      scale-up: the request goes and so does the group's backoff (`RemoveBackoff`); a request past its expected
      time (15 min after the last scale-up of the group) timed out: the group backs off; backoff data older
      than the reset timeout since the last failure is dropped (`RemoveStaleBackoffData`).
    """

    def __init__(self, initial: int) -> None:
        self.initial = initial
        self.info: dict[str, tuple[int, int, int]] = {}  # group -> (duration, until, last failure)
        self.requests: dict[
            str, tuple[int, int]
        ] = {}  # group -> (increase, time of the last scale-up)

    def until(self) -> dict[str, int]:
        return {g: u for g, (_, u, _) in self.info.items()}

    def scaled_up(self, group: str, n: int, now: int) -> None:
        inc = self.requests.get(group, (0, now))[0]
        self.requests[group] = (inc + n, now)

    def back_off(self, group: str, now: int) -> None:
        duration = self.initial
        if group in self.info:
            old, until, _ = self.info[group]
            if until < now:
                duration = min(2 * old, CA_BACKOFF_MAX)
        self.info[group] = (duration, now + duration, now)

    def update(self, upcoming: dict[str, int], now: int) -> None:
        """`updateScaleRequests`: finished scale-ups clear the group's backoff, timed-out ones back it off."""
        self.info = {g: i for g, i in self.info.items() if i[2] + CA_BACKOFF_RESET >= now}
        for g, (_, at) in sorted(self.requests.items()):
            if upcoming.get(g, 0) <= 0:
                del self.requests[g]
                self.info.pop(g, None)
            elif at + CA_MAX_PROVISION < now:
                self.back_off(g, now)
                del self.requests[g]

    def failed(self, group: str, n: int, upcoming: int, now: int) -> None:
        """`handleInstanceCreationErrorsForNodeGroup`: n launches of the group failed since the last loop."""
        if n <= 0 or group not in self.requests or upcoming <= 0:
            return
        inc, at = self.requests[group]
        if inc - n <= 0:
            del self.requests[group]
        else:
            self.requests[group] = (inc - n, at)
        self.back_off(group, now)


class Policy(Protocol):
    name: str
    gated: bool  # new pods carry the gangscale.io/capacity gate (the webhook of gate mode)

    def scan(self, objects: list[dict[str, Any]], now: int) -> None: ...

    def next_wake(self, now: int, pending: bool) -> int | None: ...

    def restart(self) -> None: ...

    def given_back_at_deadlines(self) -> int: ...


class MemoryStore:
    """The controller's state as its ConfigMaps hold it (what a restart reads back: the records, the backoffs and the
    keep rule's state), kept in memory as JSON."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.blob = b"{}"
        self.saves = 0

    def save(self, state: ControllerState) -> None:
        state.prune(self.clock())
        kept = [
            r for r in state.records.values() if r.requested or r.state in KEPT_WITHOUT_CAPACITY
        ]
        self.blob = orjson.dumps(
            {
                "records": {r.gang: r.to_json() for r in kept},
                "backoff": state.backoff,
                "keep": keep.to_json(state.keep),
            }
        )
        self.saves += 1

    def load(self) -> ControllerState:
        doc = orjson.loads(self.blob)
        recs = (Record.from_json(v) for v in doc.get("records", {}).values())
        return ControllerState(
            {r.key: r for r in recs},
            {str(k): float(v) for k, v in doc.get("backoff", {}).items()},
            keep.from_json(doc["keep"]) if "keep" in doc else keep.KeepState(),
        )


def _json_patch(doc: dict[str, Any], ops: Sequence[Mapping[str, Any]]) -> None:
    """RFC 6902 add / remove on `doc` in place (the ops gate mode sends; `test` ops were checked by the caller)."""
    for op in ops:
        steps = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        cur: Any = doc
        for step in steps[:-1]:
            cur = cur[int(step)] if isinstance(cur, list) else cur.setdefault(step, {})
        last = steps[-1]
        if op["op"] == "add":
            if isinstance(cur, list):
                cur.insert(len(cur) if last == "-" else int(last), op["value"])
            else:
                cur[last] = op["value"]
        elif op["op"] == "remove":
            del cur[int(last) if isinstance(cur, list) else last]


class GateLifter:
    """`PodGateLifter` over the engine's pod objects: applies gate mode's release patch (the gate removed, the pod
    narrowed to its node), and deletes a stranded pod as its owner would recreate it: gated again, not narrowed."""

    def __init__(
        self, pods: MutableMapping[str, dict[str, Any]], on_lift: Callable[[str], None]
    ) -> None:
        self.pods = pods
        self.on_lift = on_lift
        self.template: dict[
            str, Any
        ] = {}  # pod key -> its affinity before the release (what its owner recreates)

    def remove(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> str | None:
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is None:
            return None
        gates = [g.get("name") for g in pod["spec"].get("schedulingGates", [])]
        if any(op.get("op") == "test" and op["value"] not in gates for op in ops):
            return "the gate is not there any more"
        self.template[key] = copy.deepcopy(pod["spec"].get("affinity"))
        pod = copy.deepcopy(
            pod
        )  # a new dict, as every change the engine makes: handed-over objects never change
        _json_patch(pod, ops)
        if not pod["spec"].get("schedulingGates"):
            pod["spec"].pop("schedulingGates", None)
        self.pods[key] = pod
        self.on_lift(pod["metadata"]["name"])
        return None

    def delete(self, namespace: str, name: str, uid: str) -> str | None:
        key = f"{namespace}/{name}"
        pod = self.pods.get(key)
        if pod is not None and not pod["spec"].get("nodeName"):
            pod = copy.deepcopy(
                pod
            )  # the recreated pod is a new object (handed-over objects never change)
            pod["spec"]["schedulingGates"] = [{"name": CAPACITY_GATE}]
            affinity = self.template.pop(key, None)  # the recreated pod is the template's again
            if affinity is None:
                pod["spec"].pop("affinity", None)
            else:
                pod["spec"]["affinity"] = affinity
            (pod["metadata"].get("annotations") or {}).pop(NARROWED_KEY, None)
            self.pods[key] = pod
        return None


def controller_overrides() -> dict[str, Any]:
    """The controller settings `--controller-config` asked for (camelCase keys; empty: the controller's defaults)."""
    return orjson.loads(os.environ.get(CONTROLLER_CONFIG_ENV) or "{}")


class Gangscale:
    """The real controller (enforce mode, observe mode on; gate mode `all` for gangscale-gate)."""

    def __init__(
        self,
        name: str,
        cloud: SimCloud,
        clock: Callable[[], float],
        pods: MutableMapping[str, dict],
        on_lift: Callable[[str], None],
        deadline: int,
        cache: ParseCache | None = None,
        gated: bool | None = None,
        fixed: Mapping[str, Any] | None = None,
    ) -> None:
        """`fixed`: controller settings a policy variant holds whatever `--controller-config` says."""
        self.name = name
        # parsed objects kept across passes (the engine's): the same reads, parsed once
        self.cache = cache
        self.gated = name == "gangscale-gate" if gated is None else gated
        self.cloud = cloud
        self.clock = clock
        # the baselines have no spending limits: neither has the simulated controller unless --controller-config says so
        unlimited = {"maxNodes": "unlimited", "maxDollarsPerHour": "unlimited"}
        settings = {
            "schedulerModel": "observe",
            "provisioningDeadlineSeconds": deadline,
            "solverTimeLimitSeconds": 2.0,
            "defaultNamespaceCap": unlimited,
            "clusterCeiling": {**unlimited, "maxGPUs": "unlimited"},
            **controller_overrides(),
            **(fixed or {}),
        }
        self.cfg = ControllerConfig(
            **settings, mode="enforce", gateMode="all" if self.gated else "off"
        )
        self.store = MemoryStore(clock)
        self.metrics = Metrics()
        self.lifter = GateLifter(pods, on_lift)
        # the engine's read of the objects it hands over, at their current version (set by the engine): the
        # controller's ingest of them would be the same call on the same objects (its label and Kueue settings
        # are ingest's defaults), so it takes that read instead of repeating it
        self.read_of: Callable[[list[dict[str, Any]]], Cluster | None] | None = None
        assert (
            self.cfg.node_group_label == DEFAULT_NODE_GROUP_LABEL and not self.cfg.plan_unadmitted
        )
        self.restarts = 0
        self.last_scan = -1
        self.rec = self._new()

    def _new(self) -> Reconciler:
        r = Reconciler(
            self.cfg,
            self.cloud,
            Deps(
                store=self.store,
                metrics=self.metrics,
                clock=self.clock,
                pod_gates=self.lifter,
                solve_options=SolveOptions(time_limit=2.0, workers=1, deterministic=True),
                parse_cache=self.cache,
                shared_read=lambda objects: (
                    self.read_of(objects) if self.read_of is not None else None
                ),
            ),
        )
        r.load_state()
        return r

    def restart(self) -> None:
        """A new process: only what the store saved survives (records, backoffs); it scans at once."""
        self.restarts += 1
        self.rec = self._new()
        self.last_scan = -1

    def scan(self, objects: list[dict[str, Any]], now: int) -> None:
        self.rec.reconcile(objects, leader=True)
        self.last_scan = now

    def next_wake(self, now: int, pending: bool) -> int | None:
        """The controller's own next timer after its last pass (`Reconciler.next_due`, as the live loop wakes on it),
        on the engine's whole seconds: due now when it fell between that pass and now."""
        t0 = self.clock() - now
        due = []
        if (t := self.rec.next_due(t0 + self.last_scan)) is not None:
            due.append(math.ceil(t - t0))
        if wakes.overdue_empty(
            self.rec.empty_since, self.rec.empty_until, self.cfg, t0 + self.last_scan
        ):
            due.append(
                self.last_scan + int(self.cfg.resync_seconds)
            )  # the live loop's resync retries it
        if self.rec.replan_soon:
            due.append(self.last_scan + 10)
        elif pending or any(r.state in IN_FLIGHT for r in self.rec.state.records.values()):
            due.append(self.last_scan + RESYNC)
        return min(due) if due else None

    def given_back_at_deadlines(self) -> int:
        return int(
            sum(
                s.value
                for m in self.metrics.released.collect()
                for s in m.samples
                if s.name.endswith("_total") and s.labels.get("why") == "timed-out"
            )
        )


class Baseline:
    """A baseline re-run each scan: scale up for what it places on new nodes, back off and scale down as its model."""

    gated = False

    def __init__(
        self,
        name: str,
        cloud: SimCloud,
        clock: Callable[[], float],
        cache: ParseCache | None = None,
    ) -> None:
        self.name = name
        self.cache = cache  # parse memos shared with the engine: the baselines' reads are not what is measured
        self.cloud = cloud
        self.clock = clock
        self.backoff_s, self.unneeded_s, self.after_add_s = BASELINE_RULES[name]
        # the engine's shared read of the objects it hands over
        self.read: Callable[[], Cluster] | None = None
        # the last scan's node views, reused for nodes that did not change (as the controller)
        self.views = NodeViews()
        self.restart()

    def restart(self) -> None:
        self.backoff: dict[str, int] = {}
        self.empty_since: dict[str, int] = {}
        self.last_add = -(10**9)
        self.failures_seen = self.cloud.failure_count()
        self.watch: dict[str, int] = {}  # groups with launches in flight -> since
        self.last_scan = -1
        self.ca = CABackoff(self.backoff_s) if self.name in ("ca", "ca-atomic") else None
        self.seen_failures: dict[str, int] = {}  # CA: failed launches per group already handled

    def _ca_loop(self, cluster, groups, now: int) -> None:
        """CA's ClusterStateRegistry for this loop (CABackoff): scale-up requests, failed launches, backoffs."""
        ca = self.ca
        assert ca is not None  # run for the CA policies only (`scan`)
        ready: dict[str, int] = {}
        for n in cluster.nodes:
            if n.node_group:
                ready[n.node_group] = ready.get(n.node_group, 0) + 1
        failed: dict[str, int] = {}
        if self.cloud.failure_count() != self.failures_seen:
            self.failures_seen = self.cloud.failure_count()
            epoch = datetime.fromtimestamp(self.clock() - now, timezone.utc)
            for g in sorted(ca.requests):
                total = len(self.cloud.launch_failures(g, epoch))
                failed[g] = total - self.seen_failures.get(g, 0)
                self.seen_failures[g] = total
        # a failed launch still counts in the target (an ASG's placeholder) until CA handles it
        upcoming = {
            g.name: g.current_size - ready.get(g.name, 0) + failed.get(g.name, 0) for g in groups
        }
        ca.update(upcoming, now)
        for g, n in sorted(failed.items()):
            ca.failed(g, n, upcoming.get(g, 0), now)
        self.backoff = ca.until()

    def _failed_groups(self, now: int) -> list[str]:
        """Groups whose launches failed since the scale-up (read from the cloud only where launches are in flight)."""
        t0 = self.clock() - now
        out = []
        for g, since in sorted(self.watch.items()):
            if self.cloud.launch_failures(g, datetime.fromtimestamp(t0 + since - 1, timezone.utc)):
                out.append(g)
        return out

    def scan(self, objects: list[dict[str, Any]], now: int) -> None:
        cluster = self.read() if self.read is not None else ingest(objects, cache=self.cache)
        discovered = self.cloud.discover().groups
        if self.ca is not None:
            self._ca_loop(cluster, discovered, now)
        else:
            if self.cloud.failure_count() != self.failures_seen:
                self.failures_seen = self.cloud.failure_count()
                for g in self._failed_groups(now):
                    self.backoff[g] = now + self.backoff_s
                    self.watch.pop(g, None)
            in_flight = {g for _, g, ready, _ in self.cloud.launches() if ready > self.clock()}
            self.watch = {g: t for g, t in self.watch.items() if g in in_flight}
        groups = [
            replace(g, max_size=g.current_size) if self.backoff.get(g.name, 0) > now else g
            for g in discovered
        ]
        world = build_world(build_snapshot(cluster, groups, views=self.views))
        placed = BASELINES[self.name](world) if world.pods else None
        if placed is not None and placed.new_nodes:
            want: dict[str, int] = {}
            for g, _ in placed.new_nodes:
                want[g] = want.get(g, 0) + 1
            for g, n in sorted(want.items()):
                self.cloud.increase_size(g, n)
                self.watch.setdefault(g, now)
                if self.ca is not None:
                    self.ca.scaled_up(g, n, now)
            self.last_add = now
        self._scale_down(cluster, set(placed.existing) if placed else set(), now)
        self.last_scan = now

    def _scale_down(self, cluster, nominated: set[str], now: int) -> None:
        """Empty nodes (no pod bound, none the scan placed there) past the unneeded time go back."""
        busy = {p.node_name for p in cluster.bound} | nominated
        empty = {n.name: n for n in cluster.nodes if n.name not in busy}
        self.empty_since = {k: self.empty_since.get(k, now) for k in empty}
        if now - self.last_add < self.after_add_s:
            return
        for name, since in sorted(self.empty_since.items()):
            node = empty[name]
            if now - since >= self.unneeded_s and node.node_group:
                self.cloud.delete_instances(
                    node.node_group, [instance_id_from_provider_id(node.provider_id)]
                )
                del self.empty_since[name]

    def next_wake(self, now: int, pending: bool) -> int | None:
        """The first timer (backoff expiry, a node's unneeded time) since the last scan; due now when it fell before."""
        due = [t for t in self.backoff.values() if t > self.last_scan]
        due += [
            t
            for s in self.empty_since.values()
            if (t := max(s + self.unneeded_s, self.last_add + self.after_add_s)) > self.last_scan
        ]
        if self.ca is not None:  # a scale-up request times out after max-node-provision-time
            due += [
                t
                for _, at in self.ca.requests.values()
                if (t := at + CA_MAX_PROVISION + 1) > self.last_scan
            ]
        if pending or self.watch or (self.ca is not None and self.ca.requests):
            due.append(self.last_scan + RESYNC)
        return min(due) if due else None

    def given_back_at_deadlines(self) -> int:
        return 0  # no baseline has provisioning deadlines


def make_policy(
    name: str,
    cloud: SimCloud,
    clock: Callable[[], float],
    pods: MutableMapping[str, dict],
    on_lift: Callable[[str], None],
    deadline: int,
    cache: ParseCache | None = None,
) -> Policy:
    if name in ("gangscale-observe", "gangscale-gate"):
        return Gangscale(name, cloud, clock, pods, on_lift, deadline, cache)
    if name in BASELINES:
        return Baseline(name, cloud, clock, cache)
    raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICIES)}")
