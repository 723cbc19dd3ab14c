"""The controller's decide step: `decide(state, observation, now) -> Decision`, one pure function.

Invariant: `decide` does no I/O and reads no clock; the same state, observation and time always give the same
decision. An observation is what the pass read (the cluster's empty nodes, stranded pods, gates to lift,
loose instances, the PodGroups' conditions) or what the executor reported (`execute.Outcome`, or a lifecycle
report built from one). The decision is the new state, the actions the executor runs in order
(`actions.py`), the lifecycle's events (log lines and metric samples; the Kubernetes Events among them are
`EmitEvent` actions too) and `wake_at`: the earliest time after `now` at which one of the rules falls due on
the new state (`wakes.next_due`), so the loop runs a pass then, as Karpenter's reconcilers return
`RequeueAfter`. The loop (`reconciler.py`) observes, decides, saves the records before a write-ahead kind
(`actions.save_first`), executes, and feeds each outcome to the next `decide`: the pattern of Karpenter's
`disruption/controller.go` `disrupt` (compute commands, drop no-ops, start them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cloud_adapters.base import LooseInstance
from cloud_adapters.errors import CloudError

from ..ingest import Cluster
from ..model import Gang, GangKey, NodeGroup, Pod
from ..plan import Plan
from ..resources import GPU
from . import backoff, janitor, keep, wakes
from .actions import (
    Action,
    Adopt,
    BuyAhead,
    ConditionWrite,
    Cordon,
    DeleteStrandedPod,
    EmitEvent,
    LiftGate,
    PodPatch,
    PublishStatus,
    ReleaseCapacity,
    ReturnAhead,
    ScaleDown,
    TerminateLoose,
    Uncordon,
    WriteConditions,
)
from .conditions import due as conditions_due
from .config import ControllerConfig
from .events import state_object
from .execute import (
    CordonOutcome,
    Done,
    LiftOutcome,
    ReturnOutcome,
    ScaleDownOutcome,
    ScaleUpOutcome,
)
from .gates import CAPACITY_GATE, GateDecision, release_patch, stranded_due_at
from .keep import KeepState
from .lifecycle import (
    ApplyScaleUp,
    BackOff,
    Booked,
    Event,
    EventTarget,
    GangEvent,
    Record,
    Release,
    ReleaseWhy,
    Report,
    holds,
    named_launches,
    transition,
)
from .limits import Usage
from .published import Shown, status_due
from .reservations import reserved_registered
from .scaledown import EmptyNode, above_min_size, due_nodes, empty_nodes, tainted_nodes


@dataclass(frozen=True, slots=True)
class State:
    """What one decision leaves for the next: the records (persisted), and the rules' own clocks (in memory)."""

    settings: ControllerConfig
    records: Mapping[GangKey, Record] = field(default_factory=dict)
    backoff: Mapping[str, float] = field(default_factory=dict)  # group -> backed off until
    empty_since: Mapping[str, float] = field(default_factory=dict)  # node -> first seen empty
    # empty node -> its give-back time
    empty_until: Mapping[str, float] = field(default_factory=dict)
    keep: KeepState = KeepState()  # the keep rule's arrivals and boots (keep.py)
    # pod key -> first seen stranded
    stranded_since: Mapping[str, float] = field(default_factory=dict)
    # nodes whose instance was terminated, while their Node lasts
    scaled_down: frozenset[str] = frozenset()
    published: Shown = Shown()  # the status ConfigMap as last written (published.py)


@dataclass(frozen=True, slots=True)
class Decision:
    state: State
    actions: tuple[Action, ...] = ()
    events: tuple[Event, ...] = ()
    decided_at: float | None = None  # the `now` it was decided at (None: no wake-up)
    backed_off: tuple[BackOff, ...] = ()  # the groups this decision backed off (each, once)
    extended: tuple[BackOff, ...] = ()  # those whose backoff it moved later (logged and counted)

    @property
    def wake_at(self) -> float | None:
        """The earliest wake-up after `decided_at` on the new state (`wakes.next_due`); None: none. Worked out when
        read: a pass decides many times and its loop reads the wake-up once, from its last state
        (`Reconciler.next_due`)."""
        return None if self.decided_at is None else wakes.next_due(self.state, self.decided_at)


