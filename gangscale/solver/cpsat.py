"""The CP-SAT model: how many bins of each pattern, how many pods of each class.

Variables are counts, never one per pod and node: `z[p]` bins of pattern p,
`y[c]` pods of class c placed (per topology domain when the gang has one),
`s[g]` gang g reaches its quorum. Objectives are solved lexicographically:
first gangs and pods by priority tier, then hourly cost and node count with
the first result held fixed. The greedy plan is the hint, so a timeout still
returns a valid plan.

Never worse than the plan in hand: a stage's solution replaces it only when it
places strictly more (by the stage's weights), or as much at no higher cost; so
the result costs no more than the greedy plan at equal gangs and pods, and
`used_hint_only` means the greedy plan itself is returned. Every stage stops at
one deadline; a stage with no time left is skipped.
"""

from __future__ import annotations

from collections.abc import Callable

from ortools.sat.python import cp_model

from .budget import now
from .greedy import Assignment
from .outcome import SolveOutcome
from .params import SolveOptions, make_solver
from .patterns import PatternSet
from .problem import Problem

WEIGHT_LIMIT = 2**52  # keep each stage's objective exact in CP-SAT's double-checked int64


def _tiers(prob: Problem) -> list[tuple[dict[int, int], dict[int, int]]]:
    """Objective weights per priority tier: ({gang: weight}, {class: weight}).

    Inside a tier a satisfied gang outweighs every pod of its level and below,
    and a higher level outweighs everything under it. A tier closes when the
    weights would stop being exact; tiers are then solved one after another.
    """
    levels = sorted({g.priority for g in prob.gangs})
    tiers: list[tuple[dict[int, int], dict[int, int]]] = []
    gw: dict[int, int] = {}
    cw: dict[int, int] = {}
    below = 0  # total weight of everything already in the tier
    for lvl in levels:
        gangs = [g for g in prob.gangs if g.priority == lvl]
        pods = sum(g.pending for g in gangs)
        n_gangs = sum(1 for g in gangs if g.is_gang)
        wp = below + 1
        wg = wp * (pods + 1)
        add = wg * n_gangs + wp * pods
        if below and below + add > WEIGHT_LIMIT:
            tiers.append((gw, cw))
            gw, cw, below = {}, {}, 0
            wp, wg = 1, pods + 1
            add = wg * n_gangs + pods
        for g in gangs:
            if g.is_gang:
                gw[g.gid] = wg
            for c in g.classes:
                cw[c] = wp
        below += add
    if gw or cw:
        tiers.append((gw, cw))
    return list(reversed(tiers))  # highest priority first


