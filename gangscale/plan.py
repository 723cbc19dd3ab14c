"""The plan: gangscale's public JSON contract and its renderings for people.

Field names are camelCase and documented in the README; they are public API.
New fields may be added; existing ones are never renamed or dropped.
"""

from __future__ import annotations

import io
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Decision = Literal[
    "fits-existing", "scale-up", "infeasible", "deferred", "waiting-for-podgroup", "below-quorum", "invalid",
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

    @property
    def gang_gap(self) -> int:
        """Gangs the bound still allows beyond the plan (0: the plan starts the most gangs possible)."""
        return max(0, self.gangs_upper_bound - self.gangs_started)


class SchedulerInfo(_Model):
    """The kube-scheduler profile the plan assumed and how the plan was checked against it (docs/scheduling.md)."""

    mode: Literal["observe", "off"]
    profile: str = ""  # Profile.describe() of the default profile
    scoring_strategy: str = Field(default="", alias="scoringStrategy")
    source: Literal["default", "file", "eks"] = "default"
    seeds: list[int] = Field(default_factory=list)
    rounds: int = 0  # model runs over the whole node set (each under every seed)
    gangs_started: int = Field(default=0, alias="gangsStarted")  # gangs the model starts under every seed
    realized: bool = False  # the last round's plan was what the model did (no repair left to do)
    idle_nodes: int = Field(default=0, alias="idleNodes")  # new nodes some seed leaves idle, kept (a drop loses a gang / no model runs left)
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

    def to_dict(self) -> dict:
        return self.model_dump(by_alias=True, mode="json")


# ----------------------------------------------------------------- renderers


def _money(x: float) -> str:
    return f"${x:,.2f}/h"


def _gang_line(plan: Plan) -> str:
    sv = plan.solver
    gap = f"gang gap {sv.gang_gap}" if sv.gang_gap else "gang gap closed"
    return f"{sv.gangs_started} gangs started of at most {sv.gangs_upper_bound} possible ({gap})"


def _summary_lines(plan: Plan) -> list[str]:
    nodes = sum(plan.scale_up.values())
    ok = sum(1 for g in plan.gangs if g.decision in ("scale-up", "fits-existing"))
    return [
        f"{ok} of {len(plan.gangs)} groups placed; {nodes} new nodes for {_money(plan.cost_per_hour)} "
        f"(lower bound {_money(plan.lower_bound_per_hour)}, gap {plan.solver.gap:.2%}); "
        f"solver {plan.solver.status} in {plan.solver.seconds:.2f}s",
        _gang_line(plan),
    ]


def _group_rows(plan: Plan) -> list[tuple[str, str, int, float, float]]:
    info: dict[str, tuple[str, float]] = {}
    for n in plan.new_nodes:
        info.setdefault(n.node_group, (n.instance_type, n.price_per_hour))
    return [(g, info.get(g, ("", 0.0))[0], cnt, info.get(g, ("", 0.0))[1], cnt * info.get(g, ("", 0.0))[1])
            for g, cnt in sorted(plan.scale_up.items())]


def render_markdown(plan: Plan) -> str:
    out = ["# gangscale plan", "", *_summary_lines(plan), "", "## Gangs", "",
           "| gang | api | policy | minCount | pending | placed | decision | reason |",
           "|---|---|---|---:|---:|---:|---|---|"]
    for g in plan.gangs:
        reason = g.reason.replace("|", "\\|")
        out.append(f"| {g.namespace}/{g.name} | {g.api} | {g.policy} | {g.min_count} | {g.pending} | {g.placed} "
                   f"| {g.decision} | {reason} |")
    out += ["", "## Node groups", "", "| node group | instance type | nodes added | price each | cost |",
            "|---|---|---:|---:|---:|"]
    for name, itype, cnt, price, cost in _group_rows(plan):
        out.append(f"| {name} | {itype} | {cnt} | {_money(price)} | {_money(cost)} |")
    out += ["", f"**Total {_money(plan.cost_per_hour)}** against a proven lower bound of "
                f"{_money(plan.lower_bound_per_hour)} (gap {plan.solver.gap:.2%}).", "",
            f"**Gangs:** {_gang_line(plan)}.", ""]
    if len(plan.solver.by_priority) > 1:
        out += ["| priority | gangs started | gang upper bound | pods placed | pod upper bound |",
                "|---:|---:|---:|---:|---:|"]
        out += [f"| {t.priority} | {t.gangs_started} | {t.gangs_upper_bound} | {t.pods_placed} | "
                f"{'n/a' if t.pods_upper_bound is None else t.pods_upper_bound} |" for t in plan.solver.by_priority]
        out.append("")
    if plan.warnings:
        out += ["## Warnings", ""] + [f"- {w}" for w in plan.warnings] + [""]
    return "\n".join(out)


def render_table(plan: Plan, width: int | None = None) -> str:
    from rich.console import Console
    from rich.table import Table

    buf = io.StringIO()
    console = Console(file=buf, width=width or 160, force_terminal=False, color_system=None)
    gangs = Table(title="Gangs", show_lines=False)
    for col in ("GANG", "API", "POLICY", "MIN", "PENDING", "PLACED", "DECISION", "REASON"):
        gangs.add_column(col, overflow="fold")
    for g in plan.gangs:
        gangs.add_row(f"{g.namespace}/{g.name}", g.api, g.policy, str(g.min_count), str(g.pending), str(g.placed),
                      g.decision, g.reason)
    console.print(gangs)
    groups = Table(title="Node groups")
    for col in ("NODE GROUP", "INSTANCE TYPE", "NODES ADDED", "PRICE EACH", "COST"):
        groups.add_column(col)
    for name, itype, cnt, price, cost in _group_rows(plan):
        groups.add_row(name, itype, str(cnt), _money(price), _money(cost))
    console.print(groups)
    for line in _summary_lines(plan):
        console.print(line)
    for w in plan.warnings:
        console.print(f"warning: {w}")
    return buf.getvalue()
