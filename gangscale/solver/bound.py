"""A proven lower bound on the hourly cost of placing the same pods.

The bound relaxes bin packing to aggregate capacity: pods of a shape are
spread over compatible kinds, a kind's pods must fit in (node count x
capacity) for every resource, and no more than (node count x pods per node)
of a shape. Existing nodes with the same labels and taints (and alike memory per
core) pool their free capacity. Every node, existing or new, counts only
what the demanded pods can use of it (`usable_per_node`: free cores without
memory beside them serve no pod; loads are whole requests), and holds pod
weights of at most 1 by dual feasible functions (`_pool_dff`: one pod over half
a node, ...). While a plan's cost gap is open, the LP also holds each pool's
large pods within what they alone can fill (`tight_cost_bound`, size classes of
`usable`: a node with 3.5 free cores gives 2-core pods 2 of them, and pooled
fragments only small pods fit stop counting for large ones). Every real plan
satisfies these constraints, so the optimum -- and
CP-SAT's proven objective bound, when the time runs out -- is a lower bound
independent of the pattern set the main model used.

A bound is always reported: `fluid_bound` relaxes further (no integrality, one
resource at a time, existing nodes counted generously) and needs no solver,
so it is computed first and CP-SAT's result only ever raises it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..resources import GPU
from .budget import lp_time_limit, now, reached
from .greedy import Guide
from .params import SolveOptions, make_solver
from .problem import MICRO, Problem, memory_per_cpu_octaves
from .usable import size_classes, usable_per_node

if (
    TYPE_CHECKING
):  # CP-SAT loads (with the pandas it imports) only when the aggregate relaxation is solved
    from ortools.sat.python import cp_model


BUILD_SECONDS_PER_PAIR = 2e-5  # building the CP-SAT relaxation costs ~18 us per (shape, kind) pair


def fluid_bound(prob: Problem, placed_per_shape: dict[int, int]) -> int:
    """A lower bound in micro-dollars per hour that needs no solver.

    Pods of a shape beyond the slots every compatible existing node could give
    it at once must go on new nodes. For one resource, a new node's pods use at
    most its capacity, so such a pod costs at least the cheapest compatible
    group's price per unit of that resource times its request. Summed per
    resource, the largest sum is the bound (rounded down, with a margin for the
    float arithmetic).
    """
    R = len(prob.resources)
    total = np.zeros(R)
    for s, n in placed_per_shape.items():
        over = n
        new = []
        for kid in prob.compat[s]:
            k = prob.kinds[kid]
            if k.new:
                new.append(kid)
            else:
                over -= prob.fit_count[(s, kid)] * k.max_count
        if over <= 0 or not new:
            continue
        caps = np.array([prob.kinds[k].cap for k in new], dtype=float).reshape(len(new), R)
        cost = np.array([prob.kinds[k].cost for k in new], dtype=float)
        req = np.array(prob.shapes[s].req, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            unit = np.where(caps > 0, cost[:, None] / caps, np.inf).min(
                axis=0
            )  # cheapest price per unit
            total += over * np.where(req > 0, req * unit, 0.0)
    best = float(total.max()) if R else 0.0
    return max(0, math.floor(best * (1 - 1e-9)) - 1) if math.isfinite(best) else 0


def lower_bound(
    prob: Problem,
    placed_per_shape: dict[int, int],
    opts: SolveOptions,
    seconds: float,
    known: int = 0,
) -> tuple[int, bool]:
    """(bound in micro-dollars per hour, the aggregate relaxation was solved to optimality).

    The fluid bound always; the LP relaxation, tightened by size classes (`tight_cost_bound`), unless the caller
    passes an LP bound as `known`; the aggregate relaxation with CP-SAT when `seconds` can cover building its
    model and a short search.
    """
    start = now()
    demand = {s: n for s, n in placed_per_shape.items() if n > 0}
    if not demand:
        return 0, True
    fluid = max(known, fluid_bound(prob, demand))
    if not known and seconds - (now() - start) > 0.02:
        fluid = max(fluid, tight_cost_bound(prob, demand, start + seconds))
    pairs = sum(len(prob.compat[s]) for s in demand)
    if seconds - (now() - start) < BUILD_SECONDS_PER_PAIR * pairs + 0.1:
        return fluid, False
    found, proven = _aggregate_bound(prob, demand, opts, start + seconds)
    return max(fluid, found), proven


def lp_cost_prices(
    prob: Problem, demand: dict[int, int], deadline: float | None, parts: LPParts | None = None
) -> tuple[int, dict[int, float]]:
    """(A lower bound on the cost of placing `demand`, the LP's price of one more pod per shape in $/h: the duals
    of the cover rows, which `repack` uses to value pods). The LP is the aggregate relaxation of `_aggregate_bound`
    (GLOP): fractional node counts, existing nodes pooled (`_pools`) with their usable capacity. Every plan is a
    point of it, so its optimum is a lower bound, rounded down with a margin for the solver's tolerance. Built from
    pools, not kinds, it costs milliseconds where the CP-SAT version needs a share of a second per thousand kinds.
    (0, {}) when it cannot be solved by `deadline` (None: no limit). `parts`: another LP's pools (`GangLP.parts`),
    reused when it was built over the same shapes. Its build stops at `deadline` too."""
    lp = _cost_lp(prob, demand, deadline, parts)
    bound = None if lp is None else _solve_cost_lp(lp, deadline)
    if lp is None or bound is None:
        return 0, {}
    return bound, {sh: row.dual_value() for sh, row in lp.cover.items()}


def tight_cost_bound(
    prob: Problem,
    demand: dict[int, int],
    deadline: float | None,
    *,
    below: int | None = None,
    extra: float | None = None,
    parts: LPParts | None = None,
) -> int:
    """A lower bound on the cost of placing `demand`, at least `lp_cost_prices`'s: that LP solved by `deadline`;
    then, when its bound is below `below` (None: always), the same LP with size-class rows (`_size_class_rows`)
    re-solved from its basis within `extra` seconds more (None: by `deadline`). Every plan is a point of both LPs,
    so both optima are lower bounds; the larger is returned, floored as `lp_cost_prices` floors. 0 when the first
    is not solved in time."""
    lp = _cost_lp(prob, demand, deadline, parts)
    base = None if lp is None else _solve_cost_lp(lp, deadline)
    if lp is None or base is None:
        return 0
    if below is not None and base >= below:
        return base
    by = deadline if extra is None else now() + extra
    if deadline is not None and by is not None:
        by = min(by, deadline)
    if reached(by) or not _size_class_rows(prob, lp, by):
        return base
    tight = _solve_cost_lp(lp, by)
    return base if tight is None else max(base, tight)


@dataclass(slots=True)
class _CostLP:
    """The aggregate cost LP over one demand (GLOP), kept so rows can join it and it can be solved again."""

    solver: Any  # pywraplp.Solver (untyped)
    cover: dict[int, Any]  # per shape: its pods placed, equal to the demand
    parts: LPParts
    scale: np.ndarray  # per resource: the capacity rows' divisor (numerics)
    # (shape, a pool's first kind) -> its pods there
    uses: dict[tuple[int, int], Any] = field(default_factory=dict)
    counts: dict[int, Any] = field(default_factory=dict)  # a node group's kind -> its node count


def _cost_lp(
    prob: Problem, demand: dict[int, int], deadline: float | None, parts: LPParts | None
) -> _CostLP | None:
    """The LP of `lp_cost_prices`, built (None: past `deadline` or no LP solver): every pool's columns
    (`_lp_pool`), node counts priced at their groups' cost."""
    if reached(deadline):
        return None
    try:
        from ortools.linear_solver import pywraplp
    except Exception:  # pragma: no cover
        return None
    s = pywraplp.Solver.CreateSolver("GLOP")
    if s is None:  # pragma: no cover
        return None
    R = len(prob.resources)
    caps = np.array([k.cap for k in prob.kinds], dtype=float).reshape(len(prob.kinds), R)
    scale = np.maximum(caps.max(axis=0), 1.0) if len(prob.kinds) else np.ones(R)
    cover = {sh: s.Constraint(float(n), float(n)) for sh, n in demand.items()}
    obj = s.Objective()
    lp = _CostLP(s, cover, _lp_parts(prob, list(cover), parts), scale)
    scaled = _scaled_requests(prob, cover, scale)
    for kids, weights in zip(lp.parts.pools, lp.parts.weights, strict=False):
        if reached(deadline):
            return None
        n = _lp_pool(s, prob, kids, cover, lp.parts.view, scale, weights, scaled, lp.uses)
        if n is not None:
            obj.SetCoefficient(n, prob.kinds[kids[0]].cost / MICRO)
            lp.counts[kids[0]] = n
    obj.SetMinimization()
    return lp


