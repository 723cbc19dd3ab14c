"""The 3.10 stand-in for enum.StrEnum keeps its contract (run here on whatever Python the tests use)."""

import enum

import pytest

from cloud_adapters.strenum import StrEnumBefore311


class _Before(StrEnumBefore311):
    NOT_FOUND = "not-found"


class _Real(enum.StrEnum):
    NOT_FOUND = "not-found"


@pytest.mark.parametrize("kind", [_Before, _Real])
def test_a_member_reads_as_its_value_in_str_format_and_comparisons(kind):
    member = kind.NOT_FOUND
    assert str(member) == "not-found"
    assert f"{member}" == "not-found"
    assert f"[{member:>11}]" == "[  not-found]"
    assert member == "not-found" and "not-found" in {member}
    assert kind("not-found") is member
    assert isinstance(member, str)
