"""One pass of the controller: read → snapshot → plan → transition → act → record → emit.

Invariant: the pass is a short sequence of named steps. Gang state changes
only in `lifecycle.transition` (pure); the cloud is touched only through the
`Actuator`, and only by the leader in `enforce` mode (in `dry-run` it plans,
reports and emits events, and changes nothing); controller policy
(reservations, ageing, held gangs) goes into `build_snapshot` as a
`SnapshotPolicy`, so no snapshot object is changed after it is built. Nodes
that registered for a waiting gang are attributed to its record before the
plan (`Registered`) and stay reserved for it: no plan, release or scale-down
gives them to another gang. The
scale-up's records are saved before the cloud is called (write-ahead), with
the client token of each call; a pass that starts with a token still in a
record (a crash or a deposed leader left it) first settles that call: the
instances it launched join their group or are terminated (`janitor.py`).
Every save and every cloud mutation is fenced by the leader elector, and so
is every pod write of gate mode (lifting `gangscale.io/capacity` with the pod
narrowed to its node in the same patch, deleting a released pod whose node
died: `gates.py`), which comes last: after the scale-up, from the same plan
and snapshot.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from cloud_adapters.base import LooseInstance, NodeGroupProvider, instance_id_from_provider_id

from ..apply import ExecutionReport, GroupAction, atomic_units_with_gangs
from ..ingest import Cluster, ParseCache, ingest
from ..kube.nodetaints import NodeTainter
from ..kube.podgates import PodGateLifter
from ..kube.podgroupstatus import ConditionWriter
from ..model import Gang, GangKey, NodeGroup
from ..plan import Plan
from ..planner import make_plan
from ..realize import OFF, SchedulerModel, scheduler_model_from
from ..rfc3339 import parse_time
from ..snapshot import ClusterSnapshot, NodeViews, SnapshotPolicy, build_snapshot, pre_decide
from ..solver.params import SolveOptions
from . import backoff, gates, janitor, keep, timers
from . import metrics as observe
from .actuator import Actuator
from .conditions import due as conditions_due
from .config import ControllerConfig
from .crashpoints import crash_point
from .deadlines import cooling_holds, deadline_seconds, warn_bad_deadlines
from .events import EventSink, state_object
from .lifecycle import (
    Action,
    Applied,
    ApplyScaleUp,
    BackOff,
    Booked,
    CallRecovered,
    Confirmed,
    Event,
    EventTarget,
    Expire,
    GangEvent,
    GangFacts,
    GangState,
    GroupFailure,
    LaunchesFailed,
    NodeSeen,
    Overdue,
    Record,
    Recovered,
    Recreated,
    Registered,
    Release,
    Released,
    ReleaseOutcome,
    ReleaseWhy,
    Report,
    Rules,
    StateChanged,
    Takeover,
    holds,
    named_launches,
    spare_until,
    transition,
)
from .limits import Usage, gang_limits, held_on_hand, inflight_by_namespace, plan_within_caps
from .logs import PLAN_ID
from .metrics import Metrics
from .published import StatusPublisher, group_sizes, status_data
from .records import ControllerState, StateStore
from .reservations import (
    attribute_new_nodes,
    expired_spares,
    held_in_the_model,
    planned_upcoming,
    pods_on_upcoming,
    reserved_registered,
    reserved_upcoming,
    shared_reservations,
    sharing_units,
    still_waiting,
    upcoming_nodes,
)
from .scaledown import (
    DISRUPTION_TAINT,
    EmptyNode,
    above_min_size,
    blocks_removal,
    busy_nodes,
    due_nodes,
    empty_nodes,
    pod_key,
    protected_nodes,
    tainted_nodes,
)

log = logging.getLogger("gangscale.controller")
CLUSTER_SCHEDULER_TTL = (
    300.0  # seconds between reads of the cluster's scheduler settings (aws-eks DescribeCluster)
)
REGISTRATION_SKEW = 5.0  # a node created this long before a request (API server vs controller clock) may still be its
NODE_STAMPS_KEPT = 4096  # Nodes' parsed creation times and instance ids kept (then cleared): a cluster's Nodes, a few times
# observe mode's plan in a gate-mode pass whose every gang waits behind gangscale's gate: the scheduler chooses nothing
NARROWED = (
    "gate mode releases every gang of this plan narrowed to its planned node (KEP-3521): the scheduler has one "
    "feasible node per pod, so the solver's plan is what happens; the scheduler's own queue was placed first"
)
PLANS_KEPT = 2  # the last plans, by their inputs: a pass with the same snapshot reuses one (two: a caps re-plan's too)

__all__ = ["Reconciler", "attribute_new_nodes"]


def _on_way(f: GroupFailure, ids: frozenset[str] | None, cluster: Cluster) -> GroupFailure:
    """A launch failure with the launches the cloud still has on their way in its group (None: unknown) and the
    instances of the registered Nodes (a named launch that registered since the last pass arrived: it is
    attributed after the failures are read, so it must not be counted as failed)."""
    registered = frozenset(instance_id_from_provider_id(n.provider_id) for n in cluster.nodes) - {
        ""
    }
    return replace(
        f, on_way=None if ids is None else len(ids), on_way_ids=ids, registered_ids=registered
    )


def launched_for(
    intents: Mapping[GangKey, Mapping[str, int]],
    actions: Sequence[GroupAction],
    calls: Mapping[GangKey, Mapping[str, tuple[str, int]]] | None = None,
) -> dict[GangKey, dict[str, tuple[str, ...]]]:
    """Per gang and group, the instances the scale-up launched for it, when the cloud named them: each applied
    call's ids dealt out to the gangs whose records carry its client token (`calls`, from the write-ahead
    records), in gang order; a call without a token, to the gangs booked in its group in the same order. One call
    serves its gangs at once, so which of its instances answers which of them does not matter; that each answers
    exactly one gang, and one of those the call was made for, does."""
    ids: dict[tuple[str, str], list[str]] = {}
    for a in actions:
        if a.status == "applied":
            ids.setdefault((a.group, a.token), []).extend(a.instance_ids)
    out: dict[GangKey, dict[str, tuple[str, ...]]] = {}
    for key in sorted(intents, key=str):
        for group, n in sorted(intents[key].items()):
            call = (calls or {}).get(key, {}).get(group)
            where = (
                (group, call[0]) if call is not None and (group, call[0]) in ids else (group, "")
            )
            take, ids[where] = tuple(ids.get(where, ())[:n]), ids.get(where, [])[n:]
            if take:
                out.setdefault(key, {})[group] = take
    return out


class Reconciler:
    """Runs passes; holds what a pass leaves for the next (records, backoffs, empty-node times)."""

    def __init__(
        self,
        cfg: ControllerConfig,
        provider: NodeGroupProvider,
        *,
        store: StateStore | None = None,
        events: EventSink | None = None,
        metrics: Metrics | None = None,
        clock=time.time,
        identity: str = "gangscale",
        fence: Callable[[str], None] | None = None,
        pod_gates: PodGateLifter | None = None,
        conditions: ConditionWriter | None = None,
        solve_options: SolveOptions | None = None,
        parse_cache: ParseCache | None = None,
        shared_read: Callable[[list[dict[str, Any]]], Cluster | None] | None = None,
        status: StatusPublisher | None = None,
        node_taints: NodeTainter | None = None,
    ) -> None:
        self.cfg = cfg
        self.status = status  # the leader's per-pass view for `gangscale status` (published.py); None: not written
        # the scale-down's node writes (scaledown.py's protocol); None: empty nodes are terminated untainted
        self.node_taints = node_taints
        self.scaled_down: set[str] = (
            set()
        )  # nodes whose instance this controller terminated, while their Node lasts
        self.parse_cache = parse_cache  # kept across passes (the simulator's, by exact JSON); None: fresh each pass
        # the caller's own `ingest` of exactly these objects when it has one (the simulator's engine read the same
        # version for its scheduler; same function, same arguments), else None; None: ingest here
        self.shared_read = shared_read
        self.conditions = (
            conditions  # writes gangscale.io/CapacityReady on PodGroup status; None: never
        )
        self.solve_options = solve_options  # None: the config's time limit on every core (the simulator pins one worker)
        self.pod_gates = pod_gates  # removes gangscale.io/capacity from pods (gate mode); None: never touches pods
        self.gates_held: dict[
            GangKey, str
        ] = {}  # last pass's reasons, so a reason is logged when it changes
        self.gate_queue_runs = (
            gates.QueueMemo()
        )  # gate mode's model runs of the scheduler's queue, by their inputs
        self.fence = fence  # raises LostLeadership when this replica may no longer act
        self.actuator = Actuator(provider, fence)
        self.last_sweep = 0.0
        self.store = store
        self.events = events or EventSink(None)
        self.metrics = metrics or Metrics()
        self.clock = clock
        self.state = ControllerState()
        self.empty_since: dict[str, float] = {}
        self.empty_until: dict[str, float] = {}  # empty node -> when it goes back (keep.py)
        self.keep = keep.KeepState()  # the keep rule's arrivals and boots
        self.stranded_since: dict[
            str, float
        ] = {}  # released pods whose narrowed-to node is gone: since when
        self.replan_soon = (
            False  # a cloud failure moved gangs: run again without waiting for a change
        )
        self.passes = 0
        self.read_warnings: list[
            str
        ] = []  # what the last pass's caller could not read (`reconcile`)
        self.identity = identity
        self.rules = Rules(
            cfg.mode == "enforce",
            cfg.launch_failure_backoff_seconds,
            cfg.cancel_grace_seconds,
            cfg.late_launch_seconds,
        )
        self._cluster_scheduler: tuple[float, SchedulerModel, list[str]] | None = (
            None  # (read at, model, warnings)
        )
        self._scheduler_files: dict[
            str, SchedulerModel
        ] = {}  # schedulerConfigFile, read once by this controller
        self._plans: list[
            tuple[tuple[ClusterSnapshot, SolveOptions, SchedulerModel], Plan]
        ] = []  # newest first
        self.plans_reused = 0
        self._stamps: dict[
            tuple[str, str], tuple[float, str]
        ] = {}  # (created, providerID) -> `_node_stamps`
        self._views = (
            NodeViews()
        )  # the last snapshot's node views: a node that did not change keeps its view

    @property
    def groups(self) -> dict[str, NodeGroup]:
        """The last discovery, by name."""
        return self.actuator.groups

    def record(self, key: GangKey | str) -> Record | None:
        """The record of a gang (by key, or its "namespace/name/api" string)."""
        if isinstance(key, GangKey):
            return self.state.records.get(key)
        return next((r for r in self.state.records.values() if r.gang == key), None)

    def load_state(self) -> None:
        if self.store is not None:
            self.state = self.store.load()

    # ------------------------------------------------------------------ pass

    def next_due(self, after: float) -> float | None:
        """When one of this controller's timers (deadlines, graces, backoffs, ageing) next falls due after the pass
        that started at `after`: the loop runs a pass then (timers.py)."""
        return timers.next_due(
            self.state.records.values(),
            self.state.backoff,
            self.empty_since,
            self.cfg,
            after,
            {n: t for n, t in self.empty_until.items() if n in self.empty_since},
        )

    def reconcile(
        self, objects: list[dict[str, Any]], *, leader: bool, warnings: Sequence[str] = ()
    ) -> Plan:
        """One pass over `objects`; `warnings`: what the caller could not read, for the plan's warnings."""
        self.read_warnings = list(warnings)
        self.passes += 1
        token = PLAN_ID.set(f"{self.identity}-{self.passes}")
        try:
            return self._pass(objects, leader=leader)
        finally:
            PLAN_ID.reset(token)

    def _pass(self, objects: list[dict[str, Any]], *, leader: bool) -> Plan:
        now = self.clock()
        enforce = leader and self.cfg.mode == "enforce"
        self.replan_soon = False
        cluster, warnings = self._read(objects)
        if enforce and self._loose(cluster, now):
            cluster, warnings = self._read(objects)  # adopted instances raised a group's target
        if enforce:
            self._confirm(cluster, now)
            # what was just given back is not on its way: the snapshot must not count it
            if any([self._launches(cluster, now), self._recreated(cluster, now)]):
                cluster, _ = self.actuator.refresh(cluster)
            self._registered(cluster, now)
            self._overdue(cluster, now)
        ns_labels = gates.namespace_labels(
            objects
        )  # (read once: the plan and the release both ask)
        snap, plan = self._plan(cluster, warnings, now, ns_labels)
        scaled = self._scale_up(snap, plan, cluster, now) if enforce and plan.scale_up else None
        self._step(plan, self._applied(snap, plan, scaled, cluster), cluster, now)
        if enforce:
            spares = spare_until(
                self.state.records.values()
            )  # before the deadlines hand them to the scale-down
            self._step(plan, self._expire(plan, snap, cluster, now), cluster, now)
            if self.cfg.scale_down:
                self._scale_down(cluster, plan, now, spares, objects)
        self._gates(objects, cluster, snap, plan, enforce, now, ns_labels)
        self._observe(plan, snap)
        self._publish(plan, cluster, now, leader)
        if leader:
            self._conditions(objects)
            self._save()
        return plan

    def _expire(self, plan: Plan, snap: ClusterSnapshot, cluster: Cluster, now: float) -> Expire:
        """The deadlines' report; the cloud's launches on their way only where a running gang's late spares are."""
        late = expired_spares(self.state.records.values(), now)[
            0
        ]  # groups where they still have launches
        on_way = {g: self.actuator.on_the_way(g, cluster) for g in sorted(late)}
        ids = {g: i for g, i in on_way.items() if i is not None}
        return Expire(
            self.rules,
            planned_upcoming(plan, snap),
            {g: len(i) for g, i in ids.items()},
            frozenset(n for n, pods in plan.existing_nodes.items() if pods),
            ids,
        )

    def _conditions(self, objects: list[dict[str, Any]]) -> None:
        """Each recorded gang's condition on its PodGroup, when it changed (conditions.py); fenced, never raises."""
        if self.conditions is None:
            return
        todo = conditions_due(self.state.records.values(), objects)
        if todo and self.fence is not None:
            self.fence("write PodGroup conditions")
        for rec, obj, cond, mode in todo:
            err = self.conditions.write(obj, cond, mode)
            if err is not None:
                log.warning(
                    "cannot write the PodGroup condition", extra={"gang": rec.gang, "error": err}
                )

    def _save(self) -> None:
        """Persist the records, fenced: a deposed leader never overwrites its successor's state."""
        if self.store is None:
            return
        if self.fence is not None:
            self.fence("save the records")
        self.store.save(self.state)

    # ----------------------------------------------------------------- steps

    def _read(self, objects: list[dict[str, Any]]) -> tuple[Cluster, list[str]]:
        """The cluster as ingested, its Nodes matched to the groups the cloud reports."""
        cluster = self.shared_read(objects) if self.shared_read is not None else None
        if cluster is None:
            cluster = ingest(
                objects,
                node_group_label=self.cfg.node_group_label,
                plan_unadmitted=self.cfg.plan_unadmitted,
                cache=self.parse_cache,
            )
        cluster, discovery = self.actuator.refresh(cluster)
        return cluster, [*discovery.warnings, *self.read_warnings]

    def _confirm(self, cluster: Cluster, now: float) -> None:
        """Records booked before a call whose outcome was never recorded: keep what the groups show landed."""
        if any(r.unconfirmed for r in self.state.records.values()):
            desired = {name: g.current_size for name, g in self.groups.items()}
            self._step(None, Confirmed(desired, self.actuator.launched_tokens()), cluster, now)

    def _launches(self, cluster: Cluster, now: float) -> bool:
        """Launches that failed since a gang's request: re-plan the gang on the alternatives this pass.

        True when capacity was given back (the groups must be discovered again)."""
        watched: dict[str, float] = {}
        for r in self.state.records.values():
            if r.state == GangState.PROVISIONING:
                for g in r.requested:
                    watched[g] = min(watched.get(g, r.requested_at), r.requested_at)
        failures = tuple(
            _on_way(f, self.actuator.on_the_way(f.group, cluster), cluster)
            for f in self.actuator.launch_failures(watched)
        )
        return bool(failures) and self._step(None, LaunchesFailed(failures), cluster, now) > 0

    def _recreated(self, cluster: Cluster, now: float) -> bool:
        """A running gang with a recreated member gives its named spare launches back before the plan (lifecycle
        `_recreated`); True when the cloud gave any back."""
        spares = {
            r.key
            for r in self.state.records.values()
            if r.state == GangState.RUNNING and r.launches
        }
        listed = [g for g in cluster.gangs if g.key in spares and g.pending] if spares else []
        return bool(listed) and self._step(None, Recreated(self._facts(listed)), cluster, now) > 0

    def _registered(self, cluster: Cluster, now: float) -> None:
        """Nodes that registered for a waiting gang become its own (lifecycle `_registered`); gone ones are
        forgotten."""
        if not any(holds(r) for r in self.state.records.values()):
            return
        busy = busy_nodes(cluster)
        stamps = self._node_stamps
        seen = tuple(
            NodeSeen(n.name, n.node_group, created, n.name not in busy, n.ready, instance)
            for n in cluster.nodes
            if n.node_group in self.groups
            for created, instance in (stamps(n.created, n.provider_id),)
        )
        self._step(None, Registered(seen, frozenset(self.groups), REGISTRATION_SKEW), cluster, now)

    def _overdue(self, cluster: Cluster, now: float) -> None:
        """Late launches of provisioning gangs are covered by this pass's plan (lifecycle `_overdue`)."""
        if self.rules.late_launch_seconds > 0 and any(
            r.state == GangState.PROVISIONING and not r.covered for r in self.state.records.values()
        ):
            self._step(None, Overdue(self.rules), cluster, now)

    def _node_stamps(self, created: str, provider_id: str) -> tuple[float, str]:
        """A Node's creationTimestamp (epoch seconds, 0 when unknown) and instance id: parsed once per Node, not once
        per pass (both are fixed for a Node's life; a pass reads every registered Node)."""
        key = (created, provider_id)
        got = self._stamps.get(key)
        if got is None:
            if len(self._stamps) >= NODE_STAMPS_KEPT:
                self._stamps.clear()
            got = self._stamps[key] = (
                parse_time(created) or 0.0,
                instance_id_from_provider_id(provider_id),
            )
        return got

    def _reserved_nodes(self) -> set[str]:
        """Registered nodes that arrived for a gang still waiting for them: never given back for another reason."""
        return set(reserved_registered(self.state.records.values()))

    def _policy(self, cluster: Cluster, now: float) -> SnapshotPolicy:
        """What the controller decides around the planner: reservations, cooling, size limits, ageing."""
        records = self.state.records
        held = cooling_holds(records, cluster.gangs, now, self.cfg.launch_failure_backoff_seconds)
        open_ = [g for g in cluster.gangs if pre_decide(g) is None and g.key not in held]
        # (gang_limits asks only for the open gangs' first sight, and only records that hold capacity reserve any:
        # the store keeps up to `records.MAX_RECORDS`, most of them past, so neither is made for all of them)
        first_seen = {
            k: rec.first_seen for g in open_ if (rec := records.get(k := g.key)) is not None
        }
        refused, lifted = gang_limits(open_, self.cfg, now, first_seen)
        waiting = still_waiting(
            [r for r in records.values() if holds(r)], {g.key for g in cluster.gangs}
        )
        upcoming, registered = reserved_upcoming(waiting), reserved_registered(waiting)
        late_up, late_nodes = expired_spares(
            records.values(), now
        )  # going back this pass: no plan counts on them
        upcoming = {g: upcoming.get(g, ()) + late_up.get(g, ()) for g in {*upcoming, *late_up}}
        shared = shared_reservations(records.values(), {g.key for g in cluster.gangs})
        return SnapshotPolicy(
            upcoming, lifted, {**held, **refused}, {**late_nodes, **registered}, shared
        )

    def _scheduler(self, now: float, *, gating: bool = False) -> tuple[SchedulerModel, list[str]]:
        """The scheduler model of this pass: `schedulerConfigFile`, else the cluster's own strategy where the cloud
        knows it (aws-eks), read at most every CLUSTER_SCHEDULER_TTL seconds; `schedulerModel: off` reads nothing,
        unless `gating`: gate mode models where the cluster's scheduler puts the queued pods whatever the plan
        does."""
        model = scheduler_model_from(
            self.cfg.scheduler_config_file,
            "observe" if gating else self.cfg.scheduler_model,
            self._scheduler_files,
        )
        if not model.enabled or self.cfg.scheduler_config_file:
            return model, []
        cached = self._cluster_scheduler
        if cached is None or now - cached[0] >= CLUSTER_SCHEDULER_TTL:
            cached = self._cluster_scheduler = (now, *self.actuator.cluster_scheduler(model))
        return cached[1], cached[2]

    def _plan(
        self,
        cluster: Cluster,
        warnings: list[str],
        now: float,
        ns_labels: dict[str, dict[str, str]],
    ) -> tuple[ClusterSnapshot, Plan]:
        """The pass's plan; with pods behind our gate, on `gates.scheduled_first`'s snapshot (the scheduler's queue
        placed first: nothing is bought for pods the scheduler puts on nodes the cluster has)."""
        groups = [backoff.backed_off(g, self.state.backoff, now) for g in self.groups.values()]
        opts = self.solve_options or SolveOptions(time_limit=self.cfg.solver_time_limit_seconds)
        prices = {g.name: g.price_per_hour for g in self.groups.values()}
        scheduler, notes = self._scheduler(now)
        warnings = [*warnings, *notes]
        first = None
        holding = partial(gates.holds, mode=self.cfg.gate_mode, ns_labels=ns_labels)
        if any(gates.gated(p) for g in cluster.gangs for p in g.pending):
            first = partial(
                gates.scheduled_first,
                holding=holding,
                config=self._scheduler(now, gating=True)[0].config,
                memo=self.gate_queue_runs,
            )

        def plan(snap: ClusterSnapshot) -> Plan:
            """Observe mode: the model sees the reservations and the held gangs queued on the capacity at hand;
            the solver's plan alone when gate mode releases every gang of it narrowed to its node."""
            snap = first(snap) if first else snap
            if not scheduler.enabled:
                return self._make_plan(snap, opts, scheduler)
            if first and self.cfg.gate_narrowing and gates.all_narrowed(snap, holding):
                made = self._make_plan(snap, opts, OFF)
                return made.model_copy(
                    update={"scheduler": made.scheduler.model_copy(update={"note": NARROWED})}
                )
            return self._make_plan(
                held_on_hand(held_in_the_model(snap), scheduler.config, scheduler.seeds),
                opts,
                scheduler,
            )

        return plan_within_caps(
            lambda policy: build_snapshot(cluster, groups, warnings, policy, views=self._views),
            plan,
            self._policy(cluster, now),
            self.cfg,
            inflight_by_namespace(self.state.records.values(), prices),
            Usage.of_groups(self.groups.values()),
        )

    def _make_plan(
        self, snap: ClusterSnapshot, opts: SolveOptions, scheduler: SchedulerModel
    ) -> Plan:
        """`make_plan`, or the plan a recent pass made of an equal snapshot with the same options and scheduler model.

        A pass woken by a timer, a resync or a change the snapshot does not see (a pod bound where the plan put
        it already counts as bound, an unrelated object) has nothing new to plan; nothing writes to a plan or a
        snapshot after it is made, so sharing one is safe. Equality is field by field; the shared parsed objects
        make it cheap (identical objects compare at once). A reused plan says it took 0 s (nothing was solved)."""
        key = (snap, opts, scheduler)
        for seen, plan in self._plans:
            if seen == key:
                self.plans_reused += 1
                return plan.model_copy(
                    update={"solver": plan.solver.model_copy(update={"seconds": 0.0})}
                )
        plan = make_plan(snap, opts, scheduler)
        self._plans = [(key, plan), *self._plans][:PLANS_KEPT]
        return plan

    def _scale_up(
        self, snap: ClusterSnapshot, plan: Plan, cluster: Cluster, now: float
    ) -> tuple[dict[GangKey, dict[str, int]], ExecutionReport | None]:
        """Book the new nodes on their gangs, save them (write-ahead), then grow the groups."""
        intents = attribute_new_nodes(plan, snap)
        warn_bad_deadlines(g for g in snap.gangs if intents.get(g.key))
        units = tuple((gangs, unit) for unit, gangs in atomic_units_with_gangs(plan, cluster))
        desired = {name: g.current_size for name, g in self.groups.items()}
        booked = Booked(self._facts(snap.gangs), intents, units, desired, sharing_units(plan, snap))
        self.state.records, actions, events = transition(self.state.records, plan, booked, now)
        self._emit(events)
        self._save()  # write-ahead: records, client tokens and the desired sizes below them, before the cloud call
        crash_point("record-saved")
        report = None
        for a in actions:
            if isinstance(a, ApplyScaleUp):
                report = self.actuator.apply(plan, cluster, a.tokens, now)
                crash_point("call-confirmed")
                self._back_off(backoff.from_scale_up(report), now)
        return intents, report

    def _loose(self, cluster: Cluster, now: float) -> bool:
        """Settle unconfirmed calls, then end orphans past the grace; True when instances joined a group."""
        calls = janitor.unconfirmed_calls(
            self.state.records.values(), {g.key: g.uid or "-" for g in cluster.gangs}
        )
        if not calls and now - self.last_sweep < min(
            60.0, max(1.0, self.cfg.orphan_grace_seconds / 4)
        ):
            return False
        self.last_sweep = now
        loose = self.actuator.loose_instances()
        if loose is None:
            return False
        adopted = self._settle(calls, loose, cluster, now) if calls else 0
        due = janitor.orphans_due(loose, set(calls), now, self.cfg.orphan_grace_seconds)
        if due and self.actuator.terminate_loose([i.id for i in due]) is None:
            self._orphans_ended(due)
        return adopted > 0

    def _orphans_ended(self, due: list[LooseInstance]) -> None:
        """Say so three ways: a metric per group, a warning log line, and a Warning Event on the state ConfigMap."""
        for i in due:
            self.metrics.orphans_terminated.labels(i.group).inc()
        ids, groups = [i.id for i in due], sorted({i.group for i in due})
        log.warning(
            "terminated orphan instances",
            extra={
                "instances": ids,
                "node_groups": groups,
                "grace_seconds": self.cfg.orphan_grace_seconds,
            },
        )
        where = state_object(self.cfg.state_namespace, self.cfg.state_configmap)
        self.events.emit_on(
            where,
            "OrphanInstancesTerminated",
            janitor.orphan_message(due, self.cfg.orphan_grace_seconds),
            warning=True,
        )

    def _settle(
        self,
        calls: dict[str, list[janitor.PendingCall]],
        loose: list[LooseInstance],
        cluster: Cluster,
        now: float,
    ) -> int:
        """Each unconfirmed call's instances join the group (a record still wants them) or are terminated."""
        outcomes, adopted = [], 0
        for token, shares in calls.items():
            ids = janitor.launched_by(loose, token)
            got, note = self.actuator.settle_call(
                shares[0].group, ids, any(s.wanted for s in shares)
            )
            adopted += len(got)
            log.info(
                "unconfirmed scale-up settled",
                extra={
                    "node_group": shares[0].group,
                    "token": token,
                    "instances": ids,
                    "adopted": len(got),
                    "note": note,
                },
            )
            outcomes.extend(
                CallRecovered(s.key, s.group, token, len(got), note, instances)
                for s, instances in zip(shares, janitor.deal(got, shares))
            )
        self._step(None, Recovered(tuple(outcomes)), cluster, now)
        self._save()
        return adopted

    def _applied(
        self,
        snap: ClusterSnapshot,
        plan: Plan,
        scaled: tuple[dict[GangKey, dict[str, int]], ExecutionReport | None] | None,
        cluster: Cluster,
    ) -> Applied:
        """The report that moves every gang by the plan and the scale-up's outcome."""
        intents, report = scaled if scaled is not None else ({}, None)
        actions = report.actions if report is not None else []
        return Applied(
            self._facts(snap.gangs),
            self.rules,
            intents,
            applied=frozenset(a.group for a in actions if a.status == "applied"),
            failed={a.group: a.message for a in actions if a.status != "applied"},
            upcoming_pods=pods_on_upcoming(plan, snap),
            bound_groups=frozenset(p.group_key or ("", "") for p in cluster.bound),
            busy=frozenset(busy_nodes(cluster)),
            launched=launched_for(
                intents,
                actions,
                {k: r.calls for k in intents if (r := self.state.records.get(k)) is not None},
            ),
        )

    def _facts(self, gangs: Sequence[Gang]) -> tuple[GangFacts, ...]:
        default = self.cfg.provisioning_deadline_seconds
        return tuple(GangFacts.of(g, deadline_seconds(g, default)) for g in gangs)

    def _step(self, plan: Plan | None, report: Report, cluster: Cluster, now: float) -> int:
        """transition → act → record (in memory) → emit; what the cloud gave back comes round once more.

        Returns how many nodes the cloud gave back."""
        self.state.records, actions, events = transition(self.state.records, plan, report, now)
        released = self._act(actions, cluster, now)
        self._emit(events)
        if released:
            self._step(plan, Released(tuple(released)), cluster, now)
        return sum(o.released for o in released)

    def _act(self, actions: Sequence[Action], cluster: Cluster, now: float) -> list[ReleaseOutcome]:
        self._back_off([a for a in actions if isinstance(a, BackOff)], now)
        outcomes = []
        for a in actions:
            if isinstance(a, Release):
                # a running gang's late launches: never a registered node (those are the scale-down's, by name)
                keep = (
                    {n.name for n in cluster.nodes}
                    if a.why == ReleaseWhy.UNUSED
                    else self._reserved_nodes()
                )
                others = named_launches(r for r in self.state.records.values() if r.key != a.key)
                result = self.actuator.release(a, cluster, keep=keep, keep_instances=others)
                for group, n in result.by_group.items():
                    self.metrics.released.labels(group, a.why.value).inc(n)
                outcomes.append(ReleaseOutcome(a, result.released))
            elif isinstance(
                a, ApplyScaleUp
            ):  # pragma: no cover - applied by _scale_up after the write-ahead
                raise RuntimeError("the scale-up is applied after its records are saved")
        return outcomes

    def _back_off(self, actions: Sequence[BackOff], now: float) -> None:
        if not actions:
            return
        until = now + self.cfg.launch_failure_backoff_seconds
        self.state.backoff, extended = backoff.extend(self.state.backoff, actions, until)
        for a in extended:
            log.warning(
                "node group backed off",
                extra={"node_group": a.group, "until": until, "error": a.why},
            )
            self.metrics.scale_up_failures.labels(a.group, a.kind).inc()
        self.replan_soon = True

    def _emit(self, events: Sequence[Event]) -> None:
        for e in events:
            if isinstance(e, GangEvent):
                self.events.emit(e.target, e.reason, e.message, warning=e.warning)
            elif isinstance(e, StateChanged):
                log.info(
                    "gang state",
                    extra={
                        "gang": str(e.key),
                        "from": e.old.value,
                        "to": e.new.value,
                        "reason": e.reason,
                    },
                )
            elif isinstance(e, Takeover):
                log.info(
                    "new gang generation takes over its nodes",
                    extra={
                        "gang": str(e.key),
                        "old": e.old_generation,
                        "new": e.new_generation,
                        "requested": dict(e.requested),
                    },
                )
        observe.observe_events(self.metrics, events)

    def _scale_down(
        self,
        cluster: Cluster,
        plan: Plan,
        now: float,
        spares: dict[str, float],
        objects: Sequence[dict[str, Any]] = (),
    ) -> None:
        """Nodes of owned groups that stayed empty past the grace period go back, never below minSize; so do the
        nodes a running gang did not use (`spares`: node -> its purchase's deadline), at that deadline. Never a node
        opted out (`protected_nodes`); each is tainted and read again before it goes (`_still_empty`)."""
        # past the deadline (strictly, as `expired_spares` reserves them): no plan keeps them, no pod runs there yet
        due_spares = {n for n, until in spares.items() if now > until}
        protected = protected_nodes(objects)
        busy = (
            busy_nodes(cluster)
            | (set(plan.existing_nodes) - due_spares)
            | self._reserved_nodes()
            | set(protected)
        )
        settings = self.cfg.keep_settings()
        self.empty_since = empty_nodes(self.empty_since, cluster, busy, self.groups, now)
        self.keep = keep.observe(
            self.keep, cluster, self.groups, self.state.records.values(), now, settings
        )
        self.empty_until = keep.keep_until(
            self.keep, self.empty_since, self.empty_until, cluster, self.groups, now, settings
        )
        due = due_nodes(self.empty_since, self.empty_until, cluster, self.groups, now, spares)
        due = [e for e in above_min_size(due) if self._still_empty(e)]
        removed = set()
        for res in self.actuator.scale_down(due):
            e = res.node
            if not res.removed:
                log.warning(
                    "scale-down failed",
                    extra={"node": e.node, "node_group": e.group.name, "error": str(res.error)},
                )
                continue
            removed.add(e.node)
            self.empty_since.pop(e.node, None)
            self.metrics.released.labels(e.group.name, "empty").inc()
            log.info(
                "scaled down an empty node",
                extra={
                    "node": e.node,
                    "node_group": e.group.name,
                    "empty_seconds": round(now - e.empty_since),
                },
            )
        names = {n.name for n in cluster.nodes}
        self.scaled_down = (self.scaled_down | removed) & names
        matched = {n.name for n in cluster.nodes if n.node_group in self.groups}
        for name in sorted(
            (tainted_nodes(cluster.nodes) | {e.node for e in due}) & matched - self.scaled_down
        ):
            self._untaint(
                name, "not scaled down"
            )  # kept (minSize, a failed call) or a removal left unfinished

    def _still_empty(self, e: EmptyNode) -> bool:
        """Taint the node (NoSchedule), then read its pods again: True when none but a DaemonSet's or a finished one
        is bound, so it may go; else the taint comes off and it stays (scaledown.py's protocol). Fenced."""
        if self.node_taints is None:
            return True
        if self.fence is not None:
            self.fence(f"taint node {e.node} for scale-down")
        err = self.node_taints.set_taint(e.node, DISRUPTION_TAINT, True)
        if err is not None:
            log.warning(
                "cannot taint the node for scale-down: kept", extra={"node": e.node, "error": err}
            )
            return False
        pods = self.node_taints.pods_on(e.node)
        landed = None if pods is None else [pod_key(p) for p in pods if blocks_removal(p)]
        if landed is None or landed:
            log.info(
                "scale-down cancelled: the node is not empty",
                extra={
                    "node": e.node,
                    "pods": landed,
                    "reason": "pods unread" if landed is None else "a pod landed",
                },
            )
            self.empty_since.pop(e.node, None)
            self._untaint(e.node, "a pod landed" if landed else "its pods could not be read")
            return False
        return True

    def _untaint(self, node: str, why: str) -> None:
        if self.node_taints is None:
            return
        if self.fence is not None:
            self.fence(f"untaint node {node}")
        err = self.node_taints.set_taint(node, DISRUPTION_TAINT, False)
        if err is not None:
            log.warning(
                "cannot remove the scale-down taint", extra={"node": node, "why": why, "error": err}
            )

    def _gates(
        self,
        objects: list[dict[str, Any]],
        cluster: Cluster,
        snap: ClusterSnapshot,
        plan: Plan,
        enforce: bool,
        now: float,
        ns_labels: dict[str, dict[str, str]],
    ) -> None:
        """Gate mode: release the gangs whose capacity is Ready, each pod narrowed to its node (gates.py), fenced;
        then recover released pods whose one node died."""
        self._recover(cluster, enforce, now)
        if not any(gates.gated(p) for g in cluster.gangs for p in g.pending):
            self.gates_held = {}
            return
        scheduler, _ = self._scheduler(now, gating=True)
        decision = gates.decide(
            cluster.gangs,
            plan,
            snap,
            lambda g: gates.holds(g, self.cfg.gate_mode, ns_labels),
            config=scheduler.config,
            memo=self.gate_queue_runs,
        )
        for key, why in decision.held.items():
            if self.gates_held.get(key) != why:
                log.info("gate held", extra={"gang": str(key), "reason": why})
        self.gates_held = dict(decision.held)
        if decision.lifts:
            raw = {
                (o["metadata"].get("namespace"), o["metadata"].get("name")): o
                for o in objects
                if o.get("kind") == "Pod" and isinstance(o.get("metadata"), dict)
            }
            for lift in decision.lifts:
                self._lift(lift, raw, enforce)

    def _lift(
        self, lift: gates.Lift, raw: dict[tuple[str, str], dict[str, Any]], enforce: bool
    ) -> None:
        key = str(lift.gang.key)
        pods = [p.key for p in lift.pods]
        if not enforce or self.pod_gates is None:
            log.info(
                "gate lift skipped (dry-run)", extra={"gang": key, "pods": pods, "why": lift.why}
            )
            return
        nodes = lift.nodes if self.cfg.gate_narrowing else ()
        done, failed = [], {}
        for i, p in enumerate(lift.pods):
            if self.fence is not None:
                self.fence(f"lift the scheduling gate of pod {p.key}")
            obj = raw.get((p.namespace, p.name), {})
            err = self.pod_gates.remove(
                p.namespace,
                p.name,
                gates.release_patch(obj, p.scheduling_gates, nodes[i] if i < len(nodes) else None),
            )
            if err is None:
                done.append(p.key)
            else:
                failed[p.key] = err
        if done:
            self.metrics.gates_lifted.labels(lift.why).inc(len(done))
            log.info(
                "gate lifted",
                extra={
                    "gang": key,
                    "pods": done,
                    "why": lift.why,
                    "reason": lift.message,
                    "nodes": list(nodes),
                },
            )
            self.events.emit(
                EventTarget.of_gang(lift.gang),
                "GateLifted",
                f"removed the {gates.CAPACITY_GATE} scheduling gate from {len(done)} pod(s): {lift.message}",
            )
        if failed:
            log.warning("cannot lift the scheduling gate", extra={"gang": key, "errors": failed})

    def _recover(self, cluster: Cluster, enforce: bool, now: float) -> None:
        """Released pods narrowed to a node that is gone or NotReady (`gates.stranded`) for the grace: deleted, so
        their owner recreates them (gated again by the webhook) and the next plan places them; a pod without an
        owner is only reported (deleting it would lose it). Fenced; never raises."""
        found = gates.stranded((p for g in cluster.gangs for p in g.pending), cluster.nodes)
        gang_of = {p.key: g for g in cluster.gangs for p in g.pending}
        seen = {p.key for p, _ in found}
        self.stranded_since = {k: t for k, t in self.stranded_since.items() if k in seen}
        for p, why in found:
            since = self.stranded_since.setdefault(p.key, now)
            if (
                now - since < self.cfg.narrowed_node_grace_seconds
                or not enforce
                or self.pod_gates is None
            ):
                continue
            target = EventTarget.of_gang(gang_of[p.key])
            if not p.owner_kinds:
                log.warning("narrowed pod stranded", extra={"pod": p.key, "reason": why})
                self.events.emit(
                    target,
                    "NarrowedNodeGone",
                    f"pod {p.key}: {why}; it has no owner to recreate it, "
                    "so gangscale leaves it: delete it and create it again",
                    warning=True,
                )
                continue
            if self.fence is not None:
                self.fence(f"delete stranded pod {p.key}")
            err = self.pod_gates.delete(p.namespace, p.name, p.uid)
            if err is not None:
                log.warning("cannot delete the stranded pod", extra={"pod": p.key, "error": err})
                continue
            self.stranded_since.pop(p.key, None)
            log.info("deleted a stranded narrowed pod", extra={"pod": p.key, "reason": why})
            self.events.emit(
                target,
                "NarrowedNodeGone",
                f"deleted pod {p.key}: {why}; its owner recreates it and the next plan places it",
                warning=True,
            )

    def _publish(self, plan: Plan, cluster: Cluster, now: float, leader: bool) -> None:
        """The node-group gauges; the leader's status ConfigMap when it changed (fenced; never raises)."""
        sizes = group_sizes(self.groups, cluster.nodes, self.state.backoff, now)
        observe.observe_node_groups(self.metrics, sizes)
        if not leader or self.status is None:
            return
        data = status_data(plan, sizes, self.identity, self.cfg.mode)
        if not self.status.due(data, now):
            return
        if self.fence is not None:
            self.fence("publish the status")
        err = self.status.publish(data, now)
        if err is not None:
            log.warning("cannot publish the status", extra={"error": err})

    def _observe(self, plan: Plan, snap: ClusterSnapshot) -> None:
        prices = {g.name: g.price_per_hour for g in self.groups.values()}
        by_ns = inflight_by_namespace(self.state.records.values(), prices)
        dollars = sum(by_ns[1].values())
        observe.observe_namespaces(self.metrics, *by_ns, self.cfg)
        observe.observe_gangs(self.metrics, plan)
        observe.observe_pass(self.metrics, plan, self.state.records.values(), dollars)
        upcoming = upcoming_nodes(snap)
        used = Counter(
            upcoming[n] for n, pods in plan.existing_nodes.items() if pods and n in upcoming
        )
        log.info(
            "plan",
            extra={
                "plan": {
                    "scaleUp": plan.scale_up,
                    "costPerHour": plan.cost_per_hour,
                    "upcomingUsed": dict(used),  # nodes on their way it puts pods on
                    "gangs": len(plan.gangs),
                    "seconds": plan.solver.seconds,
                    "status": plan.solver.status,
                    "warnings": plan.warnings,
                }
            },
        )  # capped per kind (warnlog)
