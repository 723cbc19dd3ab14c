"""The running controller: watch, batch, plan, act; renew the lease; serve health and metrics.

A change to a pod, group or node starts a short batching window, so a gang
created pod by pod is planned once, about a second after its last pod
appears; a pass also runs when one of the controller's rules next falls due
(each rule's own wake-up, wakes.py: a deadline, a grace, a backoff: `Reconciler.next_due`), so nothing waits for
the next event; a periodic resync catches anything a watch missed. The lease is
renewed on its own thread (`LeaseKeeper`), so a long pass never lets it lapse;
a pass that finds itself deposed (`LostLeadership`, raised by the fence before
a mutation) is abandoned without saving anything.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from ..kube.client import KubeClient, connect
from ..kube.discovery import choose_gang_apis, discover
from ..kube.errors import KubeError
from ..kube.informer import ClusterCache
from ..kube.live import daemonsets_unread
from ..kube.nodetaints import NodeTainter
from ..kube.podgates import PodGateLifter
from ..kube.podgroupstatus import ConditionWriter
from ..kube.refs import DAEMONSETS, NAMESPACES, ResourceRef
from ..loader import InputError
from ..providers import open_provider
from .cloudcalls import CountedProvider
from .config import ControllerConfig, load_config
from .deps import Deps
from .events import EventSink
from .leader import LeaderElector, LeaseKeeper, LostLeadership
from .logs import setup_logging
from .metrics import HealthServer, Metrics
from .published import StatusPublisher
from .reconciler import Reconciler
from .records import StateConflict, StateStore

log = logging.getLogger("gangscale.controller")


class Controller:
    def __init__(
        self,
        cfg: ControllerConfig,
        client: KubeClient,
        provider,
        identity: str,
        gang_refs: list[ResourceRef],
    ) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        self.elector = LeaderElector(
            client,
            cfg.state_namespace,
            cfg.lease_name,
            identity,
            duration=cfg.lease_duration_seconds,
        )
        provider = CountedProvider(provider, self.metrics.cloud_errors)
        self.reconciler = Reconciler(cfg, provider, self._deps(client, identity))
        # gate mode reads the namespaces' gangscale.io/gate-mode label (opt-in, and opt-out under "all")
        refs = list(gang_refs) + ([NAMESPACES] if cfg.gate_mode != "off" else [])
        self.cache = ClusterCache(
            client,
            refs,
            namespace=cfg.watch_namespace,
            on_change=self._changed,
            optional_refs=(DAEMONSETS,),
        )
        self._lock = threading.Lock()
        self._first_change = 0.0
        self._last_change = 0.0
        self._wake = threading.Event()
        self.last_pass = 0.0
        # when the last pass's rules next fall due (None: none)
        self.next_timer: float | None = None
        self.heartbeat = time.time()
        self.term = 0  # the leadership term whose records are loaded (0: none; -1: reload them)
        self._load_again = 0.0  # a failed load is tried again from then on

    def _deps(self, client: KubeClient, identity: str) -> Deps:
        """The live controller's writers, each fenced by the leader elector."""
        cfg, fence = self.cfg, self.elector.check
        return Deps(
            store=StateStore(client, cfg.state_namespace, cfg.state_configmap, fence=fence),
            events=EventSink(
                client, cfg.event_refresh_seconds, cfg.pod_events_per_gang, fence=fence
            ),
            metrics=self.metrics,
            identity=identity,
            fence=fence,
            pod_gates=PodGateLifter(client),
            node_taints=NodeTainter(client),
            status=StatusPublisher(client, cfg.state_namespace),
            conditions=ConditionWriter(client) if cfg.podgroup_conditions else None,
        )

    def _changed(self, ref: ResourceRef, kind: str, obj: dict[str, Any] | None) -> None:
        now = time.time()
        with self._lock:
            if not self._first_change:
                self._first_change = now
            self._last_change = now
        self._wake.set()

    def _due(self, now: float) -> bool:
        with self._lock:
            first, last = self._first_change, self._last_change
        if first and (
            now - last >= self.cfg.batch_window_seconds
            or now - first >= self.cfg.max_batch_delay_seconds
        ):
            return True
        if self.next_timer is not None and now >= self.next_timer:
            return True
        return self.reconciler.replan_soon or now - self.last_pass >= self.cfg.resync_seconds

    def run(self, stop: threading.Event) -> None:
        servers = self._servers()
        log.info(
            "starting",
            extra={
                "mode": self.cfg.mode,
                "metrics_port": servers[0].port,
                "health_port": servers[-1].port,
                "identity": self.elector.identity,
            },
        )
        self.cache.start()
        keeper = LeaseKeeper(self.elector, self.cfg.lease_renew_seconds).start()
        try:
            while not stop.is_set():
                now = time.time()
                self.heartbeat = now
                leader = self.elector.is_leader
                self.metrics.leader.set(1 if leader else 0)
                if leader and self.elector.terms != self.term and now >= self._load_again:
                    self._load(now)  # the previous leader's records, from the cluster
                if (
                    leader
                    and self.term == self.elector.terms
                    and self.cache.synced
                    and self._due(now)
                ):
                    with self._lock:
                        self._first_change = self._last_change = 0.0
                    self._pass()
                self._wake.wait(0.1)
                self._wake.clear()
        finally:
            keeper.stop()
            self.cache.stop()
            self.elector.release()
            for server in servers:
                server.stop()
            log.info("stopped")

    def _servers(self) -> list[HealthServer]:
        """/metrics, /healthz and /readyz on metricsAddress; with healthAddress the probes go there (metrics first)."""

        def alive() -> bool:
            return time.time() - self.heartbeat < max(60.0, 4 * self.cfg.resync_seconds)

        def ready() -> bool:
            return self.cache.synced

        split = self.cfg.health_address is not None
        servers = [
            HealthServer(
                self.cfg.metrics_address, self.metrics, alive, ready, probes=not split
            ).start()
        ]
        if self.cfg.health_address is not None:
            servers.append(HealthServer(self.cfg.health_address, None, alive, ready).start())
        return servers

    def _load(self, now: float) -> None:
        """Read the records (migrating an older layout); no pass runs until they are read, so nothing is bought
        twice for want of them. A failure is tried again a second later."""
        terms = self.elector.terms
        try:
            self.reconciler.load_state()
        except (LostLeadership, KubeError) as exc:
            log.warning(
                "cannot read the records: no pass until they are read", extra={"error": str(exc)}
            )
            self._load_again = now + 1.0
            return
        self.term = terms
        self.last_pass = 0.0

    def _pass(self) -> None:
        started = time.time()
        try:
            unread = [daemonsets_unread(why) for why in self.cache.unreadable().values()]
            self.reconciler.reconcile(self.cache.snapshot(), leader=True, warnings=unread)
            self.metrics.reconciles.labels("ok").inc()
        except (
            StateConflict
        ) as exc:  # another writer changed a record: read them all again before acting
            log.warning(
                "the records changed under this leader: reading them again",
                extra={"error": str(exc)},
            )
            self.metrics.reconciles.labels("error").inc()
            self.term = -1
        except LostLeadership as exc:
            log.warning("pass abandoned: leadership lost", extra={"error": str(exc)})
            self.metrics.reconciles.labels("deposed").inc()
        except Exception:  # noqa: BLE001 - one bad pass must not stop the controller
            log.exception("reconcile failed")
            self.metrics.reconciles.labels("error").inc()
        self.last_pass = time.time()
        self.next_timer = self.reconciler.next_due(started)
        self.metrics.last_reconcile.set(self.last_pass)


