"""Apply a plan's scale-up to a cloud once, and say what happened to each group.

Invariant: each group is grown at most once per plan, and a group whose
target moved since discovery is left alone (another run is acting), so
re-running adds nothing twice. With an atomic provider every set of groups
that shares a gang is grown all together or rolled back. Typed cloud errors
are recorded in the `ExecutionReport`, never raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from cloud_adapters import CloudError, NodeGroupProvider
from cloud_adapters.base import ScaleResult
from cloud_adapters.errors import ErrorKind

from .ingest import Cluster
from .model import GangKey, NodeGroup
from .plan import Plan

__all__ = ["ExecutionReport", "GroupAction", "apply_plan", "match_node_groups", "atomic_units"]

ActionStatus = Literal["applied", "skipped", "failed", "rolled-back"]
_CLOCK_SKEW = timedelta(seconds=5)  # launch failures stamped a little before our clock still count


@dataclass(slots=True)
class GroupAction:
    """What happened to one group's share of the plan."""

    group: str
    requested: int
    status: ActionStatus
    before: int | None = None
    after: int | None = None
    message: str = ""
    error_kind: ErrorKind | None = None
    retryable: bool = False  # the error's own `retryable`: the same call may succeed later
    instance_ids: list[str] = field(default_factory=list)
    token: str = ""  # the call's client token, when the caller gave one (which records the instances are for)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "nodeGroup": self.group,
            "requested": self.requested,
            "status": self.status,
            "before": self.before,
            "after": self.after,
        }
        if self.message:
            d["message"] = self.message
        if self.error_kind:
            d["errorKind"] = self.error_kind.value
        if self.instance_ids:
            d["instanceIds"] = self.instance_ids
        return d


@dataclass(slots=True)
class ExecutionReport:
    """The `execution` section printed after the plan."""

    provider: str
    actions: list[GroupAction] = field(default_factory=list)
    launch_failures: list[CloudError] = field(default_factory=list)
    nodes_matched: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.launch_failures) or any(
            a.status in ("failed", "rolled-back") for a in self.actions
        )

    def first_error(self) -> str:
        for a in self.actions:
            if a.status == "failed":
                return a.message
        if self.launch_failures:
            return str(self.launch_failures[0])
        return next((a.message for a in self.actions if a.status == "rolled-back"), "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "nodesMatched": self.nodes_matched,
            "actions": [a.to_dict() for a in self.actions],
            "launchFailures": [
                {
                    "nodeGroup": e.group,
                    "errorKind": e.kind.value,
                    "code": e.code,
                    "message": e.message,
                }
                for e in self.launch_failures
            ],
        }

    def render_text(self) -> str:
        lines = [
            f"Execution ({self.provider}, {self.nodes_matched} registered nodes matched to groups):"
        ]
        if not self.actions:
            lines.append(
                "  nothing to apply: the plan adds no nodes (capacity already on its way counts)"
            )
        for a in self.actions:
            sizes = (
                f" (target {a.before} -> {a.after})"
                if a.before is not None and a.after is not None
                else ""
            )
            note = f": {a.message}" if a.message else ""
            lines.append(f"  {a.status:<11} +{a.requested} {a.group}{sizes}{note}")
        for e in self.launch_failures:
            lines.append(f"  launch failed {e.group}: {e}")
        return "\n".join(lines) + "\n"


def match_node_groups(cluster: Cluster, provider: NodeGroupProvider) -> tuple[Cluster, int]:
    """The cluster with each Node's group read from spec.providerID (instance id -> group), as Cluster
    Autoscaler matches nodes, and how many were matched.

    A copy: the ingested cluster and its Nodes are never changed. Nodes the provider does not know keep
    the group their label named.
    """
    mapping = provider.instance_groups()
    nodes, matched = [], 0
    for node in cluster.nodes:
        group = provider.group_of_node(node, mapping)
        if group:
            matched += 1
            if group != node.node_group:
                node = replace(node, node_group=group)
        nodes.append(node)
    return replace(cluster, nodes=nodes), matched


def atomic_units(plan: Plan, cluster: Cluster) -> list[dict[str, int]]:
    """New nodes split into sets that must arrive together: nodes sharing any gang are one set."""
    return [unit for unit, _ in atomic_units_with_gangs(plan, cluster)]


def atomic_units_with_gangs(
    plan: Plan, cluster: Cluster
) -> list[tuple[dict[str, int], frozenset[GangKey]]]:
    """`atomic_units`, each with the gangs whose pods its nodes carry (what its client token derives from)."""
    gang_of = {pod.key: gang.key for gang in cluster.gangs for pod in gang.pending}
    out = []
    for members in linked_new_nodes(plan, gang_of):
        unit: dict[str, int] = {}
        for i in members:
            group = plan.new_nodes[i].node_group
            unit[group] = unit.get(group, 0) + 1
        gangs = {gang_of[p] for i in members for p in plan.new_nodes[i].pods if p in gang_of}
        out.append((dict(sorted(unit.items())), frozenset(gangs)))
    return out


