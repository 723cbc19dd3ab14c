"""Observe mode: the plan is what kube-scheduler does with the nodes it buys.

The solver proposes, the scheduler model (`gangscale.scheduling.simulate`) observes, this module repairs; the
solver never sees the model. Each round runs the model over existing + upcoming + planned nodes (in the order the
plan lists them) under every tie-break seed, then cleans: one checked bulk drop of the nodes every seed leaves idle
(per kind of node), then `_settle` drops the nodes seed 0 leaves without a promised pod (all in one step) and runs
the model again, whatever the drop loses, until none is left; those runs are seed 0's alone, and the other seeds
run once on the node set seed 0 leaves clean (again if that check withdraws a promise and seed 0 is left with bare
nodes). Gangs the model did not start are re-planned against the model's state (seed 0's placement of the started
gangs counts as bound), which may buy more nodes; the loop ends when the model realizes the round's plan, nothing
more can be bought, the rounds or the deadline run out. Cleaning goes on past the deadline for LATE_RUNS model
runs' worth of seed runs (more within LATE_SECONDS): a plan with idle nodes is not done. The best cleaned round
(most gangs started, then cheapest) is the plan. Gangs the caller holds back whose pods kube-scheduler still queues
(`ClusterSnapshot.queued`) are in the model's queue too: never promised, and a node only their pods use is bare.

Invariants: a gang is promised (`modelStarted`, decision scale-up / fits-existing) only if it starts under
every seed of the final node set (a state holding seed 0's run alone is never returned); a new node that seed
0 leaves without a promised pod is dropped (unless the model-run budget is spent first); a node only another
seed leaves without one is counted in `scheduler.idleNodes`; `newNodes[].pods` / `existingNodes` are one
seed's placement of the promised gangs' pods (seed 0's when every new node holds one under it).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from .fit import label_keys
from .model import Gang, GangKey, NodeGroup, Pod
from .plan import GangResult, NewNode, Plan, SchedulerInfo
from .resources import sub, total
from .scheduling import (
    SchedulerConfig,
    SimNode,
    SimResult,
    arriving_node,
    default_config,
    nodes_from_views,
    simulate_iter,
)
from .snapshot import ClusterSnapshot, NodeView

MICRO = 1_000_000
NEW_PREFIX = "/planned-"  # new node names: "<group>/planned-<n>"
LATE_RUNS = 4  # model runs (x seeds: seed runs) cleaning may take past the time limit: idle nodes mean not done
LATE_SECONDS = 2.0  # ... or more while the time past the limit stays below this


@dataclass(frozen=True, slots=True)
class SchedulerModel:
    """Which scheduler the plan is checked against (`enabled=False`: plan as the solver alone would)."""

    config: SchedulerConfig | None = None  # None: upstream kube-scheduler defaults
    source: str = "default"  # default | file | eks: where the configuration came from
    seeds: tuple[int, ...] = (
        0,
        1,
        2,
    )  # tie-break seeds; a gang is promised only if it starts under all
    enabled: bool = True
    max_rounds: int = 4  # solver proposals checked (the first plan and up to 3 re-plans)


OFF = SchedulerModel(enabled=False)


@dataclass(slots=True)
class _State:
    """One cleaned round: the new nodes kept, the model's runs over them, the gangs started in all of them."""

    new: list[SimNode]
    sims: list[SimResult]
    promised: set[GangKey]
    dropped: int = 0  # new nodes the cleaning dropped
    # the model's runs before cleaning (the reasons name the nodes it left empty)
    raw: list[SimResult] | None = None
    listing: int = 0  # the seed whose placement the plan lists: one under which every new node holds a promised pod
    # the other seeds' runs over `new`, when only seed 0's is in `sims`
    pending: Iterator[SimResult] | None = None

    def cost(self, price: dict[str, int]) -> int:
        return sum(price[n.node_group or ""] for n in self.new)


