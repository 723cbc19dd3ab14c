"""The node groups the cloud reports, for a webhook with no catalog (aws-asg, aws-eks, aws-fleet installs).

The capacity rules need node groups; without a catalog they come from the same
discovery the controller runs (`NodeGroupProvider.discover`, read-only calls), on
a background thread at start and every REFRESH_SECONDS, so a review never waits on the cloud.
Until the first discovery succeeds, or when it finds no group, nothing is known
about capacity and the capacity rules stay silent (as with no catalog at all); a
failed refresh keeps the last groups. Groups are judged at their maxSize, never
their current size: what the cloud could ever hold, not what it holds now.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..controller.config import ControllerConfig
from ..model import NodeGroup

REFRESH_SECONDS = 60.0
log = logging.getLogger("gangscale.webhook")  # the controller's JSON lines (controller/logs.py)


class DiscoveredGroups:
    """`current()`: the groups of the last successful discovery (the same tuple until one differs)."""

    def __init__(
        self, discover: Callable[[], list[NodeGroup]], refresh_seconds: float = REFRESH_SECONDS
    ) -> None:
        self._discover = discover
        self._refresh = refresh_seconds
        self._groups: tuple[NodeGroup, ...] = ()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="discovery", daemon=True)

    def current(self) -> tuple[NodeGroup, ...]:
        return self._groups

    def refresh(self) -> bool:
        """One discovery; False (and the last groups kept) when it failed."""
        try:
            found = tuple(self._discover())
        except Exception as exc:  # noqa: BLE001 - any cloud failure: keep serving with what was known
            log.warning(
                "node-group discovery failed: the last groups are kept", extra={"error": str(exc)}
            )
            return False
        if found != self._groups:
            self._groups = found
            log.info("node groups discovered", extra={"groups": sorted(g.name for g in found)})
        return True

    def start(self) -> DiscoveredGroups:
        """Discover on the thread at once, then every `refresh_seconds`: serving never waits on the cloud, not even at
        start (an unreachable endpoint costs the AWS client's retries and timeouts, a minute or more)."""
        self._thread.start()
        return self

    def _loop(self) -> None:
        self.refresh()
        while not self._stop.wait(self._refresh):
            self.refresh()

    def stop(self) -> None:
        self._stop.set()


def cloud_groups(cfg: ControllerConfig) -> DiscoveredGroups | None:
    """Discovery through the config's provider (None for `simulated`, whose groups only a catalog gives, and when
    the provider cannot be opened: a one-line reason on stderr)."""
    from ..providers import open_provider

    if cfg.provider == "simulated":
        return None
    try:
        provider, _ = open_provider(
            cfg.provider,
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            endpoint_url=cfg.aws_endpoint_url,
            auto_discovery=tuple(cfg.node_group_auto_discovery),
        )
    except Exception as exc:  # noqa: BLE001 - a provider that cannot be opened: admission without capacity rules
        log.warning(
            "no node-group discovery: the capacity rules stay silent", extra={"error": str(exc)}
        )
        return None
    return DiscoveredGroups(lambda: provider.discover().groups).start()
