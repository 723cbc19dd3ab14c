"""The controller's one hold on the cloud: discovery and reads, and the five kinds of cloud change.

Invariant: the `Actuator` is the only object in the controller that holds the
`NodeGroupProvider`; every cloud read and every mutation the controller makes
goes through one of its methods, and each returns a typed result instead of
raising. The mutations are exactly five: `apply` (the scale-up), `release`
(capacity a gang gives back), `scale_down` (empty nodes), `settle_call`
(adopt an unconfirmed call's instances, or terminate them) and
`terminate_loose` (orphan instances); each calls `_mutating` first, so a
leadership fence or an idempotency token belongs there and nowhere else.
Only the executor (`execute.py`) calls them.

The fence: `_mutating` asks the leader elector (`fence`) before every
mutation, and is also installed as the provider's `before_mutation` hook, so
each AWS call that changes something (CreateFleet, AttachInstances,
SetDesiredCapacity, ...) is checked right before it is sent, even in the
middle of a multi-step scale-up. A deposed leader gets `LostLeadership` and
sends nothing more. After each such call returns, the test-only crash points
`after-<Operation>` and `call-sent` may end the process (crashpoints.py).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone

from cloud_adapters.base import (
    Discovery,
    Instance,
    LooseInstance,
    NodeGroupProvider,
    instance_id_from_provider_id,
)
from cloud_adapters.errors import CloudError

from ..apply import ExecutionReport, apply_plan, match_node_groups
from ..ingest import Cluster
from ..model import NodeGroup
from ..plan import Plan
from ..providers import cluster_scheduler
from ..realize import SchedulerModel
from .crashpoints import crash_point
from .lifecycle import GroupFailure, Release
from .scaledown import EmptyNode, busy_nodes

log = logging.getLogger("gangscale.controller")

LAUNCH_CLOCK_SKEW = 5.0  # launch failures stamped a little before a request still count


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """What one release gave back, per group (launches in flight, empty nodes, slots never launched)."""

    action: Release
    by_group: Mapping[str, int] = field(default_factory=dict)
    errors: tuple[CloudError, ...] = ()

    @property
    def released(self) -> int:
        return sum(self.by_group.values())


@dataclass(frozen=True, slots=True)
class ScaleDownResult:
    node: EmptyNode
    removed: bool
    error: CloudError | None = None


class Actuator:
    """Acts on the cloud for the controller; holds the provider and the last discovery."""

    def __init__(
        self, provider: NodeGroupProvider, fence: Callable[[str], None] | None = None
    ) -> None:
        self._provider = provider
        self._fence = fence
        provider.before_mutation = self._mutating
        provider.after_mutation = self._mutated
        self.groups: dict[str, NodeGroup] = {}  # the last discovery, by name

    @property
    def provider_name(self) -> str:
        return self._provider.name

    @property
    def launches_outside_groups(self) -> bool:
        """The provider launches instances before they join their group (aws-fleet): a crash between can leave
        them outside every group."""
        return self._provider.launches_outside_groups

    def _mutating(self, op: str, group: str) -> None:
        """Every cloud mutation passes here first: the leadership fence (raises `LostLeadership`)."""
        if self._fence is not None:
            self._fence(f"{op} {group}".strip())
        log.debug("cloud mutation", extra={"operation": op, "node_group": group})

    @staticmethod
    def _mutated(op: str, group: str) -> None:
        """A mutating call returned: the test-only crash points of the write-ahead protocol."""
        crash_point(f"after-{op}")
        crash_point("call-sent")

    # ------------------------------------------------------------- reading

    def refresh(self, cluster: Cluster) -> tuple[Cluster, Discovery]:
        """Discover the groups; the cluster with its Nodes matched to them by spec.providerID (a copy)."""
        discovery = self._provider.discover()
        self.groups = {g.name: g for g in discovery.groups}
        return match_node_groups(cluster, self._provider)[0], discovery

    def cluster_scheduler(self, model: SchedulerModel) -> tuple[SchedulerModel, list[str]]:
        """`model` with the cluster's own scoring strategy where the cloud knows it (aws-eks), and warnings."""
        return cluster_scheduler(self._provider, model, named_file=False)

    def launch_failures(self, watched: Mapping[str, float]) -> tuple[GroupFailure, ...]:
        """For each group watched since a time, the first launch that failed since then (typed)."""
        out = []
        for group, since in watched.items():
            try:
                failures = self._provider.launch_failures(group, _utc(since - LAUNCH_CLOCK_SKEW))
            except CloudError as exc:
                log.warning(
                    "cannot read launch activity", extra={"node_group": group, "error": str(exc)}
                )
                continue
            if failures:
                err = failures[0].error
                out.append(GroupFailure(group, err.kind, str(err)))
        return tuple(out)

    # ------------------------------------------------------------ mutating

    def apply(
        self,
        plan: Plan,
        cluster: Cluster,
        tokens: Sequence[Mapping[str, str]] = (),
        now: float | None = None,
    ) -> ExecutionReport:
        """Grow each group by the plan's scale-up once (with the records' client tokens); typed errors in the report.

        `now` (the controller's clock) dates the call: launch failures before it belong to earlier scale-ups."""
        for group in plan.scale_up:
            self._mutating("scale-up", group)
        return apply_plan(
            plan,
            self._provider,
            dict(self.groups),
            cluster,
            tokens=tokens,
            started=None if now is None else _utc(now),
        )

    def buy_ahead(self, group: str, nodes: int, token: str) -> CloudError | None:
        """Grow `group` by `nodes` for no gang (keep.py's `buy_ahead`); the typed error, None when the call went."""
        self._mutating("buy-ahead", group)
        try:
            self._provider.increase_size(group, nodes, token)
        except CloudError as exc:
            return exc
        return None

    def return_ahead(
        self,
        group: str,
        nodes: int,
        counted: int,
        keep_instances: Iterable[str],
        cluster: Cluster,
    ) -> tuple[int, CloudError | None]:
        """Give back up to `nodes` of `group`'s launches on their way (instances launching or running without a Node,
        then slots the cloud has not launched), never more than it has on their way beyond `counted`, never one of
        `keep_instances`; how many went, and the error that stopped it."""
        node_of = _nodes_by_instance(cluster)
        self._mutating("return-ahead", group)
        try:
            insts = self._provider.instances(group)
            live = [i for i in insts if i.state in ("launching", "running")]
            unlaunched = max(0, self._provider.target_size(group) - len(live))
            flying = sum(1 for i in live if i.id not in node_of)
            n = min(nodes, flying + unlaunched - counted)
            if n <= 0:
                return 0, None
            busy = set(node_of.values()) | set(keep_instances)
            return self._release_in(group, n, busy, node_of), None
        except CloudError as exc:
            return 0, exc

    # ------------------------------------------------- launched, not joined

    def loose_instances(self) -> list[LooseInstance] | None:
        """Instances launched outside any group (None: the provider launches none, or the read failed)."""
        if not self._provider.launches_outside_groups:
            return None
        try:
            return self._provider.loose_instances()
        except CloudError as exc:
            log.warning("cannot list instances outside the groups", extra={"error": str(exc)})
            return None

    def settle_call(self, group: str, ids: list[str], wanted: bool) -> tuple[tuple[str, ...], str]:
        """Adopt the instances an unconfirmed call launched (if still wanted) or terminate them: (the adopted
        instances' ids, note). The records hold adopted instances by id."""
        if not ids:
            return (), "nothing launched"
        note = "no longer wanted; terminated"
        if wanted:
            self._mutating("adopt", group)
            try:
                return tuple(self._provider.adopt(group, ids).instance_ids), ""
            except CloudError as exc:
                note = f"could not join the group ({exc}); terminated"
        err = self.terminate_loose(ids)
        return (
            (),
            note
            if err is None
            else f"{note.removesuffix('; terminated')}; terminating failed: {err}",
        )

    def launched_tokens(self) -> dict[str, tuple[str, ...]] | None:
        """Client token -> the instances in the groups its call launched; None when the provider does not tag its
        launches or the read failed (the bookings are then settled by desired capacity)."""
        if not self._provider.launches_outside_groups:
            return None
        try:
            return self._provider.launched_tokens()
        except CloudError as exc:
            log.warning(
                "cannot read the client tokens of the groups' instances", extra={"error": str(exc)}
            )
            return None

    def terminate_loose(self, ids: list[str]) -> CloudError | None:
        """Terminate instances that are in no group; the error when that failed."""
        self._mutating("terminate-loose", "")
        try:
            self._provider.terminate_loose(ids)
        except CloudError as exc:
            log.warning(
                "cannot terminate instances outside the groups",
                extra={"instances": ids, "error": str(exc)},
            )
            return exc
        return None

    def on_the_way(self, group: str, cluster: Cluster) -> frozenset[str] | None:
        """The instance ids of the launches of `group` the cloud has on their way: instances launching, or running
        without a Node yet (None when it cannot be read)."""
        registered = _nodes_by_instance(cluster)
        try:
            insts = self._provider.instances(group)
        except CloudError as exc:
            log.warning(
                "cannot list the group's instances", extra={"node_group": group, "error": str(exc)}
            )
            return None
        return frozenset(
            i.id
            for i in insts
            if i.state == "launching" or (i.state == "running" and i.id not in registered)
        )

    def release(
        self,
        action: Release,
        cluster: Cluster,
        keep: Iterable[str] = (),
        keep_instances: Iterable[str] = (),
    ) -> ReleaseResult:
        """Give back up to what `action` names: the record's own named launches and registered nodes first
        (`Release.instances`, `nodes`), then launches in flight, then empty nodes; never a busy node, nor one of `keep`
        (nodes that arrived for a gang still waiting for them), nor a launch of `keep_instances` (another gang's)."""
        busy = busy_nodes(cluster) | set(keep)
        node_of = _nodes_by_instance(cluster)
        own = (set(action.instances), set(action.nodes) - busy_nodes(cluster))
        by_group: dict[str, int] = {}
        errors: list[CloudError] = []
        for group, n in sorted(action.groups.items()):
            self._mutating("release", group)
            try:
                by_group[group] = self._release_in(
                    group, n, busy | set(keep_instances), node_of, action.unlaunched_only, own
                )
            except CloudError as exc:
                errors.append(exc)
                log.warning(
                    "cannot give capacity back",
                    extra={"gang": str(action.key), "node_group": group, "error": str(exc)},
                )
        return ReleaseResult(action, by_group, tuple(errors))

    def _release_in(
        self,
        group: str,
        n: int,
        busy: set[str],
        node_of: Mapping[str, str],
        unlaunched_only: bool = False,
        own: tuple[set[str], set[str]] = (set(), set()),
    ) -> int:
        insts = self._provider.instances(group)
        take = [] if unlaunched_only else _removable(insts, busy, node_of, own)[:n]
        if take:
            self._provider.delete_instances(group, take)
        left = n - len(take)
        if left > 0:  # slots the cloud has not launched yet: lower the target by those
            target = self._provider.target_size(group)  # fresh: already lowered by the deletions
            live = sum(1 for i in insts if i.state in ("launching", "running")) - len(take)
            extra = min(left, target - live)
            if extra > 0:
                self._provider.decrease_target_size(group, extra)
                return len(take) + extra
        return len(take)

    def scale_down(self, due: Iterable[EmptyNode]) -> list[ScaleDownResult]:
        """Give back each empty node, never taking its group below minSize (the size read fresh once per group: each
        removal lowers the cloud's target too, so reading it again while also counting the removals would count each
        removal twice)."""
        removed: Counter[str] = Counter()
        size: dict[str, int] = {}
        out = []
        for e in due:
            group = e.group.name
            try:
                if group not in size:
                    size[group] = self._provider.target_size(group)
                if size[group] - removed[group] <= e.group.min_size:
                    continue
                self._mutating("scale-down", group)
                self._provider.delete_instances(group, [e.instance_id])
            except CloudError as exc:
                out.append(ScaleDownResult(e, False, exc))
                continue
            removed[group] += 1
            out.append(ScaleDownResult(e, True))
        return out


def _nodes_by_instance(cluster: Cluster) -> dict[str, str]:
    """The registered Nodes' names by their instance id (from spec.providerID)."""
    return {
        instance_id_from_provider_id(n.provider_id): n.name for n in cluster.nodes if n.provider_id
    }


def _removable(
    insts: list[Instance],
    busy: set[str],
    node_of: Mapping[str, str],
    own: tuple[set[str], set[str]] = (set(), set()),
) -> list[str]:
    """Instances that may go: the record's own (its named launches, then its registered nodes that run no pod),
    then launches in flight, then running ones whose node is empty; never one in `busy` (by node name or id)."""
    ids, names = own
    live = [i for i in insts if i.state in ("launching", "running")]
    mine = [i.id for i in live if i.id in ids and node_of.get(i.id) not in busy]
    mine += [i.id for i in live if node_of.get(i.id) in names and i.id not in mine]
    free = [
        i for i in live if i.id not in mine and i.id not in busy and node_of.get(i.id) not in busy
    ]
    launching = [i.id for i in free if i.state == "launching"]
    return mine + launching + [i.id for i in free if i.state == "running"]


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)