@dataclass(slots=True)
class _Ctx:
    snap: ClusterSnapshot
    model: SchedulerModel
    config: SchedulerConfig
    base: list[SimNode]
    gangs: list[Gang]
    owner: dict[str, GangKey]  # pending pod key -> its gang
    labels: dict[str, dict[str, str]]  # node name -> labels (topology domains)
    price: dict[str, int]  # group -> micro-dollars per hour
    # ctx.gangs by key (`Gang.key` builds a new GangKey each time)
    by_key: dict[GangKey, Gang] = field(default_factory=dict)
    runs: int = 0
    serial: int = 0
    deadline: float = float(
        "inf"
    )  # past it, no re-plan; cleaning goes on for LATE_RUNS model runs' seed runs
    late: int = 0  # seed runs (one seed's `simulate`) made past the deadline
    seed_runs: int = 0  # seed runs made in all
    # checked drops the model refused, by (kind, nodes kept, promises): "lost" (a promise failed: any drop to those
    # nodes is refused) or "others" (`_settle`'s drop: lost a promise or left seed 0 a bare node)
    refused: set[tuple[str, frozenset[str], frozenset[GangKey]]] = field(default_factory=set)
    late_idle: int = 0  # new nodes left bare under the listed seed when the late checks ran out
    # node label keys some pending pod or gang looks at (what tells nodes apart)
    keys: frozenset[str] = frozenset()
    # `simulate_iter`'s memo: the queue, and the cluster drops cut from
    sim_memo: dict = field(default_factory=dict)

    def may_run(self, seeds: int = 1) -> bool:
        """Another cleaning run of `seeds` seed runs fits the budget: before the deadline, within the LATE_RUNS
        model runs' worth of seed runs after it, or within LATE_SECONDS of it (small backlogs: many runs that cost
        little)."""
        now = time.perf_counter()
        return (
            now <= self.deadline
            or self.late + seeds <= LATE_RUNS * len(self.model.seeds)
            or now - self.deadline < LATE_SECONDS
        )


def new_sim_nodes(ctx: _Ctx, group_names: Sequence[str]) -> list[SimNode]:
    """Planned nodes of these groups, each with a name unique over every round."""
    by_name = {g.name: g for g in ctx.snap.groups}
    daemons = ctx.snap.daemons
    out = []
    for gname in group_names:
        ctx.serial += 1
        pods = daemons[gname].pods if gname in daemons else ()
        out.append(arriving_node(by_name[gname], f"{gname}{NEW_PREFIX}{ctx.serial}", pods))
    return out


def _listed(new: list[SimNode]) -> list[SimNode]:
    """New nodes in the order the plan lists them (`newNodes`, by node group): the model runs over them in that
    order, so a reader who replays the plan's nodes under seed 0 sees the listed placement."""
    return sorted(new, key=lambda n: n.node_group or "")


def _one_domain(ctx: _Ctx, g: Gang, sim: SimResult) -> bool:
    """A gang with topology keys holds only if the model put all its pods in one domain (a PodGroup with the gang
    policy always is: KEP-5732's placement cycle; a basic one is placed pod by pod)."""
    if not g.topology_keys:
        return True
    doms = {
        tuple(ctx.labels.get(n, {}).get(k) for k in g.topology_keys)
        for p in g.pending
        if (n := sim.placement.get(p.key))
    }
    return len(doms) <= 1


def _runs(ctx: _Ctx, new: list[SimNode], seeds: Sequence[int] | None = None) -> Iterator[SimResult]:
    """The model over base + `new`, one seed at a time (every seed, or only `seeds`): a caller that stops early
    can finish later from the same iterator, without building the model's cluster again."""
    for n in new:
        ctx.labels[n.name] = n.labels
    ctx.runs += 1
    sims = iter(
        simulate_iter(
            ctx.base + new,
            ctx.gangs,
            ctx.model.seeds if seeds is None else seeds,
            bound=ctx.snap.bound,
            config=ctx.config,
            stable_ties=True,
            memo=ctx.sim_memo,
        )
    )
    while True:
        late = time.perf_counter() > ctx.deadline  # a seed's run started past the deadline
        sim = next(sims, None)
        if sim is None:
            return
        ctx.seed_runs += 1
        ctx.late += late
        yield sim


def _observe(
    ctx: _Ctx,
    new: list[SimNode],
    need: set[GangKey] | None = None,
    seeds: Sequence[int] | None = None,
) -> tuple[list[SimResult], set[GangKey]]:
    """The model over base + `new` under every seed (or only `seeds`), and the gangs started (in one domain) under
    all of them.

    With `need`, seeds stop as soon as one loses a gang of it: the caller only asks whether `need` still holds
    (then the sims are partial and the answer is no)."""
    sims: list[SimResult] = []
    promised = set(ctx.by_key)
    for sim in _runs(ctx, new, seeds):
        sims.append(sim)
        promised = _started_in(ctx, sim, promised)
        if need is not None and not need <= promised:
            break
    return sims, promised