def _solve_cost_lp(lp: _CostLP, deadline: float | None) -> int | None:
    """The LP's optimum in micro-dollars, floored with a margin for the solver's tolerance (None: not solved to
    optimality by `deadline`)."""
    from ortools.linear_solver import pywraplp

    s = lp.solver
    if deadline is not None:
        left = deadline - now()
        if left <= 0:
            return None
        lp_time_limit(s, left)
    if s.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return max(0, math.floor(s.Objective().Value() * MICRO * (1 - 1e-6)) - 1)


def _size_class_rows(prob: Problem, lp: _CostLP, deadline: float | None) -> bool:
    """Rows that hold each pool's large pods within what they can fill (`usable.size_classes`): per size class S
    of a resource r, sum over S of req_r u[s, pool] <= the pool's U_S (its nodes' U_S summed; n x U_S for a node
    group). Every plan meets them (`usable`'s note, node by node, summed), so the LP stays a relaxation. A row is
    left out where the pool's all-shape capacity row or its shapes' slot bounds already imply it. True if any row
    was added before `deadline`."""
    view, pools, s = lp.parts.view, lp.parts.pools, lp.solver
    order = np.fromiter((kid for kids in pools for kid in kids), dtype=np.intp)
    starts = np.cumsum([0] + [len(kids) for kids in pools[:-1]])
    # per kind: its nodes in an existing pool (multiplicity), one node of a group (whose count n multiplies it)
    weight = np.array(
        [1 if prob.kinds[k].new else prob.kinds[k].max_count for k in order], dtype=float
    )
    # per pool: its all-shape room per resource, and its slots per shape
    whole = np.add.reduceat(view.usable[order] * weight[:, None], starts, axis=0)
    slots = np.add.reduceat(view.count[order] * weight[:, None], starts, axis=0)
    added = False
    for r, S, U in size_classes(view.usable, view.req, view.fits):
        if reached(deadline):
            break
        room = np.add.reduceat(U[order] * weight, starts)  # per pool: its large pods' room in r
        implied = slots[:, S] @ view.req[S, r].astype(float)  # what their slot bounds allow already
        tighter = (room < whole[:, r] * (1 - 1e-9)) & (room < implied * (1 - 1e-9))
        for pi in np.flatnonzero(tighter).tolist():
            kid = pools[pi][0]
            terms = [(i, lp.uses.get((view.shapes[i], kid))) for i in S]
            terms = [(i, u) for i, u in terms if u is not None]
            if len(terms) < 2:
                continue
            n, rhs = lp.counts.get(kid), float(room[pi] / lp.scale[r])
            row = s.Constraint(-s.infinity(), 0.0 if n is not None else rhs)
            if n is not None:
                row.SetCoefficient(n, -rhs)
            for i, u in terms:
                row.SetCoefficient(u, float(view.req[i, r] / lp.scale[r]))
            added = True
    return added


