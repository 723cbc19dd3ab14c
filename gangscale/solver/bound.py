"""A proven lower bound on the hourly cost of placing the same pods.

The bound relaxes bin packing to aggregate capacity: pods of a shape are
spread over compatible kinds, a kind's pods must fit in (node count x
capacity) for every resource, and no more than (node count x pods per node)
of a shape. Existing nodes with the same labels and taints pool their free
capacity. Every real plan satisfies these constraints, so the optimum -- and
CP-SAT's proven objective bound, when the time runs out -- is a lower bound
independent of the pattern set the main model used.
"""

from __future__ import annotations

import math

from ortools.sat.python import cp_model

from .params import SolveOptions, make_solver
from .problem import Problem


def lower_bound(prob: Problem, placed_per_shape: dict[int, int], opts: SolveOptions, seconds: float) -> tuple[int, bool]:
    """(bound in micro-dollars per hour, proven optimal for the relaxation)."""
    demand = {s: n for s, n in placed_per_shape.items() if n > 0}
    if not demand:
        return 0, True
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
    solver = make_solver(opts, seconds)
    status = solver.solve(m)
    if status == cp_model.OPTIMAL:
        return int(round(solver.objective_value)), True
    if status == cp_model.FEASIBLE:
        return max(0, math.floor(solver.best_objective_bound)), False
    return 0, False  # no bound proven in time (or the relaxation is infeasible): 0 is always valid