def _first_seed(ctx: _Ctx, new: list[SimNode], promised: set[GangKey] | None = None) -> _State:
    """Seed 0's run over base + `new` alone (the other seeds left pending in the state, for `_complete`); the
    promises meanwhile: the gangs of `promised` (default: all) seed 0 starts."""
    pending = _runs(ctx, new)
    sims = [next(pending)]
    return _State(
        new,
        sims,
        _started_in(ctx, sims[0], set(ctx.by_key) if promised is None else promised),
        pending=pending,
    )


def _complete(ctx: _Ctx, st: _State, stop: Callable[[_State], bool] | None = None) -> _State:
    """`st` with the other seeds' runs added from its pending iterator, promising what starts (in one domain)
    under every seed run. With `stop`, a seed that makes it true ends the check early (the state keeps the
    seeds run so far and is still unchecked: `len(sims)` below the seed count)."""
    sims = list(st.sims)
    promised = set(ctx.by_key)
    for sim in sims:
        promised = _started_in(ctx, sim, promised)
    for sim in st.pending or ():
        sims.append(sim)
        promised = _started_in(ctx, sim, promised)
        part = _State(st.new, sims, promised, st.dropped, st.raw, st.listing, st.pending)
        if stop is not None and len(sims) < len(ctx.model.seeds) and stop(part):
            return part
    return _State(st.new, sims, promised, st.dropped, st.raw, st.listing)


def _started_in(ctx: _Ctx, sim: SimResult, keys: set[GangKey]) -> set[GangKey]:
    """The gangs of `keys` this run starts (in one domain)."""
    return {k for k in keys if sim.outcomes[k].started and _one_domain(ctx, ctx.by_key[k], sim)}


def _clean(ctx: _Ctx, new: list[SimNode]) -> _State:
    """Run the model, then drop the new nodes some seed leaves without a promised pod until none is left.

    Before the deadline, one checked bulk drop first (`_bulk`'s first candidate: per kind of node, as many as
    every seed leaves idle), kept only if no promised gang is lost (an idle node can still matter: a gang held
    at Permit below quorum takes capacity until its timeout; a drop refused once, in `ctx.refused`, is not run
    again). Then `_settle` drops the rest whatever it loses.
    Seed 0 runs first; the other seeds only while the deadline is not past and, when seed 0 leaves nodes bare,
    only if at seed 0's pace they end before it (the bulk drop needs them and must start before the deadline).
    Otherwise there is no bulk drop, and `_settle` drops what seed 0 leaves bare and runs the other seeds once, on
    the node set seed 0 leaves clean (their runs over nodes about to be dropped would be thrown away)."""
    began = time.perf_counter()
    st = _first_seed(ctx, new)
    now = time.perf_counter()
    if now <= ctx.deadline and (
        now + (now - began) * (len(ctx.model.seeds) - 1) <= ctx.deadline
        or not _bare(ctx, new, st.sims[0], st.promised)
    ):
        st = _complete(ctx, st)
    sims, promised = st.sims, st.promised
    st.raw = sims
    if (
        len(sims) == len(ctx.model.seeds)
        and time.perf_counter() <= ctx.deadline
        and _idle(ctx, new, sims, promised)
    ):
        batch = _bulk(ctx, new, sims, promised, set())[0]
        trial = [n for n in new if n.name not in batch]
        key = (frozenset(n.name for n in trial), frozenset(promised))
        if ("lost", *key) not in ctx.refused:
            s2, p2 = _observe(ctx, trial, promised)
            if p2 >= promised:  # every seed ran (none lost a promised gang): the drop stands
                st = _State(trial, s2, p2, len(batch), sims)
            else:
                ctx.refused.add(("lost", *key))
    return _settle(ctx, st)


def _bare(ctx: _Ctx, new: list[SimNode], sim: SimResult, used: set[GangKey]) -> set[str]:
    """The new nodes that hold no pod of a gang of `used` under `sim`."""
    return {
        n.name
        for n in new
        if not any(ctx.owner.get(k) in used for k in sim.node_pods.get(n.name, ()))
    }


