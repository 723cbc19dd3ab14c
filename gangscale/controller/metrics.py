"""Prometheus metrics (`gangscale_*`, and the process' `process_*`) and the /metrics, /healthz, /readyz endpoints.

Every `gangscale_pending_gangs{state}` series (one per plan decision) is set on each pass, 0 when no
gang has that decision, so a dashboard never shows a stale count for a decision that stopped occurring."""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, get_args

from prometheus_client import (CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector,
                               generate_latest)

from ..plan import Decision, Plan
from .lifecycle import REPORTED, Latency, Record, ScaledUp

LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    """One registry per controller, so tests and several controllers in a process never collide."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        ProcessCollector(registry=r)  # process_cpu_seconds_total, process_resident_memory_bytes, open fds, ...
        self.pending_gangs = Gauge("gangscale_pending_gangs",
                                   "Gangs with pending pods by state: the last plan's decision for each",
                                   ["state"], registry=r)
        self.queue_latency = Histogram(
            "gangscale_gang_queue_latency_seconds",
            "Time from a gang's first pending pod to its scale-up request (stage=requested) or to running",
            ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self.gangs = Gauge("gangscale_gangs", "Gangs by provisioning state", ["state"], registry=r)
        self.feasible = Gauge("gangscale_gang_feasible_members", "Members the last plan could place, per gang",
                              ["namespace", "gang"], registry=r)
        self.min_count = Gauge("gangscale_gang_min_count", "minCount per gang", ["namespace", "gang"], registry=r)
        self.scale_ups = Counter("gangscale_scale_ups_total", "Nodes requested per node group", ["node_group"],
                                 registry=r)
        self.scale_up_failures = Counter("gangscale_scale_up_failures_total",
                                         "Failed scale-ups and launches per node group and error kind",
                                         ["node_group", "kind"], registry=r)
        self.released = Counter("gangscale_capacity_released_total", "Nodes given back (deadline, cancel, empty)",
                                ["node_group", "why"], registry=r)
        self.plan_seconds = Histogram("gangscale_plan_duration_seconds", "Wall time of one plan",
                                      buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        self.solver_gap = Gauge("gangscale_solver_gap", "Relative gap of the last plan to its proven bound",
                                registry=r)
        self.dollars = Gauge("gangscale_requested_dollars_per_hour",
                             "Hourly price of the nodes requested and not yet given back", registry=r)
        self.orphans_terminated = Counter("gangscale_orphan_instances_terminated_total",
                                          "Instances launched outside any group and claimed by no record, "
                                          "terminated by the janitor", ["node_group"], registry=r)
        self.gates_lifted = Counter("gangscale_gates_lifted_total",
                                    "Pods whose gangscale.io/capacity scheduling gate was removed, by why "
                                    "(capacity-ready: gate mode released the gang; not-held: gate mode is off for it)",
                                    ["why"], registry=r)
        self.leader = Gauge("gangscale_leader", "1 while this replica holds the lease", registry=r)
        self.reconciles = Counter("gangscale_reconciles_total", "Reconcile passes by result", ["result"],
                                  registry=r)
        self.last_reconcile = Gauge("gangscale_last_reconcile_timestamp_seconds",
                                    "When the loop last finished a pass", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class HealthServer:
    """/metrics, /healthz (the loop is alive) and /readyz (the cache has synced) on one address; `metrics` None:
    the probes only, `probes` False: /metrics only (controller-runtime's split of `--metrics-bind-address` and
    `--health-probe-bind-address`, pkg/manager/manager.go), so /metrics can listen on loopback alone."""

    def __init__(self, address: str, metrics: Metrics | None, alive: Callable[[], bool], ready: Callable[[], bool],
                 probes: bool = True) -> None:
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

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), Handler)
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="health", daemon=True)

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


def observe_pass(m: Metrics, plan: Plan, records: Iterable[Record], dollars_per_hour: float) -> None:
    """The solver's time and gap, gangs per state, and what is on its way, after each pass."""
    m.plan_seconds.observe(plan.solver.seconds)
    m.solver_gap.set(plan.solver.gap)
    states = Tally(r.state for r in records)
    for s in REPORTED:
        m.gangs.labels(s.value).set(states.get(s, 0))
    m.dollars.set(dollars_per_hour)
