"""The plan: gangscale's public JSON contract and its renderings for people.

Field names are camelCase and documented in docs/plan.md; they are public API.
New fields may be added; existing ones are never renamed or dropped.

Invariant: these plain classes keep the contract `plan_schema`'s pydantic models state (the same fields,
order, aliases and defaults; tests/test_plan_schema.py), without importing pydantic: that import and the
models' build are ~0.2 s of the default `plan`. A section is built by field name or camelCase
alias; numbers are coerced as pydantic's lax mode does (an int given for a float field is a float, so the
JSON is the same), containers are copied, a Literal field refuses other values.
"""

from __future__ import annotations

import copy
import io
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Literal

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

_REQUIRED: Any = object()


def _alias(name: str) -> str:
    """snake_case -> camelCase, the JSON name of every field (`min_count` -> `minCount`)."""
    first, *rest = name.split("_")
    return first + "".join(w.capitalize() for w in rest)


def _int(v: Any) -> int:
    """An int as pydantic's lax mode takes it: bools, numpy integers and integral floats become ints."""
    if type(v) is int:
        return v
    if isinstance(v, float) and not v.is_integer():
        raise ValueError(f"expected a whole number, got {v!r}")
    return int(v)


def _float(v: Any) -> float:
    return v if type(v) is float else float(v)


def _bool(v: Any) -> bool:
    """A bool as pydantic's lax mode takes it from a number: numpy's bools, 0 and 1."""
    if type(v) is bool:
        return v
    if not isinstance(v, str) and v in (0, 1):
        return bool(v)
    raise ValueError(f"expected a bool, got {v!r}")


