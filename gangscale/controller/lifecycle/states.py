"""A gang's provisioning states and why capacity goes back: the enums and the state sets the rules read."""

from __future__ import annotations

from cloud_adapters.strenum import StrEnum


class GangState(StrEnum):
    """A gang's provisioning state; the values are what records, logs and metrics show."""

    NEW = "new"  # a record just created, before the pass decides (also the write-ahead state)
    WAITING_FOR_PODGROUP = "waiting-for-podgroup"
    # Kueue has not admitted it: nothing is bought before Kueue
    WAITING_FOR_ADMISSION = "waiting-for-admission"
    BELOW_QUORUM = "below-quorum"
    PLANNED = "planned"
    PROVISIONING = "provisioning"
    READY = "ready"
    RUNNING = "running"
    INFEASIBLE = "infeasible"
    TIMED_OUT = "timed-out"
    CANCELLED = "cancelled"
    INVALID = "invalid"
    DEFERRED = "deferred"


class ReleaseWhy(StrEnum):
    """Why capacity is given back (the `why` label of `gangscale_capacity_released_total`)."""

    LAUNCH_FAILED = "launch-failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed-out"
    # below quorum (or its group object missing) for longer than the cancel grace
    UNUSABLE = "unusable"
    # launches still on their way at the deadline of a gang that started without them
    UNUSED = "unused"


REPORTED = tuple(
    s for s in GangState if s is not GangState.NEW
)  # the `gangscale_gangs{state}` series
REPORTED_NAMES = frozenset(
    s.value for s in REPORTED
)  # the plan's decisions a record's state can take


TERMINAL = frozenset(
    {GangState.RUNNING, GangState.TIMED_OUT, GangState.CANCELLED, GangState.INFEASIBLE}
)


IN_FLIGHT = frozenset({GangState.PROVISIONING, GangState.READY})  # capacity bought and not yet used


RESTARTS = frozenset(
    {GangState.RUNNING, GangState.TIMED_OUT, GangState.CANCELLED}
)  # pending again: a new record


UNUSABLE = frozenset(
    {GangState.BELOW_QUORUM, GangState.WAITING_FOR_PODGROUP, GangState.WAITING_FOR_ADMISSION}
)  # cannot use what it holds
