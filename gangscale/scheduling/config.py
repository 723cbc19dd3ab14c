"""Scheduler profiles: the user's `KubeSchedulerConfiguration` (kubescheduler.config.k8s.io/v1) or the defaults.

Only what changes where pods land is read: per profile its `schedulerName`, the score plugins'
weights (enabled/disabled under `plugins.multiPoint` and `plugins.score`), the filters that are
disabled, the QueueSort plugin (`plugins.queueSort`, or `Coscheduling` under `plugins.multiPoint`),
`NodeResourcesFitArgs.scoringStrategy`, `NodeResourcesBalancedAllocationArgs.resources` and
`percentageOfNodesToScore`. Everything else in the file is accepted and ignored. Invariant: a
`SchedulerConfig` always has at least one profile and every weight is a positive integer; a bad
file is one `SchedulerConfigError` sentence naming the field.

Defaults as upstream (kubernetes/kubernetes pkg/scheduler/apis/config/v1/default_plugins.go and
defaults.go): score weights TaintToleration 3, NodeAffinity 2, PodTopologySpread 2,
InterPodAffinity 2, NodeResourcesFit 1, NodeResourcesBalancedAllocation 1, ImageLocality 1;
scoringStrategy LeastAllocated on cpu and memory with weight 1 each; BalancedAllocation on cpu and
memory; RequestedToCapacityRatio's shape defaults to {0: 0, 100: 10}; QueueSort PrioritySort. Every
profile must name the same QueueSort plugin, as kube-scheduler's validation requires (the queue is
shared: pkg/scheduler/apis/config/validation/validation.go, `validateCommonQueueSort`); a file whose
profiles differ is a `SchedulerConfigError`. The model scores only the
plugins whose score can differ between nodes for the pods gangscale sees (NodeResourcesFit,
NodeResourcesBalancedAllocation, TaintToleration); preferred node affinity, inter-pod affinity,
spreading and image locality are not modelled and score every node alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..loader import InputError, read_documents
from .queue import COSCHEDULING, PRIORITY_SORT

DEFAULT_SCHEDULER = "default-scheduler"
STRATEGIES = ("LeastAllocated", "MostAllocated", "RequestedToCapacityRatio")
DEFAULT_SCORE_WEIGHTS: Mapping[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "PodTopologySpread": 2,
    "InterPodAffinity": 2,
    "NodeResourcesFit": 1,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}
MODELLED_FILTERS = ("NodeUnschedulable", "NodeResourcesFit", "NodeAffinity", "TaintToleration")
DEFAULT_SHAPE = ((0, 0), (100, 100))  # {0: 0, 100: 10}, scores scaled by MaxNodeScore / 10


class SchedulerConfigError(InputError):
    """A scheduler configuration file gangscale cannot use (one sentence, naming the field)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One scheduler profile as the model uses it."""

    scheduler_name: str = DEFAULT_SCHEDULER
    strategy: str = "LeastAllocated"
    resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
    shape: tuple[tuple[int, int], ...] = DEFAULT_SHAPE  # (utilization %, score 0..100)
    balanced_resources: tuple[str, ...] = ("cpu", "memory")
    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_SCORE_WEIGHTS))
    filters: frozenset[str] = frozenset(MODELLED_FILTERS)
    percentage_of_nodes_to_score: int = 0  # 0: upstream's adaptive percentage
    queue_sort: str = PRIORITY_SORT  # the QueueSort plugin: PrioritySort or Coscheduling (queue.py)

    def weight(self, plugin: str) -> int:
        return self.weights.get(plugin, 0)

    def describe(self) -> str:
        """What a plan states it assumed, e.g. "default-scheduler: LeastAllocated (cpu 1, memory 1), ..."."""
        res = ", ".join(f"{n} {w}" for n, w in self.resources)
        parts = [f"NodeResourcesFit {self.strategy} ({res}) x{self.weight('NodeResourcesFit')}"]
        if self.weight("NodeResourcesBalancedAllocation"):
            parts.append(
                f"BalancedAllocation ({', '.join(self.balanced_resources)}) "
                f"x{self.weight('NodeResourcesBalancedAllocation')}"
            )
        if self.weight("TaintToleration"):
            parts.append(f"TaintToleration x{self.weight('TaintToleration')}")
        return f"{self.scheduler_name}: " + ", ".join(parts)


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    profiles: tuple[Profile, ...] = (Profile(),)
    source: str = "upstream defaults"

    @property
    def queue_sort(self) -> str:
        """The scheduler's one QueueSort plugin (every profile names the same: `parse_scheduler_config` checks)."""
        return self.profiles[0].queue_sort

    def profile(self, scheduler_name: str) -> Profile | None:
        return next((p for p in self.profiles if p.scheduler_name == scheduler_name), None)

    @property
    def default(self) -> Profile:
        return self.profile(DEFAULT_SCHEDULER) or self.profiles[0]