# ----------------------------------------------------------------- observations


@dataclass(frozen=True, slots=True)
class Reported:
    """A lifecycle report; `node_names`: the cluster's Nodes (a running gang's late launches never take one)."""

    report: Report
    plan: Plan | None = None
    node_names: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ScaleUpRan:
    """The scale-up's outcome: its failed groups back off."""

    outcome: ScaleUpOutcome


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    """Calls whose records hold a client token and no outcome, with the instances outside every group."""

    calls: Mapping[str, Sequence[janitor.PendingCall]]
    loose: tuple[LooseInstance, ...]


@dataclass(frozen=True, slots=True)
class AheadUnconfirmed:
    """Purchases bought ahead that an earlier leader saved and may not have seen through (token -> (group, when
    bought): `keep.ahead_calls`), with the instances outside every group."""

    calls: Mapping[str, tuple[str, float]]
    loose: tuple[LooseInstance, ...]


@dataclass(frozen=True, slots=True)
class Orphans:
    """Instances outside every group; `settling`: the tokens of the unconfirmed calls (never orphans)."""

    loose: tuple[LooseInstance, ...]
    settling: frozenset[str]


@dataclass(frozen=True, slots=True)
class OrphansEnded:
    """The orphans' termination's outcome: said as a Warning Event on the state ConfigMap when it succeeded."""

    outcome: Done


@dataclass(frozen=True, slots=True)
class EmptyNodes:
    """The cluster's nodes for the scale-down; `busy`: nodes never removed now; `spares`: node -> the deadline
    of the purchase a running gang did not use it from (`lifecycle.spare_until`)."""

    cluster: Cluster
    busy: frozenset[str]
    groups: Mapping[str, NodeGroup]
    spares: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class AheadDue:
    """The cluster and the owned groups (their desired sizes) after the scale-down: what to buy ahead."""

    cluster: Cluster
    groups: Mapping[str, NodeGroup]


@dataclass(frozen=True, slots=True)
class AheadLapsed:
    """A pass before buying ahead: the purchases bought ahead whose deadline has passed with launches not
    registered."""


@dataclass(frozen=True, slots=True)
class BoughtAhead:
    """A purchase bought ahead: a call that failed is no purchase, and a failure that says the group cannot deliver
    backs it off (`backoff.backs_off`)."""

    outcome: Done


@dataclass(frozen=True, slots=True)
class ReturnedAhead:
    """The launches bought ahead that lapsed, given back: their purchases are settled (kept for the next pass when
    the call failed), and their group backed off when some were still on their way."""

    outcome: ReturnOutcome


@dataclass(frozen=True, slots=True)
class Cordoned:
    outcome: CordonOutcome


@dataclass(frozen=True, slots=True)
class Checked:
    """The due nodes still empty once tainted: they go now."""

    nodes: tuple[EmptyNode, ...]


@dataclass(frozen=True, slots=True)
class ScaledDown:
    """The scale-down's outcome, with the cluster it ran on (its taints, its nodes in owned groups)."""

    outcome: ScaleDownOutcome
    cluster: Cluster
    groups: frozenset[str]


@dataclass(frozen=True, slots=True)
class Stranded:
    """Released pods whose narrowed-to node is gone (`gates.stranded`); `can_delete`: enforce, with a pod writer."""

    found: tuple[tuple[Pod, str], ...]
    gang_of: Mapping[str, Gang]
    can_delete: bool


@dataclass(frozen=True, slots=True)
class PodDeleted:
    outcome: Done


@dataclass(frozen=True, slots=True)
class GatesOpen:
    """Gate mode's decision (`gates.decide`) with the pods as listed (their patches are built from them)."""

    decision: GateDecision
    raw_pods: Mapping[tuple[str, str], Mapping[str, Any]]
    narrowing: bool


@dataclass(frozen=True, slots=True)
class Lifted:
    outcome: LiftOutcome


