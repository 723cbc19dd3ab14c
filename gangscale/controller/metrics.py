"""Prometheus metrics (`gangscale_*`, and the process' `process_*`) and the /metrics, /healthz, /readyz endpoints.

Every `gangscale_pending_gangs{state}` series (one per plan decision) is set on each pass, 0 when no
gang has that decision, so a dashboard never shows a stale count for a decision that stopped occurring."""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import get_args

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from ..build_info import register_build_info
from ..plan import Decision, Plan
from .config import ControllerConfig
from .lifecycle import REPORTED, Latency, Record, ScaledUp
from .published import GroupSizes

LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    """One registry per controller, so tests and several controllers in a process never collide."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        # process_cpu_seconds_total, process_resident_memory_bytes, open fds, ...
        ProcessCollector(registry=r)
        self._gang_metrics(r)
        self._work_metrics(r)
        self._loop_metrics(r)
        self._groups(r)
        self._namespaces(r)
        self.cloud_errors = Counter(
            "gangscale_cloud_api_errors_total",
            "Cloud API calls that failed, by error kind (cloud_adapters ErrorKind) and call",
            ["kind", "operation"],
            registry=r,
        )

    def _gang_metrics(self, r: CollectorRegistry) -> None:
        """Gangs by state, their queue latency, and per gang what the last plan could place."""
        self.pending_gangs = Gauge(
            "gangscale_pending_gangs",
            "Gangs with pending pods by state: the last plan's decision for each",
            ["state"],
            registry=r,
        )
        self.queue_latency = Histogram(
            "gangscale_gang_queue_latency_seconds",
            "Time from a gang's first pending pod to its scale-up request (stage=requested) or to running",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.gangs = Gauge("gangscale_gangs", "Gangs by provisioning state", ["state"], registry=r)
        self.feasible = Gauge(
            "gangscale_gang_feasible_members",
            "Members the last plan could place, per gang",
            ["namespace", "gang"],
            registry=r,
        )
        self.min_count = Gauge(
            "gangscale_gang_min_count", "minCount per gang", ["namespace", "gang"], registry=r
        )

    def _work_metrics(self, r: CollectorRegistry) -> None:
        """What the plans and the actions on the cloud did: nodes requested, failed, given back; plan time and
        gap; dollars held; orphans terminated; gates lifted."""
        self.scale_ups = Counter(
            "gangscale_scale_ups_total",
            "Nodes requested per node group",
            ["node_group"],
            registry=r,
        )
        self.scale_up_failures = Counter(
            "gangscale_scale_up_failures_total",
            "Failed scale-ups and launches per node group and error kind",
            ["node_group", "kind"],
            registry=r,
        )
        self.released = Counter(
            "gangscale_capacity_released_total",
            "Nodes given back (deadline, cancel, empty)",
            ["node_group", "why"],
            registry=r,
        )
        self.bought_ahead = Counter(
            "gangscale_nodes_bought_ahead_total",
            "Nodes bought for gangs likely to come, before any asked (keep.py, buy_ahead)",
            ["node_group"],
            registry=r,
        )
        self.plan_seconds = Histogram(
            "gangscale_plan_duration_seconds",
            "Wall time of one plan",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
            registry=r,
        )
        self.solver_gap = Gauge(
            "gangscale_solver_gap", "Relative gap of the last plan to its proven bound", registry=r
        )
        self.dollars = Gauge(
            "gangscale_requested_dollars_per_hour",
            "Hourly price of the nodes requested and not yet given back",
            registry=r,
        )
        self.orphans_terminated = Counter(
            "gangscale_orphan_instances_terminated_total",
            "Instances launched outside any group and claimed by no record, "
            "terminated by the janitor",
            ["node_group"],
            registry=r,
        )
        self.gates_lifted = Counter(
            "gangscale_gates_lifted_total",
            "Pods whose gangscale.io/capacity scheduling gate was removed, by why "
            "(capacity-ready: gate mode released the gang; not-held: gate mode is off for it)",
            ["why"],
            registry=r,
        )

    def _loop_metrics(self, r: CollectorRegistry) -> None:
        """The loop itself: leadership, passes, the last pass, the build."""
        self.leader = Gauge("gangscale_leader", "1 while this replica holds the lease", registry=r)
        self.reconciles = Counter(
            "gangscale_reconciles_total", "Reconcile passes by result", ["result"], registry=r
        )
        self.last_reconcile = Gauge(
            "gangscale_last_reconcile_timestamp_seconds",
            "When the loop last finished a pass",
            registry=r,
        )
        register_build_info(r)

    def _groups(self, r: CollectorRegistry) -> None:
        """Per node group, as Cluster Autoscaler's node_group_{target,min,max}_count (CA metrics/metrics.go)."""

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"gangscale_node_group_{name}", doc, ["node_group"], registry=r)

        self.group_target = gauge("target_size", "The cloud's desired size of the node group")
        self.group_ready = gauge("ready_nodes", "Ready Nodes of the node group in the cluster")
        self.group_upcoming = gauge(
            "upcoming_nodes", "Instances the cloud is bringing up that have no Node yet"
        )
        self.group_min = gauge("min_size", "The node group's minimum size")
        self.group_max = gauge("max_size", "The node group's maximum size")
        self.group_backed_off = gauge(
            "backed_off", "1 while scale-ups of the node group are backed off after a failure"
        )
        self.groups_shown: tuple[
            GroupSizes, ...
        ] = ()  # what the gauges show now: a pass that changed nothing skips

    def _namespaces(self, r: CollectorRegistry) -> None:
        """Cap usage per namespace: what its gangs hold against namespaceCaps (else defaultNamespaceCap)."""
        self.ns_nodes = Gauge(
            "gangscale_namespace_nodes",
            "Nodes bought for the namespace's gangs and not yet used or given back",
            ["namespace"],
            registry=r,
        )
        self.ns_dollars = Gauge(
            "gangscale_namespace_dollars_per_hour",
            "Hourly price of those nodes",
            ["namespace"],
            registry=r,
        )
        self.ns_max_nodes = Gauge(
            "gangscale_namespace_max_nodes",
            "The namespace's cap on nodes (unset: none)",
            ["namespace"],
            registry=r,
        )
        self.ns_max_dollars = Gauge(
            "gangscale_namespace_max_dollars_per_hour",
            "The namespace's cap on dollars per hour (unset: none)",
            ["namespace"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer:
    """/metrics, /healthz (the loop is alive) and /readyz (the cache has synced) on one address; `metrics` None:
    the probes only, `probes` False: /metrics only (controller-runtime's split of `--metrics-bind-address` and
    `--health-probe-bind-address`, pkg/manager/manager.go), so /metrics can listen on loopback alone."""

    def __init__(
        self,
        address: str,
        metrics: Metrics | None,
        alive: Callable[[], bool],
        ready: Callable[[], bool],
        probes: bool = True,
    ) -> None:
        host, _, port = address.rpartition(":")
        metrics_ref, alive_ref, ready_ref = metrics, alive, ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/metrics" and metrics_ref is not None:
                    self._send(200, metrics_ref.render(), CONTENT_TYPE_LATEST)
                elif not probes:
                    self._send(404, b"not found\n")
                elif self.path == "/healthz":
                    ok = alive_ref()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"loop stalled\n")
                elif self.path == "/readyz":
                    ok = ready_ref()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"cache not synced\n")
                else:
                    self._send(404, b"not found\n")

            def _send(
                self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8"
            ) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="health", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def stalled(last: Callable[[], float], limit: float) -> Callable[[], bool]:
    return lambda: time.time() - last() < limit