def default_config() -> SchedulerConfig:
    return SchedulerConfig()


def strategy_config(
    strategy: str, resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
) -> SchedulerConfig:
    """The default profile with another scoring strategy (benchmarks, tests, EKS's setting)."""
    return SchedulerConfig(
        (Profile(strategy=strategy, resources=resources),), f"{strategy} profile"
    )


# ------------------------------------------------------------------ the file, pydantic at the edge


class _M(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)


class _Res(_M):
    name: str = Field(min_length=1)
    weight: int = Field(default=1, ge=1, le=100)


class _Point(_M):
    utilization: int = Field(ge=0, le=100)
    score: int = Field(ge=0, le=10)


class _RTCR(_M):
    shape: list[_Point] = Field(min_length=1)


class _Strategy(_M):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"] = "LeastAllocated"
    resources: list[_Res] | None = None
    requested_to_capacity_ratio: _RTCR | None = Field(
        default=None, alias="requestedToCapacityRatio"
    )


class _FitArgs(_M):
    scoring_strategy: _Strategy | None = Field(default=None, alias="scoringStrategy")


class _BalancedArgs(_M):
    resources: list[_Res] | None = None


class _PluginConfig(_M):
    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class _Plugin(_M):
    name: str = Field(min_length=1)
    weight: int | None = Field(default=None, ge=0)


class _Set(_M):
    enabled: list[_Plugin] = Field(default_factory=list)
    disabled: list[_Plugin] = Field(default_factory=list)


class _Plugins(_M):
    multi_point: _Set | None = Field(default=None, alias="multiPoint")
    score: _Set | None = None
    filter: _Set | None = None
    queue_sort: _Set | None = Field(default=None, alias="queueSort")


class _Profile(_M):
    scheduler_name: str = Field(default=DEFAULT_SCHEDULER, alias="schedulerName", min_length=1)
    plugins: _Plugins | None = None
    plugin_config: list[_PluginConfig] = Field(default_factory=list, alias="pluginConfig")
    percentage_of_nodes_to_score: int | None = Field(
        default=None, alias="percentageOfNodesToScore", ge=0, le=100
    )


class _File(_M):
    api_version: Literal["kubescheduler.config.k8s.io/v1"] = Field(alias="apiVersion")
    kind: Literal["KubeSchedulerConfiguration"]
    profiles: list[_Profile] | None = None
    percentage_of_nodes_to_score: int | None = Field(
        default=None, alias="percentageOfNodesToScore", ge=0, le=100
    )


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the file"


def _one_sentence(exc: ValidationError, prefix: str = "") -> str:
    err = exc.errors()[0]
    where = _where(tuple(err["loc"]))
    msg = err["msg"].rstrip(".")
    return f"{prefix}{'.' if prefix and where else ''}{where}: {msg[0].lower() + msg[1:] if msg else 'invalid'}"


def _weights(plugins: _Plugins | None) -> dict[str, int]:
    """Score weights after merging the profile's plugin sets onto the defaults (score overrides multiPoint)."""
    weights = dict(DEFAULT_SCORE_WEIGHTS)
    for ep in (plugins.multi_point, plugins.score) if plugins else ():
        if ep is None:
            continue
        if any(d.name == "*" for d in ep.disabled):
            weights = {}
        for d in ep.disabled:
            weights.pop(d.name, None)
        for e in ep.enabled:
            weights[e.name] = e.weight or DEFAULT_SCORE_WEIGHTS.get(e.name, 1)
    return weights


def _filters(plugins: _Plugins | None) -> frozenset[str]:
    on = set(MODELLED_FILTERS)
    for ep in (plugins.multi_point, plugins.filter) if plugins else ():
        if ep is None:
            continue
        if any(d.name == "*" for d in ep.disabled):
            on.clear()
        on -= {d.name for d in ep.disabled}
        on |= {e.name for e in ep.enabled if e.name in MODELLED_FILTERS}
    return frozenset(on)