@dataclass(frozen=True, slots=True)
class ConditionsSeen:
    """The listed objects, whose PodGroups get each record's condition when it changed."""

    objects: Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class StatusSeen:
    """The leader's status as this pass has it (`published.status_data`), to publish when due."""

    data: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class StatusPublished:
    outcome: Done


Observation = (
    Reported
    | ScaleUpRan
    | Unconfirmed
    | AheadUnconfirmed
    | Orphans
    | OrphansEnded
    | EmptyNodes
    | AheadLapsed
    | AheadDue
    | BoughtAhead
    | ReturnedAhead
    | Cordoned
    | Checked
    | ScaledDown
    | Stranded
    | PodDeleted
    | GatesOpen
    | Lifted
    | ConditionsSeen
    | StatusSeen
    | StatusPublished
)


# ----------------------------------------------------------------- the step


def decide(state: State, observation: Observation, now: float) -> Decision:
    """The new state, the actions, the events and the next wake-up for one observation. Pure."""
    made = RULES[type(observation)](state, observation, now)
    return replace(made, decided_at=now)


def _reported(state: State, obs: Reported, now: float) -> Decision:
    """Move the records by the report (`lifecycle.transition`); its releases spare what other gangs wait for.
    A write-ahead batch (`Booked`) emits its Events before the call (they are in the saved pass); the others
    after the cloud answered, as their reasons describe what was done."""
    records, actions, events = transition(state.records, obs.plan, obs.report, now)
    held = frozenset(reserved_registered(records.values()))
    work: list[Action] = []
    backoffs = [a for a in actions if isinstance(a, BackOff)]
    for a in actions:
        if isinstance(a, Release):
            keep = obs.node_names if a.why == ReleaseWhy.UNUSED else held
            others = named_launches(r for r in records.values() if r.key != a.key)
            work.append(ReleaseCapacity(a, keep, frozenset(others)))
        elif isinstance(a, ApplyScaleUp):
            work.append(a)
    emits = [EmitEvent.of(e) for e in events if isinstance(e, GangEvent)]
    ordered = [*emits, *work] if isinstance(obs.report, Booked) else [*work, *emits]
    return _backed_off(replace(state, records=records), backoffs, tuple(ordered), events, now)


def _backed_off(
    state: State,
    backoffs: Sequence[BackOff],
    actions: tuple[Action, ...],
    events: tuple[Event, ...],
    now: float,
) -> Decision:
    """The decision with its groups backed off for the backoff period from `now` (`backoff.extend`)."""
    if not backoffs:
        return Decision(state, actions, events)
    until = now + state.settings.launch_failure_backoff_seconds
    new, extended = backoff.extend(state.backoff, backoffs, until)
    return Decision(
        replace(state, backoff=new), actions, events, None, tuple(backoffs), tuple(extended)
    )


def _scale_up_ran(state: State, obs: ScaleUpRan, now: float) -> Decision:
    return _backed_off(state, backoff.from_scale_up(obs.outcome.report), (), (), now)


def _unconfirmed(state: State, obs: Unconfirmed, now: float) -> Decision:
    """Each unconfirmed call's instances join their group when a record still wants them, else go."""
    return Decision(
        state,
        tuple(
            Adopt(
                shares[0].group,
                token,
                tuple(janitor.launched_by(obs.loose, token)),
                any(s.wanted for s in shares),
            )
            for token, shares in obs.calls.items()
        ),
    )


def _ahead_unconfirmed(state: State, obs: AheadUnconfirmed, now: float) -> Decision:
    """The instances a purchase bought ahead launched outside its group join it while the purchase is in time (its
    nodes are then known as bought ahead when they register), else go."""
    since = now - state.settings.keep_settings().max_boot_seconds
    launched = {t: tuple(janitor.launched_by(obs.loose, t)) for t in obs.calls}
    return Decision(
        state,
        tuple(
            Adopt(group, token, launched[token], at >= since)
            for token, (group, at) in sorted(obs.calls.items())
            if launched[token]
        ),
    )


def _orphans(state: State, obs: Orphans, now: float) -> Decision:
    """Loose instances past the orphan grace that no unconfirmed call accounts for are terminated."""
    due = janitor.orphans_due(
        list(obs.loose), set(obs.settling), now, state.settings.orphan_grace_seconds
    )
    return Decision(state, (TerminateLoose(tuple(due)),) if due else ())


