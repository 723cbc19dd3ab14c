"""What the scheduler model reports: each gang's outcome and the run's result.

Invariant: a result is read-only once returned; `GangOutcome.reason` is worded on first read from the
run's final state (most are never read), so two outcomes compare equal exactly when their key,
verdict, counts and worded reason do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..model import API_PODGROUP_V1ALPHA2, API_PODGROUP_V1BETA1, API_VOLCANO, Gang, GangKey

MODE_POD, MODE_PERMIT, MODE_GROUP = "pod", "permit", "group"


def gang_mode(g: Gang) -> str:
    """How the gang's scheduler admits it: one pod at a time, held at Permit, or the whole group in one cycle
    (`simulate`'s module docstring names the APIs and their scheduler code)."""
    if g.policy != "gang":
        return MODE_POD
    if g.api in (API_PODGROUP_V1ALPHA2, API_PODGROUP_V1BETA1, API_VOLCANO):
        return MODE_GROUP
    return MODE_PERMIT


@dataclass(slots=True, eq=False)
class GangOutcome:
    """One gang's outcome: started or not, the members bound, the members still needed, and why not."""

    key: GangKey
    started: bool
    placed: int  # members the scheduler binds
    need: int  # members still needed for quorum (minCount - bound); 1 for basic groups
    # the reason, or how to word it (worded on first read: most are never read)
    why: str | Callable[[], str] = ""

    @property
    def reason(self) -> str:
        """Why not started (empty when started)."""
        if callable(self.why):
            self.why = self.why()
        return self.why

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GangOutcome) and (
            self.key,
            self.started,
            self.placed,
            self.need,
            self.reason,
        ) == (other.key, other.started, other.placed, other.need, other.reason)


@dataclass(slots=True)
class SimResult:
    """One seed's run: where each pod went (pod key -> node name), each gang's outcome, the arriving nodes no pod
    lands on, the pods on each node, and the profiles used."""

    placement: dict[str, str]  # pod key -> node name
    outcomes: dict[GangKey, GangOutcome]
    empty_nodes: list[str]  # upcoming and new nodes no pod lands on
    node_pods: Mapping[str, list[str]] = field(default_factory=dict)
    profiles: list[str] = field(default_factory=list)  # Profile.describe() of every profile used

    @property
    def started(self) -> set[GangKey]:
        return {k for k, o in self.outcomes.items() if o.started}