def _scaled_requests(
    prob: Problem, cover: dict, scale: np.ndarray
) -> list[list[tuple[int, float]]]:
    """Per shape of `cover` (in its order), its nonzero requests as (resource, request / scale): the capacity rows'
    coefficients, the same in every pool, so an LP computes them once, not once per pool."""
    scales = scale.tolist()
    return [[(r, q / scales[r]) for r, q in enumerate(prob.shapes[sh].req) if q] for sh in cover]


def _lp_pool(
    s,
    prob: Problem,
    kids: list[int],
    cover: dict,
    view: _View,
    scale: np.ndarray,
    weights: dict[int, dict],
    scaled: list[list[tuple[int, float]]],
    uses: dict | None = None,
):
    """One pool's columns in an LP relaxation: pods of each shape it takes (`u`, added to the shape's `cover` row)
    within its capacity (scaled per resource) and its dual-feasible rows (`weights`: `_pool_dff`); a node group's
    count `n` is returned (None for existing nodes). `scaled`: `_scaled_requests` of `cover`, made once per LP."""
    inf = s.infinity()
    new = prob.kinds[kids[0]].new
    n = s.NumVar(0, prob.kinds[kids[0]].max_count, "") if new else None
    mult = np.array([prob.kinds[k].max_count for k in kids], dtype=np.int64)
    cap = view.usable[kids[0]] if new else (view.usable[kids] * mult[:, None]).sum(axis=0)
    # as Python numbers once (the same float64 values the per-element numpy reads gave): the loop below is per shape
    slots_of = (
        mult @ view.count[kids]
    ).tolist()  # per shape: pods of it the pool's nodes take one at a time
    per_node = view.count[kids[0]].tolist()
    room, nodes = (cap / scale).tolist(), float(mult.sum())
    rows: dict = {}
    for i, (sh, cov) in enumerate(cover.items()):
        if not slots_of[i]:
            continue
        u = s.NumVar(0, inf, "")
        cov.SetCoefficient(u, 1)
        if uses is not None:
            uses[(sh, kids[0])] = u
        if new:  # u <= per n
            slots = s.Constraint(-inf, 0)
            slots.SetCoefficient(u, 1)
            slots.SetCoefficient(n, -float(per_node[i]))
        else:
            u.SetUb(float(slots_of[i]))
        for r, coef in scaled[i]:
            row = rows.get(r)
            if row is None:  # sum req u <= cap (x n for a node group)
                row = rows[r] = s.Constraint(-inf, 0 if new else room[r])
                if new:
                    row.SetCoefficient(n, -room[r])
            row.SetCoefficient(u, coef)
        for (r, k), w in weights.get(sh, {}).items():
            row = rows.get((r, k))
            if row is None:  # sum f_k(req / U) u <= nodes (n for a node group)
                row = rows[(r, k)] = s.Constraint(-inf, 0 if new else nodes)
                if new:
                    row.SetCoefficient(n, -1.0)
            row.SetCoefficient(u, w)
    return n