def _orphans_ended(state: State, obs: OrphansEnded, now: float) -> Decision:
    a = obs.outcome.action
    if obs.outcome.error is not None or not isinstance(a, TerminateLoose):
        return Decision(state)
    cfg = state.settings
    where = state_object(cfg.state_namespace, cfg.state_configmap)
    message = janitor.orphan_message(a.instances, cfg.orphan_grace_seconds)
    return Decision(state, (EmitEvent("OrphanInstancesTerminated", message, True, on=where),))


def _empty_nodes(state: State, obs: EmptyNodes, now: float) -> Decision:
    """Empty nodes past their keep time (keep.py: the ski-rental rule, or the fixed grace) that their group can
    spare are tainted and read again before they go (`Cordon`)."""
    settings = state.settings.keep_settings()
    since = empty_nodes(state.empty_since, obs.cluster, set(obs.busy), obs.groups, now)
    records = state.records.values()
    kept = keep.observe(state.keep, obs.cluster, obs.groups, records, now, settings)
    until = keep.keep_until(kept, since, state.empty_until, obs.cluster, obs.groups, now, settings)
    grace = state.settings.empty_node_grace_seconds
    due = due_nodes(since, until, obs.cluster, obs.groups, now, obs.spares, grace=grace)
    cordons = tuple(Cordon(e) for e in above_min_size(due))
    return Decision(replace(state, empty_since=since, empty_until=until, keep=kept), cordons)


def _ahead_lapsed(state: State, obs: AheadLapsed, now: float) -> Decision:
    """The launches bought ahead that did not register by their purchase's deadline go back, as a gang's do at its
    deadline."""
    since = now - state.settings.keep_settings().max_boot_seconds
    gone = keep.lapsed(state.keep, since)
    return Decision(state, tuple(_return(state, g, n, since) for g, n in sorted(gone.items())))


def _ahead_due(state: State, obs: AheadDue, now: float) -> Decision:
    """The nodes bought ahead (`keep.buy_ahead`) that the cluster ceiling allows, each call logged in the keep
    rule's state first (write-ahead: saved with the records), so its nodes are known as bought ahead when they
    register. Nothing in a backed-off group, nor in one whose lapsed launches could not be given back."""
    settings = state.settings.keep_settings()
    lapsed = keep.lapsed(state.keep, now - settings.max_boot_seconds)
    held = {**state.backoff, **{g: float("inf") for g in lapsed}}
    node_group = {n.name: n.node_group or "" for n in obs.cluster.nodes}
    empty = Counter(node_group[n] for n in state.empty_since if node_group.get(n) in obs.groups)
    # a backed-off group has no room, as for the planner
    groups = {k: backoff.backed_off(g, held, now) for k, g in obs.groups.items()}
    want = keep.buy_ahead(state.keep, empty, groups, now, settings)
    in_use, ceiling = Usage.of_groups(obs.groups.values()), state.settings.cluster_ceiling
    calls, buys = dict(state.keep.requests), []
    for name, n in sorted(want.items()):
        group = obs.groups[name]
        gpus, price = group.allocatable.get(GPU, 0), group.price_per_hour
        while n and not in_use.plus(n, n * gpus, n * price).within(ceiling):
            n -= 1
        if not n:
            continue
        in_use = in_use.plus(n, n * gpus, n * price)
        calls[name] = tuple(sorted((*calls.get(name, ()), (now, keep.AHEAD, n))))
        buys.append(BuyAhead(name, n, keep.ahead_token(name, now), now))
    if not buys:
        return Decision(state)
    return Decision(replace(state, keep=replace(state.keep, requests=calls)), tuple(buys))


def _return(state: State, group: str, nodes: int, since: float) -> ReturnAhead:
    """The give-back of `group`'s lapsed launches bought ahead, sparing what gangs and the purchases bought ahead
    still in time count on there: their launches not registered (a gang's named ones by id)."""
    held = [r for r in state.records.values() if holds(r)]
    counted = sum(max(0, r.requested.get(group, 0) - r.arrived(group)) for r in held)
    counted += keep.on_the_way(state.keep, since).get(group, 0)
    return ReturnAhead(group, nodes, since, counted, frozenset(named_launches(held)))


