"""A cloud provider by name, with the simulated cloud seeded from a `--nodegroups` catalog file.

`cloud_adapters.create_provider` takes node-group templates, never files: reading a
catalog (pydantic, the loader's limits, one-sentence `InputError`s) is the planner's
job, and the adapters import nothing from gangscale. This is the one place that
joins the two for the CLI and the controller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cloud_adapters import NodeGroupProvider, create_provider

from .catalog import load_catalog


def open_provider(name: str, *, catalog: str | Path | None = None,
                  **settings: Any) -> tuple[NodeGroupProvider, list[str]]:
    """`create_provider(name, ...)`; for `simulated` the groups (and warnings) of `catalog` seed it."""
    if name != "simulated" or catalog is None:
        return create_provider(name, **settings)
    groups, warnings = load_catalog(catalog)
    provider, more = create_provider(name, groups=groups, **settings)
    return provider, [*warnings, *more]