class _Model:
    """The CP-SAT model: pattern counts per kind, pods per class (and domain), gang and domain choices."""

    def __init__(self, prob: Problem, patterns: PatternSet) -> None:
        self.prob = prob
        self.pats = patterns
        self.m = cp_model.CpModel()
        self.z: list[list[cp_model.IntVar]] = [self._pattern_vars(k) for k in prob.kinds]
        self.domains: list[list[tuple[str, ...] | None]] = [
            prob.gang_domains(g.gid) for g in prob.gangs
        ]
        self.y: list[cp_model.IntVar] = []
        # keyed by (class or gang, domain); domains are never None here: a gang with a topology
        # constraint picks among its real domains, one without gets no per-domain variables
        self.yd: dict[tuple[int, tuple[str, ...] | None], cp_model.IntVar] = {}
        self.sel: dict[tuple[int, tuple[str, ...] | None], cp_model.IntVar] = {}
        self.s: dict[int, cp_model.IntVar] = {}
        for g in prob.gangs:
            self._domain_choice(g.gid)
        for c in prob.classes:
            self._class_vars(c.cid)
        for g in prob.gangs:
            if g.is_gang:
                self._quorum(g.gid)
        self._coverage()
        self.cost_expr = sum(k.cost * z for k in prob.kinds if k.new for z in self.z[k.kid])
        self.nodes_expr = sum(z for k in prob.kinds if k.new for z in self.z[k.kid])
        self.max_nodes = sum(k.max_count for k in prob.kinds if k.new)

    def _pattern_vars(self, k) -> list[cp_model.IntVar]:
        """Bins of kind `k` filled with each of its patterns, together within its count."""
        zs = [
            self.m.new_int_var(0, k.max_count, f"z{k.kid}_{i}")
            for i in range(len(self.pats.by_kind[k.kid]))
        ]
        if len(zs) > 1:
            self.m.add(sum(zs) <= k.max_count)
        return zs

    def _domain_choice(self, gid: int) -> None:
        """A gang with a topology constraint picks at most one domain."""
        doms = self.domains[gid]
        if doms == [None]:
            return
        sels = []
        for d in doms:
            sv = self.m.new_bool_var(f"sel{gid}_{d}")
            self.sel[(gid, d)] = sv
            sels.append(sv)
        self.m.add(sum(sels) <= 1)

    def _class_vars(self, cid: int) -> None:
        """Pods placed of a class, split per domain (only in the chosen one) when its gang has a topology."""
        c = self.prob.classes[cid]
        m = self.m
        y = m.new_int_var(0, c.count, f"y{cid}")
        self.y.append(y)
        doms = self.domains[c.gang]
        if doms == [None]:
            return
        parts = []
        for d in doms:
            yd = m.new_int_var(0, c.count, f"y{cid}_{d}")
            m.add(yd <= c.count * self.sel[(c.gang, d)])
            self.yd[(cid, d)] = yd
            parts.append(yd)
        m.add(y == sum(parts))

    def _quorum(self, gid: int) -> None:
        """A gang places members only when it reaches its quorum (`s`: it does)."""
        g, prob, m = self.prob.gangs[gid], self.prob, self.m
        s = self.s[gid] = m.new_bool_var(f"s{gid}")
        for c in g.classes:
            m.add(self.y[c] <= prob.classes[c].count * s)
        m.add(sum(self.y[c] for c in g.classes) >= g.need * s)

    def _coverage(self) -> None:
        """Pods of a shape (per domain) never exceed the slots the chosen bins offer."""
        prob = self.prob
        slots: dict[tuple[int, tuple[str, ...] | None], list] = {}
        for k in prob.kinds:
            for i, pat in enumerate(self.pats.by_kind[k.kid]):
                for s, cnt in pat:
                    slots.setdefault((s, prob.domain(s, k.kid)), []).append(cnt * self.z[k.kid][i])
        demand: dict[tuple[int, tuple[str, ...] | None], list] = {}
        for c in prob.classes:
            if self.domains[c.gang] == [None]:
                demand.setdefault((c.shape, None), []).append(self.y[c.cid])
            else:
                for d in self.domains[c.gang]:
                    demand.setdefault((c.shape, d), []).append(self.yd[(c.cid, d)])
        for key, ys in demand.items():
            self.m.add(sum(ys) <= sum(slots.get(key, [])))

    # ------------------------------------------------------------------ hints

    def hint(self, a: Assignment) -> None:
        m, prob = self.m, self.prob
        m.clear_hints()
        counts: list[dict] = [dict() for _ in prob.kinds]
        for kid, contents in a.bins:
            shape_counts: dict[int, int] = {}
            for cid, n in contents.items():
                s = prob.classes[cid].shape
                shape_counts[s] = shape_counts.get(s, 0) + n
            pat = tuple(sorted(shape_counts.items()))
            counts[kid][pat] = counts[kid].get(pat, 0) + 1
        for k in prob.kinds:
            for i, pat in enumerate(self.pats.by_kind[k.kid]):
                m.add_hint(self.z[k.kid][i], counts[k.kid].get(pat, 0))
        for c in prob.classes:
            m.add_hint(self.y[c.cid], a.y[c.cid])
            for d in self.domains[c.gang]:
                if d is not None:
                    m.add_hint(self.yd[(c.cid, d)], a.y[c.cid] if a.domain[c.gang] == d else 0)
        for (g, d), v in self.sel.items():
            m.add_hint(v, 1 if a.domain[g] == d and a.satisfied[g] else 0)
        for g, v in self.s.items():
            m.add_hint(v, 1 if a.satisfied[g] else 0)

    # ----------------------------------------------------------------- decode

    def decode(self, solver: cp_model.CpSolver) -> Assignment:
        prob = self.prob
        y = [int(solver.value(v)) for v in self.y]
        domain: list[tuple[str, ...] | None] = [None] * len(prob.gangs)
        for (gid, d), v in self.sel.items():
            if solver.value(v):
                domain[gid] = d
        satisfied = []
        for gang in prob.gangs:
            placed = sum(y[c] for c in gang.classes)
            satisfied.append(placed >= max(gang.need, 1))
        zvals = [[int(solver.value(z)) for z in zs] for zs in self.z]
        return assign_pods(prob, self.pats, zvals, y, domain, satisfied)


