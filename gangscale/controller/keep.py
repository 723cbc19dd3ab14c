"""How long an empty node is kept for work likely to come and fit it: a ski-rental rule with a bounded worst-case ratio.

Each empty node is a rent-or-buy choice. Keeping it rents: its price every second. Giving it back and launching
again when a gang that fits it comes buys: one relaunch, which costs the group's price x its launch-to-Ready time
(billed while it boots) plus the start the next fitting gang loses, the same boot time, valued at
`emptyNodeWaitDollarsPerHour` (what the operator would pay to start a gang an hour sooner). So a relaunch costs
R = (price + wait value) x boot, and the break-even keep, whose idle cost equals R, is
B = boot x (1 + wait value / price) seconds (`break_even`): a cheap node is worth keeping longer than a dear one for
the same gang's time.

The rule (`keep_seconds`) is Purohit, Svitkina and Kumar's deterministic ski-rental rule with a prediction ("Improving
Online Algorithms via ML Predictions", NeurIPS 2018, Algorithm 2, robustness lambda in (0, 1]): when the predicted
time to the next use is at least B, give the node back after lambda x B; when it is shorter, keep it until B / lambda.
For any sequence of arrivals its cost is at most (1 + 1/lambda) x the cost of the best choice made knowing the
future (Theorem 2.2), and (1 + lambda) x when the prediction is right. The bound r = 1 + 1/lambda is the setting
`emptyNodeKeepRatio` (lambda = 1 / (r - 1)): r = 2 is the plain break-even rule, keep B then give back, which is
2-competitive (Karlin, Manasse, Rudolph and Sleator, "Competitive Snoopy Caching", Algorithmica 1988). The randomized
rule reaches e/(e - 1) (Karlin, Manasse, McGeoch and Owicki, "Competitive Randomized Algorithms for Nonuniform
Problems", Algorithmica 1994); a controller's decisions must be reproducible, so it is not used. The bound is per
idle stretch that ends with a fitting arrival; a stretch nothing ends costs at most the keep, itself at most
`emptyNodeMaxKeepSeconds`.

The prediction (`predicted_gap`): the mean gap between fitting node-demands of the node's group over the window (or
since the first pass, when shorter), shared among its empty nodes, and never less than the time since the last one.
A gang is fitting work for a group when its pods that fit the group's nodes (resources, selectors, taints:
`gangscale.fit`) would need no more nodes than the group has empty: a kept node that covers part of a gang saves it
no time (the gang still waits for its other nodes to boot) and no money (the kept node idles through their boot).
Arrivals are counted once per gang, when it is first seen pending (`observe`).

The boot time (`boot_seconds`): the mean launch-to-registration time measured on the group's nodes (a Node's
creationTimestamp less the oldest purchase in its group still expecting a node, from the records' `requested_at`,
no more than `provisioningDeadlineSeconds` before it), else the configured `emptyNodeBootSeconds`.

A node that has not run a pod yet goes back after the fixed `emptyNodeGraceSeconds`: it was bought for a gang that
did not take it, and its purchase's deadline rules it (the spare and deadline rules), not a bet on gangs to come.

Buying ahead (`buy_ahead`) is the same bet made before a node is empty: where the rule would keep k empty nodes of
a group, and the group has fewer empty nodes plus nodes bought ahead on their way, the difference is bought for no
gang. The prediction (`predicted_gap`, `waited`) counts only the gangs that waited for a launch in the group
(their record bought nodes there, `Arrival.bought`), at least `MIN_GANGS` of them: a gang that started on the
capacity at hand needed no node bought ahead. A launch is billed from the call whether a gang waits through its
boot or not, so a node bought ahead costs only its idle time before a gang takes it, the time the keep rule weighs
too. A node that registers for such a purchase is kept by the rule like a node that has run a pod, and is a spare
of its purchase: never kept past its deadline (`provisioningDeadlineSeconds` from the call; a group's launches
register in any order, so the oldest purchase it may have come from sets it, `ahead_due_at` wakes the loop then).
Launches of a purchase that have not registered by that deadline go back (`lapsed`, decide's `ReturnAhead`;
`ahead_calls_due_at` wakes the loop then), and the purchase stays in the state until they have (`settle_lapsed`):
otherwise they would stay in the group while the next pass, counting none on their way, bought as many again.
At most `emptyNodeBuyAhead` nodes per group are empty or bought ahead for it, and the nodes bought ahead that no
gang has used cost at most `emptyNodeBuyAheadMaxDollarsPerHour` together (the cluster ceiling holds as for any
purchase, `decide`).

Invariant: pure. `observe` and `keep_until` take the time as an argument and return new values; `KeepState` is
frozen and is saved with the controller's records (`to_json`, `from_json`): a restart reads back the arrivals, the
measured boots and which nodes have run a pod, so its first passes keep nodes as the passes before it would have.
Without them every node would go back at the rule's shortest keep, or the never-used node's grace, until the
estimate was rebuilt.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from cloud_adapters.strenum import StrEnum

from ..fit import placement_allows
from ..ingest import Cluster
from ..model import Gang, NodeGroup, Pod
from ..rfc3339 import parse_time
from .lifecycle import TICK, Record
from .scaledown import busy_nodes

AHEAD = ""  # the gang of a purchase bought ahead (`buy_ahead`): none yet
MIN_GANGS = 2  # gangs that waited for a launch a purchase ahead is predicted from, at least (one is not a rate)
MIN_SEEN = 300.0  # arrivals seen over less than this are counted as over this (one early arrival is not a rate)
BOOT_SAMPLES = 20  # measured boots kept per group (the newest)
SKEW = 5.0  # a node created this long before its record's request may still be its (clock skew)


class KeepRule(StrEnum):
    """Which rule keeps an empty node (`emptyNodeKeep`)."""

    SKI_RENTAL = "ski-rental"  # this module's rule
    GRACE = "grace"  # a fixed `emptyNodeGraceSeconds` for every node


@dataclass(frozen=True, slots=True)
class KeepSettings:
    """The rule's settings (ControllerConfig's `emptyNode*` keys)."""

    rule: KeepRule = KeepRule.SKI_RENTAL
    ratio: float = 11.0  # worst-case ratio bound r >= 2 (lambda = 1 / (r - 1))
    max_keep_seconds: float = 3600.0
    window_seconds: float = 3600.0  # arrivals counted over this long
    boot_seconds: float = 120.0  # a group's boot time until one is measured
    grace_seconds: float = 10.0  # the fixed grace (rule `grace`)
    wait_dollars_per_hour: float = 4.0  # the value of starting a gang an hour sooner
    # a node later than this after a purchase is not that purchase's; a node bought ahead goes back by then
    max_boot_seconds: float = 900.0
    # buying ahead: per group, the most empty nodes and nodes bought ahead on their way (0: never buy ahead)
    ahead_nodes: int = 4
    ahead_dollars_per_hour: float = 20.0  # the nodes bought ahead that no gang has used, together


@dataclass(frozen=True, slots=True)
class Arrival:
    """A gang first seen pending: when, per group the nodes its fitting pods need there, and the groups its record
    bought nodes in (the gang waited for a launch there: the demand buying ahead serves)."""

    at: float
    gang: str
    need: Mapping[str, int]
    bought: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class KeepState:
    """What the rule has seen: arrivals in the window (oldest first), measured boots per group (node -> seconds)."""

    arrivals: tuple[Arrival, ...] = ()
    # the gangs of `arrivals`, and those logged before still pending
    seen: frozenset[str] = frozenset()
    boots: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # group -> purchases in the last provisioning deadline: (time, gang, nodes not registered yet), oldest first
    requests: Mapping[str, tuple[tuple[float, str, int], ...]] = field(default_factory=dict)
    known: frozenset[str] = frozenset()  # the nodes registered at the last pass
    used: frozenset[str] = frozenset()  # the registered nodes that have run a pod
    start: float | None = None  # the first pass observed (arrivals are counted since then)
    # a state read back after a restart (`from_json`): the nodes that had not run a pod when it was saved; every
    # other node registered at the first pass after it, created by then (`at`), has (None: not a state read back, or
    # its first pass is over)
    unused: frozenset[str] | None = None
    at: float | None = None  # the pass it was observed at (read back: the save's; None: unknown)
    # the registered nodes bought ahead that have not run a pod -> (their purchase's deadline, their group)
    ahead: Mapping[str, tuple[float, str]] = field(default_factory=dict)


def robustness(ratio: float) -> float:
    """Purohit et al.'s lambda for a worst-case ratio bound r = 1 + 1/lambda (r >= 2)."""
    return 1.0 / (max(2.0, ratio) - 1.0)


