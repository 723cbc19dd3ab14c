"""The plan's JSON contract as pydantic models: field names, camelCase aliases, order, types and defaults.

The planner builds and renders plans with `gangscale.plan`'s plain classes (no pydantic on the default
`plan` path: importing it and building these models costs ~0.2 s of a 2 s run). These models are
the contract those classes must keep: `tests/test_plan_schema.py` checks that both declare the same fields
in the same order with the same aliases and defaults, and that every plan document validates here and dumps
back unchanged. Change a field in both places (new fields may be added; existing ones are never renamed or
dropped).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Decision = Literal[
    "fits-existing",
    "scale-up",
    "infeasible",
    "deferred",
    "waiting-for-podgroup",
    "below-quorum",
    "invalid",
    "waiting-for-admission",
]


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True)


class GangResult(_Model):
    namespace: str
    name: str
    api: str
    policy: Literal["gang", "basic"]
    min_count: int = Field(alias="minCount")
    pending: int
    placed: int
    decision: Decision
    reason: str
    bound: int = 0
    priority: int = 0
    topology_domain: dict[str, str] | None = Field(default=None, alias="topologyDomain")
    # observe mode: does the scheduler model start it under every tie-break seed, and why not
    model_started: bool | None = Field(default=None, alias="modelStarted")
    model_reason: str | None = Field(default=None, alias="modelReason")


class NewNode(_Model):
    node_group: str = Field(alias="nodeGroup")
    pods: list[str]
    instance_type: str = Field(default="", alias="instanceType")
    price_per_hour: float = Field(default=0.0, alias="pricePerHour")


class PriorityBound(_Model):
    """One priority level: gangs started and pods placed, against upper bounds no plan can beat there."""

    priority: int
    gangs_started: int = Field(alias="gangsStarted")
    gangs_upper_bound: int = Field(alias="gangsUpperBound")
    pods_placed: int = Field(alias="podsPlaced")
    pods_upper_bound: int | None = Field(default=None, alias="podsUpperBound")


class SolverPhase(_Model):
    """One phase of the plan (guide, greedy, repair, fill, exchange, gangBound, costBound, patterns, cpsat, bound,
    explain): its wall seconds, and whether its deadline cut it short (for cpsat: it ran out of time, or had none,
    with a gap open)."""

    name: str
    seconds: float
    cut_short: bool = Field(default=False, alias="cutShort")


class SolverGaps(_Model):
    """What the plan may have left on the table: gangs and pods its bounds still allow beyond it (summed over
    priority levels), and its cost above the proven lower bound in $/h."""

    gangs: int = 0
    pods: int = 0
    cost_per_hour: float = Field(default=0.0, alias="costPerHour")


class SolverInfo(_Model):
    status: Literal["OPTIMAL", "FEASIBLE"]
    seconds: float
    gap: float
    lower_bound_proven: bool = Field(default=False, alias="lowerBoundProven")
    patterns_complete: bool = Field(default=False, alias="patternsComplete")
    greedy_only: bool = Field(default=False, alias="greedyOnly")
    pod_classes: int = Field(default=0, alias="podClasses")
    bin_kinds: int = Field(default=0, alias="binKinds")
    patterns: int = 0
    gangs_started: int = Field(default=0, alias="gangsStarted")
    gangs_upper_bound: int = Field(default=0, alias="gangsUpperBound")
    by_priority: list[PriorityBound] = Field(default_factory=list, alias="byPriority")
    budget_seconds: float = Field(default=0.0, alias="budgetSeconds")
    phases: list[SolverPhase] = Field(default_factory=list)
    gaps: SolverGaps | None = None


class SchedulerInfo(_Model):
    """The kube-scheduler profile the plan assumed and how the plan was checked against it (docs/scheduling.md)."""

    mode: Literal["observe", "off"]
    profile: str = ""  # Profile.describe() of the default profile
    scoring_strategy: str = Field(default="", alias="scoringStrategy")
    source: Literal["default", "file", "eks"] = "default"
    seeds: list[int] = Field(default_factory=list)
    rounds: int = 0  # model runs over the whole node set (each under every seed)
    gangs_started: int = Field(
        default=0, alias="gangsStarted"
    )  # gangs the model starts under every seed
    realized: bool = False  # the last round's plan was what the model did (no repair left to do)
    idle_nodes: int = Field(
        default=0, alias="idleNodes"
    )  # new nodes some seed leaves idle, kept (a drop loses a gang / no model runs left)
    seconds: float = 0.0
    note: str = ""  # why observe mode was not applied, when it was asked for


class Plan(_Model):
    scale_up: dict[str, int] = Field(alias="scaleUp")
    new_nodes: list[NewNode] = Field(alias="newNodes")
    existing_nodes: dict[str, list[str]] = Field(alias="existingNodes")
    gangs: list[GangResult]
    cost_per_hour: float = Field(alias="costPerHour")
    lower_bound_per_hour: float = Field(alias="lowerBoundPerHour")
    solver: SolverInfo
    warnings: list[str] = Field(default_factory=list)
    scheduler: SchedulerInfo | None = None
    daemon_set_overhead: dict[str, dict[str, str]] = Field(
        default_factory=dict, alias="daemonSetOverhead"
    )
    mode: Literal["gate", "observe", "off"] | None = None
