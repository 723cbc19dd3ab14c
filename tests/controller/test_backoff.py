"""Which cloud failures back a node group off: decided on the typed error (`kind`, `retryable`), never on its text."""

from __future__ import annotations

import pytest

from builders import group
from cloud_adapters import errors
from cloud_adapters.errors import CloudError, ErrorKind
from cloud_adapters.simulated import SimulatedProvider
from gangscale.apply import ExecutionReport, GroupAction
from gangscale.catalog import parse_catalog
from gangscale.controller import backoff
from gangscale.controller.actuator import Actuator

# every CloudError class: does a failed scale-up call with it back its group off?
TABLE = [
    (errors.CapacityError, True),  # retryable, but later: the alternatives first
    (errors.QuotaError, True),
    (errors.ThrottledError, False),  # about the call: the same group is asked again
    (errors.NotFoundError, True),
    (errors.PermissionError_, True),
    (errors.ConflictError, False),  # another change in flight: asked again
    (errors.UnsupportedError, True),
    (errors.SizeLimitError, False),  # re-planned from the next discovery
    (CloudError, False),  # unknown: says nothing about the group
]


def test_the_table_names_every_cloud_error_class_once():
    classes = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, CloudError)}
    assert {c for c, _ in TABLE} == classes and {c.kind for c, _ in TABLE} == set(ErrorKind)


@pytest.mark.parametrize("cls, backs_off", TABLE, ids=[c.kind.value for c, _ in TABLE])
def test_a_failed_scale_up_backs_its_group_off_by_the_errors_kind_and_retryable_flag(cls, backs_off):
    exc = cls("no", group="gpu")
    failed = GroupAction("gpu", 2, "failed", message=str(exc), error_kind=exc.kind, retryable=exc.retryable)
    actions = backoff.from_scale_up(ExecutionReport("simulated", actions=[failed]))
    assert [(a.group, a.kind) for a in actions] == ([("gpu", cls.kind)] if backs_off else [])
    assert all(type(a.kind) is ErrorKind for a in actions)


def test_a_launch_failure_reaches_the_lifecycle_as_a_typed_kind_not_a_string():
    clock = lambda: 1_800_000_000.0  # noqa: E731
    groups, _ = parse_catalog([group("gpu", max_size=4)])
    provider = SimulatedProvider(groups, clock=clock, failure_probability=1.0, provisioning_delay=0.0)
    provider.increase_size("gpu", 1)
    actuator = Actuator(provider)
    (failure,) = actuator.launch_failures({"gpu": clock() - 60})
    assert failure.kind is ErrorKind.CAPACITY and "no capacity" in failure.message
