"""Gang exchange: a started gang taken out for a gang left out that places more pods, at one priority level.

Why: the greedy starts the quorums that use the least scarce capacity first, which is what starts the most gangs,
but among gangs of equal weight it cannot see which ones place the most pods. On `gpumix-3k` every training gang
needs one launcher pod on a small CPU group that holds 36 of them; the greedy gives them to 5-pod gangs (a launcher
and four 8-GPU workers) while 33-pod gangs of the same launcher, whose workers have room on the 8-GPU nodes, stay
out: 2,407 pods at 430 gangs, where the best plan of 430 gangs places 2,531.

Contract. Each exchange takes one started gang S out and starts one gang L left out in its place (L's best
topology domain by the greedy's own trials), where both are gangs of the same priority level and L then places
more pods than S held; so every level keeps its gangs, and the pods of L's level grow (the levels below keep
theirs: their pods stay where they are). Only S's pods move; every bin stays within its room, every node group
within its headroom, every gang whole or out. The gangs left out are tried largest first, each against the
started gangs of fewer pods that hold nodes it could use, fewest pods first (of several that hold the same
make-up on the same node groups, only the first); a gang that fits with nothing taken out is started as it is.
Last, the greedy's passes over what is still left out (a gang taken out may fit elsewhere). Bounded by work
(`EXCHANGE_TRIALS` trial placements), so the plan does not depend on the machine's load; `deadline` only cuts
a runaway. A plan with zone topology spread (`Problem.spread`) is left as it is: taking carriers out can break
the skew its deal was made for.
"""

from __future__ import annotations

import numpy as np

from .budget import past
from .greedy import (
    Assignment,
    _assignment,
    _Chooser,
    _place_gang,
    _place_in_order,
    _signature,
    _State,
    _state_of,
    candidate_domains,
    placement_rank,
    quorum_order,
)
from .problem import Problem

EXCHANGE_TRIALS = 1500  # trial placements, at most (gpumix-3k: ~130, target-100k: ~160)
# started gangs, per gang left out, tried though their pods request less than it lacks
UNCOVERED_TRIES = 2


def exchanged(
    prob: Problem, a: Assignment, deadline: float | None = None, trials: int = EXCHANGE_TRIALS
) -> Assignment | None:
    """Plan `a` with gangs exchanged (module docstring); None when no exchange places more, `a` was cut short,
    an existing bin of `a` names no node of the problem, or the problem has a zone topology spread."""
    if a.stopped_early or prob.spread is not None or not _may_gain(prob, a):
        return None
    st = _state_of(prob, a)
    if st is None:
        return None
    ex = _Exchange(prob, st, list(a.satisfied), list(a.domain), deadline, trials)
    if not ex.run():
        return None
    order = a.order or quorum_order(prob)
    _place_in_order(st, prob, order, ex.satisfied, ex.domain, deadline, tried=True)
    out = _assignment(prob, st, ex.satisfied, ex.domain, False, order)
    return out if placement_rank(prob, out)[:-1] > placement_rank(prob, a)[:-1] else None


def _may_gain(prob: Problem, a: Assignment) -> bool:
    """Some gang left out has more pods pending than a started gang of its level holds (else no exchange gains)."""
    fewest: dict[int, int] = {}
    for g in prob.gangs:
        if g.is_gang and a.satisfied[g.gid]:
            pods = sum(a.y[c] for c in g.classes)
            fewest[g.priority] = min(fewest.get(g.priority, pods), pods)
    return any(
        g.is_gang and not a.satisfied[g.gid] and g.pending > fewest.get(g.priority, g.pending)
        for g in prob.gangs
    )


class _Held:
    """What the started gangs hold, as rows (gang, bin kind, bin, class, pods) of numpy arrays, so the gangs that
    hold room on given node groups are found in one vector operation; a gang taken out loses its rows."""

    def __init__(self, prob: Problem, st: _State) -> None:
        self.prob, self.st = prob, st
        rows = [
            (prob.classes[cid].gang, int(st.kind[b]), b, cid, n)
            for b in range(st.n)
            for cid, n in st.contents[b].items()
            if n
        ]
        self.rows = np.array(rows, dtype=np.int64).reshape(-1, 5)
        self.alive = np.ones(len(self.rows), dtype=bool)
        self.of: dict[int, list[int]] = {}
        for i, g in enumerate(self.rows[:, 0].tolist()):
            self.of.setdefault(g, []).append(i)
        self.pods = np.zeros(len(prob.gangs), dtype=np.int64)  # per gang, the pods it holds
        np.add.at(self.pods, self.rows[:, 0], self.rows[:, 4])
        self.shape = np.array([c.shape for c in prob.classes], dtype=np.int64)

    def holding(self, gid: int) -> list[tuple[int, int, int]]:
        """(bin, class, pods) of gang `gid`."""
        return [tuple(self.rows[i, 2:].tolist()) for i in self.of.get(gid, [])]

    def kinds(self, gid: int) -> tuple[int, ...]:
        return tuple(sorted({int(self.rows[i, 1]) for i in self.of.get(gid, [])}))

    def drop(self, gid: int) -> None:
        self.alive[self.of.pop(gid, [])] = False
        self.pods[gid] = 0

    def add(self, gid: int, placed: list[tuple[int, int, int]]) -> None:
        new = [(gid, int(self.st.kind[b]), b, cid, n) for b, cid, n in placed]
        start = len(self.rows)
        self.rows = np.concatenate([self.rows, np.array(new, dtype=np.int64).reshape(-1, 5)])
        self.alive = np.concatenate([self.alive, np.ones(len(new), dtype=bool)])
        self.of[gid] = list(range(start, len(self.rows)))
        self.pods[gid] = sum(n for _, _, n in placed)

    def freed(
        self, gangs: np.ndarray, short: np.ndarray, need: np.ndarray
    ) -> list[tuple[int, bool]]:
        """(gang, covers) for the gangs of mask `gangs` with pods on kinds `short`: those whose pods there request
        at least `need` first, then the others; fewest pods first, then gang order."""
        rows = self.rows
        m = self.alive & short[rows[:, 1]] & gangs[rows[:, 0]]
        if not m.any():
            return []
        g = rows[m, 0]
        load = rows[m, 4][:, None] * self.prob.arrays.req[self.shape[rows[m, 3]]]
        total = np.zeros((len(self.prob.gangs), load.shape[1]), dtype=np.int64)
        np.add.at(total, g, load)
        # the gangs in order, without np.unique (which loads numpy.ma on its first call)
        cand = np.flatnonzero(np.bincount(g, minlength=len(self.prob.gangs)))
        covers = np.asarray((total[cand] >= need).all(axis=1), dtype=bool)
        order = np.lexsort((cand, self.pods[cand], ~covers))
        return [(int(cand[i]), bool(covers[i])) for i in order]


