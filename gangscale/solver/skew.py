"""A plan's final state within every DoNotSchedule topology spread on a key other than the hostname.

`spread.pin_spread` deals carriers out to domains before the solver runs; the solver may still place fewer of them
(a gang above its quorum, a basic pod that lost its room) or place matching pods without the rule anywhere, and the
minimum of a domain can then be lower than the deal assumed. `within_skew` checks the assignment as kube-scheduler's
PodTopologySpread filter would judge each placed carrier on the final state (matching pods in its domain - the
minimum over the eligible domains <= maxSkew, the domains of the node groups counted as in the deal) and takes pods
out of the fullest violating domain, one at a time, until none is violated; a gang left below its quorum is taken
out whole. Taking pods out never raises a count, so this ends, and it only lowers the minimum where it empties the
minimum's own domain, which is then no longer above it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..fit import term_matches
from ..model import Pod, Taint
from ..spread import Spread, SpreadBook
from .greedy import Assignment
from .problem import Problem

_Where = tuple[Mapping[str, str], tuple[Taint, ...]]


def _where(prob: Problem, a: Assignment) -> list[_Where]:
    """Per bin, the labels and taints of its kind (every label key a placement or a spread reads is kept)."""
    return [(prob.kinds[kid].labels, prob.kinds[kid].taints) for kid, _ in a.bins]


def _placed(prob: Problem, a: Assignment) -> list[list[tuple[int, Pod]]]:
    """Per bin, (class, pod) of the pods it holds, handed out per class in bin order as the plan renders them."""
    cursor: dict[int, int] = {}
    out = []
    for _, contents in a.bins:
        here: list[tuple[int, Pod]] = []
        for cid, n in sorted(contents.items()):
            start = cursor.get(cid, 0)
            cursor[cid] = start + n
            here.extend((cid, p) for p in prob.classes[cid].pods[start : start + n])
        out.append(here)
    return out


def _tally(
    sp: Spread, where: list[_Where], placed: list[list[tuple[int, Pod]]]
) -> tuple[dict[str, int], int]:
    """Matching pods per eligible domain on the final state, and the global minimum the filter compares with."""
    s = sp.spread
    counts = dict(sp.bound)
    present = set()
    for (labels, taints), pods in zip(where, placed, strict=False):
        if not sp.eligible(labels, taints):
            continue
        d = labels[s.key]
        present.add(d)
        counts[d] = counts.get(d, 0) + sum(1 for _, p in pods if term_matches(s.term, p))
    return counts, sp.low(counts, frozenset(present))


def _first_violation(
    book: SpreadBook, where: list[_Where], placed: list[list[tuple[int, Pod]]]
) -> tuple[Spread, str] | None:
    """A placed carrier's constraint and its domain, where matching pods exceed the minimum plus maxSkew."""
    tallies: dict[int, tuple[dict[str, int], int]] = {}  # by id: a Spread holds a dict
    for b, pods in enumerate(placed):
        for _, p in pods:
            for sp in book.carriers.get(p.key, ()):
                own = where[b][0].get(sp.spread.key)
                if own is None:
                    continue  # pinned to a domain: never placed off one (the solver honours the pin)
                if id(sp) not in tallies:
                    tallies[id(sp)] = _tally(sp, where, placed)
                counts, low = tallies[id(sp)]
                if counts.get(own, 0) - low > sp.spread.max_skew:
                    return sp, own
    return None


def _take_one(
    prob: Problem,
    a: Assignment,
    sp: Spread,
    d: str,
    where: list[_Where],
    placed: list[list[tuple[int, Pod]]],
) -> int:
    """Take one pod out of a bin in domain `d`: a carrier of `sp` first (one that does not match its own selector
    is over the skew by the bound pods alone), else a matching pod, from the last bin first; its gang's index."""
    best: tuple[tuple, int, int] | None = None
    for b, ((labels, taints), pods) in enumerate(zip(where, placed, strict=False)):
        if labels.get(sp.spread.key) != d:
            continue
        for cid, p in pods:
            carrier = sp.spread in p.rules.domain_spread
            if carrier or (term_matches(sp.spread.term, p) and sp.eligible(labels, taints)):
                rank = (0 if carrier else 1, -b)
                if best is None or rank < best[0]:
                    best = (rank, b, cid)
    assert best is not None, "a violated domain holds the carrier that violates it"
    _, b, cid = best
    contents = a.bins[b][1]
    contents[cid] -= 1
    if not contents[cid]:
        del contents[cid]
    a.y[cid] -= 1
    return prob.classes[cid].gang


def _settle_gang(prob: Problem, a: Assignment, gid: int) -> None:
    """A gang below its quorum is taken out whole; `satisfied` follows what is left."""
    info = prob.gangs[gid]
    placed = sum(a.y[c] for c in info.classes)
    if info.is_gang and placed < info.need:
        mine = set(info.classes)
        for _, contents in a.bins:
            for cid in [c for c in contents if c in mine]:
                del contents[cid]
        for c in mine:
            a.y[c] = 0
        placed = 0
    a.satisfied[gid] = placed >= info.need if info.is_gang else placed > 0


def within_skew(prob: Problem, a: Assignment) -> Assignment:
    """`a`, or a copy with pods taken out until every placed carrier is within its skew; the copy's `skew_cut` names,
    per gang that lost pods, the constraint that took them."""
    book = prob.spread
    if book is None or not book.carriers:
        return a
    out = Assignment(
        list(a.y),
        list(a.satisfied),
        list(a.domain),
        [(k, dict(c)) for k, c in a.bins],
        list(a.bin_nodes),
        a.stopped_early,
        list(a.order),
        dict(a.skew_cut),
    )
    where = _where(prob, out)
    cut = False
    while (hit := _first_violation(book, where, _placed(prob, out))) is not None:
        sp, d = hit
        gid = _take_one(prob, out, sp, d, where, _placed(prob, out))
        _settle_gang(prob, out, gid)
        out.skew_cut.setdefault(
            prob.gangs[gid].gang.key,
            f"{sp.spread.what}: the plan's final state would put "
            f"domain {d} over the skew, so pods were taken out of it",
        )
        cut = True
    if not cut:
        return a
    keep = [i for i, (_, c) in enumerate(out.bins) if c]
    out.bins = [out.bins[i] for i in keep]
    out.bin_nodes = [out.bin_nodes[i] for i in keep]
    return out
