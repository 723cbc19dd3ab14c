"""The one place the controller's actions are carried out: `Executor.run(action, ctx) -> Outcome`.

Invariant: this module is the only controller code that calls the cloud's mutating methods (through the
`Actuator`), writes pods (gate lifts, deletions), node taints, PodGroup conditions, Events or the status
ConfigMap; a shape test enforces it. Each write is fenced first by the leader elector (`LostLeadership`
propagates: a deposed leader sends nothing more). No other error is raised: each kind's outcome carries
the typed error (`CloudError`, whose `ErrorKind` the backoff decides on, or the Kubernetes write's one-line
reason), and the caller turns the outcome into the next report (lifecycle `Applied`, `Released`,
`Recovered`, the next rule's input), as Karpenter's `nodeclaim/lifecycle/launch.go` is the one place it
calls the cloud and branches on the error. Logs and metrics of an outcome are the loop's, not the executor's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cloud_adapters.errors import CloudError

from ..apply import ExecutionReport
from ..ingest import Cluster
from ..kube.nodetaints import NodeTainter
from ..kube.podgroupstatus import ConditionWriter
from ..plan import Plan
from .actions import (
    Action,
    Adopt,
    BuyAhead,
    Cordon,
    DeleteStrandedPod,
    EmitEvent,
    LiftGate,
    PublishStatus,
    ReleaseCapacity,
    ReturnAhead,
    ScaleDown,
    ScaleUp,
    TerminateLoose,
    Uncordon,
    WriteConditions,
)
from .actuator import Actuator, ReleaseResult, ScaleDownResult
from .crashpoints import crash_point
from .events import EventSink
from .published import StatusPublisher
from .scaledown import DISRUPTION_TAINT, blocks_removal, pod_key


class PodGates(Protocol):
    """The pod writes of gate mode (`kube.podgates.PodGateLifter`); each returns None when done, else why not."""

    def remove(self, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]) -> str | None: ...
    def delete(self, namespace: str, name: str, uid: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Context:
    """What a run needs besides its action: the pass's plan and cluster, and its clock reading."""

    plan: Plan | None
    cluster: Cluster
    now: float


@dataclass(frozen=True, slots=True)
class ScaleUpOutcome:
    action: ScaleUp
    report: ExecutionReport


@dataclass(frozen=True, slots=True)
class ScaleDownOutcome:
    action: ScaleDown
    results: tuple[ScaleDownResult, ...]


@dataclass(frozen=True, slots=True)
class AdoptOutcome:
    action: Adopt
    adopted: tuple[str, ...]
    note: str


@dataclass(frozen=True, slots=True)
class CordonOutcome:
    """`error`: the taint was not set; else `landed`: the pods that block removal (None: unread)."""

    action: Cordon
    error: str | None
    landed: tuple[str, ...] | None = None

    @property
    def still_empty(self) -> bool:
        return self.error is None and self.landed == ()


@dataclass(frozen=True, slots=True)
class LiftOutcome:
    action: LiftGate
    done: tuple[str, ...]
    failed: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Done:
    """A single write's outcome: `error` is None when it was made (a CloudError, or the write's reason)."""

    action: Action
    error: CloudError | str | None = None


@dataclass(frozen=True, slots=True)
class ReturnOutcome:
    """How many launches bought ahead went back (`ReturnAhead`), and the error that stopped it (None: none)."""

    action: ReturnAhead
    returned: int
    error: CloudError | None = None


@dataclass(frozen=True, slots=True)
class ConditionsOutcome:
    action: WriteConditions
    errors: Mapping[str, str]  # gang -> why its condition was not written


Outcome = (
    ScaleUpOutcome
    | ReleaseResult
    | ScaleDownOutcome
    | AdoptOutcome
    | CordonOutcome
    | LiftOutcome
    | ConditionsOutcome
    | ReturnOutcome
    | Done
)