def break_even(boot: float, price: float, wait_value: float) -> float:
    """Seconds of the node's idle price that equal one relaunch: its boot billed, plus the next gang's start lost by
    as much, valued at `wait_value` ($/h); `price` in $/h (a free node: no bound but the cap)."""
    return boot * (1.0 + wait_value / price) if price > 0 else float("inf")


def keep_seconds(boot: float, price: float, gap: float | None, settings: KeepSettings) -> float:
    """How long to keep an empty node whose group boots in `boot` s at `price` $/h, the next fitting use predicted
    `gap` s away (None: nothing fitting seen): lambda x B when the gap is at least B, else B / lambda; never past
    the cap."""
    b, lam = break_even(boot, price, settings.wait_dollars_per_hour), robustness(settings.ratio)
    keep = lam * b if gap is None or gap >= b else b / lam
    return min(keep, settings.max_keep_seconds)


def predicted_gap(
    state: KeepState, group: str, empty: int, now: float, window: float, *, waited: bool = False
) -> float | None:
    """The next fitting use of one of `group`'s `empty` nodes, predicted: the mean gap between its fitting
    node-demands seen in the window, per empty node, and never less than the time since the last one (a gap already
    that long is at least that long); None: none seen. A gang counts when its pods there need at most `empty` nodes.
    `waited` (buying ahead): only the gangs that waited for a launch in the group count (their record bought nodes
    there: a gang that started on the capacity at hand needed no node bought ahead), and None below `MIN_GANGS`."""
    since, demand, gangs, last = now - window, 0, 0, None
    for a in state.arrivals:
        if (
            a.at > since
            and (not waited or group in a.bought)
            and 0 < (n := a.need.get(group, 0)) <= empty
        ):
            demand, gangs, last = demand + n, gangs + 1, a.at if last is None else max(last, a.at)
    if last is None or gangs < (MIN_GANGS if waited else 1):
        return None
    seen_for = min(window, max(now - (state.start if state.start is not None else now), MIN_SEEN))
    return max(empty * seen_for / demand, now - last)


