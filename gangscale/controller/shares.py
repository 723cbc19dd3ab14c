"""Which gangs a plan's new nodes are bought for, and each gang's share of a node it shares.

Invariant: the plan's new nodes are split into units, the sets of nodes linked by
the gangs on them (a gang whose pods ride two nodes links them); every gang of a
unit is booked with the unit, and each group's new nodes in a unit are dealt out
as whole nodes among its gangs in proportion to what their pods take on those
nodes (`split`), so the shares of a unit add up to exactly its nodes: what is
booked, what caps are charged and what is bought are the same numbers. A gang
whose share rounds to zero is still booked (it rides the unit's nodes). Pure
functions of the plan and the snapshot.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..apply import linked_new_nodes
from ..model import Gang, GangKey
from ..plan import Plan
from ..resources import CPU, GPU
from ..snapshot import ClusterSnapshot

SHARED_API = "gangscale.io/shared"  # the api of `unit_key`: no gang API is named so


@dataclass(frozen=True, slots=True)
class Unit:
    """New nodes the plan links through their gangs, with each gang's share per group (whole nodes, summing to
    `nodes`)."""

    nodes: Mapping[str, int]
    shares: Mapping[GangKey, Mapping[str, int]]
    prices: Mapping[str, float]  # per group, the price per hour of one of its new nodes

    @property
    def shared(self) -> bool:
        """More than one gang rides the unit's nodes: they are booked, deadlined and released together."""
        return len(self.shares) > 1


def unit_key(unit_id: str) -> GangKey:
    """The reservation of a shared unit's nodes: a key no gang has, tolerated by every gang of the unit."""
    return GangKey("", unit_id, SHARED_API)


def unit_id(members: Iterable[str]) -> str:
    """A unit's id, the same for the same members (each "gang#generation#attempt")."""
    return "unit-" + hashlib.sha256(";".join(sorted(members)).encode()).hexdigest()[:20]


def split(total: int, weights: Mapping[GangKey, int]) -> dict[GangKey, int]:
    """`total` whole nodes dealt in proportion to `weights` (largest remainder; ties to the smaller key); every
    key gets an entry, zero included. Exact integers: the shares always add up to `total`."""
    keys = sorted(weights, key=str)
    whole = sum(max(0, weights[k]) for k in keys)
    if not keys:
        return {}
    if whole == 0:  # nothing measurable: by count, in key order
        return {
            k: total // len(keys) + (1 if i < total % len(keys) else 0) for i, k in enumerate(keys)
        }
    out = {k: total * max(0, weights[k]) // whole for k in keys}
    rest = total - sum(out.values())
    by_remainder = sorted(keys, key=lambda k: (-(total * max(0, weights[k]) % whole), str(k)))
    for k in by_remainder[:rest]:
        out[k] += 1
    return out


def units(plan: Plan, gangs: Iterable[Gang]) -> list[Unit]:
    """The plan's new nodes as units, each gang's share by what its pods take there (GPUs where any pod of the
    group's nodes asks for one, else CPU). A node no gang's pod rides is in no unit's shares."""
    pods = {p.key: p for g in gangs for p in g.pending}
    gang_of = {p.key: g.key for g in gangs for p in g.pending}
    out = []
    for members in linked_new_nodes(plan, gang_of):
        nodes: dict[str, int] = defaultdict(int)
        weight: dict[str, dict[GangKey, int]] = defaultdict(lambda: defaultdict(int))
        prices: dict[str, float] = {}
        for i in members:
            new = plan.new_nodes[i]
            nodes[new.node_group] += 1
            prices[new.node_group] = new.price_per_hour
            riding = [p for p in new.pods if p in gang_of]
            gpu = any(pods[p].requests.get(GPU, 0) for p in riding)
            for p in riding:
                weight[new.node_group][gang_of[p]] += pods[p].requests.get(GPU if gpu else CPU, 0)
        shares: dict[GangKey, dict[str, int]] = defaultdict(dict)
        for grp, w in weight.items():
            for key, count in split(nodes[grp], w).items():
                shares[key][grp] = count
        if shares:
            out.append(Unit(dict(nodes), {k: dict(v) for k, v in shares.items()}, prices))
    return out


def by_gang(found: Iterable[Unit]) -> dict[GangKey, dict[str, int]]:
    """Per gang, its share of new nodes per group (zero where it rides a shared node and its share rounds down)."""
    return {key: dict(share) for u in found for key, share in u.shares.items()}


def charged(plan: Plan, snap: ClusterSnapshot) -> dict[GangKey, tuple[int, float]]:
    """Per gang the plan buys for, the new nodes and dollars per hour its caps are charged: its shares."""
    out = {}
    for u in units(plan, snap.gangs):
        for key, share in u.shares.items():
            out[key] = (
                sum(share.values()),
                sum(n * u.prices.get(g, 0.0) for g, n in share.items()),
            )
    return out
