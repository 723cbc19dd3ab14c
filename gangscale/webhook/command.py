"""`gangscale webhook` flags and start-up: config + catalog + served gang APIs -> Policy -> HTTPS server.

The parser half imports nothing heavy (cli.py builds every parser at start-up);
`cmd_webhook` imports the rest when the command runs.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

DEFAULT_LISTEN = "0.0.0.0:8443"
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"
# server.REQUEST_DEADLINE_SECONDS (not imported: the parser half stays light)
DEFAULT_REQUEST_DEADLINE = 10.0

log = logging.getLogger("gangscale.webhook")


def _deadline(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--request-deadline must be a number of seconds, not {text!r}"
        ) from None
    if not 1 <= value <= 300:
        raise argparse.ArgumentTypeError(f"--request-deadline must be 1-300 seconds, not {text}")
    return value


def add_webhook_command(sub: Any) -> None:
    w = sub.add_parser(
        "webhook", help="serve the admission webhooks (validating + mutating) over HTTPS"
    )
    w.add_argument(
        "--config",
        metavar="FILE",
        help="controller config (config/deploy/config.yaml): admission rules, "
        "namespace caps, nodegroups",
    )
    w.add_argument(
        "--nodegroups", metavar="FILE", help="node-group catalog (default: the config's nodegroups)"
    )
    w.add_argument(
        "--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help=f"default {DEFAULT_LISTEN}"
    )
    w.add_argument(
        "--cert-dir",
        default=DEFAULT_CERT_DIR,
        metavar="DIR",
        help="tls.crt and tls.key (a cert-manager Secret mount); re-read when they change",
    )
    w.add_argument(
        "--self-signed",
        action="store_true",
        help="no cert-manager: make a CA and serving pair in --cert-dir and patch the webhook "
        "configurations' caBundle (docs/webhook.md)",
    )
    w.add_argument(
        "--service",
        default="gangscale-webhook.gangscale-system",
        metavar="NAME.NAMESPACE",
        help="the Service the API server calls (the certificate's DNS names)",
    )
    w.add_argument(
        "--webhook-configuration",
        default="gangscale",
        metavar="NAME",
        help="Mutating/ValidatingWebhookConfiguration whose caBundle --self-signed patches",
    )
    add_policy_flags(w)
    from ..kube.flags import add_kube_flags

    add_kube_flags(w)


def add_policy_flags(w: argparse.ArgumentParser) -> None:
    """The flags of what the webhook decides with: discovery, deadlines, logs, lookups, fail-open."""
    w.add_argument(
        "--no-discovery",
        action="store_true",
        help="do not ask the API server which gang APIs it serves (the gangFeatureOff rule then "
        "uses admission.servedGangAPIs, or stays silent)",
    )
    w.add_argument(
        "--request-deadline",
        type=_deadline,
        default=DEFAULT_REQUEST_DEADLINE,
        metavar="SECONDS",
        help="a TLS handshake, or a request from its first byte to its last, must arrive whole within "
        f"this (default {DEFAULT_REQUEST_DEADLINE:g}); the connection is closed otherwise",
    )
    w.add_argument(
        "--log-level", default="info", help="debug, info, warning or error (default info)"
    )
    w.add_argument(
        "--no-group-lookup",
        action="store_true",
        help="do not read a gang pod's PodGroup/Workload for its minCount (a native gang is then "
        "judged one pod at a time)",
    )
    w.add_argument(
        "--fail-open-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="lift every gangscale.io/capacity gate once the controller's lease has been stale this long "
        "(default: the config's gateFailOpenSeconds; 0: never; docs/webhook.md, Fail-open)",
    )


def served_gang_apis(
    args: argparse.Namespace, configured: list[str] | None
) -> frozenset[str] | None:
    """The gang apiVersions the server serves: configured, else discovered, else unknown (None)."""
    if configured is not None:
        return frozenset(configured)
    if args.no_discovery:
        return None
    from ..kube.commands import _connect
    from ..kube.discovery import discover
    from ..kube.errors import KubeConfigError, KubeError

    try:
        with _connect(args) as client:
            info = discover(client)
    except (KubeError, KubeConfigError) as exc:
        log.warning(
            "gang API discovery failed: gangFeatureOff stays silent", extra={"error": str(exc)}
        )
        return None
    return frozenset(f"{g}/{v}" for g, versions in info.groups.items() for v in versions)


def group_lookup(args: argparse.Namespace, served: frozenset[str] | None) -> Any:
    """Reads a pod's group through the API server (lookup.py), or None: no catalog, turned off, no kubeconfig."""
    if args.no_group_lookup:
        return None
    from ..kube.commands import _connect
    from ..kube.errors import KubeError
    from .lookup import kube_lookup

    try:
        client = _connect(args)  # open for the server's life: one connection pool for every lookup
    except KubeError as exc:
        log.warning(
            "no API server for group lookups: gang pods are judged one at a time",
            extra={"error": str(exc)},
        )
        return None
    return kube_lookup(client, served)


def build_policy(args: argparse.Namespace) -> Any:
    from ..catalog import load_catalog
    from ..controller.config import load_config
    from .discovered import cloud_groups
    from .rules import Policy

    cfg = load_config(args.config)
    catalog = args.nodegroups or cfg.nodegroups
    groups = tuple(load_catalog(catalog)[0]) if catalog else ()
    served = served_gang_apis(args, cfg.admission.served_gang_apis)
    discovered = None if groups else cloud_groups(cfg)  # no catalog: the groups the cloud reports
    return Policy(
        cfg,
        groups,
        served,
        group_lookup(args, served) if groups or discovered else None,
        discovered=discovered.current if discovered is not None else None,
    )


def cmd_webhook(args: argparse.Namespace) -> int:
    import os

    from ..controller.logs import setup_logging
    from .server import serve

    setup_logging(args.log_level)
    policy = build_policy(args)
    cert, key = os.path.join(args.cert_dir, "tls.crt"), os.path.join(args.cert_dir, "tls.key")
    if args.self_signed:
        from ..kube.errors import KubeConfigError, KubeError
        from .certs import bootstrap

        try:
            bootstrap(args, cert, key, policy.config.admission)
        except (
            KubeError,
            KubeConfigError,
        ) as exc:  # e.g. 403: the self-signed RBAC component is not installed
            log.error(
                "self-signed bootstrap failed: caBundle not patched", extra={"error": str(exc)}
            )
            return 1
    start_fail_open(args, policy.config)
    return serve(policy, cert, key, args.listen, args.request_deadline)


def start_fail_open(args: argparse.Namespace, cfg: Any) -> Any:
    """The fail-open loop (failopen.py) on its own thread, its metrics in the server's registry; None when gate
    mode is off, the time is 0, or there is no API server."""
    after = cfg.gate_fail_open_seconds if args.fail_open_after is None else args.fail_open_after
    if cfg.gate_mode == "off" or after <= 0:
        return None
    from ..kube.commands import _connect
    from ..kube.errors import KubeConfigError, KubeError
    from .failopen import FailOpen
    from .metrics import PROCESS_COLLECTORS

    try:
        client = _connect(args)  # open for the process's life
    except (KubeError, KubeConfigError) as exc:
        log.error("no API server: gates do not fail open", extra={"error": str(exc)})
        return None
    loop = FailOpen(client, cfg.state_namespace, cfg.lease_name, after)
    PROCESS_COLLECTORS.extend(loop.metrics.collectors())  # before serve() builds the registry
    return loop.start()
