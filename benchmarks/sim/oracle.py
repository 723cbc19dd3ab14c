"""A keep rule that knows the future, for the simulator only: how far keeping empty nodes can move time-to-start.

`gangscale-oracle` is gangscale-gate without buying ahead and with one change: after every pass, each empty
node's give-back time (`Reconciler.empty_until`, which the next pass honours as decided) is rewritten from the
trace's arrivals still to come. The future gangs are matched, earliest first, to the empty nodes now in the
cluster: a gang is matched only if every role of its quorum fits whole on empty nodes left unmatched (a kept node
that covers part of a gang saves it no time: it still waits for its other nodes to boot), each role in the group
where its nodes cost least, and only within the rule's horizon of now. A matched node is kept until its gang has
arrived (`SLACK` more: the arrival's pass plans on it); every other empty node goes back at the next pass. The
horizon is the policy name's suffix:

- `gangscale-oracle`: the node's break-even keep B = boot x (1 + wait value / price) (`keep.break_even`, the
  group's median launch delay of the trace as boot, `emptyNodeWaitDollarsPerHour` as wait value): the choice
  made knowing the future that ski-rental's ratio is measured against;
- `gangscale-oracle-<k>x`: k x B; `gangscale-oracle-<T>s`: T seconds, whatever the group.

What it does not know: where the counterfactual takes the gang (a gang may start beside other pods, or on a node
bought for another gang), crash replacements, and the launches a give-back causes later. So it is a keep rule with
perfect knowledge of arrivals, not the best possible policy.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from gangscale.controller.keep import break_even, nodes_needed
from gangscale.ingest import DEFAULT_NODE_GROUP_LABEL, ingest
from gangscale.model import NodeGroup, Pod
from gangscale.parse import ParseCache

from ..generate import _pod
from .cloud import SimCloud
from .policies import Gangscale
from .trace import Trace

ORACLE = "gangscale-oracle"
NO_BUYING_AHEAD = {"emptyNodeBuyAhead": 0}
SLACK = 20  # seconds a node matched to an arrival is kept past it: two scans, the arrival's pass plans on it
_NAME = re.compile(rf"^{ORACLE}(?:-(\d+(?:\.\d+)?)(x|s))?$")


@dataclass(frozen=True, slots=True)
class Horizon:
    """How far ahead an arrival keeps a node: `factor` x its break-even keep, or `seconds` whatever the group."""

    factor: float = 1.0
    seconds: float | None = None

    def limit(self, break_even_seconds: float) -> float:
        return self.seconds if self.seconds is not None else self.factor * break_even_seconds


def parse_oracle(name: str) -> Horizon | None:
    """The horizon an oracle policy's name asks for; None: not an oracle policy."""
    m = _NAME.match(name)
    if m is None:
        return None
    if m.group(1) is None:
        return Horizon()
    value = float(m.group(1))
    return Horizon(factor=value) if m.group(2) == "x" else Horizon(seconds=value)


@dataclass(frozen=True, slots=True)
class Demand:
    """A gang of the trace: when it arrives, and per role of its quorum the nodes each group that fits it needs."""

    at: int
    gang: str
    roles: tuple[Mapping[str, int], ...]


def _role_pod(name: str, namespace: str, role: str, tmpl: Any) -> Pod:
    """The role's pod as the controller reads it (one is enough: a role's pods are alike)."""
    raw = _pod(name, namespace, name, "2020-01-01T00:00:00Z", tmpl, role, link=None)
    (gang,) = ingest([raw], cache=ParseCache()).gangs
    return gang.pending[0]