def _queue_sort(plugins: _Plugins | None) -> str:
    """The profile's QueueSort plugin: Coscheduling when enabled under `queueSort` or `multiPoint` (it implements
    QueueSort, scheduler-plugins pkg/coscheduling), else PrioritySort (default_plugins.go). Other queue sorts are
    not modelled and read as PrioritySort."""
    for ep in (plugins.queue_sort, plugins.multi_point) if plugins else ():
        if ep is not None and any(e.name == COSCHEDULING for e in ep.enabled):
            return COSCHEDULING
    return PRIORITY_SORT


def _profile(i: int, p: _Profile, top_pct: int | None) -> Profile:
    base = Profile(
        scheduler_name=p.scheduler_name,
        weights=_weights(p.plugins),
        filters=_filters(p.plugins),
        queue_sort=_queue_sort(p.plugins),
        percentage_of_nodes_to_score=p.percentage_of_nodes_to_score
        if p.percentage_of_nodes_to_score is not None
        else (top_pct or 0),
    )
    kw: dict[str, Any] = {}
    for j, pc in enumerate(p.plugin_config):
        where = f"profiles[{i}].pluginConfig[{j}].args"
        try:
            if pc.name == "NodeResourcesFit":
                st = _FitArgs.model_validate(pc.args).scoring_strategy
                if st is not None:
                    kw["strategy"] = st.type
                    if st.resources is not None:
                        kw["resources"] = tuple((r.name, r.weight) for r in st.resources)
                    if st.requested_to_capacity_ratio is not None:
                        pts = [
                            (s.utilization, s.score * 10)
                            for s in st.requested_to_capacity_ratio.shape
                        ]
                        if any(b[0] <= a[0] for a, b in zip(pts, pts[1:], strict=False)):
                            raise SchedulerConfigError(
                                f"{where}.scoringStrategy.requestedToCapacityRatio.shape: "
                                "utilization must increase from point to point"
                            )
                        kw["shape"] = tuple(pts)
            elif pc.name == "NodeResourcesBalancedAllocation":
                res = _BalancedArgs.model_validate(pc.args).resources
                if res is not None:
                    kw["balanced_resources"] = tuple(r.name for r in res)
        except ValidationError as exc:
            raise SchedulerConfigError(_one_sentence(exc, where)) from None
    from dataclasses import replace

    return replace(base, **kw)


def parse_scheduler_config(doc: Any, name: str = "the scheduler configuration") -> SchedulerConfig:
    if not isinstance(doc, Mapping):
        raise SchedulerConfigError(f"{name}: expected a KubeSchedulerConfiguration object")
    try:
        f = _File.model_validate(dict(doc))
    except ValidationError as exc:
        raise SchedulerConfigError(f"{name}: {_one_sentence(exc)}") from None
    profiles = f.profiles or [_Profile()]
    names = [p.scheduler_name for p in profiles]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise SchedulerConfigError(f"{name}: profiles[].schedulerName {dup!r} appears twice")
    try:
        built = tuple(
            _profile(i, p, f.percentage_of_nodes_to_score) for i, p in enumerate(profiles)
        )
    except SchedulerConfigError as exc:
        raise SchedulerConfigError(f"{name}: {exc}") from None
    sorts = sorted({p.queue_sort for p in built})
    if len(sorts) > 1:
        raise SchedulerConfigError(
            f"{name}: profiles[].plugins.queueSort: every profile must use the same QueueSort "
            f"plugin, found {' and '.join(sorts)}"
        )
    return SchedulerConfig(built, name)


def load_scheduler_config(path: str | Path) -> SchedulerConfig:
    """Read a KubeSchedulerConfiguration file (YAML or JSON, one document)."""
    docs = [d for d in read_documents(path) if d is not None]
    if len(docs) != 1:
        raise SchedulerConfigError(
            f"{path}: expected one KubeSchedulerConfiguration document, found {len(docs)}"
        )
    return parse_scheduler_config(docs[0], str(path))


# ---------------------------------------------------------------------------------- the CLI's part


def add_scheduler_config_argument(parser: argparse.ArgumentParser) -> None:
    """`--scheduler-config FILE` for `gangscale plan` (the CLI wires it; reading stays here)."""
    parser.add_argument(
        "--scheduler-config",
        metavar="FILE",
        default=None,
        help="the cluster's KubeSchedulerConfiguration (default: upstream kube-scheduler defaults)",
    )


def scheduler_config_from_args(args: argparse.Namespace) -> SchedulerConfig:
    """The configuration `--scheduler-config` names, or the defaults; raises InputError (exit 2)."""
    path = getattr(args, "scheduler_config", None)
    return load_scheduler_config(path) if path else default_config()
