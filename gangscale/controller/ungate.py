"""`gangscale ungate`: lift every `gangscale.io/capacity` scheduling gate, so no pod is left waiting for a
gangscale that is gone (the Helm chart's pre-delete hook runs it; docs/controller.md "Uninstall").

Each pod gets the one JSON patch gate mode itself uses to drop the gate (`gates.remove_gate_patch`: a `test`
of the entry, then its `remove`). KEP-3521 (Pod Scheduling Readiness) lets a gate be removed from a pod's
`spec.schedulingGates` at any time and never added, so this is the one pod write needed; any other gate
(Kueue's, a user's) stays. A patch that fails its `test` (the gates changed since the list) is built again
from a fresh read once; a pod deleted meanwhile is done. Nothing else about the pod is changed: a pod is not
narrowed to a node, since no plan stands behind it any more.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..ingest import CAPACITY_GATE
from ..kube.client import KubeClient
from ..kube.errors import KubeError
from ..kube.lister import list_all
from ..kube.podgates import PodGateLifter
from ..kube.refs import PODS
from ..loader import InputError
from .gates import remove_gate_patch

EXIT_SOME_FAILED = 1
MUTATING_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@dataclass(slots=True)
class UngateReport:
    """Pods (`namespace/name`) whose gate was lifted (or would be, in a dry run), and the ones that failed, with why."""

    lifted: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    # why the fence stopped the lift before every pod was done (None: it was not)
    stopped: str | None = None


Fence = Callable[
    [], "str | None"
]  # None: go on; a sentence: stop before the next pod write, saying why


def gate_names(pod: dict[str, Any]) -> list[str]:
    """The names in the pod's spec.schedulingGates (a malformed entry is skipped)."""
    spec = pod.get("spec")
    gates = spec.get("schedulingGates") if isinstance(spec, dict) else None
    return [
        g["name"] for g in gates or () if isinstance(g, dict) and isinstance(g.get("name"), str)
    ]


def gated(
    pods: Iterable[dict[str, Any]], gate: str = CAPACITY_GATE
) -> list[tuple[str, str, list[str]]]:
    """(namespace, name, gate names) of every pod carrying `gate`, sorted."""
    out = []
    for p in pods:
        meta = p.get("metadata")
        names = gate_names(p)
        if gate in names and isinstance(meta, dict) and meta.get("name"):
            out.append((str(meta.get("namespace") or ""), str(meta["name"]), names))
    return sorted(out)


def ungate(
    client: KubeClient,
    namespace: str | None = None,
    *,
    dry_run: bool = False,
    gate: str = CAPACITY_GATE,
    fence: Fence | None = None,
    batch: int = 10,
) -> UngateReport:
    """Remove `gate` from every pod of `namespace` (None: all namespaces) that carries it; never raises for one
    pod (its failure is reported), a failed list raises KubeError.

    `fence`, when given, is asked before every `batch` pod writes (and before the first): a sentence stops the
    lift there, in `report.stopped`, so at most `batch` writes follow a change the fence would have seen.
    """
    lifter = PodGateLifter(client)
    report = UngateReport()
    for i, (ns, name, names) in enumerate(gated(list_all(client, PODS, namespace).items, gate)):
        if fence is not None and i % max(1, batch) == 0 and (why := fence()) is not None:
            report.stopped = why
            break
        key = f"{ns}/{name}"
        if dry_run:
            report.lifted.append(key)
            continue
        err = lifter.remove(ns, name, remove_gate_patch(names, gate))
        if err is not None:  # the gates changed since the list: once more from a fresh read
            err = _retry(client, lifter, ns, name, gate)
        if err is None:
            report.lifted.append(key)
        else:
            report.failed[key] = err
    return report


def _retry(client: KubeClient, lifter: PodGateLifter, ns: str, name: str, gate: str) -> str | None:
    try:
        names = gate_names(client.get(PODS.path(ns, name)))
    except KubeError as exc:
        return None if exc.status == 404 else str(exc)
    return lifter.remove(ns, name, remove_gate_patch(names, gate)) if gate in names else None


def stop_gating(client: KubeClient, name: str | None, dry_run: bool) -> str | None:
    """Delete the MutatingWebhookConfiguration `name` (None: nothing to do), so the webhook gates no pod after the
    lift. None when done or already gone, else why not (the lift goes on either way)."""
    if not name:
        return None
    try:
        if not dry_run:
            client.delete(f"{MUTATING_WEBHOOKS}/{name}")
    except KubeError as exc:
        return (
            None
            if exc.status == 404
            else f"cannot delete MutatingWebhookConfiguration {name}: {exc}"
        )
    print(f"{'would delete' if dry_run else 'deleted'} MutatingWebhookConfiguration {name}")
    return None


def cmd_ungate(args: argparse.Namespace) -> int:
    """Lift the gates; print one line per pod and a summary. Exit 1 when a pod could not be ungated."""
    from ..kube.client import connect
    from ..kube.errors import KubeConfigError

    try:
        client = connect(args.kubeconfig, args.context, timeout=args.request_timeout)
    except KubeConfigError as exc:
        raise InputError(str(exc)) from None
    where = f"namespace {args.namespace}" if args.namespace else "all namespaces"
    try:
        with client:
            still_gating = stop_gating(
                client, getattr(args, "delete_mutating_webhook", None), args.dry_run
            )
            report = ungate(client, args.namespace, dry_run=args.dry_run)
    except KubeError as exc:
        raise InputError(f"cannot list the pods of {where}: {exc}") from None
    verb = "would lift" if args.dry_run else "lifted"
    for key in report.lifted:
        print(f"{verb} {CAPACITY_GATE} from pod {key}")
    for key, err in report.failed.items():
        print(f"gangscale: cannot lift {CAPACITY_GATE} from pod {key}: {err}", file=sys.stderr)
    print(
        f"{len(report.lifted)} pod(s) {verb} in {where}"
        + (f", {len(report.failed)} failed" if report.failed else "")
    )
    if still_gating:
        print(f"gangscale: {still_gating}", file=sys.stderr)
    return EXIT_SOME_FAILED if report.failed or still_gating else 0
