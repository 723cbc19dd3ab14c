"""The act half of a pass: observe → `decide` → save when write-ahead → execute → the outcome feeds `decide` again.

Invariant: every change this controller makes outside its own memory is an action that `execute.Executor` ran,
and every one the act half makes (the status ConfigMap's included) is one `decide.decide` returned; the `Loop`
only builds observations, keeps the decide state between calls, saves the records right before the first
write-ahead action of a decision (`actions.save_first`; the order is: Events, save, the crash point
`record-saved`, the call, the crash point `call-confirmed`) and logs and counts outcomes.
A lifecycle report's releases come round once more as `Released` (what the cloud gave back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cloud_adapters.base import LooseInstance

from ..apply import ExecutionReport
from ..ingest import Cluster
from ..model import NodeGroup
from ..plan import Plan
from . import gates, janitor
from . import metrics as observe
from .actions import (
    BuyAhead,
    Cordon,
    DeleteStrandedPod,
    EmitEvent,
    LiftGate,
    TerminateLoose,
    Uncordon,
    save_first,
)
from .actuator import ReleaseResult
from .config import ControllerConfig
from .crashpoints import crash_point
from .decide import (
    AheadDue,
    AheadLapsed,
    AheadUnconfirmed,
    BoughtAhead,
    Checked,
    ConditionsSeen,
    Cordoned,
    Decision,
    EmptyNodes,
    GatesOpen,
    Lifted,
    Observation,
    Orphans,
    OrphansEnded,
    PodDeleted,
    Reported,
    ReturnedAhead,
    ScaledDown,
    ScaleUpRan,
    State,
    StatusPublished,
    StatusSeen,
    Stranded,
    Unconfirmed,
    decide,
)
from .execute import (
    AdoptOutcome,
    ConditionsOutcome,
    Context,
    CordonOutcome,
    Done,
    Executor,
    LiftOutcome,
    Outcome,
    ReturnOutcome,
    ScaleDownOutcome,
    ScaleUpOutcome,
)
from .lifecycle import (
    Booked,
    CallRecovered,
    Event,
    Recovered,
    Released,
    ReleaseOutcome,
    ReleaseWhy,
    Report,
    StateChanged,
    Takeover,
)
from .metrics import Metrics
from .published import Shown
from .records import ControllerState

log = logging.getLogger("gangscale.controller")


class Loop:
    """Holds the decide state between decisions and runs each decision's actions through the executor."""

    def __init__(
        self,
        cfg: ControllerConfig,
        executor: Executor,
        metrics: Metrics,
        save: Callable[[], None],
    ) -> None:
        self.cfg = cfg
        self.executor = executor
        self.metrics = metrics
        self.save = save  # persists the records, fenced
        self.state = ControllerState()
        self.empty_since: dict[str, float] = {}
        self.empty_until: dict[str, float] = {}  # empty node -> its give-back time (keep.py)
        self.stranded_since: dict[str, float] = {}  # released pods whose narrowed-to node is gone
        self.scaled_down: set[str] = set()  # nodes whose instance this controller terminated
        self.published = Shown()  # the status ConfigMap as this controller last wrote it
        # a cloud failure moved gangs: run again without waiting for a change
        self.replan_soon = False

    # ------------------------------------------------------------ decide, execute

    def view(self) -> State:
        """The decide state as this loop holds it."""
        return State(
            self.cfg,
            self.state.records,
            self.state.backoff,
            self.empty_since,
            self.empty_until,
            self.state.keep,
            self.stranded_since,
            frozenset(self.scaled_down),
            self.published,
        )

    def decide(self, observation: Observation, now: float) -> Decision:
        """`decide.decide` on the held state; the new state is kept, and each group it backed off is logged."""
        d = decide(self.view(), observation, now)
        s = d.state
        self.state.records, self.state.backoff = dict(s.records), dict(s.backoff)
        self.empty_since, self.stranded_since = dict(s.empty_since), dict(s.stranded_since)
        self.empty_until, self.state.keep = dict(s.empty_until), s.keep
        self.scaled_down = set(s.scaled_down)
        self.published = s.published
        if d.backed_off:
            until = self.state.backoff[d.backed_off[0].group]
            for a in d.extended:
                log.warning(
                    "node group backed off",
                    extra={"node_group": a.group, "until": until, "error": a.why},
                )
                self.metrics.scale_up_failures.labels(a.group, a.kind).inc()
            self.replan_soon = True
        return d

    def execute(self, decision: Decision, ctx: Context | None = None) -> list[Outcome]:
        """Run the decision's actions in order; the records are saved right before the first write-ahead one."""
        out, saved = [], False
        for a in decision.actions:
            if save_first(a) and not saved:
                self.save()  # write-ahead: records, client tokens and the desired sizes below them
                crash_point("record-saved")
                saved = True
            out.append(self.executor.run(a, ctx))
        return out

    def log_events(self, events: Sequence[Event]) -> None:
        """The lifecycle events' log lines and metric samples (their Kubernetes Events are actions)."""
        for e in events:
            if isinstance(e, StateChanged):
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

    # ------------------------------------------------------------ the lifecycle

    def step(self, plan: Plan | None, report: Report, cluster: Cluster, now: float) -> int:
        """One lifecycle report decided and executed; what the cloud gave back comes round once more.

        Returns how many nodes the cloud gave back."""
        names = frozenset(n.name for n in cluster.nodes)
        d = self.decide(Reported(report, plan, names), now)
        released = []
        for o in self.execute(d, Context(plan, cluster, now)):
            if isinstance(o, ReleaseResult):
                for group, n in o.by_group.items():
                    self.metrics.released.labels(group, o.action.why.value).inc(n)
                released.append(ReleaseOutcome(o.action, o.released))
        self.log_events(d.events)
        if released:
            self.step(plan, Released(tuple(released)), cluster, now)
        return sum(o.released for o in released)

    def scale_up(
        self, plan: Plan, booked: Booked, cluster: Cluster, now: float
    ) -> ExecutionReport | None:
        """Book the new nodes on their gangs, save them (write-ahead), then grow the groups; failures back off."""
        d = self.decide(Reported(booked, plan, frozenset(n.name for n in cluster.nodes)), now)
        report = None
        for o in self.execute(d, Context(plan, cluster, now)):
            if isinstance(o, ScaleUpOutcome):
                report = o.report
                self.decide(ScaleUpRan(o), now)
        self.log_events(d.events)
        return report

    # ------------------------------------------------------------ launched outside the groups

    def settle(
        self,
        calls: Mapping[str, Sequence[janitor.PendingCall]],
        loose: Sequence[LooseInstance],
        cluster: Cluster,
        now: float,
    ) -> int:
        """Each unconfirmed call's instances join their group or are terminated; the records learn what became of
        each call (`Recovered`) and are saved. Returns how many instances joined a group."""
        d = self.decide(Unconfirmed(calls, tuple(loose)), now)
        outcomes: list[CallRecovered] = []
        adopted = 0
        for o in self.execute(d):
            assert isinstance(o, AdoptOutcome)
            a, got = o.action, o.adopted
            adopted += len(got)
            log.info(
                "unconfirmed scale-up settled",
                extra={
                    "node_group": a.group,
                    "token": a.token,
                    "instances": list(a.ids),
                    "adopted": len(got),
                    "note": o.note,
                },
            )
            shares = calls[a.token]
            outcomes.extend(
                CallRecovered(s.key, s.group, a.token, len(got), o.note, instances)
                for s, instances in zip(shares, janitor.deal(got, shares), strict=True)
            )
        self.step(None, Recovered(tuple(outcomes)), cluster, now)
        self.save()
        return adopted

    def settle_ahead(
        self, calls: Mapping[str, tuple[str, float]], loose: Sequence[LooseInstance], now: float
    ) -> int:
        """The instances purchases bought ahead launched outside their group join it (in time) or are terminated
        (`AheadUnconfirmed`); how many joined."""
        adopted = 0
        for o in self.execute(self.decide(AheadUnconfirmed(calls, tuple(loose)), now)):
            assert isinstance(o, AdoptOutcome)
            a = o.action
            adopted += len(o.adopted)
            log.info(
                "unconfirmed purchase bought ahead settled",
                extra={
                    "node_group": a.group,
                    "token": a.token,
                    "instances": list(a.ids),
                    "adopted": len(o.adopted),
                    "note": o.note,
                },
            )
        return adopted

    def end_orphans(
        self, loose: Sequence[LooseInstance], settling: frozenset[str], now: float
    ) -> None:
        """Orphans past the grace are terminated; then said three ways: a metric per group, a warning log line,
        and a Warning Event on the state ConfigMap."""
        for o in self.execute(self.decide(Orphans(tuple(loose), settling), now)):
            assert isinstance(o, Done) and isinstance(o.action, TerminateLoose)
            if o.error is not None:
                continue
            due = o.action.instances
            for i in due:
                self.metrics.orphans_terminated.labels(i.group).inc()
            log.warning(
                "terminated orphan instances",
                extra={
                    "instances": [i.id for i in due],
                    "node_groups": sorted({i.group for i in due}),
                    "grace_seconds": self.cfg.orphan_grace_seconds,
                },
            )
            self.execute(self.decide(OrphansEnded(o), now))

    # ------------------------------------------------------------ scale-down

    def scale_down(
        self,
        cluster: Cluster,
        busy: frozenset[str],
        groups: Mapping[str, NodeGroup],
        spares: Mapping[str, float],
        now: float,
    ) -> None:
        """Empty nodes past their keep time are tainted and read again (each, with its untaint when it is not
        empty), then the still-empty ones go; a taint left on a node that stays comes off."""
        still = []
        for cordon in self.decide(EmptyNodes(cluster, busy, groups, spares), now).actions:
            assert isinstance(cordon, Cordon)
            o = self.executor.run(cordon)
            assert isinstance(o, CordonOutcome)
            if o.still_empty:
                still.append(cordon.node)
                continue
            self._not_empty(o)
            self._untaint(self.decide(Cordoned(o), now))
        (done,) = self.execute(self.decide(Checked(tuple(still)), now))
        assert isinstance(done, ScaleDownOutcome)
        self._removed(done, now)
        self._untaint(self.decide(ScaledDown(done, cluster, frozenset(groups)), now))

    def buy_ahead(self, cluster: Cluster, groups: Mapping[str, NodeGroup], now: float) -> None:
        """Nodes bought for the gangs likely to come (keep.py's `buy_ahead`), after the scale-down, once the
        launches bought ahead that did not register by their deadline have gone back; the keep rule's state, with
        each call in it, is saved first."""
        for r in self.execute(self.decide(AheadLapsed(), now), Context(None, cluster, now)):
            assert isinstance(r, ReturnOutcome)
            self._returned(r, now)
        for o in self.execute(self.decide(AheadDue(cluster, groups), now)):
            assert isinstance(o, Done) and isinstance(o.action, BuyAhead)
            a = o.action
            if o.error is None:
                self.metrics.bought_ahead.labels(a.group).inc(a.nodes)
                log.info("bought ahead", extra={"node_group": a.group, "nodes": a.nodes})
            else:
                log.warning(
                    "cannot buy ahead", extra={"node_group": a.group, "error": str(o.error)}
                )
            self.decide(BoughtAhead(o), now)

    def _returned(self, o: ReturnOutcome, now: float) -> None:
        a = o.action
        fields = {"node_group": a.group, "nodes": a.nodes, "returned": o.returned}
        if o.error is None:
            self.metrics.released.labels(a.group, ReleaseWhy.TIMED_OUT.value).inc(o.returned)
            log.info("launches bought ahead did not arrive by the deadline", extra=fields)
        else:
            log.warning(
                "cannot give back launches bought ahead", extra={**fields, "error": str(o.error)}
            )
        self.decide(ReturnedAhead(o), now)

    @staticmethod
    def _not_empty(o: CordonOutcome) -> None:
        node = o.action.node.node
        if o.error is not None:
            log.warning(
                "cannot taint the node for scale-down: kept", extra={"node": node, "error": o.error}
            )
            return
        log.info(
            "scale-down cancelled: the node is not empty",
            extra={
                "node": node,
                "pods": None if o.landed is None else list(o.landed),
                "reason": "pods unread" if o.landed is None else "a pod landed",
            },
        )

    def _removed(self, done: ScaleDownOutcome, now: float) -> None:
        for res in done.results:
            e = res.node
            if not res.removed:
                log.warning(
                    "scale-down failed",
                    extra={"node": e.node, "node_group": e.group.name, "error": str(res.error)},
                )
                continue
            self.metrics.released.labels(e.group.name, "empty").inc()
            log.info(
                "scaled down an empty node",
                extra={
                    "node": e.node,
                    "node_group": e.group.name,
                    "empty_seconds": round(now - e.empty_since),
                },
            )

    def _untaint(self, d: Decision) -> None:
        """Run a decision's `Uncordon` actions; a taint that stays is a warning (the next pass tries again)."""
        for o in self.execute(d):
            assert isinstance(o, Done) and isinstance(o.action, Uncordon)
            if o.error is not None:
                log.warning(
                    "cannot remove the scale-down taint",
                    extra={"node": o.action.node, "why": o.action.why, "error": o.error},
                )

    # ------------------------------------------------------------ gate mode

    def recover(self, cluster: Cluster, can_delete: bool, now: float) -> None:
        """Released pods narrowed to a node that is gone or NotReady (`gates.stranded`) for the grace: deleted, so
        their owner recreates them and the next plan places them; a pod without an owner is only reported."""
        found = gates.stranded((p for g in cluster.gangs for p in g.pending), cluster.nodes)
        gang_of = {p.key: g for g in cluster.gangs for p in g.pending}
        d = self.decide(Stranded(tuple(found), gang_of, can_delete), now)
        why = {p.key: w for p, w in found}
        for a in d.actions:
            if isinstance(a, EmitEvent):  # no owner to recreate it
                log.warning("narrowed pod stranded", extra={"pod": a.about, "reason": why[a.about]})
                self.executor.run(a)
                continue
            assert isinstance(a, DeleteStrandedPod)
            o = self.executor.run(a)
            assert isinstance(o, Done)
            if o.error is not None:
                log.warning(
                    "cannot delete the stranded pod", extra={"pod": a.pod.key, "error": o.error}
                )
                continue
            log.info("deleted a stranded narrowed pod", extra={"pod": a.pod.key, "reason": a.why})
            self.execute(self.decide(PodDeleted(o), now))

    def lift(
        self,
        decision: gates.GateDecision,
        objects: Sequence[Mapping[str, Any]],
        can_write: bool,
        now: float,
    ) -> None:
        """Release each gang gate mode lets go, each pod narrowed to its node (dry-run: only logged)."""
        if not can_write:
            for lift in decision.lifts:
                log.info(
                    "gate lift skipped (dry-run)",
                    extra={
                        "gang": str(lift.gang.key),
                        "pods": [p.key for p in lift.pods],
                        "why": lift.why,
                    },
                )
            return
        raw = {
            (o["metadata"].get("namespace"), o["metadata"].get("name")): o
            for o in objects
            if o.get("kind") == "Pod" and isinstance(o.get("metadata"), dict)
        }
        for a in self.decide(GatesOpen(decision, raw, self.cfg.gate_narrowing), now).actions:
            assert isinstance(a, LiftGate)
            o = self.executor.run(a)
            assert isinstance(o, LiftOutcome)
            if o.done:
                self.metrics.gates_lifted.labels(a.why).inc(len(o.done))
                log.info(
                    "gate lifted",
                    extra={
                        "gang": str(a.gang),
                        "pods": list(o.done),
                        "why": a.why,
                        "reason": a.message,
                        "nodes": list(a.nodes),
                    },
                )
                self.execute(self.decide(Lifted(o), now))
            if o.failed:
                log.warning(
                    "cannot lift the scheduling gate",
                    extra={"gang": str(a.gang), "errors": dict(o.failed)},
                )

    # ------------------------------------------------------------ conditions

    def conditions(self, objects: Sequence[Mapping[str, Any]], now: float) -> None:
        """Each recorded gang's condition on its PodGroup, when it changed (conditions.py); never raises."""
        for o in self.execute(self.decide(ConditionsSeen(objects), now)):
            assert isinstance(o, ConditionsOutcome)
            for gang, err in o.errors.items():
                log.warning(
                    "cannot write the PodGroup condition", extra={"gang": gang, "error": err}
                )

    # ------------------------------------------------------------ the status

    def publish(self, data: Mapping[str, str], now: float) -> None:
        """The leader's status ConfigMap, when `decide` finds it due (changed, or not written for REFRESH_SECONDS);
        a failed write is a warning, and it is due again at the next pass. Never raises."""
        for o in self.execute(self.decide(StatusSeen(data), now)):
            assert isinstance(o, Done)
            if o.error is not None:
                log.warning("cannot publish the status", extra={"error": o.error})
            self.decide(StatusPublished(o), now)