def assign_pods(
    prob: Problem,
    pats: PatternSet,
    zvals: list[list[int]],
    y: list[int],
    domain: list[tuple[str, ...] | None],
    satisfied: list[bool],
) -> Assignment:
    """Turn pattern counts into concrete bins and put the placed pods in their slots.

    A bin exists only once a pod is put in it, so the work follows the placed
    pods, not the pattern counts (a solution may buy bins it leaves empty).
    """
    # (shape, domain) -> [kind, first instance of the pattern, bins of it, pods per bin, cursor bin, used in it]
    slots: dict[tuple[int, tuple[str, ...] | None], list[list[int]]] = {}
    for k in prob.kinds:
        first = 0
        for i, pat in enumerate(pats.by_kind[k.kid]):
            n = zvals[k.kid][i]
            if n:
                for s, cnt in pat:
                    slots.setdefault((s, prob.domain(s, k.kid)), []).append(
                        [k.kid, first, n, cnt, 0, 0]
                    )
            first += n
    opened: dict[tuple[int, int], dict[int, int]] = {}  # (kind, instance) -> {class: pods}
    for c in prob.classes:
        left = y[c.cid]
        if not left:
            continue
        key = (c.shape, domain[c.gang] if prob.shapes[c.shape].topology_keys else None)
        for slot in slots.get(key, []):
            kid, first, n, cnt, j, used = slot
            while left and j < n:
                take = min(left, cnt - used)
                contents = opened.setdefault((kid, first + j), {})
                contents[c.cid] = contents.get(c.cid, 0) + take
                left -= take
                used += take
                if used == cnt:
                    j, used = j + 1, 0
            slot[4], slot[5] = j, used
            if not left:
                break
        if left:  # pragma: no cover - coverage constraints make this impossible
            raise AssertionError(f"class {c.cid}: {left} pods without a slot")
    bins: list[tuple[int, dict[int, int]]] = []
    names: list[str | None] = []
    for kid, inst in sorted(opened):
        k = prob.kinds[kid]
        bins.append((kid, opened[(kid, inst)]))
        names.append(None if k.new else k.nodes[inst])
    return Assignment(y, satisfied, domain, bins, names)


class _StopNearBound(cp_model.CpSolverSolutionCallback):
    """Stop the cost stage once a plan is within the relative gap of the proven bound."""

    def __init__(self, cost_expr, target: int) -> None:
        super().__init__()
        self._cost = cost_expr
        self._target = target

    def on_solution_callback(self) -> None:
        if self.value(self._cost) <= self._target:
            self.stop_search()


BoundFn = Callable[[Assignment, float], int]


MIN_STAGE_SECONDS = 0.05  # below this CP-SAT cannot even load the model: skip the stage