def _kind(ctx: _Ctx, n: SimNode) -> tuple:
    """What the scheduler tells new nodes apart by: allocatable, taints and the labels some pod or gang reads
    (node groups differing only in a zone no pod selects are alike to it)."""
    return (
        tuple(sorted(n.allocatable.items())),
        n.taints,
        tuple(sorted((k, v) for k, v in n.labels.items() if k in ctx.keys)),
    )


def _bulk(
    ctx: _Ctx, new: list[SimNode], sims: list[SimResult], promised: set[GangKey], keep: set[str]
) -> list[list[str]]:
    """Idle nodes to drop at once, as candidate sets to try in turn (each ordered: idle under most seeds, then
    dearest, first).

    Seeds differ in *which* of several alike nodes they leave idle more than in *how many*, so dropping every
    node idle under some seed drops the ones other seeds use. Per kind of node, as many as every seed leaves
    idle go first, then the nodes idle under the seed that leaves fewest. Nodes that hold pods of a gang the
    scheduler starts under every seed, over several topology domains (not promised), come after the empty
    ones: dropping them moves those pods onto capacity bought for promised gangs, so that drop often fails."""
    out: list[list[str]] = []
    steady = set.intersection(*(s.started for s in sims)) if sims else set()
    for used in (promised | steady, promised):
        bare = [_bare(ctx, new, s, used) - keep for s in sims]
        times = Counter(name for b in bare for name in b)
        kinds = {n.name: _kind(ctx, n) for n in new if n.name in times}
        quota = {
            kd: min(sum(1 for name in b if kinds[name] == kd) for b in bare)
            for kd in set(kinds.values())
        }
        price = {n.name: ctx.price[n.node_group or ""] for n in new}
        order = sorted(times, key=lambda name: (-times[name], -price[name], name))
        by_kind = []
        for name in order:
            if quota[kinds[name]] > 0:
                quota[kinds[name]] -= 1
                by_kind.append(name)
        best = min(bare, key=len)
        out += [by_kind, [name for name in order if name in best]]
    out = [c for i, c in enumerate(out) if c and c not in out[:i]]
    return out or [sorted(_idle(ctx, new, sims, promised).keys() - keep)]


def _idle(ctx: _Ctx, new: list[SimNode], sims: list[SimResult], promised: set[GangKey]) -> Counter:
    """New node -> how many seeds leave it without a pod of a promised gang."""
    return Counter(name for s in sims for name in _bare(ctx, new, s, promised))


def _settle(ctx: _Ctx, st: _State) -> _State:
    """Make seed 0 (what a reader who replays the plan's nodes in order sees) leave no new node bare: while it
    does, drop those nodes (empty or used only by unpromised gangs, all in one step) and run the model again,
    whatever the drop loses. These runs are seed 0's alone (its bare nodes are all they look at; the promises
    meanwhile: the last checked ones that seed 0 still starts); once seed 0 leaves none, the other seeds run on
    that node set, and the promises are what starts under every seed of it (if that loses a gang, seed 0 may
    have bare nodes again: the loop goes on). So a node the scheduler leaves idle under some tie-break is not
    bought, and a gang that needed it as a buffer is not promised (a re-plan, before the deadline, buys for it
    against the model's state). Then the nodes only other seeds leave bare are dropped once more before the
    deadline, checked: kept dropped only if no promise is lost and seed 0 stays clean (past it they are
    counted: a whole model run for a node or two; a drop refused once is not tried again). Past the deadline
    it runs while `may_run` allows, always leaving room to check the last node set under every seed; the seed
    with the fewest bare nodes is listed (seed 0 when it has none), and the nodes bare under some seed are
    counted in `scheduler.idleNodes`."""
    tried_others = False
    seeds = ctx.model.seeds
    while True:
        bare = [_bare(ctx, st.new, s, st.promised) for s in st.sims]
        if bare[0] and ctx.may_run(len(seeds)):
            new = [n for n in st.new if n.name not in bare[0]]
            nxt = _first_seed(ctx, new, st.promised)
            nxt.dropped, nxt.raw = st.dropped + len(st.new) - len(new), st.raw
            st = nxt
            continue
        if len(st.sims) < len(
            seeds
        ):  # seed 0 alone so far: every promise is checked under every seed
            # a seed that withdraws a promise seed 0's nodes were bought for ends the check: drop them first
            st = _complete(
                ctx,
                st,
                lambda part: (
                    bool(_bare(ctx, part.new, part.sims[0], part.promised))
                    and ctx.may_run(len(seeds))
                ),
            )
            if _bare(ctx, st.new, st.sims[0], st.promised) and ctx.may_run(len(seeds)):
                continue
            bare = [_bare(ctx, st.new, s, st.promised) for s in st.sims]
        others = set().union(*bare)
        key = (frozenset(n.name for n in st.new if n.name not in others), frozenset(st.promised))
        if (
            others
            and not bare[0]
            and not tried_others
            and ("lost", *key) not in ctx.refused
            and ("others", *key) not in ctx.refused
            and time.perf_counter() <= ctx.deadline
        ):
            tried_others = True
            dropped = _drop_others(ctx, st, others, key)
            if dropped is not None:
                st = dropped
                continue
        i = 0 if not bare[0] else min(range(len(bare)), key=lambda j: len(bare[j]))
        ctx.late_idle = len(bare[i])
        return _State(st.new, st.sims, st.promised, st.dropped, st.raw, i)


