"""Human reasons: why a pod fits no node group, in the words an operator checks."""

from __future__ import annotations

from datetime import datetime, timezone

from .fit import HARD_EFFECTS, labels_match, tolerates
from .model import NodeGroup, Pod
from .resources import format_amount


def group_misfit(pod: Pod, group: NodeGroup, topology_keys: tuple[str, ...] = ()) -> str | None:
    """Why `pod` cannot run on a new node of `group` (None: it can)."""
    if not labels_match(pod.placement, group.labels):
        return "nodeSelector/affinity does not match its labels"
    for taint in group.taints:
        if taint.effect in HARD_EFFECTS and not any(tolerates(t, taint) for t in pod.placement.tolerations):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    for key in topology_keys:
        if key not in group.labels:
            return f"no {key} label for the topology constraint"
    for name, amount in sorted(pod.requests.items()):
        have = group.allocatable.get(name, 0)
        if amount > have:
            return f"needs {format_amount(name, amount)} {name}, a node has {format_amount(name, have)}"
    if group.headroom <= 0 and group.backed_off_until:
        until = datetime.fromtimestamp(group.backed_off_until, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"backed off until {until}: it recently failed to deliver nodes (launchFailureBackoffSeconds)"
    if group.headroom <= 0:
        return f"already at maxSize {group.max_size}"
    return None


def pod_misfit(pod: Pod, groups: list[NodeGroup], topology_keys: tuple[str, ...] = (), limit: int = 4) -> str:
    reasons = []
    for g in groups:
        why = group_misfit(pod, g, topology_keys)
        if why:
            reasons.append(f"{g.name}: {why}")
    if not groups:
        return f"pod {pod.key} fits no existing node and the catalog has no node groups"
    shown = "; ".join(reasons[:limit])
    more = f"; and {len(reasons) - limit} more" if len(reasons) > limit else ""
    return f"pod {pod.key} fits no existing node and no node group ({shown}{more})"
