"""One pass of the controller: read, plan, act, and move every gang through its states.

States: waiting-for-podgroup, below-quorum, planned, provisioning, ready,
running, infeasible, timed-out, cancelled (plus invalid and deferred, with the
planner's meaning). Only the leader in `enforce` mode calls the cloud; in
`dry-run` it plans, reports and emits events, and changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from cloud_adapters.base import NodeGroupProvider, instance_id_from_provider_id
from cloud_adapters.errors import CloudError

from ..execute import ExecutionReport, apply_plan, assign_node_groups
from ..ingest import Cluster, ingest
from ..model import Gang, NodeGroup
from ..plan import Plan
from ..planner import make_plan
from ..snapshot import ClusterSnapshot, PreDecision, build_snapshot
from ..solver.params import SolveOptions
from .config import ControllerConfig
from .events import EventSink
from .limits import apply_gang_limits, over_caps
from .metrics import Metrics
from .records import TERMINAL, ControllerState, Record, StateStore

log = logging.getLogger("gangscale.controller")

DEADLINE_ANNOTATION = "gangscale.io/provisioning-deadline-seconds"
BACKOFF_KINDS = ("capacity", "quota", "permission", "not-found", "unsupported")
STATES = ("waiting-for-podgroup", "below-quorum", "planned", "provisioning", "ready", "running", "infeasible",
          "timed-out", "cancelled", "invalid", "deferred")


def gang_id(g: Gang) -> str:
    return f"{g.namespace}/{g.name}/{g.api}"


class Reconciler:
    def __init__(self, cfg: ControllerConfig, provider: NodeGroupProvider, *, store: StateStore | None = None,
                 events: EventSink | None = None, metrics: Metrics | None = None, clock=time.time) -> None:
        self.cfg = cfg
        self.provider = provider
        self.store = store
        self.events = events or EventSink(None)
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.state = ControllerState()
        self.empty_since: dict[str, float] = {}
        self.replan_soon = False  # a cloud failure moved gangs: run again without waiting for a change
        self.groups: dict[str, NodeGroup] = {}  # the last discovery, by name

    def load_state(self) -> None:
        if self.store is not None:
            self.state = self.store.load()

    # ------------------------------------------------------------------ pass

    def reconcile(self, objects: list[dict[str, Any]], *, leader: bool) -> Plan:
        now = self.clock()
        enforce = leader and self.cfg.mode == "enforce"
        self.replan_soon = False
        cluster = ingest(objects, node_group_label=self.cfg.node_group_label)
        discovery = self.provider.discover()
        self.groups = {g.name: g for g in discovery.groups}
        assign_node_groups(cluster, self.provider)
        if enforce:
            self._watch_launches(now)
        groups = [self._backed_off(g, now) for g in discovery.groups]
        snap = build_snapshot(cluster, groups, discovery.warnings)
        first_seen = {key: r.first_seen for key, r in self.state.records.items()}
        apply_gang_limits(snap, self.cfg, now, {g.key: first_seen.get(gang_id(g), 0.0) for g in snap.gangs})
        plan = self._plan_within_caps(snap)
        report = None
        if enforce and plan.scale_up:
            report = apply_plan(plan, self.provider, {g.name: g for g in discovery.groups}, cluster)
            for action in report.actions:
                if action.status == "failed" and action.error_kind in BACKOFF_KINDS:
                    self._back_off(action.group, now, f"{action.error_kind}: {action.message}")
            for err in report.launch_failures:
                self._back_off(err.group, now, str(err))
        self._lifecycle(snap, cluster, plan, report, now, enforce)
        if enforce:
            self._expire(cluster, now)
            if self.cfg.scale_down:
                self._scale_down_empty(cluster, plan, now)
        self._observe(plan)
        if leader and self.store is not None:
            self.store.save(self.state)
        return plan

    # ---------------------------------------------------------------- plan

    def _plan_within_caps(self, snap: ClusterSnapshot) -> Plan:
        opts = SolveOptions(time_limit=self.cfg.solver_time_limit_seconds)
        plan = make_plan(snap, opts)
        inflight_n, inflight_d = self._inflight_by_namespace()
        for _ in range(4):  # each round only removes gangs, so this settles quickly
            held = over_caps(plan, snap, self.cfg, inflight_n, inflight_d)
            if not held:
                break
            for key, reason in held.items():
                snap.decided[key] = PreDecision("deferred", reason)
            plan = make_plan(snap, opts)
        return plan

    def _inflight_by_namespace(self) -> tuple[dict[str, int], dict[str, float]]:
        nodes: dict[str, int] = defaultdict(int)
        dollars: dict[str, float] = defaultdict(float)
        prices = {g.name: g.price_per_hour for g in self.groups.values()}
        for r in self.state.records.values():
            if r.state in ("provisioning", "ready"):
                for g, n in r.requested.items():
                    nodes[r.namespace] += n
                    dollars[r.namespace] += n * prices.get(g, 0.0)
        return nodes, dollars

    # ------------------------------------------------------------- backoff

    def _backed_off(self, g: NodeGroup, now: float) -> NodeGroup:
        """A group that failed to launch recently cannot grow: the gang is planned on the alternatives."""
        if self.state.backoff.get(g.name, 0.0) > now:
            return replace(g, max_size=min(g.max_size, g.current_size))
        return g

    def _back_off(self, group: str, now: float, why: str) -> None:
        until = now + self.cfg.launch_failure_backoff_seconds
        if self.state.backoff.get(group, 0.0) < until:
            log.warning("node group backed off", extra={"node_group": group, "until": until, "error": why})
            self.metrics.scale_up_failures.labels(group, why.split(":", 1)[0]).inc()
        self.state.backoff[group] = until
        self.replan_soon = True

    def _watch_launches(self, now: float) -> None:
        """Launches that failed since a gang's request: back the group off and stop counting on them."""
        watched: dict[str, float] = {}
        for r in self.state.records.values():
            if r.state == "provisioning":
                for g in r.requested:
                    watched[g] = min(watched.get(g, r.requested_at), r.requested_at)
        for group, since in watched.items():
            try:
                failures = self.provider.launch_failures(group, _utc(since - 5))
            except CloudError as exc:
                log.warning("cannot read launch activity", extra={"node_group": group, "error": str(exc)})
                continue
            if not failures:
                continue
            self._back_off(group, now, str(failures[0].error))
            self._drop_failed_target(group, len(failures))

    def _drop_failed_target(self, group: str, failed: int) -> None:
        """If the cloud kept the target for launches that failed, lower it: they are not on their way."""
        try:
            target = self.provider.target_size(group)
            live = sum(1 for i in self.provider.instances(group) if i.state in ("launching", "running"))
            extra = min(failed, target - live)
            if extra > 0:
                self.provider.decrease_target_size(group, extra)
        except CloudError as exc:
            log.warning("cannot lower the target after failed launches", extra={"node_group": group, "error": str(exc)})

    # ------------------------------------------------------------ lifecycle

    def _lifecycle(self, snap: ClusterSnapshot, cluster: Cluster, plan: Plan, report: ExecutionReport | None,
                   now: float, enforce: bool) -> None:
        results = {(r.namespace, r.name, r.api): r for r in plan.gangs}
        upcoming_pods = {p for n, pods in plan.existing_nodes.items() if "/upcoming-" in n for p in pods}
        bought = self._attribute_new_nodes(plan, snap)
        applied = {a.group for a in report.actions if a.status == "applied"} if report else set()
        failed = {a.group: a for a in report.actions if a.status != "applied"} if report else {}
        seen: set[str] = set()
        for g in snap.gangs:
            key = gang_id(g)
            seen.add(key)
            res = results.get(g.key)
            if res is None:
                continue
            rec = self._record(g, key, now)
            decision, reason = res.decision, res.reason
            if decision == "scale-up":
                mine = bought.get(g.key, {})
                if enforce and mine and all(grp in applied for grp in mine):
                    for grp, n in mine.items():
                        rec.requested[grp] = rec.requested.get(grp, 0) + n
                        self.metrics.scale_ups.labels(grp).inc(n)
                    rec.requested_at = now
                    rec.deadline = now + self._deadline_seconds(g)
                    rec.pods = sorted(p.uid for p in g.pending)
                    self.metrics.queue_latency.labels("requested").observe(max(0.0, now - rec.first_seen))
                    self._set(g, rec, "provisioning", reason, now)
                    self.events.emit(g, "TriggeredScaleUp", "pod group triggered scale-up: " + ", ".join(
                        f"{grp} +{n}" for grp, n in sorted(mine.items())) + f"; {reason}")
                elif enforce and mine:
                    why = "; ".join(f"{grp}: {failed[grp].message}" for grp in mine if grp in failed)
                    self._set(g, rec, "planned", f"scale-up not applied ({why or 'another group failed'}); "
                                                 "re-planning on the alternatives", now)
                    self.events.emit(g, "NotTriggerScaleUp", rec.reason, warning=True)
                else:
                    self._set(g, rec, "planned", f"dry-run: {reason}" if self.cfg.mode == "dry-run" else reason, now)
                    self.events.emit(g, "TriggeredScaleUp" if self.cfg.mode == "enforce" else "NotTriggerScaleUp",
                                     rec.reason)
            elif decision == "fits-existing":
                on_way = any(p.key in upcoming_pods for p in g.pending)
                if on_way or (rec.state == "provisioning" and rec.requested):
                    self._set(g, rec, "provisioning", f"capacity on its way: {reason}", now)
                else:
                    self._set(g, rec, "ready", f"capacity is there, waiting for the scheduler: {reason}", now)
            else:
                state = decision if decision in STATES else "infeasible"
                self._set(g, rec, state, reason, now)
                self.events.emit(g, "NotTriggerScaleUp", reason, warning=state in ("infeasible", "invalid"))
            self.metrics.feasible.labels(g.namespace, g.name).set(res.placed + res.bound)
            self.metrics.min_count.labels(g.namespace, g.name).set(g.min_count)

        bound_by_gang = Counter((p.group_key or ("", "")) for p in cluster.bound)
        for key, rec in self.state.records.items():
            if key in seen or rec.state in TERMINAL:
                continue
            if bound_by_gang.get((rec.namespace, rec.name)):
                self.metrics.queue_latency.labels("running").observe(max(0.0, now - rec.first_seen))
                rec.state, rec.reason, rec.since = "running", "all members are bound", now
            else:
                rec.state, rec.since = "cancelled", now
                rec.reason = "the gang and its pods are gone"
                if enforce and rec.requested:
                    released = self._release(rec, cluster, "cancelled")
                    rec.reason += f"; released {released} unused nodes"

    def _record(self, g: Gang, key: str, now: float) -> Record:
        rec = self.state.records.get(key)
        gen = g.uid or "-"
        pod_uids = {p.uid for p in g.pending}
        replaced = rec is not None and rec.pods and pod_uids and not (pod_uids & set(rec.pods))
        if rec is None or rec.generation != gen or rec.state in TERMINAL or replaced:
            if rec is not None and rec.state not in TERMINAL:
                log.info("new gang generation", extra={"gang": key, "old": rec.generation, "new": gen})
            rec = Record(key, g.namespace, g.name, g.api, gen, "planned", "", now, first_seen=now)
            self.state.records[key] = rec
        return rec

    def _set(self, g: Gang, rec: Record, state: str, reason: str, now: float) -> None:
        if rec.state != state or rec.reason != reason:
            if rec.state != state:
                log.info("gang state", extra={"gang": rec.gang, "from": rec.state, "to": state, "reason": reason})
                rec.since = now
            rec.state, rec.reason = state, reason

    def _deadline_seconds(self, g: Gang) -> float:
        raw = g.annotations.get(DEADLINE_ANNOTATION)
        if raw:
            try:
                value = float(raw)
                if value > 0:
                    return value
            except ValueError:
                pass
            log.warning("bad deadline annotation; using the default",
                        extra={"gang": gang_id(g), "annotation": DEADLINE_ANNOTATION, "value": raw})
        return self.cfg.provisioning_deadline_seconds

    @staticmethod
    def _attribute_new_nodes(plan: Plan, snap: ClusterSnapshot) -> dict[tuple[str, str, str], dict[str, int]]:
        """New nodes per gang and group; a node shared by gangs belongs to the one with most pods on it."""
        owner = {p.key: g.key for g in snap.gangs for p in g.pending}
        out: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
        for n in plan.new_nodes:
            counts = Counter(owner[p] for p in n.pods if p in owner)
            if counts:
                key = counts.most_common(1)[0][0]
                out[key][n.node_group] = out[key].get(n.node_group, 0) + 1
        return out

    # ------------------------------------------------- deadlines and release

    def _expire(self, cluster: Cluster, now: float) -> None:
        for rec in self.state.records.values():
            if rec.state in ("provisioning", "ready") and rec.deadline and now > rec.deadline:
                released = self._release(rec, cluster, "timed-out") if rec.requested else 0
                rec.state, rec.since = "timed-out", now
                rec.reason = (f"not all nodes arrived within {rec.deadline - rec.requested_at:.0f}s; "
                              f"gave back {released} unused nodes")
                gang = _gang_stub(rec)
                self.events.emit(gang, "ScaleUpTimedOut", rec.reason, warning=True)
                if released:
                    self.events.emit(gang, "CapacityReleased", f"gave back {released} unused nodes bought for this gang")

    def _busy_nodes(self, cluster: Cluster) -> set[str]:
        """Nodes running any pod that is not a DaemonSet's: never removed."""
        return {p.node_name for p in cluster.bound if p.node_name and "DaemonSet" not in p.owner_kinds}

    def _release(self, rec: Record, cluster: Cluster, why: str) -> int:
        """Give back up to what `rec` bought: launches in flight first, then empty nodes; never a busy node."""
        busy = self._busy_nodes(cluster)
        node_of = {instance_id_from_provider_id(n.provider_id): n.name for n in cluster.nodes if n.provider_id}
        total = 0
        for group, n in sorted(rec.requested.items()):
            try:
                insts = self.provider.instances(group)
                launching = [i.id for i in insts if i.state == "launching" and node_of.get(i.id) not in busy]
                empty = [i.id for i in insts if i.state == "running" and node_of.get(i.id) not in busy
                         and i.id not in launching]
                take = (launching + empty)[:n]
                if take:
                    self.provider.delete_instances(group, take)
                left = n - len(take)
                if left > 0:
                    target = self.provider.target_size(group)
                    live = sum(1 for i in insts if i.state in ("launching", "running")) - len(take)
                    extra = min(left, target - len(take) - live)
                    if extra > 0:
                        self.provider.decrease_target_size(group, extra)
                        take += ["(not launched)"] * extra
                total += len(take)
                self.metrics.released.labels(group, why).inc(len(take))
            except CloudError as exc:
                log.warning("cannot give capacity back", extra={"gang": rec.gang, "node_group": group, "error": str(exc)})
        rec.requested = {}
        return total

    def _scale_down_empty(self, cluster: Cluster, plan: Plan, now: float) -> None:
        """Nodes of owned groups that stayed empty past the grace period go back, never below minSize."""
        busy = self._busy_nodes(cluster) | set(plan.existing_nodes)
        templates = self.groups
        removed: Counter[str] = Counter()
        present = set()
        for node in cluster.nodes:
            present.add(node.name)
            group = templates.get(node.node_group or "")
            if group is None or node.name in busy:
                self.empty_since.pop(node.name, None)
                continue
            since = self.empty_since.setdefault(node.name, now)
            iid = instance_id_from_provider_id(node.provider_id)
            if now - since < self.cfg.empty_node_grace_seconds or not iid:
                continue
            try:
                if self.provider.target_size(group.name) - removed[group.name] <= group.min_size:
                    continue
                self.provider.delete_instances(group.name, [iid])
            except CloudError as exc:
                log.warning("scale-down failed", extra={"node": node.name, "node_group": group.name, "error": str(exc)})
                continue
            removed[group.name] += 1
            self.empty_since.pop(node.name, None)
            self.metrics.released.labels(group.name, "empty").inc()
            log.info("scaled down an empty node", extra={"node": node.name, "node_group": group.name,
                                                          "empty_seconds": round(now - since)})
        for name in list(self.empty_since):
            if name not in present:
                del self.empty_since[name]

    # ----------------------------------------------------------- observation

    def _observe(self, plan: Plan) -> None:
        self.metrics.plan_seconds.observe(plan.solver.seconds)
        self.metrics.solver_gap.set(plan.solver.gap)
        states = Counter(r.state for r in self.state.records.values())
        for s in STATES:
            self.metrics.gangs.labels(s).set(states.get(s, 0))
        prices = {g.name: g.price_per_hour for g in self.groups.values()}
        self.metrics.dollars.set(sum(n * prices.get(g, 0.0) for r in self.state.records.values()
                                     if r.state in ("provisioning", "ready") for g, n in r.requested.items()))
        log.info("plan", extra={"plan": {"scaleUp": plan.scale_up, "costPerHour": plan.cost_per_hour,
                                         "gangs": len(plan.gangs), "seconds": plan.solver.seconds,
                                         "status": plan.solver.status}})


def _utc(t: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc)


def _gang_stub(rec: Record) -> Gang:
    """Enough of a Gang to address an event when the gang is no longer listed."""
    return Gang(rec.namespace, rec.name, rec.api, uid=rec.generation if rec.generation != "-" else "")