def linked_new_nodes(plan: Plan, gang_of: Mapping[str, GangKey]) -> list[list[int]]:
    """The plan's new nodes (by index) grouped by the gangs their pods belong to: two nodes carrying pods of one
    gang are in one group (union-find); groups in order of their first node."""
    parent = list(range(len(plan.new_nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[GangKey, int] = {}
    for i, node in enumerate(plan.new_nodes):
        for pod in node.pods:
            key = gang_of.get(pod)
            if key is None:
                continue
            if key in first:
                parent[find(i)] = find(first[key])
            else:
                first[key] = i
    out: dict[int, list[int]] = {}
    for i in range(len(plan.new_nodes)):
        out.setdefault(find(i), []).append(i)
    return [out[r] for r in sorted(out)]


def _moved(
    provider: NodeGroupProvider,
    groups: dict[str, int],
    discovered: dict[str, NodeGroup],
    report: ExecutionReport,
) -> set[str]:
    """Groups whose target changed since discovery: another run is acting; re-plan rather than add twice."""
    moved = set()
    for g in groups:
        try:
            now = provider.target_size(g)
        except CloudError as exc:
            moved.add(g)
            report.actions.append(_failed(g, groups[g], exc))
            continue
        if g in discovered and now != discovered[g].current_size:
            moved.add(g)
            report.actions.append(
                GroupAction(
                    g,
                    groups[g],
                    "skipped",
                    discovered[g].current_size,
                    now,
                    f"target moved from {discovered[g].current_size} to {now} since "
                    "discovery; nothing added, plan again",
                )
            )
    return moved


def apply_plan(
    plan: Plan,
    provider: NodeGroupProvider,
    discovered: dict[str, NodeGroup],
    cluster: Cluster,
    report: ExecutionReport | None = None,
    tokens: Sequence[Mapping[str, str]] = (),
    started: datetime | None = None,
) -> ExecutionReport:
    """Grow each group by the plan's scale-up, once; typed cloud errors are recorded, not raised.

    `tokens`, aligned with `atomic_units`, gives each atomic call its client token (idempotency).
    `started`: now on the caller's clock (the controller's; the wall clock by default): only launch failures
    from then on are this scale-up's, not an earlier one the group was already backed off for.
    """
    report = report or ExecutionReport(provider.name)
    started = started or datetime.now(timezone.utc)
    moved = _moved(provider, plan.scale_up, discovered, report)
    grown: set[str] = set()
    if provider.atomic:
        units, grow = atomic_units(plan, cluster), provider.atomic_increase_size
    else:  # every group on its own: a one-group unit is grown or fails by itself
        units, grow = [{g: n} for g, n in plan.scale_up.items() if n > 0], provider.increase_size
    for i, unit in enumerate(units):
        unit_tokens = tokens[i] if provider.atomic and i < len(tokens) else {}
        _apply_unit(
            provider, _with_token(grow, unit_tokens), unit, moved, report, grown, unit_tokens
        )
    for group in sorted(grown):
        try:
            report.launch_failures.extend(
                f.error for f in provider.launch_failures(group, started - _CLOCK_SKEW)
            )
        except CloudError as exc:
            report.launch_failures.append(exc)
    return report


def _with_token(
    grow: Callable[..., ScaleResult], tokens: Mapping[str, str]
) -> Callable[[str, int], ScaleResult]:
    """`grow(group, n)`, passing the group's client token when there is one (older providers take none)."""
    return lambda g, n: grow(g, n, tokens[g]) if tokens.get(g) else grow(g, n)


def _failed(group: str, n: int, exc: CloudError) -> GroupAction:
    return GroupAction(
        group, n, "failed", message=str(exc), error_kind=exc.kind, retryable=exc.retryable
    )


def _give_back(
    provider: NodeGroupProvider,
    done: list[tuple[ScaleResult, int]],
    failed: str,
    exc: CloudError,
) -> list[GroupAction]:
    """Undo the unit's launches that succeeded before `failed` did: `rolled-back`, or `applied` with the
    reason when the undo fails too (the nodes are kept)."""
    out = []
    for res, m in done:
        status: ActionStatus = "rolled-back"
        note = f"given back: {failed} could not be grown ({exc.kind})"
        try:
            if res.instance_ids:
                provider.delete_instances(res.group, list(res.instance_ids))
            else:
                provider.decrease_target_size(res.group, res.delta)
        except CloudError as undo:
            status, note = "applied", f"rollback failed, nodes kept: {undo}"
        out.append(
            GroupAction(
                res.group,
                m,
                status,
                res.before,
                res.after,
                note,
                instance_ids=list(res.instance_ids),
            )
        )
    return out


def _apply_unit(
    provider: NodeGroupProvider,
    grow: Callable[[str, int], ScaleResult],
    unit: dict[str, int],
    moved: set[str],
    report: ExecutionReport,
    grown: set[str],
    tokens: Mapping[str, str] | None = None,
) -> None:
    """All groups of one unit, or none: a failure gives back what the unit already launched."""
    if moved & set(unit):
        for g, n in unit.items():
            if g not in moved:
                report.actions.append(
                    GroupAction(
                        g,
                        n,
                        "skipped",
                        message="another group of the same gang moved since discovery",
                    )
                )
        return
    done: list[tuple[ScaleResult, int]] = []
    for group, n in unit.items():
        try:
            done.append((grow(group, n), n))
        except CloudError as exc:
            report.actions.append(_failed(group, n, exc))
            report.actions.extend(_give_back(provider, done, group, exc))
            tried = {group, *(r.group for r, _ in done)}
            for g, m in unit.items():
                if g not in tried:
                    report.actions.append(
                        GroupAction(g, m, "skipped", message=f"same gang as {group}, which failed")
                    )
            return
    for res, n in done:
        report.actions.append(
            GroupAction(
                res.group,
                n,
                "applied",
                res.before,
                res.after,
                instance_ids=list(res.instance_ids),
                token=(tokens or {}).get(res.group, ""),
            )
        )
        grown.add(res.group)
