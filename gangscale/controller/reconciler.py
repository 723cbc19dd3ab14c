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
from ..model import Gang, NodeGroup, Taint, Toleration
from ..plan import Plan
from ..planner import make_plan
from ..snapshot import ClusterSnapshot, PreDecision, build_snapshot
from ..solver.params import SolveOptions
from .config import ControllerConfig
from .events import EventSink
from .limits import apply_gang_limits, over_caps
from .logs import PLAN_ID
from .metrics import Metrics
from .records import TERMINAL, ControllerState, Record, StateStore

log = logging.getLogger("gangscale.controller")

DEADLINE_ANNOTATION = "gangscale.io/provisioning-deadline-seconds"
RESERVED = "gangscale.io/reserved-for"  # planner-only taint on upcoming nodes bought for one gang
BACKOFF_KINDS = ("capacity", "quota", "permission", "not-found", "unsupported")
STATES = ("waiting-for-podgroup", "below-quorum", "planned", "provisioning", "ready", "running", "infeasible",
          "timed-out", "cancelled", "invalid", "deferred")


def gang_id(g: Gang) -> str:
    return f"{g.namespace}/{g.name}/{g.api}"


class Reconciler:
    def __init__(self, cfg: ControllerConfig, provider: NodeGroupProvider, *, store: StateStore | None = None,
                 events: EventSink | None = None, metrics: Metrics | None = None, clock=time.time,
                 identity: str = "gangscale") -> None:
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
        self.passes = 0
        self.identity = identity

    def load_state(self) -> None:
        if self.store is not None:
            self.state = self.store.load()

    # ------------------------------------------------------------------ pass

    def reconcile(self, objects: list[dict[str, Any]], *, leader: bool) -> Plan:
        self.passes += 1
        token = PLAN_ID.set(f"{self.identity}-{self.passes}")
        try:
            return self._reconcile(objects, leader=leader)
        finally:
            PLAN_ID.reset(token)

    def _reconcile(self, objects: list[dict[str, Any]], *, leader: bool) -> Plan:
        now = self.clock()
        enforce = leader and self.cfg.mode == "enforce"
        self.replan_soon = False
        cluster = ingest(objects, node_group_label=self.cfg.node_group_label)
        discovery = self.provider.discover()
        self.groups = {g.name: g for g in discovery.groups}
        assign_node_groups(cluster, self.provider)
        if enforce:
            self._watch_launches(cluster, now)
        groups = [self._backed_off(g, now) for g in discovery.groups]
        snap = build_snapshot(cluster, groups, discovery.warnings)
        self._reserve_upcoming(snap)
        for g in snap.solvable:  # a gang that just timed out waits before it is bought for again
            rec = self.state.records.get(gang_id(g))
            if rec is not None and self._cooling(rec, g, now):
                left = rec.since + self.cfg.launch_failure_backoff_seconds - now
                snap.decided[g.key] = PreDecision("deferred", f"{rec.reason}; retrying in {left:.0f}s")
        records = self.state.records
        first_seen = {g.key: records[gang_id(g)].first_seen for g in snap.gangs if gang_id(g) in records}
        apply_gang_limits(snap, self.cfg, now, first_seen)
        plan = self._plan_within_caps(snap)
        report = None
        intents: dict[str, dict[str, int]] = {}
        if enforce and plan.scale_up:
            intents = self._register_intents(snap, plan, now)
            if self.store is not None:
                self.store.save(self.state)  # write-ahead: a crash right after the cloud call keeps who it was for
            report = apply_plan(plan, self.provider, {g.name: g for g in discovery.groups}, cluster)
            for action in report.actions:
                if action.status == "failed" and action.error_kind in BACKOFF_KINDS:
                    self._back_off(action.group, now, f"{action.error_kind}: {action.message}")
            for err in report.launch_failures:
                self._back_off(err.group, now, str(err))
        self._lifecycle(snap, cluster, plan, report, intents, now, enforce)
        if enforce:
            self._expire(cluster, now)
            if self.cfg.scale_down:
                self._scale_down_empty(cluster, plan, now)
        self._observe(plan)
        if leader and self.store is not None:
            self.store.save(self.state)
        return plan

    # ---------------------------------------------------------------- plan

    def _reserve_upcoming(self, snap: ClusterSnapshot) -> None:
        """Nodes on their way belong to the gang they were bought for: taint them for it, and let only
        that gang's pods tolerate the taint, so another gang cannot take them over in the next plan."""
        upcoming: dict[str, list] = defaultdict(list)
        for view in snap.nodes:
            if view.upcoming and view.node_group:
                upcoming[view.node_group].append(view)
        reserved: set[str] = set()
        records = sorted((r for r in self.state.records.values() if r.state == "provisioning" and r.requested),
                         key=lambda r: r.requested_at)
        for rec in records:
            for group, n in rec.requested.items():
                free = [v for v in upcoming.get(group, []) if not any(t.key == RESERVED for t in v.taints)]
                for view in free[:n]:
                    view.taints = view.taints + (Taint(RESERVED, rec.gang, "NoSchedule"),)
                    reserved.add(rec.gang)
        for g in snap.gangs:
            if gang_id(g) in reserved:
                tol = Toleration(RESERVED, "Equal", gang_id(g), "NoSchedule")
                for p in g.pending:
                    p.placement = replace(p.placement, tolerations=p.placement.tolerations + (tol,))

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

    def _watch_launches(self, cluster: Cluster, now: float) -> None:
        """A launch failed since a gang's request: back the group off and take back what the gang
        still waits for there, so this pass re-plans it on the alternatives instead of waiting."""
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
            why = str(failures[0].error)
            self._back_off(group, now, why)
            for rec in self.state.records.values():
                if rec.state == "provisioning" and rec.requested.get(group):
                    released = self._release(rec, cluster, "launch-failed", only=group)
                    rec.state, rec.since = "planned", now
                    rec.reason = f"launch failed in {group} ({why}); gave back {released} nodes there, re-planning"
                    self.events.emit(_gang_stub(rec), "NotTriggerScaleUp", rec.reason, warning=True)

    # ------------------------------------------------------------ lifecycle

    def _register_intents(self, snap: ClusterSnapshot, plan: Plan, now: float) -> dict[str, dict[str, int]]:
        """Book the plan's new nodes on the gangs they are for, before the cloud is called."""
        owned = {gang_id(g): dict(self.state.records[gang_id(g)].requested) for g in snap.gangs
                 if gang_id(g) in self.state.records and self.state.records[gang_id(g)].state == "provisioning"}
        intents: dict[str, dict[str, int]] = {}
        for g in snap.gangs:
            mine = attribute_new_nodes(plan, snap, owned).get(g.key)
            if not mine:
                continue
            key = gang_id(g)
            rec = self._record(g, key, now)
            for grp, n in mine.items():
                rec.requested[grp] = rec.requested.get(grp, 0) + n
            rec.requested_at = now
            rec.deadline = now + self._deadline_seconds(g)
            rec.pods = sorted(p.uid for p in g.pending)
            intents[key] = mine
        return intents

    def _lifecycle(self, snap: ClusterSnapshot, cluster: Cluster, plan: Plan, report: ExecutionReport | None,
                   intents: dict[str, dict[str, int]], now: float, enforce: bool) -> None:
        results = {(r.namespace, r.name, r.api): r for r in plan.gangs}
        upcoming_pods = {p for n, pods in plan.existing_nodes.items() if "/upcoming-" in n for p in pods}
        self.metrics.feasible.clear()  # per-gang series only for the gangs listed now
        self.metrics.min_count.clear()
        applied = {a.group for a in report.actions if a.status == "applied"} if report else set()
        failed = {a.group: a for a in report.actions if a.status != "applied"} if report else {}
        seen: set[str] = set()
        for g in snap.gangs:
            key = gang_id(g)
            seen.add(key)
            res = results.get(g.key)
            old = self.state.records.get(key)
            if res is None or (old is not None and self._cooling(old, g, now)):
                continue
            rec = self._record(g, key, now)
            decision, reason = res.decision, res.reason
            mine = intents.get(key, {})
            if decision == "scale-up" or mine:
                if mine and all(grp in applied for grp in mine):
                    for grp, n in mine.items():
                        self.metrics.scale_ups.labels(grp).inc(n)
                    self.metrics.queue_latency.labels("requested").observe(max(0.0, now - rec.first_seen))
                    self._set(rec, "provisioning", reason, now)
                    self.events.emit(g, "TriggeredScaleUp", "pod group triggered scale-up: " + ", ".join(
                        f"{grp} +{n}" for grp, n in sorted(mine.items())) + f"; {reason}")
                elif mine:
                    for grp, n in mine.items():  # undo the booking of what the cloud did not add
                        if grp not in applied:
                            rec.requested[grp] = rec.requested.get(grp, 0) - n
                    rec.requested = {grp: n for grp, n in rec.requested.items() if n > 0}
                    why = "; ".join(f"{grp}: {failed[grp].message}" for grp in mine if grp in failed)
                    self._set(rec, "planned", f"scale-up not applied ({why or 'another group failed'}); "
                                                 "re-planning on the alternatives", now)
                    self.events.emit(g, "NotTriggerScaleUp", rec.reason, warning=True)
                elif rec.state == "provisioning" and rec.requested:
                    self._set(rec, "provisioning", f"capacity on its way: {reason}", now)
                else:
                    self._set(rec, "planned", f"dry-run: {reason}" if self.cfg.mode == "dry-run" else reason, now)
                    self.events.emit(g, "TriggeredScaleUp" if self.cfg.mode == "enforce" else "NotTriggerScaleUp",
                                     rec.reason)
            elif decision == "fits-existing":
                on_way = any(p.key in upcoming_pods for p in g.pending)
                if on_way or (rec.state == "provisioning" and rec.requested):
                    self._set(rec, "provisioning", f"capacity on its way: {reason}", now)
                else:
                    self._set(rec, "ready", f"capacity is there, waiting for the scheduler: {reason}", now)
            else:
                state = decision if decision in STATES else "infeasible"
                self._set(rec, state, reason, now)
                self.events.emit(g, "NotTriggerScaleUp", reason, warning=state in ("infeasible", "invalid"))
            self.metrics.feasible.labels(g.namespace, g.name).set(res.placed + res.bound)
            self.metrics.min_count.labels(g.namespace, g.name).set(g.min_count)

        bound_by_gang = Counter((p.group_key or ("", "")) for p in cluster.bound)
        for key, rec in self.state.records.items():
            if key in seen or rec.state in TERMINAL:
                continue
            if bound_by_gang.get((rec.namespace, rec.name)):
                self.metrics.queue_latency.labels("running").observe(max(0.0, now - rec.first_seen))
                bought = ", ".join(f"{g} +{n}" for g, n in sorted(rec.requested.items()))
                self._set(rec, "running", "all members are bound" + (
                    f" (nodes bought for it: {bought})" if bought else ""), now)
                rec.requested = {}  # they are nodes now, no longer capacity on its way
            else:
                reason = "the gang and its pods are gone"
                if rec.requested:
                    reason += (f"; its unused nodes go back in {self.cfg.cancel_grace_seconds:.0f}s "
                               "unless a new generation of the gang takes them")
                self._set(rec, "cancelled", reason, now)

    def _record(self, g: Gang, key: str, now: float) -> Record:
        rec = self.state.records.get(key)
        gen = g.uid or "-"
        pod_uids = {p.uid for p in g.pending}
        replaced = rec is not None and rec.pods and pod_uids and not (pod_uids & set(rec.pods))
        if rec is None or rec.generation != gen or rec.state in TERMINAL or replaced:
            old = rec
            rec = Record(key, g.namespace, g.name, g.api, gen, "new", "", now, first_seen=now)
            if old is not None and old.requested and old.state in ("provisioning", "ready", "cancelled"):
                # nodes bought for the previous generation and still on their way: the new one takes them
                log.info("new gang generation takes over its nodes", extra={
                    "gang": key, "old": old.generation, "new": gen, "requested": old.requested})
                rec.requested, rec.requested_at, rec.deadline = dict(old.requested), old.requested_at, old.deadline
                rec.state = "provisioning"
            self.state.records[key] = rec
        return rec

    def _cooling(self, rec: Record, g: Gang, now: float) -> bool:
        return (rec.state == "timed-out" and rec.generation == (g.uid or "-")
                and now - rec.since < self.cfg.launch_failure_backoff_seconds)

    def _set(self, rec: Record, state: str, reason: str, now: float) -> None:
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

    # ------------------------------------------------- deadlines and release

    def _expire(self, cluster: Cluster, now: float) -> None:
        for rec in self.state.records.values():
            if rec.state == "cancelled" and rec.requested and now - rec.since >= self.cfg.cancel_grace_seconds:
                released = self._release(rec, cluster, "cancelled")
                rec.reason = f"the gang and its pods are gone; gave back {released} unused nodes"
                if released:
                    self.events.emit(_gang_stub(rec), "CapacityReleased", rec.reason)
                continue
            if rec.state in ("provisioning", "ready") and rec.deadline and now > rec.deadline:
                for group in rec.requested:  # it did not deliver in time: try the alternatives first
                    self._back_off(group, now, f"timed-out: nodes for {rec.gang} did not arrive")
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

    def _release(self, rec: Record, cluster: Cluster, why: str, only: str | None = None) -> int:
        """Give back up to what `rec` bought: launches in flight first, then empty nodes; never a busy node."""
        busy = self._busy_nodes(cluster)
        node_of = {instance_id_from_provider_id(n.provider_id): n.name for n in cluster.nodes if n.provider_id}
        total = 0
        for group, n in sorted(rec.requested.items()):
            if only is not None and group != only:
                continue
            try:
                insts = self.provider.instances(group)
                launching = [i.id for i in insts if i.state == "launching" and node_of.get(i.id) not in busy]
                empty = [i.id for i in insts if i.state == "running" and node_of.get(i.id) not in busy
                         and i.id not in launching]
                take = (launching + empty)[:n]
                if take:
                    self.provider.delete_instances(group, take)
                left = n - len(take)
                if left > 0:  # slots the cloud has not launched yet: lower the target by those
                    target = self.provider.target_size(group)  # fresh: already lowered by the deletions
                    live = sum(1 for i in insts if i.state in ("launching", "running")) - len(take)
                    extra = min(left, target - live)
                    if extra > 0:
                        self.provider.decrease_target_size(group, extra)
                        take += ["(not launched)"] * extra
                total += len(take)
                self.metrics.released.labels(group, why).inc(len(take))
            except CloudError as exc:
                log.warning("cannot give capacity back", extra={"gang": rec.gang, "node_group": group, "error": str(exc)})
        rec.requested = {g: n for g, n in rec.requested.items() if only is not None and g != only}
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
        self.metrics.dollars.set(sum(self._inflight_by_namespace()[1].values()))
        log.info("plan", extra={"plan": {"scaleUp": plan.scale_up, "costPerHour": plan.cost_per_hour,
                                         "gangs": len(plan.gangs), "seconds": plan.solver.seconds,
                                         "status": plan.solver.status,
                                         "warnings": plan.warnings}})  # capped per kind (warnlog)


