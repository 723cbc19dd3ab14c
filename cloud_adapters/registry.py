"""Providers by name, built from plain settings (what the CLI and the controller pass)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .base import NodeGroupProvider
from .types import NodeGroup

PROVIDERS = ("aws-asg", "aws-eks", "aws-fleet", "simulated")


def create_provider(
    name: str,
    *,
    cluster_name: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    groups: Sequence[NodeGroup] | None = None,
    simulated_state: str | Path | None = None,
    aws_options=None,
    auto_discovery: Sequence[str] = (),
    **simulated,
) -> tuple[NodeGroupProvider, list[str]]:
    """The provider called `name` and its warnings (none today; the CLI adds its catalog's).

    The simulated cloud is seeded from `groups` (`gangscale.providers.open_provider` reads them from
    a catalog file: reading catalogs is the planner's business, not the adapters').
    boto3 is imported only for the AWS providers, so the simulated cloud needs no AWS packages.
    """
    if name == "simulated":
        if groups is None:
            raise ValueError(
                "the simulated provider is seeded from a node-group catalog (--nodegroups)"
            )
        from .simulated import SimulatedProvider

        return SimulatedProvider(list(groups), state_file=simulated_state, **simulated), []
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}")
    from .aws_common import AwsOptions

    options = aws_options or AwsOptions()
    if region:
        options.region = region
    if endpoint_url:
        options.endpoint_url = endpoint_url
    if auto_discovery:  # CA-style asg:tag=... filters instead of gangscale's own tags (tags.py)
        options.auto_discovery = tuple(auto_discovery)
    if name == "aws-asg":
        from .aws_asg import AsgProvider

        return AsgProvider(cluster_name or "", options), []
    if name == "aws-eks":
        from .aws_eks import EksProvider

        return EksProvider(cluster_name or "", options), []
    from .aws_fleet import FleetProvider

    return FleetProvider(cluster_name or "", options), []