@dataclass(slots=True)
class LPParts:
    """What an LP relaxation's pools are built from: the view of its shapes, the pools (`_pools`) and each pool's
    dual-feasible weights (`_pool_dff`). All of it depends on the set of shapes, not their order (usable capacity is
    a max and a gcd over the shapes, each weight is one shape's), so an LP over the same set reuses it."""

    view: _View
    pools: list[list[int]]
    weights: list[dict[int, dict]]


def _lp_parts(prob: Problem, shapes: list[int], known: LPParts | None = None) -> LPParts:
    """`LPParts` for `shapes` (in this order): `known`'s, its columns reordered, when it covers the same shapes."""
    if (
        known is not None
        and len(known.view.shapes) == len(shapes)
        and set(known.view.shapes) == set(shapes)
    ):
        v = known.view
        at = {sh: i for i, sh in enumerate(v.shapes)}
        idx = np.array([at[sh] for sh in shapes], dtype=np.int64)
        view = _View(list(shapes), v.req[idx], v.count[:, idx], v.fits[:, idx], v.usable)
        return LPParts(view, known.pools, known.weights)
    view = _view(prob, shapes)
    pools = _pools(prob, view)
    return LPParts(view, pools, _pool_dff(prob, view, pools))


DFF_ORDERS = (1, 3)  # the dual feasible functions f_k each pool's node-count rows use


def _pool_dff(prob: Problem, view: _View, pools: list[list[int]]) -> list[dict[int, dict]]:
    """Per pool, per shape, per (resource r, k in `DFF_ORDERS`), a weight w with sum_s w_s u_s <= the pool's node
    count for every placement: w_s is f_k(req_r / U_r), the dual feasible function of Fekete and Schepers
    (f_k(x) = x when (k+1)x is whole, else floor((k+1)x)/k), on the kind of the pool where it is least among
    those the shape fits (U: `view.usable`, per node). Pods whose requests sum to at most U have weights summing
    to at most 1 by f_k, so at most 1 by w on each node. Zero weights are left out. Every pool at once: the kinds
    in pool order, the per-pool least and largest by `reduceat` (the same numbers as pool by pool)."""
    if not pools:
        return []
    shapes = view.shapes
    q = view.req
    order = np.fromiter((kid for kids in pools for kid in kids), dtype=np.intp)
    starts = np.cumsum([0] + [len(kids) for kids in pools[:-1]])
    cap = np.floor(view.usable[order]).astype(np.int64)  # kinds x resources
    fits = view.fits[order]
    safe = np.maximum(cap, 1)[:, None, :]  # kinds x 1 x resources
    allowed = fits[:, :, None] & (cap[:, None, :] > 0) & (q[None] > 0)
    # pools x 1 x resources:
    share = q[None] / np.maximum(np.maximum.reduceat(cap, starts, axis=0), 1)[:, None, :]
    # the weight the capacity row gives, on the pool's largest node
    out: list[dict[int, dict]] = [{} for _ in pools]
    for k in DFF_ORDERS:
        whole, rest = np.divmod((k + 1) * q[None], safe)  # kinds x shapes x resources
        f = np.where(
            allowed, np.where(whole > 0, np.where(rest > 0, whole / k, q[None] / safe), 0.0), np.inf
        )
        least = np.minimum.reduceat(f, starts, axis=0)  # pools x shapes x resources
        w = np.where(np.isfinite(least), least, 0.0)
        useful = (w > share + 1e-12).any(
            axis=1
        )  # pools x resources; other rows add nothing: left out
        for pi, r in zip(*(a.tolist() for a in np.nonzero(useful)), strict=False):
            weights = out[pi]
            for i in np.flatnonzero(w[pi, :, r] > 0).tolist():
                weights.setdefault(shapes[i], {})[(r, k)] = float(w[pi, i, r])
    return out


def _aggregate_bound(
    prob: Problem, demand: dict[int, int], opts: SolveOptions, deadline: float
) -> tuple[int, bool]:
    """Cheapest nodes for `demand` (pods per shape) with existing nodes pooled by what decides compatibility:
    a relaxation, so its optimum (or proven bound) is a lower bound on any plan's cost."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    use: dict[int, list] = {s: [] for s in demand}
    view = _view(prob, list(demand))
    for kids in _pools(prob, view, groups=False):
        _add_pool(m, prob, kids, demand, use, view)
    cost_terms = [_add_group_kind(m, prob, k, demand, use, view) for k in prob.kinds if k.new]
    for s, n in demand.items():
        m.add(sum(use[s]) == n)
    if not cost_terms:
        return 0, True
    m.minimize(sum(cost_terms))
    return _solve_bound(m, opts, deadline)


def _pools(prob: Problem, view: _View, groups: bool = True) -> list[list[int]]:
    """Kinds pooled by what decides compatibility: existing nodes by labels and taints, split further by the
    memory per core (powers of two) and GPUs of their usable capacity (`view`), one capacity pool each;
    every node group alone (left out with `groups=False`); in kind order. Any partition of the existing nodes is
    valid (a pool only adds up what its nodes hold); splitting by ratio keeps a cpu-rich node's cores from
    serving a memory-rich node's pods in the relaxation."""
    pools: dict[tuple, list[int]] = {}
    existing = [k.kid for k in prob.kinds if not k.new]
    bucket = dict(zip(existing, _ratio_buckets(prob, view.usable[existing]), strict=False))
    for k in prob.kinds:
        if not k.new:
            pools.setdefault((tuple(sorted(k.labels.items())), k.taints, bucket[k.kid]), []).append(
                k.kid
            )
        elif groups:
            pools[("new", k.kid)] = [k.kid]
    return list(pools.values())