class Executor:
    """Runs actions against the cloud (`actuator`) and the cluster (the writers; None: that kind writes nothing)."""

    def __init__(
        self,
        actuator: Actuator,
        events: EventSink,
        *,
        fence: Callable[[str], None] | None = None,
        pod_gates: PodGates | None = None,
        conditions: ConditionWriter | None = None,
        node_taints: NodeTainter | None = None,
        status: StatusPublisher | None = None,
    ) -> None:
        self.actuator = actuator
        self.events = events
        self.fence = fence
        self.pod_gates = pod_gates
        self.conditions = conditions
        self.node_taints = node_taints
        self.status = status

    def _fenced(self, what: str) -> None:
        if self.fence is not None:
            self.fence(what)

    def run(self, action: Action, ctx: Context | None = None) -> Outcome:
        """Carry out `action`; its outcome, never an exception but `LostLeadership`. The cloud's kinds that read
        the cluster (`ScaleUp`, `ReleaseCapacity`, `ReturnAhead`) need `ctx`."""
        if isinstance(action, ScaleUp):
            assert ctx is not None, "a scale-up runs in a pass's context"
            return self._scale_up(action, ctx)
        if isinstance(action, ReleaseCapacity):
            assert ctx is not None, "a release runs in a pass's context"
            return self.actuator.release(
                action.release, ctx.cluster, action.keep, action.keep_instances
            )
        if isinstance(action, ScaleDown):
            return ScaleDownOutcome(action, tuple(self.actuator.scale_down(action.nodes)))
        if isinstance(action, Adopt):
            got, note = self.actuator.settle_call(action.group, list(action.ids), action.wanted)
            return AdoptOutcome(action, got, note)
        if isinstance(action, TerminateLoose):
            return Done(action, self.actuator.terminate_loose([i.id for i in action.instances]))
        if isinstance(action, BuyAhead):
            err = self.actuator.buy_ahead(action.group, action.nodes, action.token)
            crash_point("call-confirmed")
            return Done(action, err)
        if isinstance(action, ReturnAhead):
            assert ctx is not None, "a return runs in a pass's context"
            n, err = self.actuator.return_ahead(
                action.group, action.nodes, action.counted, action.keep_instances, ctx.cluster
            )
            return ReturnOutcome(action, n, err)
        return self._cluster_write(action)

    def _cluster_write(self, action: Action) -> Outcome:
        """The writes to the cluster: node taints, pods, conditions, Events, the status ConfigMap."""
        if isinstance(action, Cordon):
            return self._cordon(action)
        if isinstance(action, Uncordon):
            return Done(action, self._taint(action.node, False, f"untaint node {action.node}"))
        if isinstance(action, LiftGate):
            return self._lift(action)
        if isinstance(action, DeleteStrandedPod):
            return self._delete(action)
        if isinstance(action, WriteConditions):
            return self._conditions(action)
        if isinstance(action, EmitEvent):
            return self._emit(action)
        if isinstance(action, PublishStatus):
            return self._publish(action)
        raise TypeError(f"no executor for {type(action).__name__}")  # pragma: no cover

    def _scale_up(self, action: ScaleUp, ctx: Context) -> ScaleUpOutcome:
        """The scale-up call, after its records were saved (`actions.save_first`)."""
        assert ctx.plan is not None, "a scale-up runs with its plan"
        report = self.actuator.apply(ctx.plan, ctx.cluster, action.tokens, ctx.now)
        crash_point("call-confirmed")
        return ScaleUpOutcome(action, report)

    def _taint(self, node: str, present: bool, why: str) -> str | None:
        if self.node_taints is None:
            return None
        self._fenced(why)
        return self.node_taints.set_taint(node, DISRUPTION_TAINT, present)

    def _cordon(self, action: Cordon) -> CordonOutcome:
        """Taint, then read the node's pods back (scaledown.py's protocol); no tainter: empty as seen."""
        if self.node_taints is None:
            return CordonOutcome(action, None, ())
        node = action.node.node
        err = self._taint(node, True, f"taint node {node} for scale-down")
        if err is not None:
            return CordonOutcome(action, err)
        pods = self.node_taints.pods_on(node)
        landed = None if pods is None else tuple(pod_key(p) for p in pods if blocks_removal(p))
        return CordonOutcome(action, None, landed)

    def _lift(self, action: LiftGate) -> LiftOutcome:
        done, failed = [], {}
        for patch in action.patches:
            p = patch.pod
            if self.pod_gates is None:
                break
            self._fenced(f"lift the scheduling gate of pod {p.key}")
            err = self.pod_gates.remove(p.namespace, p.name, list(patch.ops))
            if err is None:
                done.append(p.key)
            else:
                failed[p.key] = err
        return LiftOutcome(action, tuple(done), failed)

    def _delete(self, action: DeleteStrandedPod) -> Done:
        p = action.pod
        if self.pod_gates is None:
            return Done(action, "no pod writer")
        self._fenced(f"delete stranded pod {p.key}")
        return Done(action, self.pod_gates.delete(p.namespace, p.name, p.uid))

    def _conditions(self, action: WriteConditions) -> ConditionsOutcome:
        if self.conditions is None or not action.writes:
            return ConditionsOutcome(action, {})
        self._fenced("write PodGroup conditions")
        errors = {}
        for w in action.writes:
            err = self.conditions.write(w.obj, w.condition, w.mode)
            if err is not None:
                errors[w.gang] = err
        return ConditionsOutcome(action, errors)

    def _emit(self, action: EmitEvent) -> Done:
        """Events are never fenced here: the sink fences its own writes and counts the refused ones."""
        if action.on is not None:
            self.events.emit_on(
                dict(action.on), action.reason, action.message, warning=action.warning
            )
        elif action.target is not None:
            self.events.emit(action.target, action.reason, action.message, warning=action.warning)
        return Done(action)

    def _publish(self, action: PublishStatus) -> Done:
        if self.status is None:
            return Done(action)
        self._fenced("publish the status")
        return Done(action, self.status.publish(action.data, action.now))
