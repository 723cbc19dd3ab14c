"""The scheduling queue's order: kube-scheduler's PrioritySort, and coscheduling's group-aware sort.

PrioritySort (kubernetes/kubernetes pkg/scheduler/framework/plugins/queuesort/priority_sort.go,
`Less`): higher `spec.priority` first, then the earlier queue timestamp (the time the pod entered the
queue; for pods admitted at once that is their creation order). scheduler-plugins coscheduling
(pkg/coscheduling/coscheduling.go, `Less`) compares priority, then the PodGroup's creation time, then
the group's namespace/name, so a group's pods leave the queue together. A 1.36+ PodGroup and a Volcano
job are one queue entry each, ordered by the group's priority and creation time.

Invariant: the order is total and deterministic (names break the last ties); seeds only break score
ties, never queue ties.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Gang, Pod


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    neg_priority: int
    timestamp: str
    group: str = ""
    name: str = ""


def pod_key(pod: Pod) -> QueueKey:
    """PrioritySort for one pod."""
    return QueueKey(-pod.priority, pod.created, "", pod.key)


def coscheduling_key(pod: Pod, gang: Gang) -> QueueKey:
    """coscheduling's Less: priority, then the PodGroup's creation time, then its namespace/name."""
    return QueueKey(-pod.priority, gang.created or pod.created, f"{gang.namespace}/{gang.name}", pod.key)


def group_key(gang: Gang) -> QueueKey:
    """A whole group as one queue entry (1.36+ PodGroup cycle, Volcano job order)."""
    first = min((p.created for p in gang.pending), default="")
    return QueueKey(-gang.scheduler_priority, gang.created or first, f"{gang.namespace}/{gang.name}", "")


@dataclass(order=True, slots=True)
class Entry:
    """One thing the scheduler pops: a pod, or a whole group."""

    key: QueueKey
    gang_index: int = field(compare=False)
    pod: Pod | None = field(default=None, compare=False)  # None: the whole group