def _bought_ahead(state: State, obs: BoughtAhead, now: float) -> Decision:
    a, err = obs.outcome.action, obs.outcome.error
    if err is None or not isinstance(a, BuyAhead):
        return Decision(state)
    left = tuple(
        q for q in state.keep.requests.get(a.group, ()) if q[1] != keep.AHEAD or q[0] != a.at
    )
    calls = {**state.keep.requests, a.group: left}
    decided = replace(state, keep=replace(state.keep, requests=calls))
    kind, retryable = (err.kind, err.retryable) if isinstance(err, CloudError) else (None, True)
    if kind is None or not backoff.backs_off(kind, retryable):
        return Decision(decided)
    return _backed_off(decided, [BackOff(a.group, kind, str(err))], (), (), now)


def _returned_ahead(state: State, obs: ReturnedAhead, now: float) -> Decision:
    """Launches that were still on their way at the deadline back their group off, as a gang's timeout does; none
    left (they failed and left the group, or registered for another purchase) is no sign the group cannot deliver."""
    o = obs.outcome
    if o.error is not None:
        return Decision(state)
    settled = replace(state, keep=keep.settle_lapsed(state.keep, o.action.group, o.action.since))
    if not o.returned:
        return Decision(settled)
    late = BackOff(
        o.action.group, ReleaseWhy.TIMED_OUT, "timed-out: nodes bought ahead did not arrive"
    )
    return _backed_off(settled, [late], (), (), now)


def _cordoned(state: State, obs: Cordoned, now: float) -> Decision:
    """A node that is not empty once tainted (or whose pods could not be read) stays: its taint comes off and
    its emptiness starts over. A taint that could not be set leaves nothing to take off."""
    out = obs.outcome
    if out.still_empty or out.error is not None:
        return Decision(state)
    node = out.action.node.node
    since = {k: t for k, t in state.empty_since.items() if k != node}
    until = {k: t for k, t in state.empty_until.items() if k != node}
    why = "a pod landed" if out.landed else "its pods could not be read"
    return Decision(replace(state, empty_since=since, empty_until=until), (Uncordon(node, why),))


def _checked(state: State, obs: Checked, now: float) -> Decision:
    return Decision(state, (ScaleDown(obs.nodes),))


def _scaled_down(state: State, obs: ScaledDown, now: float) -> Decision:
    """Removed nodes forget their emptiness; a node tainted for removal that was not removed (minSize, a failed
    call, a removal left unfinished) gets its taint off."""
    removed = {r.node.node for r in obs.outcome.results if r.removed}
    since = {k: t for k, t in state.empty_since.items() if k not in removed}
    until = {k: t for k, t in state.empty_until.items() if k not in removed}
    names = {n.name for n in obs.cluster.nodes}
    scaled_down = (state.scaled_down | removed) & names
    matched = {n.name for n in obs.cluster.nodes if n.node_group in obs.groups}
    tainted = tainted_nodes(obs.cluster.nodes) | {e.node for e in obs.outcome.action.nodes}
    leftover = sorted(tainted & matched - scaled_down)
    return Decision(
        replace(state, empty_since=since, empty_until=until, scaled_down=frozenset(scaled_down)),
        tuple(Uncordon(n, "not scaled down") for n in leftover),
    )


def _stranded(state: State, obs: Stranded, now: float) -> Decision:
    """A released pod stranded for the grace is deleted so its owner recreates it (gated again by the webhook);
    a pod without an owner is only reported (deleting it would lose it)."""
    seen = {p.key for p, _ in obs.found}
    since = {k: t for k, t in state.stranded_since.items() if k in seen}
    actions: list[Action] = []
    for p, why in obs.found:
        first = since.setdefault(p.key, now)
        due = stranded_due_at(first, state.settings.narrowed_node_grace_seconds)
        if now < due or not obs.can_delete:
            continue
        target = EventTarget.of_gang(obs.gang_of[p.key])
        if p.owner_kinds:
            actions.append(DeleteStrandedPod(p, why, target))
        else:
            message = (
                f"pod {p.key}: {why}; it has no owner to recreate it, "
                "so gangscale leaves it: delete it and create it again"
            )
            actions.append(EmitEvent("NarrowedNodeGone", message, True, target, about=p.key))
    return Decision(replace(state, stranded_since=since), tuple(actions))


