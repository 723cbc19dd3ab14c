"""Baselines, each a faithful re-implementation of a documented autoscaler algorithm.

Every baseline reads the same `World` (gangscale's snapshot) and returns a
`Placed`: the pods it would put on existing nodes and the new nodes it would
buy. None of them knows about gangs beyond what its real counterpart knows.
"""

from __future__ import annotations

from collections.abc import Callable

from ..world import Placed, World
from .ca import plan_ca, plan_ca_atomic
from .karpenter import plan_karpenter

BASELINES: dict[str, Callable[[World], Placed]] = {
    "ca": plan_ca,
    "ca-atomic": plan_ca_atomic,
    "karpenter": plan_karpenter,
}

__all__ = ["BASELINES", "plan_ca", "plan_ca_atomic", "plan_karpenter"]