def _drop_others(
    ctx: _Ctx, st: _State, others: set[str], key: tuple[frozenset[str], frozenset[GangKey]]
) -> _State | None:
    """The state without the nodes only seeds other than 0 leave bare, checked under every seed; None (and the
    drop remembered as refused, `lost` too when a promise goes) when a seed is missing, a promise is lost or
    seed 0 is left with a bare node."""
    new = [n for n in st.new if n.name not in others]
    sims, promised = _observe(ctx, new, st.promised)
    if (
        len(sims) == len(st.sims)
        and promised >= st.promised
        and not _bare(ctx, new, sims[0], promised)
    ):
        return _State(new, sims, promised, st.dropped + len(others), st.raw)
    ctx.refused.add(("others", *key))
    if not promised >= st.promised:
        ctx.refused.add(("lost", *key))
    return None


def _residual(ctx: _Ctx, st: _State) -> ClusterSnapshot:
    """What is left to plan: the gangs not promised, on the capacity seed 0's placement leaves free (of the promised
    gangs and of the held ones it places)."""
    sim = st.sims[0]
    taking = [g for g in ctx.gangs if g.key in st.promised or g.key not in ctx.by_key]
    pods = {p.key: p for g in taking for p in g.pending if p.key in sim.placement}
    used: dict[str, Counter] = {}
    for k, p in pods.items():
        used.setdefault(sim.placement[k], Counter()).update(p.requests)
    views = [replace(v, free=sub(v.free, used.get(v.name, {}))) for v in ctx.snap.nodes]
    views += [
        NodeView(
            n.name,
            dict(n.labels),
            n.taints,
            sub(sub(n.allocatable, used.get(n.name, {})), _load(n.daemon_pods)),
            n.node_group,
            True,
            daemon_pods=n.daemon_pods,
        )
        for n in st.new
    ]
    kept = Counter(n.node_group for n in st.new)
    groups: list[NodeGroup] = [
        replace(g, current_size=g.current_size + kept[g.name]) for g in ctx.snap.groups
    ]
    bound = list(ctx.snap.bound) + [replace(p, node_name=sim.placement[k]) for k, p in pods.items()]
    gangs = [g for k, g in ctx.by_key.items() if k not in st.promised]
    return ClusterSnapshot(
        views,
        groups,
        gangs,
        decided={},
        warnings=[],
        bound=bound,
        daemons=ctx.snap.daemons,
        all_nodes=ctx.snap.all_nodes,
    )


def _load(pods: Sequence[Pod]) -> dict[str, int]:
    """What these (DaemonSet) pods request together."""
    return total(p.requests for p in pods)


def _better(a: _State, b: _State, price: dict[str, int]) -> bool:
    return (len(a.promised), -a.cost(price)) > (len(b.promised), -b.cost(price))


Solve = Callable[[ClusterSnapshot, float], Plan]


