"""What kube-scheduler would do with a set of nodes and pending gangs.

`simulate(nodes, gangs, ...)` pops queue entries in PrioritySort order (queue.py), runs the filters
(NodeUnschedulable, NodeResourcesFit incl. extended resources and the pods slot, NodeAffinity /
nodeSelector, TaintToleration) and the scores (scores.py) for one pod at a time, takes the best
node (ties broken uniformly at random with the seeded RNG: schedule_one.go `selectHost` samples a
reservoir, which is the same distribution; one draw per pod is cheaper), and applies each gang
API's admission as its scheduler does:

- 1.35 Workload (`GangScheduling`, KEP-4671): pods leave the queue one by one in PrioritySort
  order; each is assumed on its node and waits at Permit until minCount members are assumed; a
  gang that does not reach quorum holds its capacity until the Permit timeout, then all its assumed
  pods are rolled back (modelled as the end of a queue pass).
- scheduler-plugins coscheduling: the same Permit wait with minMember, but the queue keeps a
  group's pods together (coscheduling `Less`).
- 1.36+ PodGroup (v1alpha2 / v1beta1) and Volcano jobs: the whole group in one cycle, each member
  placed greedily; if minCount members fit they are all bound (elastic gangs take every member that
  fits), otherwise none is and no capacity is held. With a topology constraint, one cycle per domain
  (KEP-5732), and the best-scored domain where minCount fit is kept (placement.py).
- basic groups and lone pods: every pod on its own.

Unplaced pods retry in later passes (the scheduler re-queues them when capacity frees), until a
pass binds nothing new. Not modelled: preemption, preferred affinity, inter-pod scoring, DRA;
`percentageOfNodesToScore` is modelled (upstream's adaptive default; within a placement, over its
nodes).

This module holds the queue passes and the gang admission; one pod's scheduling cycle is elsewhere:

- nodes.py, outcome.py: the nodes the model sees and what it reports (`SimNode`, `SimResult`).
- cluster.py: the run's state, nodes as integer arrays and the pods on each.
- engine.py: one seed's scheduler state (profile, rotating start, seeded tie-break).
- `schedule_one` sends each pod's cycle to reference.py, the cycle as upstream writes it (every node
  filtered and scored: score_arrays.py), or, for a pod without pod-to-pod rules on a cluster where
  no placed pod has any, to fastpath.py, the same answer from per-shape kept verdicts and scores
  (shapes.py, scorer.py).
- reasons.py: why a gang did not start.

`fast=False` sends every pod to the reference path; tests/scheduling/test_fastpath.py checks both
give identical results. `simulate_seeds` / `simulate_iter` run several seeds over nodes and gangs
built once; a run that met no tie (no random draw) is every seed's run, so the other seeds take its
result without running. Invariant: the same inputs and seed give the same result; nodes and gangs
are only read.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..model import API_COSCHEDULING, API_VOLCANO, NO_RULES, Gang, Pod
from .cluster import Cluster, columns
from .config import SchedulerConfig, default_config
from .engine import Engine, num_feasible_to_find
from .fastpath import select as fast_select
from .nodes import SimNode, arriving_node, nodes_from_views, pinned_names, planned_nodes
from .outcome import (
    MODE_GROUP,
    MODE_PERMIT,
    MODE_POD,
    GangOutcome,
    SimResult,
    gang_mode,
)
from .placement import placement_score
from .queue import COSCHEDULING, Entry, coscheduling_key, group_key, job_key, pod_key
from .reasons import sim_result
from .reference import select as reference_select
from .score_arrays import score_nodes

__all__ = [
    "MODE_GROUP",
    "MODE_PERMIT",
    "MODE_POD",
    "GangOutcome",
    "SimNode",
    "SimResult",
    "arriving_node",
    "gang_mode",
    "nodes_from_views",
    "num_feasible_to_find",
    "pinned_names",
    "planned_nodes",
    "score_nodes",
    "simulate",
    "simulate_iter",
    "simulate_seeds",
]


def schedule_one(eng: Engine, pod: Pod) -> int | None:
    """One scheduling cycle's node choice (filters, percentageOfNodesToScore, scores, selectHost), or None.

    Pods without pod-to-pod rules, on a cluster where no placed pod has any, take the fast path; the rest (and
    every pod when `eng.fast` is off: the reference the tests compare against) filter and score every node."""
    prof = eng.profile(pod)
    if (
        eng.fast
        and (pod.rules is NO_RULES or not pod.rules)
        and not (eng.c.anti_nodes or eng.c.spread_pods)
    ):
        return fast_select(eng, pod, prof)
    return reference_select(eng, pod, prof)


def _entries(gangs: Sequence[Gang], queue_sort: str) -> list[Entry]:
    """The queue in `queue_sort`'s order (queue.py): a pod per entry, or a whole group for a group cycle."""
    out = []
    for gi, g in enumerate(gangs):
        mode = gang_mode(g)
        if mode == MODE_GROUP:
            out.append(Entry(job_key(g) if g.api == API_VOLCANO else group_key(g, queue_sort), gi))
            continue
        for p in g.pending:
            if queue_sort == COSCHEDULING:
                key = coscheduling_key(p, g if g.api == API_COSCHEDULING else None)
            else:
                key = pod_key(p)
            out.append(Entry(key, gi, p))
    return sorted(out)