class _Exchange:
    """The state of one exchange run: the greedy state, who is started where, and the trials left."""

    def __init__(
        self,
        prob: Problem,
        st: _State,
        satisfied: list[bool],
        domain: list[tuple[str, ...] | None],
        deadline: float | None,
        trials: int,
    ) -> None:
        self.prob, self.st, self.satisfied, self.domain = prob, st, satisfied, domain
        self.deadline, self.trials = deadline, trials
        self.chooser = _Chooser()
        self.held = _Held(prob, st)
        self.is_gang = np.array([g.is_gang for g in prob.gangs], dtype=bool)
        self.level = np.array([g.priority for g in prob.gangs], dtype=np.int64)

    def _out_of_work(self) -> bool:
        return self.trials <= 0 or past(self.deadline)

    def run(self) -> bool:
        """Every gang left out, largest first, tried once against the started ones (a gang taken out joins the
        queue); True when an exchange was made."""
        prob = self.prob
        queue = sorted(
            (g.gid for g in prob.gangs if g.is_gang and not self.satisfied[g.gid]),
            key=lambda g: (-prob.gangs[g].priority, -prob.gangs[g].pending, g),
        )
        made, tried = False, set()
        while queue and not self._out_of_work():
            gid = queue.pop(0)
            if gid in tried or self.satisfied[gid]:
                continue
            tried.add(gid)
            out = self._start(gid)
            if out is None:
                continue
            made = True
            if out >= 0:  # the gang taken out may replace a smaller one in turn
                tried.discard(out)
                queue.append(out)
                queue.sort(key=lambda g: (-prob.gangs[g].priority, -prob.gangs[g].pending, g))
        return made

    def _start(self, gid: int) -> int | None:
        """Start gang `gid`: as it is (-1), or in place of the started gang returned; None when neither."""
        short = self._short(gid)
        if short is None:
            return -1 if self._try(gid, None) else None
        info = self.prob.gangs[gid]
        gangs = np.array(self.satisfied, dtype=bool) & self.is_gang
        gangs &= (self.level == info.priority) & (self.held.pods < info.pending)
        seen: set[tuple] = set()
        misses = 0
        for other, covers in self.held.freed(gangs, *short):
            if self._out_of_work():
                return None
            if not covers and misses >= UNCOVERED_TRIES:
                return None  # the rest cover less than the gang lacks too
            key = (_signature(self.prob, other), self.domain[other], self.held.kinds(other))
            if key in seen:
                continue
            seen.add(key)
            if self._try(gid, other):
                return other
            misses += not covers
        return None

    def _short(self, gid: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Where gang `gid` runs short, placed alone in each of its topology domains (then undone): the kinds its
        classes that do not all fit may use, in any domain, and the requests of the pods short in the domain with
        fewest of them; None when it reaches its quorum in one of them."""
        st, prob = self.st, self.prob
        info, base = prob.gangs[gid], prob.arrays
        kinds = np.zeros(len(prob.kinds), dtype=bool)
        need, fewest = np.zeros(len(prob.resources), dtype=np.int64), None
        for d in candidate_domains(prob, gid):
            self.trials -= 1
            mark = len(st.log)
            placed = _place_gang(st, prob, gid, d)
            lack = [(c, prob.classes[c].count - st.y[c]) for c in info.classes]
            st.undo(mark)
            if placed >= max(info.need, 1):
                return None
            lack = [(c, n) for c, n in lack if n > 0]
            for c, _ in lack:
                kinds |= base.compat_mask[prob.classes[c].shape]
            if fewest is None or sum(n for _, n in lack) < fewest:
                fewest = sum(n for _, n in lack)
                need = sum((n * base.req[prob.classes[c].shape] for c, n in lack), need * 0)
        return kinds, need

    def _try(self, gid: int, other: int | None) -> bool:
        """Take `other` out (None: nothing) and start `gid`; kept when `gid` reaches its quorum and places more
        pods than `other` held, else undone."""
        st, prob = self.st, self.prob
        self.trials -= 1
        mark = len(st.log)
        freed = 0
        for b, cid, n in self.held.holding(other) if other is not None else []:
            st.remove(b, cid, n)
            freed += n
        ok, dom = self.chooser.place(st, prob, gid, None, self.deadline)
        placed = sum(st.y[c] for c in prob.gangs[gid].classes)
        if not ok or placed <= freed:
            st.undo(mark)
            return False
        self.satisfied[gid], self.domain[gid] = True, dom
        self.held.add(gid, [(b, cid, n) for b, cid, n in st.log[mark:] if cid >= 0 and n > 0])
        if other is not None:
            self.satisfied[other], self.domain[other] = False, None
            self.held.drop(other)
        return True