def _mapper(
    tp: Any,
    leaf: Callable[[Any], Callable[[Any], Any] | None],
    section: Callable[[type], Callable[[Any], Any]],
) -> Callable[[Any], Any] | None:
    """A function over values of type `tp` that keeps `None` (Optional), copies lists and dicts mapping their
    items, applies `section` to a nested plan section and `leaf` to anything else (None: the value as it is)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if type(None) in args:  # `X | None`
        inner = _mapper(next(a for a in args if a is not type(None)), leaf, section)
        return None if inner is None else (lambda v: None if v is None else inner(v))
    if origin is list:
        item = _mapper(args[0], leaf, section)
        return list if item is None else (lambda v: [item(x) for x in v])
    if origin is dict:
        value = _mapper(args[1], leaf, section)
        return dict if value is None else (lambda v: {k: value(x) for k, x in v.items()})
    if isinstance(tp, type) and issubclass(tp, _Model):
        return section(tp)
    return leaf(tp)


def _scalar(tp: Any) -> Callable[[Any], Any] | None:
    if typing.get_origin(tp) is Literal:
        return _choice(frozenset(typing.get_args(tp)))
    return {int: _int, float: _float, bool: _bool}.get(tp)


def _converter(tp: Any) -> Callable[[Any], Any] | None:
    """How a value given for a field of type `tp` is stored (None: as given)."""
    return _mapper(tp, _scalar, lambda t: lambda v: v if isinstance(v, t) else t(**v))


def _choice(allowed: frozenset) -> Callable[[Any], Any]:
    def check(v: Any) -> Any:
        if v not in allowed:
            raise ValueError(f"expected one of {sorted(allowed)}, got {v!r}")
        return v

    return check


def _dumper(tp: Any) -> Callable[[Any], Any] | None:
    """How a field of type `tp` becomes JSON-ready data (None: as it is); containers come out as new ones."""
    return _mapper(tp, lambda t: None, lambda t: lambda v: v.model_dump())


class _Model:
    """A plan section. Fields are the class' annotations; a class attribute of the same name is the default
    (a list or dict default is copied per instance)."""

    _fields: ClassVar[tuple[tuple[str, str, Any, Callable[[Any], Any] | None], ...]] = ()
    _dumpers: ClassVar[tuple[tuple[str, str, Callable[[Any], Any] | None], ...]] = ()
    _by_key: ClassVar[dict[str, tuple[str, str, Callable[[Any], Any] | None]]] = {}

    def __init_subclass__(cls) -> None:
        hints = typing.get_type_hints(cls)
        names = [name for name in cls.__annotations__ if not name.startswith("_")]
        cls._fields = tuple(
            (n, _alias(n), cls.__dict__.get(n, _REQUIRED), _converter(hints[n])) for n in names
        )
        cls._dumpers = tuple((n, _alias(n), _dumper(hints[n])) for n in names)
        cls._by_key = {
            key: (n, alias, convert) for n, alias, _d, convert in cls._fields for key in (n, alias)
        }

    def __init__(self, **values: Any) -> None:
        fields, by_key, state = self._fields, self._by_key, self.__dict__
        for key, value in values.items():
            field = by_key.get(key)
            if field is None:
                raise TypeError(f"{type(self).__name__}: no field {key!r}")
            name, alias, convert = field
            if key != alias and alias in values:
                continue  # both spellings given: the alias wins, as in pydantic
            state[name] = value if convert is None else convert(value)
        if len(state) < len(fields):
            for name, alias, default, _convert in fields:
                if name not in state:
                    if default is _REQUIRED:
                        raise TypeError(f"{type(self).__name__}: {alias} is required")
                    state[name] = (
                        copy.copy(default) if isinstance(default, (list, dict)) else default
                    )

    def model_dump(self, *, by_alias: bool = True, mode: str = "json") -> dict[str, Any]:
        """The section as the JSON contract has it: keyed by alias, in declaration order (the one dump there is)."""
        if not by_alias or mode != "json":
            raise NotImplementedError(
                "a plan section dumps only as its JSON contract (by_alias=True, mode='json')"
            )
        values = self.__dict__
        return {
            alias: values[name] if dump is None else dump(values[name])
            for name, alias, dump in self._dumpers
        }

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Any:
        """A copy with `update` (field names) set as given, unchecked, as pydantic's `model_copy` does."""
        new = copy.deepcopy(self) if deep else copy.copy(self)
        new.__dict__.update(update or {})
        return new

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, like the pydantic models it stands for

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={self.__dict__[n]!r}' for n, *_ in self._fields)})"


class GangResult(_Model):
    namespace: str
    name: str
    api: str
    policy: Literal["gang", "basic"]
    min_count: int
    pending: int
    placed: int
    decision: Decision
    reason: str
    bound: int = 0
    priority: int = 0
    topology_domain: dict[str, str] | None = None
    # observe mode: does the scheduler model start it under every tie-break seed, and why not
    model_started: bool | None = None
    model_reason: str | None = None


class NewNode(_Model):
    node_group: str
    pods: list[str]
    instance_type: str = ""
    price_per_hour: float = 0.0


class PriorityBound(_Model):
    """One priority level: gangs started and pods placed, against upper bounds no plan can beat there."""

    priority: int
    gangs_started: int
    gangs_upper_bound: int
    pods_placed: int
    pods_upper_bound: int | None = None


class SolverPhase(_Model):
    """One phase of the plan (guide, greedy, gangBound, repair, costBound, patterns, cpsat, bound, explain): its wall
    seconds, and whether its deadline cut it short (for cpsat: it ran out of time, or had none, with a gap open)."""

    name: str
    seconds: float
    cut_short: bool = False


class SolverGaps(_Model):
    """What the plan may have left on the table: gangs and pods its bounds still allow beyond it (summed over
    priority levels), and its cost above the proven lower bound in $/h."""

    gangs: int = 0
    pods: int = 0
    cost_per_hour: float = 0.0