def _skip_reason(g: Gang) -> str | None:
    if g.invalid:
        return g.invalid
    if not g.exists:
        return f"pods point at {g.api} {g.namespace}/{g.name}, which does not exist"
    if g.policy == "gang" and len(g.pending) + g.bound < g.min_count:
        return f"{len(g.pending) + g.bound} of minCount {g.min_count} pods exist; the scheduler waits for the rest"
    return None


@dataclass(slots=True)
class _Run:
    """One simulation's working state: where committed pods are, which gangs started, first failures."""

    gangs: list[Gang]
    cluster: Cluster
    eng: Engine
    where: dict[str, int] = field(default_factory=dict)  # committed pod key -> node index
    # id() of the pods in `where` (the gangs hold them: ids stay theirs)
    placed: set[int] = field(default_factory=set)
    started: set[int] = field(default_factory=set)
    failed: dict[int, Pod] = field(default_factory=dict)
    committed: list[int] = field(default_factory=list)
    # a group entry's pods in queue order (`_queue`'s memo)
    members: dict[int, list[Pod]] = field(default_factory=dict)

    def need(self, gi: int) -> int:
        g = self.gangs[gi]
        return max(0, g.min_count - g.bound) if g.policy == "gang" else 1


def simulate(
    nodes: Sequence[SimNode],
    gangs: Sequence[Gang],
    *,
    bound: Iterable[Pod] = (),
    config: SchedulerConfig | None = None,
    seed: int = 0,
    max_passes: int = 4,
    fast: bool = True,
    stable_ties: bool = False,
) -> SimResult:
    """Place `gangs`' pending pods on `nodes` as kube-scheduler would; see the module docstring.

    `fast=False` filters and scores every node for every pod (the reference the fast path is tested against)."""
    return simulate_seeds(
        nodes,
        gangs,
        (seed,),
        bound=bound,
        config=config,
        max_passes=max_passes,
        fast=fast,
        stable_ties=stable_ties,
    )[0]


def simulate_seeds(
    nodes: Sequence[SimNode],
    gangs: Sequence[Gang],
    seeds: Sequence[int],
    *,
    bound: Iterable[Pod] = (),
    config: SchedulerConfig | None = None,
    max_passes: int = 4,
    fast: bool = True,
    stable_ties: bool = False,
) -> list[SimResult]:
    """`simulate` under each seed, in order; what depends on the nodes and gangs only is built once."""
    return list(
        simulate_iter(
            nodes,
            gangs,
            seeds,
            bound=bound,
            config=config,
            max_passes=max_passes,
            fast=fast,
            stable_ties=stable_ties,
        )
    )


def simulate_iter(
    nodes: Sequence[SimNode],
    gangs: Sequence[Gang],
    seeds: Sequence[int],
    *,
    bound: Iterable[Pod] = (),
    config: SchedulerConfig | None = None,
    max_passes: int = 4,
    fast: bool = True,
    stable_ties: bool = False,
    memo: dict | None = None,
) -> Iterator[SimResult]:
    """`simulate_seeds` one seed at a time, so a caller can stop once a seed has answered its question.

    `memo`: the caller's, for calls with the same gangs (the same objects) and the same `bound` object (observe
    mode's runs as it drops nodes): the queue is built once, and when `nodes` are some of the last call's nodes
    in the same order (the same objects, the same resource columns), the cluster is cut from the last one's
    (`Cluster.subset`) rather than built again. The same results as without it.

    The seed only breaks ties (`Engine.pick`, a topology placement's best domains): when the first seed's run met
    none, every seed makes the same choices in the same order, so the others get a copy of its result unrun."""
    config = config or default_config()
    gangs = list(gangs)
    skipped, entries, members = _queue(gangs, memo, config.queue_sort)
    cluster = _cluster_for(nodes, gangs, skipped, bound, memo)
    first: SimResult | None = None
    for i, seed in enumerate(seeds):
        if first is not None:
            yield _same_run(first)
            continue
        c = cluster if i == 0 else cluster.fresh()
        eng = Engine(c, config, seed, fast, stable_ties)
        res = _run(c, eng, gangs, skipped, entries, max_passes, members)
        if i == 0 and eng.ties == 0:
            first = res
        yield res