def realize(
    snap: ClusterSnapshot, first: Plan, model: SchedulerModel, solve: Solve, deadline: float
) -> Plan:
    """The solver's `first` plan, checked and repaired against the scheduler model (see the module docstring)."""
    start = time.perf_counter()
    ctx = _context(snap, model)
    ctx.deadline = deadline
    proposed = {GangKey(r.namespace, r.name, r.api) for r in first.gangs if r.placed}
    state = best = _clean(ctx, _listed(new_sim_nodes(ctx, [n.node_group for n in first.new_nodes])))
    first_reasons = _reasons(state, proposed)
    realized = proposed <= state.promised and not state.dropped
    for _ in range(model.max_rounds - 1):
        left = deadline - time.perf_counter()
        if realized or left < 0.2:
            break
        residual = _residual(ctx, state)
        sub_plan = solve(residual, max(0.2, 0.5 * left))
        if not sub_plan.new_nodes:
            break  # the model already had all the capacity the re-plan would use, and did not start them
        placed = {GangKey(r.namespace, r.name, r.api) for r in sub_plan.gangs if r.placed}
        state = _clean(
            ctx, _listed(state.new + new_sim_nodes(ctx, [n.node_group for n in sub_plan.new_nodes]))
        )
        proposed |= placed
        realized = placed <= state.promised and not state.dropped
        if _better(state, best, ctx.price):
            best = state
    realized = realized and best is state
    best = _settle(ctx, best)
    idle = len(_idle(ctx, best.new, best.sims, best.promised))
    info = SchedulerInfo(
        mode="observe",
        idleNodes=idle,
        profile=ctx.config.default.describe(),
        scoringStrategy=ctx.config.default.strategy,
        source=model.source,
        seeds=list(model.seeds),
        rounds=ctx.runs,
        gangsStarted=len(best.promised),
        realized=realized and not ctx.late_idle,
        seconds=round(time.perf_counter() - start, 3),
        note=f"{ctx.late_idle} new nodes the scheduler leaves without a promised pod under the "
        "listed tie-break are kept: the model-run budget ran out before they were dropped"
        if ctx.late_idle
        else "",
    )
    return _assemble(ctx, first, best, proposed, first_reasons, info)


def _context(snap: ClusterSnapshot, model: SchedulerModel) -> _Ctx:
    base = nodes_from_views(snap.nodes, snap.bound)
    by_key = {g.key: g for g in snap.solvable}
    # a held gang queues too (never promised, its pods no node's reason to buy)
    gangs = snap.solvable + snap.queued
    keys = {k for g in gangs for k in g.topology_keys}
    for pl in {p.placement for g in gangs for p in g.pending}:
        keys |= label_keys(pl)
    return _Ctx(
        snap,
        model,
        model.config or default_config(),
        base,
        gangs,
        {p.key: k for k, g in by_key.items() for p in g.pending},
        {n.name: n.labels for n in base},
        {g.name: round(g.price_per_hour * MICRO) for g in snap.groups},
        by_key,
        keys=frozenset(keys),
    )


def _reasons(st: _State, keys: set[GangKey]) -> dict[GangKey, str]:
    """The model's first word on each proposed gang it did not start (kept to explain a repair)."""
    raw = st.raw or st.sims
    return {
        k: _why_not(raw if any(not s.outcomes[k].started for s in raw) else st.sims, k)
        for k in keys - st.promised
    }


def _why_not(sims: list[SimResult], key: GangKey) -> str:
    outs = [s.outcomes[key] for s in sims]
    failing = next((o for o in outs if not o.started), None)
    started = sum(o.started for o in outs)
    if failing is None:
        return "the scheduler would spread it over several topology domains; the plan does not promise it"
    if started:
        return f"starts under only {started} of {len(outs)} scheduler tie-breaks; {failing.reason}"
    return failing.reason


# ------------------------------------------------------------------------------------------- the plan


def _assemble(
    ctx: _Ctx,
    first: Plan,
    st: _State,
    proposed: set[GangKey],
    first_reasons: dict[GangKey, str],
    info: SchedulerInfo,
) -> Plan:
    sim = st.sims[st.listing]
    new_names = {n.name: n for n in st.new}
    on_node: dict[str, list[str]] = {}
    for k, node in sim.placement.items():
        if ctx.owner.get(k) in st.promised:
            on_node.setdefault(node, []).append(k)
    itype = {g.name: g.instance_type for g in ctx.snap.groups}
    new_nodes = [
        NewNode(
            nodeGroup=n.node_group or "",
            pods=sorted(on_node.get(n.name, [])),
            instanceType=itype.get(n.node_group or "", ""),
            pricePerHour=ctx.price[n.node_group or ""] / MICRO,
        )
        for n in st.new
    ]
    existing = {
        name: sorted(pods) for name, pods in sorted(on_node.items()) if name not in new_names
    }
    cost_micro = st.cost(ctx.price)
    cost = round(cost_micro / MICRO, 6)
    lb = min(first.lower_bound_per_hour, cost)
    gangs = [_gang(ctx, r, st, proposed, first_reasons, new_names) for r in first.gangs]
    same = abs(cost - first.cost_per_hour) < 1e-9 and lb == first.lower_bound_per_hour
    solver = first.solver.model_copy(
        update={
            "gap": round((cost - lb) / cost, 6) if cost else 0.0,
            "status": first.solver.status if same else "FEASIBLE",
        }
    )
    return Plan(
        scaleUp=dict(sorted(Counter(n.node_group for n in new_nodes).items())),
        newNodes=sorted(new_nodes, key=lambda n: n.node_group),
        existingNodes=existing,
        gangs=gangs,
        costPerHour=cost,
        lowerBoundPerHour=lb,
        solver=solver,
        warnings=first.warnings,
        scheduler=info,
    )