def demands(trace: Trace, groups: Iterable[NodeGroup]) -> list[Demand]:
    """Every gang of the trace, by arrival: the first `min_count` members in role order are its quorum (one pod
    of a basic group)."""
    groups = list(groups)
    out = []
    for g in trace.gangs:
        left, roles = g.min_count, []
        for role, n, tmpl in g.roles:
            k = min(n, left)
            if k <= 0:
                break
            left -= k
            pod = _role_pod(f"{g.name}-{role}", g.namespace, role, tmpl)
            need = {ng.name: c for ng in groups if (c := nodes_needed([pod] * k, ng))}
            roles.append(need)
        out.append(Demand(g.arrival, g.name, tuple(roles)))
    return sorted(out, key=lambda d: (d.at, d.gang))


def _place(
    d: Demand,
    free: Mapping[str, list[str]],
    prices: Mapping[str, float],
    limits: Mapping[str, float],
    now: float,
) -> list[tuple[str, int]] | None:
    """Each role's group (the cheapest for its nodes among those with enough free nodes, within the horizon);
    None: some role has none, so the gang would wait for a launch whatever is kept."""
    taken: dict[str, int] = {}
    out = []
    for need in d.roles:
        fits = [
            (n * prices[g], g, n)
            for g, n in sorted(need.items())
            if g in free
            and n <= len(free[g]) - taken.get(g, 0)
            and d.at - now <= limits.get(g, 0.0)
        ]
        if not fits:
            return None
        _, g, n = min(fits)
        taken[g] = taken.get(g, 0) + n
        out.append((g, n))
    return out


def keep_until(
    future: Sequence[Demand],
    empty: Mapping[str, str],
    prices: Mapping[str, float],
    limits: Mapping[str, float],
    now: float,
) -> dict[str, float]:
    """Each empty node's (node -> group) give-back time: the arrival of the future gang matched to it plus
    `SLACK`, else the next second (the next pass gives it back)."""
    free: dict[str, list[str]] = {}
    for node, group in sorted(empty.items()):
        free.setdefault(group, []).append(node)
    until = {node: now + 1 for node in empty}
    horizon = max(limits.values(), default=0.0)
    for d in future:
        if d.at <= now:
            continue
        if d.at - now > horizon or not any(free.values()):
            break
        placed = _place(d, free, prices, limits, now)
        for g, n in placed or ():
            for node in free[g][:n]:
                until[node] = float(d.at + SLACK)
            free[g] = free[g][n:]
    return until


class OracleGate(Gangscale):
    """gangscale-gate whose empty nodes are kept as `keep_until` says, knowing the trace's arrivals."""

    def __init__(
        self,
        name: str,
        cloud: SimCloud,
        clock: Callable[[], float],
        pods: MutableMapping[str, dict],
        on_lift: Callable[[str], None],
        trace: Trace,
        horizon: Horizon,
        cache: ParseCache | None = None,
    ) -> None:
        # a keep rule alone: nothing is bought ahead
        super().__init__(
            name,
            cloud,
            clock,
            pods,
            on_lift,
            trace.deadline,
            cache,
            gated=True,
            fixed=NO_BUYING_AHEAD,
        )
        groups = list(cloud.groups_by_name.values())
        self.future = demands(trace, groups)
        wait = self.cfg.empty_node_wait_dollars_per_hour
        self.prices = {g.name: g.price_per_hour for g in groups}
        self.limits = {
            g.name: horizon.limit(break_even(trace.delays[g.name][0], g.price_per_hour, wait))
            for g in groups
        }

    def scan(self, objects: list[dict[str, Any]], now: int) -> None:
        super().scan(objects, now)
        since = self.rec.empty_since
        groups = {
            o["metadata"]["name"]: o["metadata"].get("labels", {}).get(DEFAULT_NODE_GROUP_LABEL)
            for o in objects
            if o.get("kind") == "Node"
        }
        empty = {n: g for n in since if (g := groups.get(n)) in self.prices}
        t0 = self.clock() - now
        until = keep_until(self.future, empty, self.prices, self.limits, float(now))
        self.rec.empty_until = {
            **self.rec.empty_until,
            **{n: t0 + t for n, t in until.items()},
        }
