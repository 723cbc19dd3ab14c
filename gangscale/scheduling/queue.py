"""The scheduling queue's order: kube-scheduler's PrioritySort, or coscheduling's when the profile enables it.

PrioritySort, the default profile's QueueSort (kubernetes/kubernetes
pkg/scheduler/framework/plugins/queuesort/priority_sort.go, `Less`): higher `spec.priority` first,
then the earlier `QueuedPodInfo.Timestamp`, the time the pod entered the queue. The model takes a
pod's creationTimestamp for it: pods the scheduler watches enter its queue as they are created.

A 1.36+ PodGroup with the gang policy is scheduled in one PodGroup cycle, started when the scheduler
pops one of its pods; it then takes the group's other queued pods and orders them by priority and
the time the scheduler first saw them (KEP-4671, "PodGroup scheduling cycle";
kubernetes.io docs/concepts/scheduling-eviction/podgroup-scheduling). So the group's place in the
queue is its first member's under the queue sort (its highest-priority, then earliest pod), not the
PodGroup object's creation. A Volcano job is ordered by Volcano's job order: priority, then the
PodGroup's creation time.

scheduler-plugins coscheduling (pkg/coscheduling/coscheduling.go, `Less`) is used only when the
scheduler configuration enables it as the QueueSort plugin (`SchedulerConfig.queue_sort`): priority,
then the pod's PodGroup's creation time (the pod's own queue time when it has none), then the
PodGroup's namespace/name (`namespace/` for a pod without one), so a group's pods leave the queue
together.

Missing creationTimestamp (hand-written input; the API server always sets it): such an entry goes
after every stamped entry of its priority, in namespace/name order, so the order stays total and
deterministic. Names break the last ties; seeds only break score ties, never queue ties.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import API_COSCHEDULING, API_VOLCANO, Gang, Pod

PRIORITY_SORT = "PrioritySort"
COSCHEDULING = "Coscheduling"
QUEUE_SORTS = (PRIORITY_SORT, COSCHEDULING)


@dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    neg_priority: int
    unstamped: bool  # no creationTimestamp: after every stamped entry of the same priority
    timestamp: str
    name: str = ""  # namespace/name of the pod (PrioritySort) or of its PodGroup (coscheduling)
    member: str = ""  # the pod's namespace/name when `name` is a group's


def pod_key(pod: Pod) -> QueueKey:
    """PrioritySort for one pod: priority, then creationTimestamp, then namespace/name."""
    return QueueKey(-pod.priority, not pod.created, pod.created, pod.key)


def coscheduling_key(pod: Pod, gang: Gang | None) -> QueueKey:
    """coscheduling's Less: priority, then the PodGroup's creation time (the pod's own without one), then the
    PodGroup's namespace/name (`namespace/` for a pod in none); the pod's name breaks the last tie."""
    created = (gang.created if gang is not None else "") or pod.created
    group = f"{pod.namespace}/{gang.name if gang is not None else ''}"
    return QueueKey(-pod.priority, not created, created, group, pod.key)


def group_key(gang: Gang, queue_sort: str = PRIORITY_SORT) -> QueueKey:
    """A 1.36+ PodGroup's cycle as one queue entry: its first member under the queue sort (KEP-4671's PodGroup cycle
    starts when any member is popped), at the group's scheduler priority."""
    if not gang.pending:
        return QueueKey(
            -gang.scheduler_priority,
            not gang.created,
            gang.created,
            f"{gang.namespace}/{gang.name}",
        )
    first = min(
        coscheduling_key(p, None) if queue_sort == COSCHEDULING else pod_key(p)
        for p in gang.pending
    )
    return QueueKey(
        -gang.scheduler_priority, first.unstamped, first.timestamp, first.name, first.member
    )


def job_key(gang: Gang) -> QueueKey:
    """A Volcano job (Volcano's job order: priority, then the PodGroup's creation time, then namespace/name); the
    earliest member's creationTimestamp when the PodGroup has none."""
    created = gang.created or min((p.created for p in gang.pending if p.created), default="")
    return QueueKey(-gang.scheduler_priority, not created, created, f"{gang.namespace}/{gang.name}")


def first_entry(gang: Gang, queue_sort: str = PRIORITY_SORT) -> QueueKey:
    """Where a gang first reaches the queue: a Volcano job at its job order, any other gang at its first member
    under `queue_sort` (where a 1.36+ PodGroup cycle starts too). Orders that must agree with the scheduler's (the
    controller's namespace caps and cluster ceiling) sort gangs by it."""
    if gang.api == API_VOLCANO:
        return job_key(gang)
    if queue_sort == COSCHEDULING and gang.pending:
        own = gang if gang.api == API_COSCHEDULING else None
        return min(coscheduling_key(p, own) for p in gang.pending)
    return group_key(gang, queue_sort)


@dataclass(order=True, slots=True)
class Entry:
    """One thing the scheduler pops: a pod, or a whole group."""

    key: QueueKey
    gang_index: int = field(compare=False)
    pod: Pod | None = field(default=None, compare=False)  # None: the whole group
