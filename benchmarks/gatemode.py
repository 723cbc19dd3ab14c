"""Gate mode in the benchmark: the plan's nodes are bought and Ready, then gangs leave the gate in release order.

What `gangscale run` does with `gangscale.io/capacity` (gangscale/controller/gates.py), replayed on the
scheduler model (`gangscale.scheduling.simulate`) with every bought node Ready:

- Pods linked to a group carry the gate (the webhook gates exactly those); ungrouped pods do not, so
  they are in the scheduler's queue before any gate is lifted and go first.
- Only gangs the plan starts (decision `scale-up` / `fits-existing`) are released, and of those only
  the pods the plan placed (an elastic gang's extra members stay gated). Deferred gangs never leave
  the gate, so they take no capacity.
- Released gangs reach the scheduler one after another in `gates.release_order` (imported, not
  copied, with `gates.placement_choices`): priority, then the biggest per-pod GPU request first, then
  (among GPU gangs) the gang with the fewest places (node groups, nodes) to go, then the biggest pod by
  cpu or memory. The replay gives each released
  gang's pods a queue timestamp in that order, so one model run schedules them as if each gang
  were bound before the next gate is lifted.
- gates.py holds a gang whose pods would land on a node the plan keeps for a gang still held, when
  that gang would then no longer start, until that gang has bound. The replay applies the same rule
  after the fact: a promised gang that does not start moves ahead of the gangs whose pods took its
  planned nodes; where a bought node stays empty, the gangs whose nodes its gangs took go ahead of
  them. The model runs again (`ROUNDS` at most, stopping after `STALE_ROUNDS` without a better round;
  the round starting the most gangs, then groups, then leaving the fewest bought nodes empty, is reported).

Invariant: a gang counts as started only if the model started it from the released pods; nothing of a
gang that stays gated is ever on a node. Cost: one model run per round, like `evaluate.model_run`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Sequence

from gangscale.controller.gates import STARTING, placement_choices, release_order
from gangscale.model import API_NONE, Gang, GangKey
from gangscale.scheduling import SchedulerConfig, SimNode, SimResult, nodes_from_views, planned_nodes, simulate

from .world import World

ROUNDS = 8  # model runs: the release order, then up to seven repairs by gates.py's trespass rule
STALE_ROUNDS = 3  # stop when this many repairs in a row do not beat the best round


@dataclass(slots=True)
class GateRun:
    """The best round: the release order used, the model's result, and what each round started."""

    order: list[GangKey]  # released gangs, in the order their gates were lifted
    result: SimResult
    empty: list[str]  # bought nodes no pod landed on
    rounds: list[tuple[int, int]] = field(default_factory=list)  # (gang-policy groups started, empty nodes) per round

    @property
    def started(self) -> set[GangKey]:
        return {k for k in self.order if self.result.outcomes[k].started}


def plan_placement(plan: dict) -> dict[str, str]:
    """Pod key -> the node the plan put it on, new nodes named as `planned_nodes` names them."""
    where = {p: node for node, pods in plan.get("existingNodes", {}).items() for p in pods}
    for i, n in enumerate(plan.get("newNodes", [])):
        where.update({p: f"{n['nodeGroup']}/new-{i + 1}" for p in n["pods"]})
    return where


def plan_starts(plan: dict) -> set[GangKey]:
    """The key of every group the plan starts: the ones gate mode releases."""
    return {GangKey(g["namespace"], g["name"], g.get("api", API_NONE)) for g in plan.get("gangs", [])
            if g.get("decision") in STARTING}


def _queued(g: Gang, stamp: str) -> Gang:
    """`g` with every pod entering the scheduler's queue at `stamp` (priority is already in the order)."""
    return replace(g, priority=0, created=stamp, pending=[replace(p, priority=0, created=stamp) for p in g.pending])


def _run(nodes: list[SimNode], ungated: Sequence[Gang], released: Sequence[Gang], bound, config, seed) -> SimResult:
    """One model run: the ungated pods first (in their own queue order), then the released gangs in order."""
    def early(prio: int, created: str) -> str:  # before every release, in PrioritySort's order among themselves
        return f"0-{(1 << 40) - prio:016d}-{created}"

    queue = [replace(g, pending=[replace(p, priority=0, created=early(p.priority, p.created)) for p in g.pending],
                     priority=0, created=early(g.effective_priority, g.created)) for g in ungated]
    queue += [_queued(g, f"1-{i:07d}") for i, g in enumerate(released)]
    return simulate(nodes, queue, bound=bound, config=config, seed=seed)


