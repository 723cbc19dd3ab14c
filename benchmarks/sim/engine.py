"""The discrete-event engine: one trace, one policy, a simulated clock, the simulated cloud and the scheduler model.

Invariant: time advances on a 10 s grid (the autoscalers' scan interval) and jumps over idle
stretches to the next step where something can happen (an arrival, a completion, a crash, a
restart, a launch becoming Ready or failing, a policy timer). Each step runs, in order: trace
events → Nodes for launches that became Ready (and pods of vanished nodes fail) → kube-scheduler
(`gangscale.scheduling.simulate` binds pending, ungated pods by setting spec.nodeName) → the
policy's scan → the scheduler again if gates were lifted. Metrics integrate the state between
steps, which is constant there. Arrivals stop at the trace's horizon, the simulation does not: it runs
on until nothing is running and nothing is billed (every started gang ran to its end and the policy gave
its nodes back), or until `drain_cap` (the horizon + twice the trace's longest run time + 1 h), so every
policy pays for whole runs, not for the part of them that fits before the horizon. Same trace and seed,
same result: every choice is seeded and every iteration is over sorted keys. Every change the engine
makes to the objects bumps `version` (as an API server's resourceVersion); a read of an unchanged version
is shared (`read`). An object handed over is never changed in place: a change replaces it with a new dict
(so parses are keyed by the object, `ParseCache.frozen_objects`).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any

from gangscale.catalog import parse_catalog
from gangscale.ingest import Cluster, ingest
from gangscale.model import Node
from gangscale.parse import ParseCache
from gangscale.scheduling import SimNode, simulate

from ..generate import NODE_GROUP_LABEL, GangPlan, _pod, _podgroup
from .cloud import SimCloud
from .metrics import Recorder
from .oracle import OracleGate, parse_oracle
from .policies import make_policy
from .trace import GangSpec, Trace

T0 = 1_800_000_000  # the simulation's epoch, fixed so runs repeat; traces carry their own daily wave in seconds from 0
STEP = 10
# the drain's cap beyond twice the longest run time: every policy's scale-down timers
DRAIN_SLACK = 3600
# parsed pods kept before the cache starts afresh (a few versions of each live pod)
PARSED_OBJECTS = 20_000
GATE = "gangscale.io/capacity"
_T0_DT = datetime.fromtimestamp(T0, timezone.utc)


@dataclass(slots=True)
class GangRun:
    """What happened to one gang of the trace under this policy."""

    spec: GangSpec
    pods: list[str] = field(default_factory=list)  # current pod keys, member order
    start: int | None = None
    done: bool = False
    crashes: int = 0
    # a gang that started on arrival: the capacity it started on (`Engine._capacity_at_hand`); None: it waited
    on: str | None = None


class Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> float:
        return float(T0 + self.t)


class Engine:
    def __init__(
        self,
        trace: Trace,
        policy: str,
        *,
        seed: int = 0,
        progress: Callable[[int], None] | None = None,
    ):
        self.trace = trace
        self.seed = seed
        self.clock = Clock()
        groups, _ = parse_catalog(trace.catalog)
        self.cloud = SimCloud(
            groups,
            delays=trace.delays,
            failure_probability=trace.failures,
            outages=trace.outages,
            seed=seed,
            clock=self.clock,
            t0=T0,
        )
        self.group_gpus = {g.name: g.allocatable.get("nvidia.com/gpu", 0) for g in groups}
        self.pods: dict[str, dict[str, Any]] = {}
        self.podgroups: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.gangs: dict[str, GangRun] = {}
        self.waiting: set[str] = set()  # arrived, not started yet
        # parsed objects, shared by the engine's scheduler, the baselines and the controller: a pass re-reads every
        # object, and most are unchanged since the last one (the result is the same). The engine never changes an
        # object it handed over (a bind or a lifted gate makes a new dict), so they are keyed by the object itself
        self.parse_cache = ParseCache(objects=True, frozen_objects=True)
        self.pod_gang: dict[str, str] = {}
        self.templates: dict[str, Any] = {}  # pod key -> its PodT
        self.lifted = False
        # bumped by every change to the objects: a read of an unchanged version is reused
        self.version = 0
        self._read_at: tuple[int, Any] = (-1, None)
        self._sim_nodes: dict[int, tuple[Node, SimNode]] = {}  # `_sim_node`
        horizon = parse_oracle(policy)
        self.policy = (
            make_policy(
                policy,
                self.cloud,
                self.clock,
                self.pods,
                self._on_lift,
                trace.deadline,
                self.parse_cache,
            )
            if horizon is None
            else OracleGate(
                policy,
                self.cloud,
                self.clock,
                self.pods,
                self._on_lift,
                trace,
                horizon,
                self.parse_cache,
            )
        )
        if hasattr(self.policy, "read"):
            # the baselines read through the engine: one ingest per version of the objects
            self.policy.read = self.read
        if hasattr(self.policy, "read_of"):
            # so does the controller, of the objects a scan hands it
            self.policy.read_of = self.read_of
        self._handed: tuple[int, list[dict[str, Any]] | None] = (-1, None)
        self.events: list[tuple[int, int, str, str]] = []
        self._seq = 0
        for g in trace.gangs:
            self._push(g.arrival, "arrive", g.name)
        for t in trace.restarts:
            self._push(t, "restart", "")
        self.specs = {g.name: g for g in trace.gangs}
        self.rng = random.Random(f"engine/{seed}")
        self.rec = Recorder(trace, self.cloud, self.group_gpus)
        self.progress = progress
        self.scans = 0
        self.steps = 0
        # a gang that started by the horizon ends within one longest run time of it, and so can one that waited
        # for such a gang's nodes and started in the drain; a policy that never gives nodes back stops here
        self.drain_cap = (
            trace.horizon + 2 * max((g.runtime for g in trace.gangs), default=0) + DRAIN_SLACK
        )

    # ------------------------------------------------------------------ events
    def _push(self, t: int, kind: str, what: str) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, self._seq, kind, what))

    def _on_lift(self, _pod: str) -> None:
        self.lifted = True
        self.version += 1

    def _ts(self, t: int) -> str:
        return (_T0_DT + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _new_pod(self, run: GangRun, role: str, tmpl, name: str, t: int) -> str:
        s = run.spec
        link = None if s.api == "none" else (s.api, s.name)
        uid = f"{self.rng.getrandbits(64):016x}"
        pod = _pod(name, s.namespace, uid, self._ts(t), tmpl, role, link=link)
        pod["metadata"]["annotations"] = {
            **pod["metadata"].get("annotations", {}),
            "sim/role": role,
        }
        self.templates[f"{s.namespace}/{name}"] = tmpl  # for recreating a crashed member
        if self.policy.gated:
            pod["spec"]["schedulingGates"] = [{"name": GATE}]
        self.pods[f"{s.namespace}/{name}"] = pod
        self.version += 1
        self.pod_gang[f"{s.namespace}/{name}"] = s.name
        return f"{s.namespace}/{name}"

    def _arrive(self, name: str, t: int) -> None:
        s = self.specs[name]
        run = self.gangs[name] = GangRun(s)
        self.waiting.add(name)
        plan = GangPlan(s.name, s.namespace, s.api, list(s.roles), s.min_count)
        pg = _podgroup(plan, f"pg-{s.name}", self._ts(t))
        if pg is not None:
            self.podgroups[f"{s.namespace}/{s.name}"] = pg
        k = 0
        for role, n, tmpl in s.roles:
            for _ in range(n):
                run.pods.append(self._new_pod(run, role, tmpl, f"{s.name}-{role}-{k}", t))
                k += 1

    def _complete(self, name: str) -> None:
        run = self.gangs[name]
        for key in run.pods:
            self.pods.pop(key, None)
            self.pod_gang.pop(key, None)
            self.templates.pop(key, None)
        self.podgroups.pop(f"{run.spec.namespace}/{name}", None)
        run.pods, run.done = [], True
        self.waiting.discard(name)
        self.version += 1

    def _crash(self, key: str, t: int) -> None:
        """A member fails: its pod is deleted and its controller creates a new pending one."""
        name = self.pod_gang.get(key)
        pod = self.pods.pop(key, None)
        if name is None or pod is None:
            return
        self.pod_gang.pop(key)
        self.version += 1
        run = self.gangs[name]
        run.crashes += 1
        i = run.pods.index(key)
        role = pod["metadata"]["annotations"]["sim/role"]
        base = pod["metadata"]["name"].split("~")[0]
        run.pods[i] = self._new_pod(run, role, self.templates.pop(key), f"{base}~{run.crashes}", t)

    def _trace_events(self, t: int) -> bool:
        changed = False
        while self.events and self.events[0][0] <= t:
            _, _, kind, what = heapq.heappop(self.events)
            run = self.gangs.get(what)
            if kind == "arrive":
                self._arrive(what, t)
            elif kind == "complete" and run is not None and not run.done:
                self._complete(what)
            elif kind == "crash" and run is not None and not run.done:
                member = run.pods[run.spec.crash_member % len(run.pods)]
                if self.pods.get(member, {}).get("spec", {}).get("nodeName"):
                    self._crash(member, t)
            elif kind == "restart":
                self.policy.restart()
            changed = True
        return changed

    # ------------------------------------------------------------------- nodes
    def _node(self, iid: str, group: str) -> dict[str, Any]:
        g = self.cloud.groups_by_name[group]
        zone = g.labels.get("topology.kubernetes.io/zone", "")
        alloc = {k: (f"{v}m" if k == "cpu" else str(v)) for k, v in sorted(g.allocatable.items())}
        spec: dict[str, Any] = {"providerID": f"sim:///{zone}/{iid}"}
        if g.taints:
            spec["taints"] = [
                {"key": x.key, "value": x.value, "effect": x.effect} for x in g.taints
            ]
        created = datetime.fromtimestamp(self.clock(), timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )  # as the API server sets it
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": iid,
                "creationTimestamp": created,
                "labels": {**g.labels, NODE_GROUP_LABEL: group, "kubernetes.io/hostname": iid},
            },
            "spec": spec,
            "status": {
                "allocatable": alloc,
                "capacity": alloc,
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def _sync_nodes(self, t: int) -> bool:
        """Launches that became Ready register as Nodes; Nodes whose instance is gone disappear with their pods."""
        now = self.clock()
        live = {}
        for iid, group, ready_at, fails in self.cloud.launches():
            if not fails and ready_at <= now:
                live[iid] = group
        changed = False
        for iid in sorted(set(self.nodes) - set(live)):
            del self.nodes[iid]
            for key in sorted(k for k, p in self.pods.items() if p["spec"].get("nodeName") == iid):
                self._crash(key, t)
            changed = True
        for iid in sorted(set(live) - set(self.nodes)):
            self.nodes[iid] = self._node(iid, live[iid])
            self.rec.node_ready(iid, t)
            changed = True
        if changed:
            self.version += 1
        return changed

    # --------------------------------------------------------------- scheduler
    def _all(self) -> list[dict[str, Any]]:
        return [*self.podgroups.values(), *self.nodes.values(), *self.pods.values()]

    def objects(self) -> list[dict[str, Any]]:
        """The objects handed to a policy's scan (remembered: `read_of`)."""
        objs = self._all()
        self._handed = (self.version, objs)
        return objs

    def read_of(self, objects: list[dict[str, Any]]) -> Cluster | None:
        """`read` when `objects` is the list last handed over and nothing changed since (else None: not this read)."""
        version, handed = self._handed
        return self.read() if objects is handed and version == self.version else None

    def read(self) -> Cluster:
        """`ingest` of the objects, once per version of them (the scheduler's read and a baseline's scan share it;
        nothing writes to a Cluster or its frozen Pods and Nodes)."""
        if self._read_at[0] != self.version:
            self._read_at = (self.version, ingest(self._all(), cache=self.parse_cache))
        return self._read_at[1]

    def _schedule(self, t: int) -> bool:
        """kube-scheduler: bind the pending, ungated pods the scheduler model places on Ready nodes."""
        if not any(
            not p["spec"].get("nodeName") and not p["spec"].get("schedulingGates")
            for p in self.pods.values()
        ):
            return False
        cluster = self.read()
        gangs = []
        for g in cluster.gangs:
            pending = tuple(p for p in g.pending if not p.scheduling_gates)
            if pending:
                gangs.append(replace(g, pending=pending))
        if not gangs:
            return False
        nodes = [self._sim_node(n) for n in cluster.nodes if n.ready]
        res = simulate(nodes, gangs, bound=cluster.bound, seed=self.rng.randrange(1 << 30))
        for key, node in sorted(res.placement.items()):
            pod = self.pods[key]
            self.pods[key] = {
                **pod,
                "spec": {**pod["spec"], "nodeName": node},
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
            self.version += 1
        self._starts(t)
        return bool(res.placement)

    def _sim_node(self, n: Node) -> SimNode:
        """The scheduler's view of a parsed Node, made once per Node object (a parsed Node is shared by every read of
        the same object, and nothing writes to either)."""
        hit = self._sim_nodes.get(id(n))
        if (
            hit is None or hit[0] is not n
        ):  # the entry holds the Node: its id is not another's while kept
            hit = self._sim_nodes[id(n)] = (
                n,
                SimNode(
                    n.name,
                    {**n.labels, "kubernetes.io/hostname": n.name, "metadata.name": n.name},
                    tuple(n.taints),
                    dict(n.allocatable),
                    n.node_group,
                    unschedulable=n.unschedulable,
                ),
            )
        return hit[1]

    def _starts(self, t: int) -> None:
        """Gangs whose bound members reach minCount start now; their completion (and crash) is scheduled."""
        for name in sorted(self.waiting):
            run = self.gangs[name]
            bound = sum(1 for k in run.pods if self.pods[k]["spec"].get("nodeName"))
            if bound >= run.spec.min_count:
                self.waiting.discard(name)
                run.start = t
                if t <= -(-run.spec.arrival // STEP) * STEP:
                    run.on = self._capacity_at_hand(run)
                self._push(t + run.spec.runtime, "complete", name)
                if run.spec.crash_after is not None:
                    self._push(t + run.spec.crash_after, "crash", name)

    def _capacity_at_hand(self, run: GangRun) -> str:
        """What a gang that started on arrival started on: a node that had never run a pod (bought for another gang
        that has not started on it), else a node kept empty after a pod, else room beside other gangs' pods."""
        own = set(run.pods)
        nodes = {n for k in run.pods if (n := self.pods[k]["spec"].get("nodeName"))}
        shared = {
            p["spec"].get("nodeName")
            for k, p in self.pods.items()
            if k not in own and p["spec"].get("nodeName") in nodes
        }
        alone = nodes - shared
        if alone - self.rec.ever_used:
            return "never_ran_a_pod"
        return "kept_after_a_pod" if alone else "beside_other_pods"

    # -------------------------------------------------------------------- loop
    def _mutations(self) -> int:
        c = self.cloud.calls
        return c["increase_size"] + c["delete_instances"] + c["decrease_target_size"]

    def _pending(self) -> bool:
        return any(not p["spec"].get("nodeName") for p in self.pods.values())

    def _drained(self) -> bool:
        """Nothing runs, nothing is billed, no launch is on its way: no policy pays for anything any more."""
        return (
            not self.cloud.open
            and self.cloud.next_change() is None
            and all(run.start is None or run.done for run in self.gangs.values())
        )

    def _next(self, t: int, changed: bool) -> int:
        cands = [self.trace.horizon + STEP if t <= self.trace.horizon else self.drain_cap + STEP]
        if self.events:
            cands.append(self.events[0][0])
        ready = self.cloud.next_change()
        if ready is not None:
            cands.append(math.ceil(ready - T0))
        wake = self.policy.next_wake(t, self._pending())
        if wake is not None:
            cands.append(wake)
        if changed:
            cands.append(t + STEP)
        nxt = max(t + STEP, min(cands))
        return -(-nxt // STEP) * STEP

    def run(self) -> dict[str, Any]:
        t = 0
        failures = self.cloud.failure_count()
        horizon, end = self.trace.horizon, self.drain_cap
        while t <= self.drain_cap:
            self.clock.t = t
            if t > horizon:
                if (
                    self.rec.micro_by_horizon is None
                ):  # no step between the horizon and t: the bill then
                    self.rec.micro_by_horizon = self.cloud.micro_dollars(horizon)
                if self._drained():
                    end = t
                    break
            if (
                len(self.parse_cache.pods) > PARSED_OBJECTS
            ):  # old versions of pods pile up: start afresh
                self.parse_cache.forget_objects()
                self._sim_nodes.clear()
            self.rec.account(t, self.nodes, self.pods, self.templates, self.version)
            changed = self._trace_events(t)
            changed |= self._sync_nodes(t)
            changed |= self._schedule(t) if changed else False
            if self.cloud.failure_count() != failures:
                failures, changed = self.cloud.failure_count(), True
            wake = self.policy.next_wake(t, self._pending())
            if changed or (wake is not None and wake <= t):
                self.lifted, before = False, self._mutations()
                self.policy.scan(self.objects(), t)
                self.scans += 1
                if self.lifted:
                    self._schedule(t)
                changed = self.lifted or self._mutations() != before
                if self._mutations() != before:
                    self._sync_nodes(
                        t
                    )  # instances the scan deleted are gone now, not one step later
            self.steps += 1
            if self.progress is not None:
                self.progress(t)
            t = self._next(t, changed)
        self.clock.t = end
        self.rec.account(end, self.nodes, self.pods, self.templates)
        return self.rec.result(self.policy, self.gangs, horizon, end, self.scans, self.steps)
