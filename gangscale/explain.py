"""Human reasons: why a pod fits no node group, in the words an operator checks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .fit import HARD_EFFECTS, labels_match, tolerates
from .model import NodeGroup, Pod
from .resources import format_amount
from .rfc3339 import format_time

AT_MAX_SIZE = "already at maxSize"
BACKED_OFF = "backed off until"


def group_misfit(pod: Pod, group: NodeGroup, topology_keys: tuple[str, ...] = ()) -> str | None:
    """Why `pod` cannot run on a new node of `group` (None: it can)."""
    if not labels_match(pod.placement, group.labels):
        return "nodeSelector/affinity does not match its labels"
    for taint in group.taints:
        if taint.effect in HARD_EFFECTS and not any(
            tolerates(t, taint) for t in pod.placement.tolerations
        ):
            return f"taint {taint.key}={taint.value}:{taint.effect} not tolerated"
    for key in topology_keys:
        if key not in group.labels:
            return f"no {key} label for the topology constraint"
    for name, amount in sorted(pod.requests.items()):
        have = group.allocatable.get(name, 0)
        if amount > have:
            return f"needs {format_amount(name, amount)} {name}, a node has {format_amount(name, have)}"
    if group.headroom <= 0 and group.backed_off_until:
        return (
            f"{BACKED_OFF} {format_time(group.backed_off_until)}: "
            "it recently failed to deliver nodes (launchFailureBackoffSeconds)"
        )
    if group.headroom <= 0:
        return f"{AT_MAX_SIZE} {group.max_size}"
    return None


def limits_reached(
    pods: Iterable[Pod],
    groups: list[NodeGroup],
    added: Mapping[str, int],
    topology_keys: tuple[str, ...] = (),
    limit: int = 4,
) -> str:
    """The node groups a new node of which would hold one of `pods` but that may add no more nodes: at maxSize
    before the plan, or once the plan adds `added` (per group) to them, or backed off by the controller after a failed
    launch (`NodeGroup.backed_off_until`: its headroom is held at zero); "" when there is none."""
    seen: set[tuple] = set()
    full: dict[str, str] = {}
    for pod in pods:
        key = (pod.placement, tuple(sorted(pod.requests.items())))
        if key in seen:
            continue
        seen.add(key)
        for g in groups:
            if g.name in full:
                continue
            why = group_misfit(pod, g, topology_keys)
            more = added.get(g.name, 0)
            if why is not None and why.startswith(BACKED_OFF):
                full[g.name] = f"node group {g.name} is {why}"
            elif why is not None and why.startswith(AT_MAX_SIZE):
                full[g.name] = (
                    f"node group {g.name} is at maxSize {g.max_size} ({g.current_size} nodes)"
                )
            elif why is None and more >= g.headroom:
                full[g.name] = (
                    f"node group {g.name} reaches maxSize {g.max_size} with the {more} node"
                    f"{'s' if more != 1 else ''} this plan adds ({g.current_size} before)"
                )
    shown = [full[n] for n in sorted(full)][:limit]
    more_text = f"; and {len(full) - limit} more groups" if len(full) > limit else ""
    return "; ".join(shown) + more_text


def pod_misfit(
    pod: Pod, groups: list[NodeGroup], topology_keys: tuple[str, ...] = (), limit: int = 4
) -> str:
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