def boot_seconds(state: KeepState, group: str, default: float) -> float:
    """The group's mean measured boot, else `default`."""
    got = state.boots.get(group)
    return sum(got.values()) / len(got) if got else default


def _fits(pod: Pod, group: NodeGroup) -> bool:
    alloc = group.allocatable
    return all(v <= alloc.get(k, 0) for k, v in pod.requests.items() if v) and placement_allows(
        pod.placement, group.labels, group.taints
    )


def nodes_needed(pods: Iterable[Pod], group: NodeGroup) -> int:
    """The nodes of `group` the pods that fit it need, by the scarcest resource (a lower bound; 0: none fits)."""
    total: dict[str, int] = {}
    for p in pods:
        if _fits(p, group):
            for k, v in p.requests.items():
                total[k] = total.get(k, 0) + v
    alloc = group.allocatable
    return max((-(-v // alloc[k]) for k, v in total.items() if v and alloc.get(k)), default=0)


def _need(gang: Gang, groups: Iterable[NodeGroup]) -> dict[str, int]:
    return {g.name: n for g in groups if (n := nodes_needed(gang.pending, g))}


def _bought(arrivals: tuple[Arrival, ...], records: Iterable[Record]) -> tuple[Arrival, ...]:
    """The arrivals with the groups their gang's record has bought nodes in added (a gang bought for once keeps it)."""
    bought = {
        r.gang: frozenset(g for g, n in r.requested.items() if n > 0)
        for r in records
        if r.requested
    }
    if not bought:
        return arrivals
    return tuple(
        replace(a, bought=a.bought | got)
        if (got := bought.get(a.gang, frozenset())) - a.bought
        else a
        for a in arrivals
    )


def _requests(
    state: KeepState, records: Iterable[Record], since: float
) -> dict[str, tuple[tuple[float, str, int], ...]]:
    """The purchases still expecting nodes, with the records' new ones (each purchase once: by time and gang)."""
    out = {g: [q for q in qs if q[0] > since or _unsettled(q)] for g, qs in state.requests.items()}
    for r in records:
        if r.requested_at > since:
            for g, n in r.requested.items():
                qs = out.setdefault(g, [])
                if n > 0 and not any(t == r.requested_at and k == r.gang for t, k, _ in qs):
                    qs.append((r.requested_at, r.gang, n))
    return {g: tuple(sorted(qs)) for g, qs in out.items() if qs}


def _unsettled(q: tuple[float, str, int]) -> bool:
    """A purchase bought ahead with launches not registered: kept past its deadline until they are given back
    (`lapsed`, `settle_lapsed`)."""
    return q[1] == AHEAD and q[2] > 0


def _boots(
    state: KeepState,
    cluster: Cluster,
    requests: Mapping[str, tuple[tuple[float, str, int], ...]],
    longest: float,
) -> tuple[
    Mapping[str, Mapping[str, float]],
    dict[str, tuple[tuple[float, str, int], ...]],
    frozenset[str],
    dict[str, tuple[float, str]],
]:
    """The measured boots with those of the nodes registered since the last pass (a node's creation less the oldest
    purchase in its group still expecting a node, at most `longest` before), the purchases left, the nodes known,
    and the new nodes that came for a purchase bought ahead (node -> (that purchase's deadline, `longest` after it,
    its group))."""
    known = frozenset(n.name for n in cluster.nodes)
    new = sorted((n for n in cluster.nodes if n.name not in state.known), key=lambda n: n.created)
    ahead: dict[str, tuple[float, str]] = {}
    if not new:
        return state.boots, dict(requests), known, ahead
    boots = {g: dict(b) for g, b in state.boots.items()}
    left = {g: list(qs) for g, qs in requests.items()}
    for n in new:
        if n.name in state.ahead:  # read back after a restart: its purchase was matched before
            continue
        group = n.node_group or ""
        at = parse_time(n.created) if group in left else None
        qs = left.get(group, [])
        i = next(
            (
                i
                for i, q in enumerate(qs)
                if at is not None and q[2] and at - longest <= q[0] <= at + SKEW
            ),
            None,
        )
        if at is None or i is None:
            continue
        t, gang, k = qs[i]
        qs[i] = (t, gang, k - 1)  # kept at 0 until it leaves the window: the record still lists it
        if gang == AHEAD:
            # a group's launches register in any order: the oldest purchase this node may have come from (bought
            # ahead or for a gang) sets its deadline, so it never stays past its own
            first = min(q[0] for q in qs if at - longest <= q[0])
            ahead[n.name] = (first + longest, group)
        kept = boots.setdefault(group, {})
        kept[n.name] = max(0.0, at - t)
        while len(kept) > BOOT_SAMPLES:
            del kept[next(iter(kept))]
    return boots, {g: tuple(qs) for g, qs in left.items()}, known, ahead


def to_json(state: KeepState) -> dict[str, Any]:
    """What a restart needs of the state (saved with the controller's records): the arrivals in the window, the
    measured boots, when counting started, the registered nodes that have not run a pod yet, and what was bought
    ahead: the nodes registered for it (with their deadline and group) and the calls still expecting nodes."""
    return {
        "arrivals": [
            [a.at, a.gang, dict(sorted(a.need.items())), sorted(a.bought)] for a in state.arrivals
        ],
        "boots": {g: dict(b) for g, b in sorted(state.boots.items())},
        "start": state.start,
        "unused": sorted(state.known - state.used),
        "at": state.at,
        "ahead": {n: [t, g] for n, (t, g) in sorted(state.ahead.items())},
        "aheadCalls": [
            [t, g, k]
            for g, qs in sorted(state.requests.items())
            for t, gang, k in qs
            if gang == AHEAD
        ],
    }


def from_json(doc: Any) -> KeepState:
    """The state `to_json` saved; a document that cannot be read is an empty state (the rule's shortest keeps until
    the estimate is rebuilt), never an error."""
    return read_json(doc) or KeepState()


def read_json(doc: Any) -> KeepState | None:
    """The state `to_json` saved (a state saved before buying ahead existed has none); None when `doc` cannot be
    read as one."""
    try:
        arrivals = tuple(
            Arrival(
                float(a[0]),
                str(a[1]),
                {str(g): int(n) for g, n in a[2].items()},
                frozenset(str(g) for g in (a[3] if len(a) > 3 else ())),
            )
            for a in doc["arrivals"]
        )
        boots = {str(g): {str(n): float(t) for n, t in b.items()} for g, b in doc["boots"].items()}
        start = None if doc["start"] is None else float(doc["start"])
        unused = frozenset(str(n) for n in doc["unused"])
        at = None if doc.get("at") is None else float(doc["at"])
        ahead = {str(n): (float(t), str(g)) for n, (t, g) in doc.get("ahead", {}).items()}
        calls: dict[str, list[tuple[float, str, int]]] = {}
        for t, g, k in doc.get("aheadCalls", []):
            calls.setdefault(str(g), []).append((float(t), AHEAD, int(k)))
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None
    return KeepState(
        arrivals,
        frozenset(a.gang for a in arrivals),
        boots,
        {g: tuple(sorted(qs)) for g, qs in calls.items()},
        start=start,
        unused=unused,
        at=at,
        ahead=ahead,
    )


def observe(
    state: KeepState,
    cluster: Cluster,
    groups: Mapping[str, NodeGroup],
    records: Iterable[Record],
    now: float,
    settings: KeepSettings,
) -> KeepState:
    """The state after a pass: gangs first seen pending logged with their needs per group, arrivals older than the
    window forgotten, boots measured on nodes that arrived for a record. The `grace` rule needs none of it.

    A gang is logged at its record's `first_seen` when it has one (after a restart, the saved records say when their
    gangs came), else now; counting starts at the first pass or the earliest arrival logged then."""
    if settings.rule is KeepRule.GRACE:
        return state
    records = list(records)
    since = now - settings.window_seconds
    kept = tuple(a for a in state.arrivals if a.at > since)
    waiting = {str(g.key): g for g in cluster.gangs if g.pending}
    seen = frozenset(k for k in state.seen if k in waiting) | {a.gang for a in kept}
    pending = [(k, g) for k, g in waiting.items() if k not in seen]
    start = state.start
    if pending:
        first = {r.gang: r.first_seen for r in records if r.first_seen}
        new = tuple(
            Arrival(min(now, first.get(k, now)), k, _need(g, groups.values())) for k, g in pending
        )
        kept += tuple(a for a in new if a.at > since)
        seen = seen | {k for k, _ in pending}
        start = min([now, *(a.at for a in new)]) if start is None else start
    kept = _bought(kept, records)
    requests = _requests(state, records, now - settings.max_boot_seconds)
    boots, requests, known, ahead = _boots(state, cluster, requests, settings.max_boot_seconds)
    used = state.used | busy_nodes(cluster)
    # the first pass after a restart: the saved state says which nodes had not run a pod; a node created after
    # the save is not taken to have run one (it registered while no controller was watching)
    if state.unused is not None:
        used |= {
            n.name
            for n in cluster.nodes
            if n.name not in state.unused
            and (state.at is None or (parse_time(n.created) or 0.0) <= state.at)
        }
    ahead = {n: t for n, t in {**state.ahead, **ahead}.items() if n in known and n not in used}
    return KeepState(
        kept,
        seen,
        boots,
        requests,
        known,
        used & known,
        now if start is None else start,
        at=now,
        ahead=ahead,
    )


def keep_until(
    state: KeepState,
    empty_since: Mapping[str, float],
    decided: Mapping[str, float],
    cluster: Cluster,
    groups: Mapping[str, NodeGroup],
    now: float,
    settings: KeepSettings,
) -> dict[str, float]:
    """Each empty node's give-back time: decided once, with the prediction as it stood when the node emptied
    (`decided`: the earlier passes' times, kept for the nodes still empty since then)."""
    if settings.rule is KeepRule.GRACE:
        return {n: s + settings.grace_seconds for n, s in empty_since.items()}
    node_groups = {n.name: n.node_group or "" for n in cluster.nodes if n.name in empty_since}
    prices = {g.name: g.price_per_hour for g in groups.values()}
    empty: dict[str, int] = {}
    for n in empty_since:
        g = node_groups.get(n, "")
        empty[g] = empty.get(g, 0) + 1
    out: dict[str, float] = {}
    for n, s in empty_since.items():
        if n in decided:
            out[n] = decided[n]
            continue
        deadline = state.ahead[n][0] if n in state.ahead else float("inf")
        if n not in state.used and n not in state.ahead:
            # bought for a gang that did not take it: its purchase's deadline rules it
            out[n] = s + settings.grace_seconds
            continue
        g = node_groups.get(n, "")
        gap = predicted_gap(state, g, empty[g], now, settings.window_seconds)
        boot = boot_seconds(state, g, settings.boot_seconds)
        out[n] = min(s + keep_seconds(boot, prices.get(g, 0.0), gap, settings), deadline)
    return out


def ahead_due_at(state: KeepState) -> tuple[float, ...]:
    """When each registered node bought ahead that no gang has used falls due as a spare past its purchase's
    deadline (`lifecycle.deadline_due_at`'s strict boundary): a plan that counts on it keeps it until then."""
    return tuple(t + TICK for t, _ in state.ahead.values())


def _unregistered(state: KeepState) -> Iterator[tuple[str, float, int]]:
    """The purchases bought ahead with launches not registered: (their group, when bought, those launches)."""
    for g, qs in state.requests.items():
        for t, gang, k in qs:
            if gang == AHEAD and k > 0:
                yield g, t, k


def _per_group(launches: Iterable[tuple[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for g, k in launches:
        out[g] = out.get(g, 0) + k
    return out


def on_the_way(state: KeepState, since: float = float("-inf")) -> dict[str, int]:
    """Per group, the nodes bought ahead at or after `since` (a purchase's deadline ago) that have not registered."""
    return _per_group((g, k) for g, t, k in _unregistered(state) if t >= since)


def lapsed(state: KeepState, since: float) -> dict[str, int]:
    """Per group, the launches bought ahead before `since` (their purchase's deadline has passed) that have not
    registered: they go back, as a gang's launches do at its deadline (`settle_lapsed` once they have)."""
    return _per_group((g, k) for g, t, k in _unregistered(state) if t < since)


def settle_lapsed(state: KeepState, group: str, since: float) -> KeepState:
    """The state without `group`'s purchases bought ahead before `since` (their launches given back)."""
    left = tuple(q for q in state.requests.get(group, ()) if q[1] != AHEAD or q[0] >= since)
    return replace(state, requests={**state.requests, group: left})


def ahead_calls_due_at(state: KeepState, longest: float) -> tuple[float, ...]:
    """When each purchase bought ahead with launches not registered lapses: `longest` (the provisioning deadline)
    after its call, strictly (`lifecycle.deadline_due_at`'s boundary)."""
    return tuple(t + longest + TICK for _, t, _ in _unregistered(state))


def ahead_token(group: str, at: float) -> str:
    """The idempotency token of a purchase bought ahead in `group` at `at` (the cloud's client token, and on
    aws-fleet the tag on its instances): one per group and decision time."""
    return "gangscale-ahead-" + hashlib.sha256(f"{group}|{at!r}".encode()).hexdigest()[:34]


def ahead_calls(state: KeepState) -> dict[str, tuple[str, float]]:
    """The purchases bought ahead with launches not registered, by token: (their group, when they were bought)."""
    return {ahead_token(g, t): (g, t) for g, t, _ in _unregistered(state)}


def buy_ahead(
    state: KeepState,
    empty: Mapping[str, int],
    groups: Mapping[str, NodeGroup],
    now: float,
    settings: KeepSettings,
) -> dict[str, int]:
    """Per group, the nodes to buy ahead now: up to the most empty nodes k the rule would keep there (the next use
    of k nodes by a gang that waits for a launch there, `predicted_gap(waited=True)`, within the break-even keep
    B; a gang that needs more nodes than k does not count for k), counting the group's empty nodes no gang holds
    (`empty`) and those bought ahead on their way; at most `ahead_nodes` of them, within the group's maxSize and,
    with the registered nodes bought ahead that no gang has used, the dollars of `ahead_dollars_per_hour`. A
    backed-off group (`backoff.backed_off`: no room above its size) and a free one get none."""
    if settings.rule is KeepRule.GRACE or settings.ahead_nodes <= 0:
        return {}
    prices = {g.name: g.price_per_hour for g in groups.values()}
    coming = on_the_way(state, now - settings.max_boot_seconds)
    spent = sum(prices.get(g, 0.0) * n for g, n in coming.items())
    spent += sum(prices.get(g, 0.0) for _, g in state.ahead.values())
    out: dict[str, int] = {}
    for name in sorted(groups):
        g = groups[name]
        price = g.price_per_hour
        if price <= 0:
            continue
        have = empty.get(name, 0) + coming.get(name, 0)
        affordable = int((settings.ahead_dollars_per_hour - spent) / price + 1e-9)
        most = min(settings.ahead_nodes, have + g.max_size - g.current_size, have + affordable)
        boot = boot_seconds(state, name, settings.boot_seconds)
        b = break_even(boot, price, settings.wait_dollars_per_hour)
        window = settings.window_seconds
        kept = [
            k
            for k in range(have + 1, most + 1)
            if (gap := predicted_gap(state, name, k, now, window, waited=True)) is not None
            and gap < b
        ]
        if kept:
            out[name] = max(kept) - have
            spent += out[name] * price
    return out


def wake_up(until: Mapping[str, float], after: float) -> float | None:
    """The first give-back time after `after` (the last pass); None: none left."""
    return min((t for t in until.values() if t > after), default=None)
