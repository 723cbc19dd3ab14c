"""What a `Reconciler` talks to besides the cloud and its settings, as one frozen value.

Each writer that is None is never written (a dry run, a test, the simulator); each reader that is None is read
the default way. The live controller sets them all (`run.py`); the simulator sets its own clock, store, pod
writer, solver options and shared parse (benchmarks/sim/policies.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..ingest import Cluster, ParseCache
from ..kube.nodetaints import NodeTainter
from ..kube.podgroupstatus import ConditionWriter
from ..solver.params import SolveOptions
from .events import EventSink
from .execute import PodGates
from .metrics import Metrics
from .published import StatusPublisher
from .records import ControllerState


class RecordStore(Protocol):
    """Where the records live between passes and restarts (`records.StateStore`: one ConfigMap per record)."""

    def load(self) -> ControllerState: ...
    def save(self, state: ControllerState) -> None: ...


@dataclass(frozen=True, slots=True)
class Deps:
    store: RecordStore | None = None  # the records' ConfigMaps; None: kept in memory only
    events: EventSink | None = None  # Kubernetes Events; None: a sink that writes nowhere
    metrics: Metrics | None = None  # None: a registry of its own
    clock: Callable[[], float] = time.time
    identity: str = "gangscale"  # this replica, in plan ids and the status
    # raises LostLeadership when this replica may no longer act
    fence: Callable[[str], None] | None = None
    # lifts gangscale.io/capacity, deletes stranded pods (gate mode)
    pod_gates: PodGates | None = None
    conditions: ConditionWriter | None = None  # gangscale.io/CapacityReady on PodGroup status
    node_taints: NodeTainter | None = None  # the scale-down's taint; None: empty nodes go untainted
    status: StatusPublisher | None = None  # the leader's per-pass view for `gangscale status`
    # None: the config's time limit on every core (the simulator pins one worker)
    solve_options: SolveOptions | None = None
    parse_cache: ParseCache | None = None  # kept across passes; None: fresh each pass
    # the caller's own `ingest` of exactly these objects when it has one (the simulator's engine read the same
    # version for its scheduler); None from it, or no function: ingest here
    shared_read: Callable[[list[dict[str, Any]]], Cluster | None] | None = None
