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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from cloud_adapters.base import NodeGroupProvider, instance_id_from_provider_id

from ..apply import ExecutionReport, GroupAction, atomic_units_with_gangs
from ..ingest import Cluster, ingest
from ..model import Gang, GangKey, NodeGroup
from ..plan import Plan
from ..planner import make_plan
from ..realize import OFF, SchedulerModel, scheduler_model_from
from ..rfc3339 import parse_time
from ..snapshot import ClusterSnapshot, NodeViews, SnapshotPolicy, build_snapshot, pre_decide
from ..solver.params import SolveOptions
from . import backoff, gates, janitor, keep, wakes
from . import metrics as observe
from .actuator import Actuator
from .config import ControllerConfig
from .deadlines import cooling_holds, deadline_seconds, warn_bad_deadlines
from .deps import Deps
from .events import EventSink
from .execute import Executor
from .lifecycle import (
    Applied,
    Booked,
    Confirmed,
    Expire,
    GangFacts,
    GangState,
    GroupFailure,
    LaunchesFailed,
    NodeSeen,
    Overdue,
    Record,
    Recreated,
    Registered,
    Report,
    Rules,
    holds,
    past_deadline,
    spare_until,
)
from .limits import Usage, gang_limits, held_on_hand, inflight_by_namespace, plan_within_caps
from .logs import PLAN_ID
from .loop import Loop
from .metrics import Metrics
from .published import group_sizes, status_data
from .records import ControllerState
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
    startable_now,
    still_waiting,
    upcoming_nodes,
)
from .scaledown import (
    busy_nodes,
    protected_nodes,
)

log = logging.getLogger("gangscale.controller")
# seconds between reads of the cluster's scheduler settings (aws-eks DescribeCluster)
CLUSTER_SCHEDULER_TTL = 300.0
# a node created this long before a request (API server vs controller clock) may still be its
REGISTRATION_SKEW = 5.0
# Nodes' parsed creation times and instance ids kept (then cleared): a cluster's Nodes, a few times
NODE_STAMPS_KEPT = 4096
# observe mode's plan in a gate-mode pass whose every gang waits behind gangscale's gate: the scheduler chooses nothing
NARROWED = (
    "gate mode releases every gang of this plan narrowed to its planned node (KEP-3521): the scheduler has one "
    "feasible node per pod, so the solver's plan is what happens; the scheduler's own queue was placed first"
)
PLANS_KEPT = 2  # the last plans, by their inputs: a pass with the same snapshot reuses one (two: a caps re-plan's too)

