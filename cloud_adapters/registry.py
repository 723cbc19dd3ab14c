"""Providers by name, built from plain settings (what the CLI and the controller pass)."""

from __future__ import annotations

from pathlib import Path

from .base import NodeGroupProvider

PROVIDERS = ("aws-asg", "aws-eks", "aws-fleet", "simulated")


def create_provider(
    name: str,
    *,
    cluster_name: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    catalog: str | Path | None = None,
    simulated_state: str | Path | None = None,
    aws_options=None,
    **simulated,
) -> tuple[NodeGroupProvider, list[str]]:
    """The provider called `name`, and any warnings from reading its seed catalog (simulated only).

    boto3 is imported only for the AWS providers, so the simulated cloud needs no AWS packages.
    """
    if name == "simulated":
        if catalog is None:
            raise ValueError("the simulated provider is seeded from a node-group catalog (--nodegroups)")
        from .simulated import SimulatedProvider

        return SimulatedProvider.from_catalog(catalog, state_file=simulated_state, **simulated)
    if name not in PROVIDERS:
        raise ValueError(f"unknown provider {name!r}; choose one of {', '.join(PROVIDERS)}")
    from .aws_common import AwsOptions

    options = aws_options or AwsOptions()
    if region:
        options.region = region
    if endpoint_url:
        options.endpoint_url = endpoint_url
    if name == "aws-asg":
        from .aws_asg import AsgProvider

        return AsgProvider(cluster_name or "", options), []
    if name == "aws-eks":
        from .aws_eks import EksProvider

        return EksProvider(cluster_name or "", options), []
    from .aws_fleet import FleetProvider

    return FleetProvider(cluster_name or "", options), []
