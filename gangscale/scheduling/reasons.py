"""Why a gang did not start, worded from a finished run's final state, and the run's result.

Invariant: reasons only read the cluster, the engine's profiles and the gangs; they are worded on
first read (`GangOutcome.reason`), after the run's state has stopped changing, so wording one never
changes another or the placement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..model import Gang, Pod
from ..resources import CPU, GPU
from .cluster import Cluster, NodePods, holds_none
from .engine import Engine
from .outcome import MODE_GROUP, GangOutcome, SimResult, gang_mode
from .scores import is_scalar


def _shape(pod: Pod) -> str:
    scalars = [
        (r, v) for r, v in sorted(pod.requests.items()) if is_scalar(r) and v and r != "pods"
    ]
    if scalars:
        r, v = scalars[0]
        return f"{v}-GPU" if r == GPU else f"{v} {r}"
    return f"{pod.requests.get(CPU, 0)}m-cpu"


def _groups_of(c: Cluster, idx: Iterable[int]) -> str:
    names = sorted({c.nodes[j].node_group or c.nodes[j].name for j in idx})
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def why_not_started(
    c: Cluster,
    eng: Engine,
    gangs: Sequence[Gang],
    gi: int,
    pod: Pod,
    placed: int,
    need: int,
    empty: set[int],
    owner_on: Sequence[Sequence[int]],
) -> str:
    """Why gang `gi` did not start; `owner_on[j]`: the gang index of each pod on node j (-1: not committed)."""
    g = gangs[gi]
    prof = eng.profile(pod)
    req = c.vec(pod)
    compat = c.compat(pod.placement, prof)
    big = (c.alloc[:, req > 0] >= req[req > 0]).all(axis=1)
    if not compat.any():
        return f"no node passes the scheduler's filters for pod {pod.key} (nodeSelector, affinity, taints)"
    cand = np.flatnonzero(compat & big)
    if len(cand) == 0:
        return f"no node the pod may use has the allocatable pod {pod.key} requests"
    takers: Counter[int] = Counter()
    for j in cand.tolist():
        for t in owner_on[j]:
            if t >= 0 and t != gi:
                takers[t] += 1
    have = (
        f"only {placed} of {need} members needed fit" if g.policy == "gang" else "it does not fit"
    )
    if not takers:
        return f"{have}: the {len(cand)} nodes ({_groups_of(c, cand)}) it fits on are full"
    t, _ = takers.most_common(1)[0]
    return f"{have}: {_taken_by(c, eng, gangs, gi, t, cand.tolist(), empty, owner_on)}"


def _taken_by(
    c: Cluster,
    eng: Engine,
    gangs: Sequence[Gang],
    gi: int,
    t: int,
    cand: list[int],
    empty: set[int],
    owner_on: Sequence[Sequence[int]],
) -> str:
    """How gang `t`, the one holding most of the nodes gang `gi` fits on (`cand`), came to take them: its pods
    went there while new nodes they fit stayed empty (the score's choice), or it came first in the queue."""
    g, tg = gangs[gi], gangs[t]
    tpod = next(p for j in cand for p, o in zip(c.pods_on[j], owner_on[j], strict=True) if o == t)
    tprof = eng.profile(tpod)
    tok = c.compat(tpod.placement, tprof) & c.fits(c.vec(tpod))
    spare = [j for j in empty if tok[j]]
    if spare:
        res = next(
            (r for r, v in sorted(tpod.requests.items()) if is_scalar(r) and v and r != "pods"),
            None,
        )
        hint = ""
        if tprof.strategy == "LeastAllocated":
            hint = (
                f"; MostAllocated with a {'GPU' if res == GPU else res} weight avoids it"
                if res
                else "; MostAllocated avoids it"
            )
        return (
            f"the scheduler would place {tg.namespace}'s {_shape(tpod)} pods ({tg.name}) on the "
            f"{_groups_of(c, cand)} nodes this gang needs, while {len(spare)} "
            f"{_groups_of(c, spare)} node(s) they fit stay empty{hint}"
        )
    older = tg.created and g.created and tg.created < g.created
    who = (
        "higher-priority"
        if tg.scheduler_priority > g.scheduler_priority
        else "older"
        if older
        else "earlier-queued"
    )
    return f"{who} gang {tg.key} takes this capacity first ({_groups_of(c, cand)})"


def sim_result(
    c: Cluster,
    eng: Engine,
    gangs: Sequence[Gang],
    where: dict[str, int],
    started: set[int],
    failed: dict[int, Pod],
    skipped: dict[int, str],
    committed: list[int],
    need: Callable[[int], int],
) -> SimResult:
    """The run's result: where each committed pod went, each gang's outcome (its reason worded on first read),
    the arriving nodes left empty, and the profiles used."""
    empty = {j for j, n in enumerate(c.nodes) if n.kind != "existing" and holds_none(c, j)}
    # built on the first reason asked for; the run's state no longer changes
    owners: list[list[list[int]]] = []

    def why(gi: int, pod: Pod) -> Callable[[], str]:
        def word() -> str:
            if not owners:
                owner = {p.key: i for i, g in enumerate(gangs) for p in g.pending if p.key in where}
                owners.append([[owner.get(p.key, -1) for p in pods] for pods in c.pods_on])
            why = why_not_started(c, eng, gangs, gi, pod, committed[gi], need(gi), empty, owners[0])
            if gangs[gi].topology_keys and gang_mode(gangs[gi]) == MODE_GROUP:
                keys = "/".join(gangs[gi].topology_keys)
                why = (
                    f"no single {keys} domain holds {need(gi)} members "
                    f"(the scheduler places it in one: KEP-5732); {why}"
                )
            return why

        return word

    outcomes = {}
    for gi, g in enumerate(gangs):
        if gi in skipped:
            outcomes[g.key] = GangOutcome(g.key, False, 0, need(gi), skipped[gi])
            continue
        ok = gi in started
        reason: str | Callable[[], str] = "" if ok else why(gi, failed.get(gi) or g.pending[0])
        outcomes[g.key] = GangOutcome(g.key, ok, committed[gi], need(gi), reason)
    return SimResult(
        placement={k: c.nodes[j].name for k, j in where.items()},
        outcomes=outcomes,
        empty_nodes=[c.nodes[j].name for j in sorted(empty)],
        node_pods=NodePods(c),
        profiles=[p.describe() for p in eng.used_profiles.values()],
    )