def _repaired(order: list[Gang], res: SimResult, where: dict[str, str], empty: Sequence[str]) -> list[Gang]:
    """gates.py's trespass rule, applied to what went wrong in `res`: a gang whose pods landed on a node the
    plan keeps for a later gang waits until that gang has bound. Applied where a promised gang did not start
    (it goes ahead of the first gang that took one of its planned nodes) and where a bought node stayed empty
    (the gangs planned on it landed elsewhere: the owners of those nodes go ahead of them)."""
    owner_of = {p.key: g.gang_key for g in order for p in g.pending}
    pos = {g.gang_key: i for i, g in enumerate(order)}
    planned_on: dict[str, set[GangKey]] = {}
    for k, node in where.items():
        if k in owner_of:
            planned_on.setdefault(node, set()).add(owner_of[k])
    moves: dict[GangKey, int] = {}

    def ahead(key: GangKey, of: int) -> None:
        if of < pos[key]:
            moves[key] = min(moves.get(key, of), of)

    for g in order:
        if not res.outcomes[g.gang_key].started:
            mine = {where[p.key] for p in g.pending}
            takers = [pos[k] for node in mine for p in res.node_pods.get(node, [])
                      if (k := owner_of.get(p)) is not None and k != g.gang_key and where.get(p) != node]
            ahead(g.gang_key, min(takers, default=pos[g.gang_key]))
    for node in (empty if not moves else ()):  # gangs that did not start first: their moves change the rest
        for g in planned_on.get(node, ()):
            for p in order[pos[g]].pending:
                landed = res.placement.get(p.key)
                for h in planned_on.get(landed or "", set()) - {g} if landed != where[p.key] else ():
                    ahead(h, pos[g])
    if not moves:
        return order
    # a moved gang sorts just before the gang it must precede (ties: its old position)
    return sorted(order, key=lambda g: (moves.get(g.gang_key, pos[g.gang_key]) - (0.5 if g.gang_key in moves else 0),
                                        pos[g.gang_key]))


def gate_replay(world: World, plan: dict, config: SchedulerConfig | None, seed: int = 0,
                rounds: int = ROUNDS) -> GateRun:
    """Replay gate mode over `plan` (see the module docstring)."""
    snap = world.snap
    nodes = nodes_from_views(snap.nodes, snap.bound) + planned_nodes(
        snap.groups, [n["nodeGroup"] for n in plan.get("newNodes", [])])
    where = plan_placement(plan)
    starts = plan_starts(plan)
    ungated = [g for g in snap.solvable if g.api == API_NONE]
    held = [g for g in snap.solvable if g.api != API_NONE and g.key in starts]
    order = [replace(g, pending=[p for p in g.pending if p.key in where])
             for g in release_order(held, placement_choices(snap))]
    best: GateRun | None = None
    best_score: tuple[int, int, int] = (-1, -1, 0)
    tried: list[tuple[int, int]] = []
    stale = 0  # rounds since the best one
    for _ in range(max(1, rounds)):
        res = _run(nodes, ungated, order, snap.bound, config, seed)
        run = GateRun([g.gang_key for g in order], res, [n for n in res.empty_nodes if "/new-" in n])
        started = run.started
        score = (sum(1 for g in order if g.policy == "gang" and g.gang_key in started), len(started), -len(run.empty))
        tried.append((score[0], -score[2]))
        stale += 1
        if best is None or score > best_score:
            best, best_score, stale = run, score, 0
        if stale >= STALE_ROUNDS:
            break
        nxt = _repaired(order, res, where, run.empty)
        if nxt == order:
            break
        order = nxt
    best.rounds = tried
    return best


def gate_model_run(world: World, plan: dict, strategy: str, seed: int = 0) -> dict:
    """`evaluate.model_run`'s columns for gate mode over `plan` (the solver's plan, as the controller makes it)."""
    from gangscale.scheduling import strategy_config

    start = time.perf_counter()
    run = gate_replay(world, plan, strategy_config(strategy), seed)
    gangs = [g for g in world.snap.solvable if g.policy == "gang"]
    starts = plan_starts(plan)
    promised = {g.gang_key for g in gangs if g.key in starts}
    started = promised & run.started
    price = {g.name: g.price_per_hour for g in world.snap.groups}
    cost = sum(price[n["nodeGroup"]] for n in plan.get("newNodes", []))
    lost = sorted(promised - started, key=str)
    return {"promised": len(promised), "promised_not_started": len(lost),
            "gangs_started": len(started), "gangs": len(gangs), "groups_started": len(run.result.started),
            "empty_nodes": len(run.empty),
            "empty_cost": round(sum(price[n.rpartition("/new-")[0]] for n in run.empty), 6),
            "cost_per_started_gang": round(cost / len(started), 4) if started else None,
            "pods_placed": len(run.result.placement), "seconds": round(time.perf_counter() - start, 3),
            "rounds": run.rounds,
            "not_started": [f"{k}: {run.result.outcomes[k].reason}" for k in lost[:10]],
            "profile": strategy}