def cmd_run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    cfg = load_config(args.config)
    overrides = {
        k: v
        for k, v in {
            "mode": args.mode,
            "provider": args.provider,
            "nodegroups": args.nodegroups,
            "region": args.region,
            "cluster_name": args.cluster_name,
            "aws_endpoint_url": args.aws_endpoint_url,
            "metrics_address": args.metrics_address,
            "health_address": getattr(args, "health_address", None),
            "node_group_auto_discovery": getattr(args, "node_group_auto_discovery", None),
        }.items()
        if v is not None
    }
    cfg = cfg.model_copy(update=overrides)
    identity = (
        args.identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    )
    client = connect(args.kubeconfig, args.context)
    try:
        provider, warnings = open_provider(
            cfg.provider,
            cluster_name=cfg.cluster_name,
            region=cfg.region,
            endpoint_url=cfg.aws_endpoint_url,
            catalog=cfg.nodegroups,
            simulated_state=args.simulated_state,
            auto_discovery=tuple(cfg.node_group_auto_discovery),
        )
    except ValueError as exc:  # a bad catalog or --simulated-state: one line, exit 2
        raise InputError(str(exc)) from None
    for w in warnings:
        log.warning(w)
    apis = choose_gang_apis(discover(client))
    log.info(
        "gang APIs",
        extra={
            "read": [r.label for r in apis.refs],
            "unread": apis.unread,
            "inputs": [r.label for r in apis.inputs],
        },
    )
    controller = Controller(
        cfg, client, provider, identity, [*apis.refs, *apis.inputs]
    )  # DRA, Kueue too
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    controller.run(stop)
    provider.close()
    return 0
