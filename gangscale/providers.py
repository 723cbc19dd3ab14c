"""A cloud provider by name, with the simulated cloud seeded from a `--nodegroups` catalog file.

`cloud_adapters.create_provider` takes node-group templates, never files: reading a
catalog (pydantic, the loader's limits, one-sentence `InputError`s) is the planner's
job, and the adapters import nothing from gangscale. This is the one place that
joins the two for the CLI and the controller, and where a managed control plane's scheduler
settings (`NodeGroupProvider.scheduler_scoring`) become the scheduler model's configuration.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from cloud_adapters import NodeGroupProvider, create_provider

from .catalog import load_catalog
from .realize import SchedulerModel
from .scheduling import strategy_config


def open_provider(
    name: str, *, catalog: str | Path | None = None, **settings: Any
) -> tuple[NodeGroupProvider, list[str]]:
    """`create_provider(name, ...)`; for `simulated` the groups (and warnings) of `catalog` seed it."""
    if name != "simulated" or catalog is None:
        return create_provider(name, **settings)
    groups, warnings = load_catalog(catalog)
    provider, more = create_provider(name, groups=groups, **settings)
    return provider, [*warnings, *more]


DEFAULT_FIT_RESOURCES = (
    ("cpu", 1),
    ("memory", 1),
)  # upstream's NodeResourcesFit resources when none are named


def cluster_scheduler(
    provider: NodeGroupProvider, model: SchedulerModel, named_file: bool
) -> tuple[SchedulerModel, list[str]]:
    """The scheduler model with the cluster's own scoring strategy (aws-eks: DescribeCluster), and warnings.

    A user's file (`named_file`) wins and nothing is read; so does `--scheduler-model off` (the plan does not
    depend on the scheduler then). A strategy that cannot be read leaves upstream defaults, with one warning
    that names why; nothing here raises."""
    if named_file or not model.enabled:
        return model, []
    scoring = provider.scheduler_scoring()
    if scoring is None:
        return model, []
    if scoring.unknown:
        return model, [
            f"{provider.name}: the cluster's kube-scheduler scoring strategy is unknown: {scoring.unknown}; "
            "the plan assumes upstream defaults (LeastAllocated on cpu and memory): pass "
            "--scheduler-config FILE (controller: schedulerConfigFile) to name it"
        ]
    config = strategy_config(scoring.strategy, scoring.resources or DEFAULT_FIT_RESOURCES)
    return replace(model, config=replace(config, source=scoring.source), source="eks"), []
