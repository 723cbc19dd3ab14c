"""A proven lower bound on the hourly cost of placing the same pods.

The bound relaxes bin packing to aggregate capacity: pods of a shape are
spread over compatible kinds, a kind's pods must fit in (node count x
capacity) for every resource, and no more than (node count x pods per node)
of a shape. Existing nodes with the same labels and taints pool their free
capacity. Every real plan satisfies these constraints, so the optimum -- and
CP-SAT's proven objective bound, when the time runs out -- is a lower bound
independent of the pattern set the main model used.

A bound is always reported: `fluid_bound` relaxes further (no integrality, one
resource at a time, existing nodes counted generously) and needs no solver,
so it is computed first and CP-SAT's result only ever raises it.
"""

from __future__ import annotations

import math
import time

import numpy as np
from ortools.sat.python import cp_model

from .params import SolveOptions, make_solver
from .problem import Problem


BUILD_SECONDS_PER_PAIR = 2e-5  # measured: building the CP-SAT relaxation costs ~18 us per (shape, kind) pair


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
            unit = np.where(caps > 0, cost[:, None] / caps, np.inf).min(axis=0)  # cheapest price per unit
            total += over * np.where(req > 0, req * unit, 0.0)
    best = float(total.max()) if R else 0.0
    return max(0, math.floor(best * (1 - 1e-9)) - 1) if math.isfinite(best) else 0


def lower_bound(prob: Problem, placed_per_shape: dict[int, int], opts: SolveOptions, seconds: float) -> tuple[int, bool]:
    """(bound in micro-dollars per hour, the aggregate relaxation was solved to optimality).

    The fluid bound always; the aggregate relaxation with CP-SAT when `seconds`
    can cover building its model and a short search.
    """
    start = time.perf_counter()
    demand = {s: n for s, n in placed_per_shape.items() if n > 0}
    if not demand:
        return 0, True
    fluid = fluid_bound(prob, demand)
    pairs = sum(len(prob.compat[s]) for s in demand)
    if seconds - (time.perf_counter() - start) < BUILD_SECONDS_PER_PAIR * pairs + 0.1:
        return fluid, False
    found, proven = _aggregate_bound(prob, demand, opts, start + seconds)
    return max(fluid, found), proven


def _aggregate_bound(prob: Problem, demand: dict[int, int], opts: SolveOptions, deadline: float) -> tuple[int, bool]:
    m = cp_model.CpModel()
    R = len(prob.resources)

    # existing kinds -> pools keyed by what decides compatibility
    pools: dict[tuple, list[int]] = {}
    for k in prob.kinds:
        if not k.new:
            pools.setdefault((tuple(sorted(k.labels.items())), k.taints), []).append(k.kid)

    use: dict[int, list] = {s: [] for s in demand}
    cost_terms = []
    for kids in pools.values():
        cap = [sum(prob.kinds[k].cap[r] * prob.kinds[k].max_count for k in kids) for r in range(R)]
        load = [[] for _ in range(R)]
        for s, n in demand.items():
            slots = sum(prob.fit_count.get((s, k), 0) * prob.kinds[k].max_count for k in kids)
            if slots <= 0:
                continue
            u = m.new_int_var(0, min(n, slots), "")
            use[s].append(u)
            for r in range(R):
                if prob.shapes[s].req[r]:
                    load[r].append(prob.shapes[s].req[r] * u)
        for r in range(R):
            if load[r]:
                m.add(sum(load[r]) <= cap[r])
    for k in prob.kinds:
        if not k.new:
            continue
        n_k = m.new_int_var(0, k.max_count, "")
        cost_terms.append(k.cost * n_k)
        load = [[] for _ in range(R)]
        for s, n in demand.items():
            per = prob.fit_count.get((s, k.kid), 0)
            if per <= 0:
                continue
            u = m.new_int_var(0, n, "")
            use[s].append(u)
            m.add(u <= per * n_k)
            for r in range(R):
                if prob.shapes[s].req[r]:
                    load[r].append(prob.shapes[s].req[r] * u)
        for r in range(R):
            if load[r]:
                m.add(sum(load[r]) <= k.cap[r] * n_k)
    for s, n in demand.items():
        m.add(sum(use[s]) == n)
    if not cost_terms:
        return 0, True
    m.minimize(sum(cost_terms))
    left = deadline - time.perf_counter()
    if left < 0.05:
        return 0, False
    solver = make_solver(opts, left)
    status = solver.solve(m)
    if status == cp_model.OPTIMAL:
        return int(round(solver.objective_value)), True
    if status == cp_model.FEASIBLE:
        return max(0, math.floor(solver.best_objective_bound)), False
    return 0, False  # no bound proven in time (or the relaxation is infeasible): 0 is always valid