class SolverInfo(_Model):
    status: Literal["OPTIMAL", "FEASIBLE"]
    seconds: float
    gap: float
    lower_bound_proven: bool = False
    patterns_complete: bool = False
    greedy_only: bool = False
    pod_classes: int = 0
    bin_kinds: int = 0
    patterns: int = 0
    gangs_started: int = 0
    gangs_upper_bound: int = 0
    by_priority: list[PriorityBound] = []
    # the budget the plan worked to (the auto budget as grown while a gap was open)
    budget_seconds: float = 0.0
    phases: list[SolverPhase] = []
    gaps: SolverGaps | None = None

    @property
    def gang_gap(self) -> int:
        """Gangs the bound still allows beyond the plan (0: the plan starts the most gangs possible)."""
        return max(0, self.gangs_upper_bound - self.gangs_started)


class SchedulerInfo(_Model):
    """The kube-scheduler profile the plan assumed and how the plan was checked against it (docs/scheduling.md)."""

    mode: Literal["observe", "off"]
    profile: str = ""  # Profile.describe() of the default profile
    scoring_strategy: str = ""
    source: Literal["default", "file", "eks"] = "default"
    seeds: list[int] = []
    # model runs over the whole node set (under every seed, or seed 0 alone while settling)
    rounds: int = 0
    gangs_started: int = 0  # gangs the model starts under every seed
    realized: bool = False  # the last round's plan was what the model did (no repair left to do)
    # new nodes some seed leaves idle, kept (a drop loses a gang / no model runs left)
    idle_nodes: int = 0
    seconds: float = 0.0
    note: str = ""  # why observe mode was not applied, when it was asked for


class Plan(_Model):
    scale_up: dict[str, int]
    new_nodes: list[NewNode]
    existing_nodes: dict[str, list[str]]
    gangs: list[GangResult]
    cost_per_hour: float
    lower_bound_per_hour: float
    solver: SolverInfo
    warnings: list[str] = []
    scheduler: SchedulerInfo | None = None
    # per node group, what its DaemonSets' pods take on each new node (Kubernetes quantities), already off the
    # allocatable the plan packs (gangscale.daemonsets)
    daemon_set_overhead: dict[str, dict[str, str]] = {}
    # the controller mode `gangscale plan` planned as (`--mode`: gate, observe, off); None where no mode was named
    mode: Literal["gate", "observe", "off"] | None = None

    def to_dict(self) -> dict:
        return self.model_dump(by_alias=True, mode="json")


# ----------------------------------------------------------------- renderers


def _money(x: float) -> str:
    return f"${x:,.2f}/h"


def _gang_line(plan: Plan) -> str:
    sv = plan.solver
    gap = f"gang gap {sv.gang_gap}" if sv.gang_gap else "gang gap closed"
    return f"{sv.gangs_started} gangs started of at most {sv.gangs_upper_bound} possible ({gap})"


SUGGESTED_LIMITS = (
    5,
    10,
    30,
    60,
    120,
    300,
)  # seconds: the --time-limit a gap line suggests, the first above twice
# the budget the plan worked to
# a cost gap this small (relative) is the solver's own stopping gap: no line for it
COST_GAP_SHOWN = 0.001


def gap_line(plan: Plan) -> str | None:
    """One line when the plan's bounds leave a gang, pod or cost gap open ("1 more gang may fit: run with
    --time-limit 5"), naming a larger budget when a phase was cut short; None when every gap is closed."""
    sv, gaps = plan.solver, plan.solver.gaps
    if gaps is None:
        return None
    if gaps.gangs:
        what = f"{gaps.gangs} more gang{'s' if gaps.gangs > 1 else ''} may fit"
    elif gaps.pods:
        what = f"{gaps.pods} more pod{'s' if gaps.pods > 1 else ''} may fit"
    elif sv.gap > COST_GAP_SHOWN:
        what = f"the plan may cost up to {_money(gaps.cost_per_hour)} less"
    else:
        return None
    if not any(p.cut_short for p in sv.phases):
        return f"{what} (no phase was cut short: the bound may not be reachable)"
    used = max(sv.budget_seconds, sv.seconds)
    more = next((t for t in SUGGESTED_LIMITS if t > 2 * used), SUGGESTED_LIMITS[-1])
    return f"{what}: run with --time-limit {more}"