__all__ = ["Deps", "Reconciler", "attribute_new_nodes"]


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
        self, cfg: ControllerConfig, provider: NodeGroupProvider, deps: Deps | None = None
    ) -> None:
        deps = deps or Deps()
        self.cfg, self.deps = cfg, deps
        self.store, self.clock, self.identity, self.fence = (
            deps.store,
            deps.clock,
            deps.identity,
            deps.fence,
        )
        self.events = deps.events or EventSink(None)
        self.metrics = deps.metrics or Metrics()
        self.gates_held: dict[GangKey, str] = {}  # last pass's reasons, logged when one changes
        self.gate_queue_runs = gates.QueueMemo()  # gate mode's model runs of the queue, by inputs
        self.actuator = Actuator(provider, deps.fence)
        self.last_sweep = 0.0
        # the purchases bought ahead in the records read back, not seen through by this controller (`_loose`)
        self.ahead_read_back: dict[str, tuple[str, float]] = {}
        self.passes = 0
        self.read_warnings: list[str] = []  # what the last pass's caller could not read
        self.executor = Executor(
            self.actuator,
            self.events,
            fence=deps.fence,
            pod_gates=deps.pod_gates,
            conditions=deps.conditions,
            node_taints=deps.node_taints,
            status=deps.status,
        )
        # the act half of each pass: decide, save when write-ahead, execute; it holds the decide state
        self.loop = Loop(cfg, self.executor, self.metrics, self._save)
        self.rules = Rules(
            cfg.mode == "enforce",
            cfg.launch_failure_backoff_seconds,
            cfg.cancel_grace_seconds,
            cfg.late_launch_seconds,
        )
        # (read at, model, warnings)
        self._cluster_scheduler: tuple[float, SchedulerModel, list[str]] | None = None
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
        # the last snapshot's node views: a node that did not change keeps its view
        self._views = NodeViews()

    @property
    def state(self) -> ControllerState:
        """The records and backoffs (held by the loop, which decides on them)."""
        return self.loop.state

    @state.setter
    def state(self, state: ControllerState) -> None:
        self.loop.state = state

    @property
    def empty_since(self) -> dict[str, float]:
        """Node -> when it was first seen empty (the scale-down's keep time counts from it)."""
        return self.loop.empty_since

    @empty_since.setter
    def empty_since(self, since: dict[str, float]) -> None:
        self.loop.empty_since = since

    @property
    def empty_until(self) -> dict[str, float]:
        """Empty node -> when its keep rule gives it back (keep.py)."""
        return self.loop.empty_until

    @empty_until.setter
    def empty_until(self, until: dict[str, float]) -> None:
        self.loop.empty_until = until

    @property
    def replan_soon(self) -> bool:
        """A cloud failure moved gangs in the last pass: run again without waiting for a change."""
        return self.loop.replan_soon

    @replan_soon.setter
    def replan_soon(self, soon: bool) -> None:
        self.loop.replan_soon = soon

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
            if self.actuator.launches_outside_groups:
                self.ahead_read_back = keep.ahead_calls(self.state.keep)

    # ------------------------------------------------------------------ pass

    def next_due(self, after: float) -> float | None:
        """When one of this controller's timers (deadlines, graces, backoffs, ageing) next falls due after the pass
        that started at `after`: the loop runs a pass then (each rule's own wake-up: wakes.py)."""
        return wakes.next_due(self.loop.view(), after)

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
        self.loop.replan_soon = False
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
            # before the deadlines hand them to the scale-down; the nodes bought ahead that no gang has used are
            # spares too, due at their purchase's deadline (keep.py)
            spares = spare_until(self.state.records.values())
            spares.update({n: t for n, (t, _) in self.state.keep.ahead.items()})
            self._step(plan, self._expire(plan, snap, cluster, now), cluster, now)
            # what is bought ahead goes back by the scale-down: never without it
            if self.cfg.scale_down:
                self._scale_down(cluster, plan, now, spares, objects)
                self.loop.buy_ahead(cluster, self.groups, now)
        self._gates(objects, cluster, snap, plan, enforce, now, ns_labels)
        self._observe(plan, snap)
        self._publish(plan, cluster, now, leader)
        if leader:
            self._conditions(objects, now)
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

    def _conditions(self, objects: list[dict[str, Any]], now: float) -> None:
        """Each recorded gang's condition on its PodGroup, when it changed (conditions.py); fenced, never raises."""
        if self.deps.conditions is not None:
            self.loop.conditions(objects, now)

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
        cluster = self.deps.shared_read(objects) if self.deps.shared_read is not None else None
        if cluster is None:
            cluster = ingest(
                objects,
                node_group_label=self.cfg.node_group_label,
                plan_unadmitted=self.cfg.plan_unadmitted,
                cache=self.deps.parse_cache,
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
        """A running gang with a recreated member gives its named spare launches back before the plan
        (`lifecycle.on_recreated`); True when the cloud gave any back."""
        spares = {
            r.key
            for r in self.state.records.values()
            if r.state == GangState.RUNNING and r.launches
        }
        listed = [g for g in cluster.gangs if g.key in spares and g.pending] if spares else []
        return bool(listed) and self._step(None, Recreated(self._facts(listed)), cluster, now) > 0

    def _registered(self, cluster: Cluster, now: float) -> None:
        """Nodes that registered for a waiting gang become its own (`lifecycle.on_registered`); gone ones are
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
        """Late launches of provisioning gangs are covered by this pass's plan (`lifecycle.on_overdue`)."""
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
        upcoming = reserved_upcoming(waiting)
        registered = startable_now(reserved_registered(waiting), upcoming)
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
        opts = self.deps.solve_options or SolveOptions(
            time_limit=self.cfg.solver_time_limit_seconds
        )
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
                if (
                    made.scheduler is None
                ):  # pragma: no cover - a plan always says its scheduler model
                    return made
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
        return intents, self.loop.scale_up(plan, booked, cluster, now)

    def _loose(self, cluster: Cluster, now: float) -> bool:
        """Settle unconfirmed calls (the records', then the purchases bought ahead that an earlier leader saved), then
        end orphans past the grace; True when instances joined a group."""
        calls = janitor.unconfirmed_calls(
            self.state.records.values(), {g.key: g.uid or "-" for g in cluster.gangs}
        )
        ahead = self.ahead_read_back
        if (
            not calls
            and not ahead
            and now - self.last_sweep < min(60.0, max(1.0, self.cfg.orphan_grace_seconds / 4))
        ):
            return False
        self.last_sweep = now
        loose = self.actuator.loose_instances()
        if loose is None:
            return False
        adopted = self.loop.settle(calls, loose, cluster, now) if calls else 0
        adopted += self.loop.settle_ahead(ahead, loose, now) if ahead else 0
        self.ahead_read_back = {}
        self.loop.end_orphans(loose, frozenset(calls) | frozenset(ahead), now)
        return adopted > 0

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
        """decide → execute → what the cloud gave back comes round once more (`Loop.step`); how many nodes the
        cloud gave back."""
        return self.loop.step(plan, report, cluster, now)

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
        due_spares = {n for n, until in spares.items() if past_deadline(until, now)}
        protected = protected_nodes(objects)
        busy = (
            busy_nodes(cluster)
            | (set(plan.existing_nodes) - due_spares)
            | self._reserved_nodes()
            | set(protected)
        )
        self.loop.scale_down(cluster, frozenset(busy), self.groups, spares, now)

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
        self.loop.recover(cluster, enforce and self.deps.pod_gates is not None, now)
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
            self.loop.lift(decision, objects, enforce and self.deps.pod_gates is not None, now)

    def _publish(self, plan: Plan, cluster: Cluster, now: float, leader: bool) -> None:
        """The node-group gauges; the leader's status ConfigMap, which `decide` publishes when due (`Loop.publish`)."""
        sizes = group_sizes(self.groups, cluster.nodes, self.state.backoff, now)
        observe.observe_node_groups(self.metrics, sizes)
        if leader and self.deps.status is not None:
            self.loop.publish(status_data(plan, sizes, self.identity, self.cfg.mode), now)

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