def _ratio_buckets(prob: Problem, usable: np.ndarray) -> list[tuple]:
    """Per row of `usable`: (floor of log2 of its memory per cpu, it has GPUs); () without those resources."""
    names = prob.resources
    octaves = memory_per_cpu_octaves(names, usable)
    if octaves is None or not len(usable):
        return [()] * len(usable)
    gpu = usable[:, names.index(GPU)] > 0 if GPU in names else np.zeros(len(usable), bool)
    ratio = np.floor(octaves).astype(np.int64)
    return list(zip(ratio.tolist(), gpu.tolist(), strict=False))


@dataclass(slots=True)
class _View:
    """Every kind's usable capacity per node for pods of `shapes` (`usable_per_node`), computed once per model."""

    shapes: list[int]
    req: np.ndarray  # shapes x resources (int64)
    count: (
        np.ndarray
    )  # kinds x shapes: pods of the shape one node of the kind takes (`fit_count`, 0: none)
    fits: np.ndarray  # count > 0
    usable: np.ndarray  # kinds x resources


def _view(prob: Problem, shapes: list[int]) -> _View:
    R = len(prob.resources)
    req = np.array([prob.shapes[s].req for s in shapes], dtype=np.int64).reshape(len(shapes), R)
    count = np.zeros((len(prob.kinds), len(shapes)), dtype=np.int64)
    for i, s in enumerate(shapes):
        count[list(prob.compat[s]), i] = [prob.fit_count[(s, k)] for k in prob.compat[s]]
    fits = count > 0
    cap = np.array([k.cap for k in prob.kinds], dtype=float).reshape(len(prob.kinds), R)
    return _View(shapes, req, count, fits, usable_per_node(cap, req, fits))


def _add_load(prob: Problem, load: list[list], s: int, u) -> None:
    """Append shape `s`'s requests times `u` to the per-resource load sums."""
    for r, q in enumerate(prob.shapes[s].req):
        if q:
            load[r].append(q * u)


def _add_pool(
    m: cp_model.CpModel,
    prob: Problem,
    kids: list[int],
    demand: dict[int, int],
    use: dict[int, list],
    view: _View,
) -> None:
    """Pods of each shape placed on one pool of existing nodes, within its summed capacity."""
    R = len(prob.resources)
    mult = np.array([prob.kinds[k].max_count for k in kids], dtype=float)
    cap = np.floor((view.usable[kids] * mult[:, None]).sum(axis=0)).astype(np.int64).tolist()
    load: list[list] = [[] for _ in range(R)]
    for s, n in demand.items():
        slots = sum(prob.fit_count.get((s, k), 0) * prob.kinds[k].max_count for k in kids)
        if slots <= 0:
            continue
        u = m.new_int_var(0, min(n, slots), "")
        use[s].append(u)
        _add_load(prob, load, s, u)
    for r in range(R):
        if load[r]:
            m.add(sum(load[r]) <= cap[r])


def _add_group_kind(
    m: cp_model.CpModel, prob: Problem, k, demand: dict[int, int], use: dict[int, list], view: _View
):
    """New nodes of one node group and the pods of each shape they take; returns the group's cost term."""
    R = len(prob.resources)
    n_k = m.new_int_var(0, k.max_count, "")
    load: list[list] = [[] for _ in range(R)]
    for s, n in demand.items():
        per = prob.fit_count.get((s, k.kid), 0)
        if per <= 0:
            continue
        u = m.new_int_var(0, n, "")
        use[s].append(u)
        m.add(u <= per * n_k)
        _add_load(prob, load, s, u)
    cap = np.floor(view.usable[k.kid]).astype(np.int64).tolist()
    for r in range(R):
        if load[r]:
            m.add(sum(load[r]) <= cap[r] * n_k)
    return k.cost * n_k


def _solve_bound(m: cp_model.CpModel, opts: SolveOptions, deadline: float) -> tuple[int, bool]:
    """(bound, proven optimal) within the time left; 0 is always a valid bound."""
    left = deadline - now()
    if left < 0.05:
        return 0, False
    from ortools.sat.python import cp_model

    solver = make_solver(opts, left)
    status = solver.solve(m)
    if status == cp_model.OPTIMAL:
        return int(round(solver.objective_value)), True
    if status == cp_model.FEASIBLE:
        return max(0, math.floor(solver.best_objective_bound)), False
    return 0, False  # no bound proven in time (or the relaxation is infeasible): 0 is always valid