def _same_run(res: SimResult) -> SimResult:
    """Another seed's result of a run no seed decided: equal to `res`, its containers its own (`node_pods` is
    read-only)."""
    return SimResult(
        dict(res.placement),
        dict(res.outcomes),
        list(res.empty_nodes),
        res.node_pods,
        list(res.profiles),
    )


def _queue(
    gangs: list[Gang], memo: dict | None, queue_sort: str
) -> tuple[dict[int, str], list[Entry], dict[int, list[Pod]]]:
    """The gangs the scheduler skips (and why), the queue's entries and the group entries' pods in queue order (filled
    by the runs as they meet them: it depends on the gangs and the queue sort only), from `memo` when it holds
    these gangs under this queue sort."""
    hit = memo.get("queue") if memo is not None else None
    if (
        hit is not None
        and hit[4] == queue_sort
        and len(hit[0]) == len(gangs)
        and all(a is b for a, b in zip(hit[0], gangs, strict=True))
    ):
        return hit[1], hit[2], hit[3]
    skipped = {gi: r for gi, g in enumerate(gangs) if (r := _skip_reason(g))}
    entries = [e for e in _entries(gangs, queue_sort) if e.gang_index not in skipped]
    members: dict[int, list[Pod]] = {}
    if memo is not None:
        memo["queue"] = (tuple(gangs), skipped, entries, members, queue_sort)
    return skipped, entries, members


def _cluster_for(
    nodes: Sequence[SimNode],
    gangs: list[Gang],
    skipped: dict[int, str],
    bound: Iterable[Pod],
    memo: dict | None,
) -> Cluster:
    """The cluster over `nodes`: cut from the memo's last one when `nodes` are a subsequence of its nodes (and
    the bound pods the same object, the resource columns the same), else built."""
    hit = memo.get("cluster") if memo is not None else None
    if hit is not None and hit[0] is bound:
        last: Cluster = hit[1]
        keep = _subsequence(last.nodes, nodes)
        if keep is not None and columns(nodes, last.pod_res) == last.res:
            return last.subset(nodes, keep)
    live = [g for gi, g in enumerate(gangs) if gi not in skipped]
    cluster = Cluster(nodes, (p for g in live for p in g.pending), bound)
    if memo is not None:
        memo["cluster"] = (bound, cluster)
    return cluster


def _subsequence(whole: Sequence[SimNode], part: Sequence[SimNode]) -> list[int] | None:
    """The indices of `part`'s nodes in `whole` when `part` is `whole` with some nodes left out (the same
    objects, the same order), else None."""
    keep: list[int] = []
    j = 0
    for n in part:
        while j < len(whole) and whole[j] is not n:
            j += 1
        if j == len(whole):
            return None
        keep.append(j)
        j += 1
    return keep


def _run(
    cluster: Cluster,
    eng: Engine,
    gangs: list[Gang],
    skipped: dict[int, str],
    entries: list[Entry],
    max_passes: int,
    members: dict[int, list[Pod]],
) -> SimResult:
    """One seed's queue passes: schedule every entry, time out Permit waits, re-queue the failures."""
    run = _Run(gangs, cluster, eng, committed=[0] * len(gangs), members=members)
    for _ in range(max_passes):
        before = len(run.where)
        assumed: dict[int, list[tuple[Pod, int]]] = {}
        # re-queued in the order they failed (the queue timestamp is the re-queue time)
        retry: list[Entry] = []
        for e in entries:
            _schedule_entry(run, e, assumed, retry)
        rolled = _permit_timeout(run, assumed, entries, retry)
        if len(run.where) == before and not rolled:
            break
        entries = _requeue(run, retry)
    return sim_result(
        cluster, eng, gangs, run.where, run.started, run.failed, skipped, run.committed, run.need
    )