def _gang(
    ctx: _Ctx,
    r: GangResult,
    st: _State,
    proposed: set[GangKey],
    first_reasons: dict[GangKey, str],
    new_names: dict[str, SimNode],
) -> GangResult:
    key = GangKey(r.namespace, r.name, r.api)
    if key not in ctx.by_key:
        return r  # decided before any planning (invalid, waiting, below quorum, held)
    if key in st.promised:
        return _started(ctx, r, key, st, first_reasons.get(key), new_names)
    # the first run's word when the nodes bought for it were dropped since (the last run then only finds none)
    why = first_reasons.get(key) or _why_not(st.sims, key)
    if key in proposed or any(s.outcomes[key].started for s in st.sims):
        return r.model_copy(
            update={
                "placed": 0,
                "decision": "deferred",
                "topology_domain": None,
                "reason": f"the scheduler would not start it: {why}",
                "model_started": False,
                "model_reason": why,
            }
        )
    return r.model_copy(update={"model_started": False, "model_reason": why})


def _started(
    ctx: _Ctx,
    r: GangResult,
    key: GangKey,
    st: _State,
    repaired: str | None,
    new_names: dict[str, SimNode],
) -> GangResult:
    sim = st.sims[st.listing]
    g = ctx.by_key[key]
    where = [sim.placement[p.key] for p in g.pending if p.key in sim.placement]
    per_group = Counter(new_names[n].node_group for n in set(where) if n in new_names)
    on_existing = sum(1 for n in where if n not in new_names)
    parts = [
        f"the scheduler starts it under all {len(st.sims)} tie-breaks: {len(where)} of {len(g.pending)} "
        "pending pods placed"
    ]
    if on_existing:
        parts.append(f"{on_existing} on existing or upcoming nodes")
    if per_group:
        parts.append(
            "new nodes: " + ", ".join(f"+{n} {grp}" for grp, n in sorted(per_group.items()))
        )
    if repaired:
        parts.append(f"re-planned after the model's first run found: {repaired}")
    elif not r.placed:
        parts.append("the solver had deferred it, but the scheduler's queue reaches it first")
    topo = None
    if g.topology_keys and where:
        topo = {k: ctx.labels.get(where[0], {}).get(k, "") for k in g.topology_keys}
    return r.model_copy(
        update={
            "placed": len(where),
            "decision": "scale-up" if per_group else "fits-existing",
            "reason": "; ".join(parts),
            "topology_domain": topo,
            "model_started": True,
            "model_reason": None,
        }
    )


# ---------------------------------------------------------------------------------- configuration


def scheduler_model_from(
    path: str | None, mode: str = "observe", memo: dict[str, SchedulerModel] | None = None
) -> SchedulerModel:
    """`--scheduler-config FILE` / `schedulerConfigFile` and `--scheduler-model` / `schedulerModel` as a
    SchedulerModel; a bad file raises SchedulerConfigError (an InputError: one sentence naming the field).

    `memo`: files already read, owned by the caller (the controller reads its file once per process start);
    without one the file is read now. Nothing is cached process-wide."""
    if mode == "off":
        return OFF
    if not path:
        return SchedulerModel()
    if memo is None:
        return _loaded(str(path))
    if str(path) not in memo:
        memo[str(path)] = _loaded(str(path))
    return memo[str(path)]


def _loaded(path: str) -> SchedulerModel:
    from .scheduling import load_scheduler_config

    return SchedulerModel(config=load_scheduler_config(path), source="file")