# ------------------------------------------------------------- gangs (first objective)

# ~5 us per class, gang and (shape, kind) pair to build the gang LP; doubled
LP_BUILD_SECONDS = 1e-5
# 0.25-0.8 ms per node group (each its own pool, rows per resource) on a busy machine
LP_GROUP_SECONDS = 2e-4


def lp_size(prob: Problem) -> int:
    return len(prob.classes) + len(prob.gangs) + sum(len(k) for k in prob.compat)


def lp_seconds(prob: Problem) -> float:
    """What building the gang LP is expected to take (its first solve about as much again)."""
    return LP_BUILD_SECONDS * lp_size(prob) + LP_GROUP_SECONDS * sum(1 for k in prob.kinds if k.new)


GUIDE_COST_WEIGHT = 0.5  # gangs: the guide's cost term at its largest (every node group full)
# nodes: a node group the guide's LP uses within this of its headroom is full (tolerance)
GUIDE_SLACK = 1e-6
# an LP optimum is floored after adding this: GLOP's tolerances never cost soundness
LP_SLACK = 1e-4


@dataclass(slots=True)
class TierBound:
    """One priority level: what a plan achieved and what no plan (of the planner's lexicographic aim) can beat."""

    priority: int
    gangs: int  # gangs the plan starts (quorum reached)
    pods: int  # pods the plan places at this level
    gangs_bound: int  # upper bound on gangs started by the lexicographically best plan
    pods_bound: int | None  # upper bound on its pods at this level (None: not computed)


def tier_counts(prob: Problem, y: list[int], satisfied: list[bool]) -> list[TierBound]:
    """Per priority level (highest first): gangs started and pods placed by a plan; bounds left open."""
    levels = sorted({g.priority for g in prob.gangs}, reverse=True)
    out = []
    for lvl in levels:
        gs = [g for g in prob.gangs if g.priority == lvl]
        started = sum(1 for g in gs if g.is_gang and satisfied[g.gid])
        pods = sum(y[c] for g in gs for c in g.classes)
        out.append(TierBound(lvl, started, pods, sum(1 for g in gs if g.is_gang), None))
    return out


def gang_lp(prob: Problem, deadline: float | None = None) -> GangLP | None:
    """The relaxation R of `gangs_upper_bound`, built once for the greedy's guide and the bound (None: no time to
    build it by `deadline`, or no LP solver)."""
    if deadline is not None and now() + LP_BUILD_SECONDS * lp_size(prob) > deadline:
        return None
    try:
        return GangLP(prob, deadline)
    except Exception:  # pragma: no cover - no LP solver
        return None


def gangs_upper_bound(
    prob: Problem, tiers: list[TierBound], deadline: float | None = None, lp: GangLP | None = None
) -> list[TierBound]:
    """Fill in `gangs_bound` / `pods_bound` per priority level from an aggregate-capacity LP relaxation.

    Soundness. The planner's aim is lexicographic by priority level L1 > L2 > ...:
    (gangs started at L1, pods placed at L1, gangs at L2, pods at L2, ...); call its optimum O. The relaxation
    R keeps, of a plan, only: a gang g started (x_g = 1) places between need_g and all of its pods, an unstarted
    gang none (y_c <= count_c x_g, sum y_c >= need_g x_g); basic pods freely; and pods of a shape go to
    compatible bin kinds (u[s,k]) whose *aggregate* capacity -- usable free capacity (`usable_per_node`) summed
    over existing nodes with the same labels and taints (and alike memory per core), n_k x usable allocatable
    for n_k <= headroom new nodes -- covers their requests in every resource, their count in pods-per-node
    slots and their dual-feasible weights in node counts (`_pool_dff`). Every plan satisfies all of this (with x, n
    integral), so O is a point of R, and so is the LP relaxation of R (x, n fractional). Hence:
      * G1(O) <= max G1 over R. The plan in hand is feasible, so G1(O) >= its G1 (O is lexicographically at
        least as good), and P1(O) <= max P1 over R with G1 >= plan's G1.
      * If the plan's G1 equals its bound and its P1 equals that pods bound, O agrees with it on level 1, so
        G2(O) >= plan's G2 may join the constraints for the next level's bounds; otherwise only the levels
        already proven equal are held, which is weaker but still sound.
    Each LP optimum is floored (after `LP_SLACK` for solver tolerance). `tests/test_gang_bound.py` checks the
    bounds against brute force on small clusters. Past `deadline` the bounds not yet computed stay trivial
    (every gang of the level). `lp`: the relaxation already built (`gang_lp`), whose solves are remembered.
    """
    if not tiers:
        return tiers
    lp = lp or gang_lp(prob, deadline)
    if lp is None:
        return tiers  # no time to build the LP (or no solver): the trivial bounds stand
    lp.deadline = deadline
    held: list[tuple[int, TierBound]] = []  # levels whose plan counts O is proven to match
    for t in tiers:
        ub = lp.maximize(gangs_of=t.priority, held=held, floor_gangs=None)
        t.gangs_bound = max(t.gangs, min(t.gangs_bound, ub)) if ub is not None else t.gangs_bound
        pb = lp.maximize(pods_of=t.priority, held=held, floor_gangs=(t.priority, t.gangs))
        t.pods_bound = max(t.pods, pb) if pb is not None else None
        if t.gangs_bound == t.gangs and t.pods_bound == t.pods:
            held.append((t.priority, t))
        else:
            break  # below an open level no plan count can be held: the remaining bounds ignore the plan
    for t in tiers[len(held) + 1 :]:
        ub = lp.maximize(gangs_of=t.priority, held=held, floor_gangs=None)
        if ub is not None:
            t.gangs_bound = max(t.gangs, min(t.gangs_bound, ub))
    return tiers