def _schedule_entry(
    run: _Run, e: Entry, assumed: dict[int, list[tuple[Pod, int]]], retry: list[Entry]
) -> None:
    """One queue entry (a pod, or a whole gang): select nodes, then commit, hold (Permit) or undo."""
    gi, g = e.gang_index, run.gangs[e.gang_index]
    pods: list[Pod] | None = [e.pod] if e.pod is not None else run.members.get(gi)
    if pods is None:
        pods = run.members[gi] = sorted(g.pending, key=pod_key)
    if e.pod is None and g.topology_keys:
        got = _place_in_domain(run, gi, pods)
    else:
        got = _select_all(run, gi, pods)
    if (
        e.pod is not None
        and not got
        or e.pod is None
        and len(got) + run.committed[gi] < len(g.pending)
    ):
        retry.append(e)
    if not got:
        return
    mode = gang_mode(g)
    if mode == MODE_PERMIT:
        got = assumed.setdefault(gi, []) + got
        assumed[gi] = got
    if mode == MODE_POD or gi in run.started or run.committed[gi] + len(got) >= run.need(gi):
        run.started.add(gi)
        for p, j in got:
            run.where[p.key] = j
            run.placed.add(id(p))
        run.committed[gi] += len(got)
        assumed.pop(gi, None)
    elif mode == MODE_GROUP:
        for p, j in got:
            run.cluster.remove(j, p)


def _select_all(run: _Run, gi: int, pods: Sequence[Pod]) -> list[tuple[Pod, int]]:
    """Each pod not yet committed, greedily, in order: placed on its node (the caller commits or undoes)."""
    got: list[tuple[Pod, int]] = []
    for p in pods:
        if id(p) in run.placed:
            continue
        j = schedule_one(run.eng, p)
        if j is None:
            run.failed.setdefault(gi, p)
            continue
        run.cluster.place(j, p)
        got.append((p, j))
    return got


def _place_in_domain(run: _Run, gi: int, pods: Sequence[Pod]) -> list[tuple[Pod, int]]:
    """KEP-5732's placement cycle (placement.py): the group cycle once per topology domain, on that domain's nodes
    only; of the domains where the gang reaches quorum, the best-scored one is kept (ties drawn with the seeded RNG,
    as Go's map order would), the rest undone. A gang already started stays in its domain."""
    c, eng, g = run.cluster, run.eng, run.gangs[gi]
    home = [j for p in g.pending if (j := run.where.get(p.key)) is not None]
    req = sum((c.vec(p) for p in pods), np.zeros(len(c.res), dtype=np.int64))
    if not pods:
        return []
    prof = eng.profile(pods[0])
    feasible: list[tuple[int, list[tuple[Pod, int]]]] = []
    for _, mask in c.domains(g.topology_keys):
        if home and not mask[home].all():
            continue
        eng.allowed, eng.allowed_n = mask, int(mask.sum())
        try:
            got = _select_all(run, gi, pods)
        finally:
            eng.allowed = None
        if run.committed[gi] + len(got) >= run.need(gi):
            placed = run.committed[gi] + len(got)
            feasible.append(
                (
                    placement_score(c.alloc, c.used, mask, c.ri, req, prof, placed, len(g.pending)),
                    got,
                )
            )
        for p, j in reversed(got):
            c.remove(j, p)
    if not feasible:
        return []
    top = max(score for score, _ in feasible)
    best = [got for score, got in feasible if score == top]
    if len(best) > 1:
        eng.ties += 1
        got = best[eng.rng.randrange(len(best))]
    else:
        got = best[0]
    for p, j in got:
        c.place(j, p)
    return got


def _permit_timeout(
    run: _Run, assumed: dict[int, list[tuple[Pod, int]]], entries: list[Entry], retry: list[Entry]
) -> bool:
    """Gangs still held at Permit never reached quorum: release their pods and re-queue them."""
    rolled = False
    entry_of = {id(e.pod): e for e in entries if e.pod is not None} if assumed else {}
    for gi, held in assumed.items():
        for p, j in held:
            run.cluster.remove(j, p)
            retry.append(entry_of[id(p)])
        run.failed.setdefault(gi, held[0][0])
        rolled = True
    return rolled


def _requeue(run: _Run, retry: list[Entry]) -> list[Entry]:
    """The next pass's queue: each failed entry once, priority first, then re-queue order (stable sort)."""
    seen: set[int] = set()
    entries = []
    # a pod failing twice in a pass (never) or a rolled-back one that also failed: once
    for e in retry:
        if id(e) not in seen and (e.pod is None or e.pod.key not in run.where):
            seen.add(id(e))
            entries.append(e)
    entries.sort(key=lambda e: e.key.neg_priority)
    return entries