def observe_gangs(m: Metrics, plan: Plan) -> None:
    """Per-gang series for the gangs the plan lists now (and only those)."""
    m.feasible.clear()
    m.min_count.clear()
    decisions = Tally(r.decision for r in plan.gangs)
    for d in get_args(Decision):
        m.pending_gangs.labels(d).set(decisions.get(d, 0))
    for r in plan.gangs:
        m.feasible.labels(r.namespace, r.name).set(r.placed + r.bound)
        m.min_count.labels(r.namespace, r.name).set(r.min_count)


def observe_events(m: Metrics, events: Iterable[object]) -> None:
    """The metric samples among a transition's events."""
    for e in events:
        if isinstance(e, ScaledUp):
            m.scale_ups.labels(e.group).inc(e.nodes)
        elif isinstance(e, Latency):
            m.queue_latency.labels(e.stage).observe(e.seconds)


def observe_pass(
    m: Metrics, plan: Plan, records: Iterable[Record], dollars_per_hour: float
) -> None:
    """The solver's time and gap, gangs per state, and what is on its way, after each pass."""
    m.plan_seconds.observe(plan.solver.seconds)
    m.solver_gap.set(plan.solver.gap)
    states = Tally(r.state for r in records)
    for s in REPORTED:
        m.gangs.labels(s.value).set(states.get(s, 0))
    m.dollars.set(dollars_per_hour)


def observe_node_groups(m: Metrics, sizes: Iterable[GroupSizes]) -> None:
    """The node-group gauges for the groups discovered now (and only those); unchanged sizes are not set again."""
    sizes = tuple(sizes)
    if sizes == m.groups_shown:
        return
    m.groups_shown = sizes
    for g in (
        m.group_target,
        m.group_ready,
        m.group_upcoming,
        m.group_min,
        m.group_max,
        m.group_backed_off,
    ):
        g.clear()
    for s in sizes:
        m.group_target.labels(s.name).set(s.target)
        m.group_ready.labels(s.name).set(s.ready)
        m.group_upcoming.labels(s.name).set(s.upcoming)
        m.group_min.labels(s.name).set(s.min_size)
        m.group_max.labels(s.name).set(s.max_size)
        m.group_backed_off.labels(s.name).set(1 if s.backoff_until else 0)


def observe_namespaces(
    m: Metrics, nodes: dict[str, int], dollars: dict[str, float], cfg: ControllerConfig
) -> None:
    """Usage and cap of every namespace holding capacity or named in namespaceCaps."""
    for g in (m.ns_nodes, m.ns_dollars, m.ns_max_nodes, m.ns_max_dollars):
        g.clear()
    for ns in sorted({*nodes, *dollars, *cfg.namespace_caps}):
        m.ns_nodes.labels(ns).set(nodes.get(ns, 0))
        m.ns_dollars.labels(ns).set(dollars.get(ns, 0.0))
        cap = cfg.cap_for(ns)
        if cap.max_nodes is not None:
            m.ns_max_nodes.labels(ns).set(cap.max_nodes)
        if cap.max_dollars_per_hour is not None:
            m.ns_max_dollars.labels(ns).set(cap.max_dollars_per_hour)