def _memo_key(
    held: list, floor_gangs: tuple[int, int] | None, gangs_of: int | None, pods_of: int | None
) -> tuple:
    return gangs_of, pods_of, floor_gangs, tuple((lvl, t.gangs, t.pods) for lvl, t in held)


class GangLP:
    """The relaxation R of `gangs_upper_bound` as one GLOP model; objectives and held levels vary per call."""

    def __init__(self, prob: Problem, deadline: float | None = None) -> None:
        from ortools.linear_solver import pywraplp

        self.prob = prob
        self.deadline = deadline
        s = self.solver = pywraplp.Solver.CreateSolver("GLOP")
        if s is None:  # pragma: no cover
            raise RuntimeError("GLOP unavailable")
        R = len(prob.resources)
        caps = np.array([k.cap for k in prob.kinds], dtype=float).reshape(len(prob.kinds), R)
        # per resource, for numerics
        scale = np.maximum(caps.max(axis=0), 1.0) if len(prob.kinds) else np.ones(R)
        inf = s.infinity()
        self.x = {g.gid: s.NumVar(0, 1, "") for g in prob.gangs if g.is_gang}
        self.y = [s.NumVar(0, c.count, "") for c in prob.classes]
        for (
            g
        ) in prob.gangs:  # (raw constraints: pywraplp's expression sums cost ~10x more to build)
            if g.is_gang:
                x = self.x[g.gid]
                quorum = s.Constraint(0, inf)  # sum y_c - need x >= 0
                quorum.SetCoefficient(x, -g.need)
                for c in g.classes:
                    link = s.Constraint(0, inf)  # count_c x - y_c >= 0
                    link.SetCoefficient(x, prob.classes[c].count)
                    link.SetCoefficient(self.y[c], -1)
                    quorum.SetCoefficient(self.y[c], 1)
        cover: dict[int, Any] = {}  # per shape: sum u - sum y == 0
        for pc in prob.classes:
            if pc.shape not in cover:
                cover[pc.shape] = s.Constraint(0, 0)
            cover[pc.shape].SetCoefficient(self.y[pc.cid], -1)
        self.parts = _lp_parts(prob, list(cover))  # (`lp_cost_prices` reuses them)
        self.n: dict[int, Any] = {}  # per node group kind: its node count
        self.uses: dict[
            tuple[int, int], Any
        ] = {}  # (shape, first kind of a pool) -> pods of the shape there
        scaled = _scaled_requests(prob, cover, scale)
        for kids, weights in zip(self.parts.pools, self.parts.weights, strict=False):
            n = _lp_pool(s, prob, kids, cover, self.parts.view, scale, weights, scaled, self.uses)
            if n is not None:
                self.n[kids[0]] = n
        self.extra: list = []
        self.memo: dict[tuple, int | None] = {}  # each objective under each held set is solved once

    def _gangs(self, lvl: int):
        return [self.x[g.gid] for g in self.prob.gangs if g.is_gang and g.priority == lvl]

    def _pods(self, lvl: int):
        return [self.y[c] for g in self.prob.gangs if g.priority == lvl for c in g.classes]

    def maximize(
        self,
        *,
        held: list,
        floor_gangs: tuple[int, int] | None,
        gangs_of: int | None = None,
        pods_of: int | None = None,
    ) -> int | None:
        """Floor of the LP optimum of one level's gangs (or pods), the held levels' counts at least the plan's."""
        key = _memo_key(held, floor_gangs, gangs_of, pods_of)
        if self.memo.get(key) is None:  # (a solve cut by its deadline may be tried again)
            self.memo[key] = self._solve(held, floor_gangs, gangs_of, pods_of)
        return self.memo[key]

    def _solve(
        self,
        held: list,
        floor_gangs: tuple[int, int] | None,
        gangs_of: int | None,
        pods_of: int | None,
    ) -> int | None:
        from ortools.linear_solver import pywraplp

        s = self.solver
        terms = self._gangs(gangs_of) if gangs_of is not None else self._pods(cast(int, pods_of))
        if not self._objective(terms, held, floor_gangs):
            return 0
        if not self._in_time():
            return None
        if s.Solve() != pywraplp.Solver.OPTIMAL:
            return None  # nothing proven: the caller keeps its trivial bound
        return math.floor(s.Objective().Value() + LP_SLACK)

    def _objective(self, terms: list, held: list, floor_gangs: tuple[int, int] | None) -> bool:
        """Maximize the sum of `terms` (False: none), the held levels' counts at least the plan's."""
        s = self.solver
        for c in self.extra:
            c.SetBounds(-s.infinity(), s.infinity())
        self.extra = []
        for lvl, t in held:
            for held_terms, at_least in ((self._gangs(lvl), t.gangs), (self._pods(lvl), t.pods)):
                if held_terms:
                    self.extra.append(s.Add(sum(held_terms) >= at_least))
        if floor_gangs is not None and self._gangs(floor_gangs[0]):
            self.extra.append(s.Add(sum(self._gangs(floor_gangs[0])) >= floor_gangs[1]))
        obj = s.Objective()
        obj.Clear()
        for v in terms:
            obj.SetCoefficient(v, 1)
        obj.SetMaximization()
        return bool(terms)

    def _in_time(self) -> bool:
        """The solver's time limit set to what is left before the deadline; False when nothing is."""
        if self.deadline is not None:
            left = self.deadline - now()
            if left <= 0:
                return False
            lp_time_limit(self.solver, left)
        return True

    def guide(self) -> Guide | None:
        """For the greedy (`greedy.Guide`): the top level's gangs maximized less a cost term worth at most
        `GUIDE_COST_WEIGHT` gangs, so of the plans starting about as many, a cheap one (one solve, where two stages
        -- the most gangs, then least cost for that many -- take 10x longer at 100k pods). Read from it: per gang
        of that level the share started, per (shape, node-group kind) the pods put there, and the node groups
        used to their headroom. None when every gang of the level fits the relaxation (the bound's first solve,
        done next and remembered: it then ranks none of them, and the greedy's price order stands), or when not
        solved in time."""
        from ortools.linear_solver import pywraplp

        s, prob = self.solver, self.prob
        lvl = max((g.priority for g in prob.gangs if g.is_gang), default=None)
        if lvl is None:
            return None
        if not self._objective(self._gangs(lvl), [], None) or not self._in_time():
            return None
        spend = sum(prob.kinds[kid].cost * prob.kinds[kid].max_count for kid in self.n)
        obj = s.Objective()
        for kid, n in self.n.items():
            obj.SetCoefficient(
                n, -GUIDE_COST_WEIGHT * prob.kinds[kid].cost / spend if spend else 0.0
            )
        if s.Solve() != pywraplp.Solver.OPTIMAL:
            return None
        started = _oldest_first(
            prob,
            {
                g.gid: self.x[g.gid].solution_value()
                for g in prob.gangs
                if g.is_gang and g.priority == lvl
            },
        )
        allot = np.zeros((len(prob.shapes), len(prob.kinds)))
        for (sh, kid), u in self.uses.items():
            if kid in self.n:
                allot[sh, kid] = u.solution_value()
        full = np.zeros(len(prob.kinds), dtype=bool)
        for kid, n in self.n.items():
            full[kid] = n.solution_value() >= prob.kinds[kid].max_count - GUIDE_SLACK
        most = self.maximize(
            gangs_of=lvl, held=[], floor_gangs=None
        )  # the bound's first solve, remembered
        if most is None or most >= len(started):
            return None
        return Guide(started, allot, full)


def _oldest_first(prob: Problem, started: dict[int, float]) -> dict[int, float]:
    """The LP's shares of interchangeable gangs (the same pods per shape, quorum and topology keys) handed to the
    oldest first: the LP is indifferent between them, kube-scheduler's queue is not (PrioritySort: priority, then
    creation time), and with a cap only some of them can start (tests/controller/test_faults_asg.py: under a
    one-node cap the oldest of twenty one-node gangs is the one bought for)."""
    alike: dict[tuple, list[int]] = {}
    for gid in started:
        g = prob.gangs[gid]
        key = (
            g.need,
            g.pending,
            g.gang.topology_keys,
            tuple(sorted((prob.classes[c].shape, prob.classes[c].count) for c in g.classes)),
        )
        alike.setdefault(key, []).append(gid)
    out = dict(started)
    for gids in alike.values():
        if len(gids) > 1:
            shares = sorted((started[g] for g in gids), reverse=True)
            by_age = sorted(
                gids,
                key=lambda g: (
                    prob.gangs[g].gang.created,
                    prob.gangs[g].gang.namespace,
                    prob.gangs[g].gang.name,
                ),
            )
            out.update(zip(by_age, shares, strict=False))
    return out