def _summary_lines(plan: Plan) -> list[str]:
    nodes = sum(plan.scale_up.values())
    ok = sum(1 for g in plan.gangs if g.decision in ("scale-up", "fits-existing"))
    mode = [f"planned as the controller's {plan.mode} mode"] if plan.mode else []
    return mode + [
        f"{ok} of {len(plan.gangs)} groups placed; {nodes} new nodes for {_money(plan.cost_per_hour)} "
        f"(lower bound {_money(plan.lower_bound_per_hour)}, gap {plan.solver.gap:.2%}); "
        f"solver {plan.solver.status} in {plan.solver.seconds:.2f}s",
        _gang_line(plan),
    ]


def _group_rows(plan: Plan) -> list[tuple[str, str, int, float, float]]:
    info: dict[str, tuple[str, float]] = {}
    for n in plan.new_nodes:
        info.setdefault(n.node_group, (n.instance_type, n.price_per_hour))
    return [
        (
            g,
            info.get(g, ("", 0.0))[0],
            cnt,
            info.get(g, ("", 0.0))[1],
            cnt * info.get(g, ("", 0.0))[1],
        )
        for g, cnt in sorted(plan.scale_up.items())
    ]


def render_markdown(plan: Plan) -> str:
    out = [
        "# gangscale plan",
        "",
        *_summary_lines(plan),
        "",
        "## Gangs",
        "",
        "| gang | api | policy | minCount | pending | placed | decision | reason |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for g in plan.gangs:
        reason = g.reason.replace("|", "\\|")
        out.append(
            f"| {g.namespace}/{g.name} | {g.api} | {g.policy} | {g.min_count} | {g.pending} | {g.placed} "
            f"| {g.decision} | {reason} |"
        )
    out += [
        "",
        "## Node groups",
        "",
        "| node group | instance type | nodes added | price each | cost |",
        "|---|---|---:|---:|---:|",
    ]
    for name, itype, cnt, price, cost in _group_rows(plan):
        out.append(f"| {name} | {itype} | {cnt} | {_money(price)} | {_money(cost)} |")
    out += [
        "",
        f"**Total {_money(plan.cost_per_hour)}** against a proven lower bound of "
        f"{_money(plan.lower_bound_per_hour)} (gap {plan.solver.gap:.2%}).",
        "",
        f"**Gangs:** {_gang_line(plan)}.",
        "",
    ]
    if len(plan.solver.by_priority) > 1:
        out += [
            "| priority | gangs started | gang upper bound | pods placed | pod upper bound |",
            "|---:|---:|---:|---:|---:|",
        ]
        out += [
            f"| {t.priority} | {t.gangs_started} | {t.gangs_upper_bound} | {t.pods_placed} | "
            f"{'n/a' if t.pods_upper_bound is None else t.pods_upper_bound} |"
            for t in plan.solver.by_priority
        ]
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
        gangs.add_row(
            f"{g.namespace}/{g.name}",
            g.api,
            g.policy,
            str(g.min_count),
            str(g.pending),
            str(g.placed),
            g.decision,
            g.reason,
        )
    console.print(gangs)
    groups = Table(title="Node groups")
    for col in ("NODE GROUP", "INSTANCE TYPE", "NODES ADDED", "PRICE EACH", "COST"):
        groups.add_column(col)
    for name, itype, cnt, price, cost in _group_rows(plan):
        groups.add_row(name, itype, str(cnt), _money(price), _money(cost))
    console.print(groups)
    for line in _summary_lines(plan):
        console.print(line)
    gap = gap_line(plan)
    if gap:
        console.print(gap)
    for w in plan.warnings:
        console.print(f"warning: {w}")
    return buf.getvalue()