def attribute_new_nodes(plan: Plan, snap: ClusterSnapshot, owned: dict[str, dict[str, int]]
                        ) -> dict[tuple[str, str, str], dict[str, int]]:
    """Which gang each new node is bought for, per group.

    A node belongs to the gang with most pods on it. A gang that already owns
    nodes on their way (`owned`, from its provisioning record) claims the
    plan's new and upcoming nodes of a group only beyond what it owns there;
    whatever of the group's new nodes is left goes to the gangs on them.
    """
    gangs = {p.key: g for g in snap.gangs for p in g.pending}
    holding: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)

    def majority(pods: list[str]) -> Gang | None:
        counts = Counter(gangs[p].key for p in pods if p in gangs)
        if not counts:
            return None
        key = counts.most_common(1)[0][0]
        return next(g for g in snap.gangs if g.key == key)

    new_per_group: Counter[str] = Counter(n.node_group for n in plan.new_nodes)
    new_owner: dict[str, Counter] = defaultdict(Counter)
    for n in plan.new_nodes:
        g = majority(n.pods)
        if g is not None:
            holding[g.key][n.node_group] += 1
            new_owner[n.node_group][g.key] += 1
    for name, pods in plan.existing_nodes.items():
        if "/upcoming-" in name:
            g = majority(pods)
            if g is not None:
                holding[g.key][name.split("/upcoming-")[0]] += 1
    out: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    for group, total in new_per_group.items():
        left = total
        for key, cnt in sorted(holding.items(), key=lambda kv: kv[0]):
            want = cnt[group] - owned.get("/".join(key[:2]) + "/" + key[2], {}).get(group, 0)
            take = min(left, max(0, want))
            if take:
                out[key][group] = take
                left -= take
        for key, cnt in new_owner[group].most_common():  # the rest: by who rides the new nodes
            if not left:
                break
            take = min(left, cnt - out[key].get(group, 0))
            if take > 0:
                out[key][group] = out[key].get(group, 0) + take
                left -= take
    return out


def _utc(t: float):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(t, timezone.utc)


def _gang_stub(rec: Record) -> Gang:
    """Enough of a Gang to address an event when the gang is no longer listed."""
    return Gang(rec.namespace, rec.name, rec.api, uid=rec.generation if rec.generation != "-" else "")