def _pod_deleted(state: State, obs: PodDeleted, now: float) -> Decision:
    a = obs.outcome.action
    if obs.outcome.error is not None or not isinstance(a, DeleteStrandedPod):
        return Decision(state)
    since = {k: t for k, t in state.stranded_since.items() if k != a.pod.key}
    message = (
        f"deleted pod {a.pod.key}: {a.why}; its owner recreates it and the next plan places it"
    )
    event = EmitEvent("NarrowedNodeGone", message, True, target=a.target)
    return Decision(replace(state, stranded_since=since), (event,))


def _gates_open(state: State, obs: GatesOpen, now: float) -> Decision:
    """Each gang gate mode releases: one patch per pod, the gate off and the pod narrowed to its planned node."""
    lifts = []
    for lift in obs.decision.lifts:
        nodes = lift.nodes if obs.narrowing else ()
        patches = tuple(
            PodPatch(
                p,
                tuple(
                    release_patch(
                        obs.raw_pods.get((p.namespace, p.name), {}),
                        p.scheduling_gates,
                        nodes[i] if i < len(nodes) else None,
                    )
                ),
            )
            for i, p in enumerate(lift.pods)
        )
        target = EventTarget.of_gang(lift.gang)
        lifts.append(LiftGate(lift.gang.key, target, lift.why, lift.message, nodes, patches))
    return Decision(state, tuple(lifts))


def _lifted(state: State, obs: Lifted, now: float) -> Decision:
    done, a = obs.outcome.done, obs.outcome.action
    if not done:
        return Decision(state)
    message = f"removed the {CAPACITY_GATE} scheduling gate from {len(done)} pod(s): {a.message}"
    return Decision(state, (EmitEvent("GateLifted", message, target=a.target),))


def _conditions_seen(state: State, obs: ConditionsSeen, now: float) -> Decision:
    todo = conditions_due(state.records.values(), [dict(o) for o in obs.objects])
    writes = tuple(ConditionWrite(r.gang, o, c, m) for r, o, c, m in todo)
    return Decision(state, (WriteConditions(writes),) if writes else ())


def _status_seen(state: State, obs: StatusSeen, now: float) -> Decision:
    """The status is published when it changed since it was last written, or that is REFRESH_SECONDS old."""
    due = status_due(state.published, obs.data, now)
    return Decision(state, (PublishStatus(obs.data, now),) if due else ())


def _status_published(state: State, obs: StatusPublished, now: float) -> Decision:
    """A write that succeeded is what the next `_status_seen` compares with; a failed one is tried again."""
    a = obs.outcome.action
    if obs.outcome.error is not None or not isinstance(a, PublishStatus):
        return Decision(state)
    return Decision(replace(state, published=Shown(dict(a.data), a.now)))


RULES: Mapping[type, Callable[[State, Any, float], Decision]] = {
    Reported: _reported,
    ScaleUpRan: _scale_up_ran,
    Unconfirmed: _unconfirmed,
    AheadUnconfirmed: _ahead_unconfirmed,
    Orphans: _orphans,
    OrphansEnded: _orphans_ended,
    EmptyNodes: _empty_nodes,
    AheadLapsed: _ahead_lapsed,
    AheadDue: _ahead_due,
    BoughtAhead: _bought_ahead,
    ReturnedAhead: _returned_ahead,
    Cordoned: _cordoned,
    Checked: _checked,
    ScaledDown: _scaled_down,
    Stranded: _stranded,
    PodDeleted: _pod_deleted,
    GatesOpen: _gates_open,
    Lifted: _lifted,
    ConditionsSeen: _conditions_seen,
    StatusSeen: _status_seen,
    StatusPublished: _status_published,
}