def solve_model(
    prob: Problem,
    patterns: PatternSet,
    hint: Assignment,
    opts: SolveOptions,
    budget: float,
    bound_fn: BoundFn | None = None,
    placement_proven: bool = False,
) -> SolveOutcome:
    """Lexicographic solve within `budget` seconds; `bound_fn(assignment, seconds)` lets the cost stage stop near
    a proven bound. `placement_proven`: the hint's gangs and pods already meet their bounds (the gang LP), so
    the placement stages are skipped and their values held."""
    start = now()
    deadline = start + budget
    model = _Model(prob, patterns)
    tiers = _tiers(prob)
    stages = 1 if placement_proven else len(tiers) + 1
    best, optimal = hint, patterns.complete
    for si, tier in enumerate(tiers):
        if placement_proven:
            _hold(model, best, tier)
            continue
        best, stage_optimal = _placement_stage(model, best, tier, opts, deadline, stages - si)
        optimal &= stage_optimal
    placement_optimal = optimal or placement_proven
    best, cost_optimal = _cost_stage(model, best, opts, deadline, bound_fn)
    optimal &= cost_optimal
    return SolveOutcome(best, placement_optimal, optimal, best is hint, stages, now() - start)


def _tier_expr(model: _Model, best: Assignment, tier: tuple[dict, dict]) -> tuple:
    """(the tier's placement objective, its value in `best`)."""
    gw, cw = tier
    expr = sum(w * model.s[g] for g, w in gw.items()) + sum(w * model.y[c] for c, w in cw.items())
    value = sum(w for g, w in gw.items() if best.satisfied[g]) + sum(
        w * best.y[c] for c, w in cw.items()
    )
    return expr, value


def _hold(model: _Model, best: Assignment, tier: tuple[dict, dict]) -> None:
    """Later stages keep at least what `best` reaches in this tier."""
    expr, value = _tier_expr(model, best, tier)
    model.m.add(expr >= value)


def _placement_stage(
    model: _Model,
    best: Assignment,
    tier: tuple[dict, dict],
    opts: SolveOptions,
    deadline: float,
    stages_left: int,
) -> tuple[Assignment, bool]:
    """Maximise one priority tier's gangs and pods (its share of the time left), then hold the value reached;
    (the plan in hand, proven optimal)."""
    m, prob = model.m, model.prob
    expr, hint_value = _tier_expr(model, best, tier)
    left = deadline - now()
    value, optimal = hint_value, False
    if left >= MIN_STAGE_SECONDS:
        model.hint(best)
        m.maximize(expr)
        solver = make_solver(opts, left / stages_left)
        status = solver.solve(m)
        if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and solver.objective_value >= hint_value:
            found = int(round(solver.objective_value))
            cand = model.decode(solver)
            # this stage ignores cost: an equal placement replaces the plan in hand only if it is no dearer
            if found > hint_value or cand.cost(prob) <= best.cost(prob):
                best, value = cand, found
            optimal = status == cp_model.OPTIMAL
    m.add(expr >= value)
    return best, optimal


def _cost_stage(
    model: _Model, best: Assignment, opts: SolveOptions, deadline: float, bound_fn: BoundFn | None
) -> tuple[Assignment, bool]:
    """Cheapest (then fewest) new nodes with the placement held; stops near `bound_fn`'s bound when given."""
    m, prob = model.m, model.prob
    left = deadline - now()
    if left < MIN_STAGE_SECONDS:
        return best, False
    model.hint(best)
    m.minimize(model.cost_expr * (model.max_nodes + 1) + model.nodes_expr)
    callback = None
    if bound_fn is not None:
        lb = bound_fn(best, max(MIN_STAGE_SECONDS, left * 0.25))
        callback = _StopNearBound(model.cost_expr, int(lb * (1 + opts.relative_gap)))
        left = deadline - now()
    if left < MIN_STAGE_SECONDS:
        return best, False
    solver = make_solver(opts, left)
    status = solver.solve(m, callback)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return best, False
    cand = model.decode(solver)
    return (cand if cand.cost(prob) <= best.cost(prob) else best), status == cp_model.OPTIMAL
