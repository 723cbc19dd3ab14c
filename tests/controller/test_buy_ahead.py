"""Buying ahead (keep.py's `buy_ahead`, decide's `AheadDue`): nodes bought for the gangs likely to come, against an
independent count of what the keep rule's own trade allows, and their life once bought (kept, never past their
purchase's deadline, saved across a restart)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pytest

from cloud_adapters.errors import CapacityError, ThrottledError
from gangscale.controller import backoff, keep
from gangscale.controller.actions import BuyAhead, ReturnAhead, save_first
from gangscale.controller.config import ControllerConfig
from gangscale.controller.decide import (
    AheadDue,
    AheadLapsed,
    AheadUnconfirmed,
    BoughtAhead,
    ReturnedAhead,
    State,
    decide,
)
from gangscale.controller.execute import Done, ReturnOutcome
from gangscale.controller.keep import AHEAD, Arrival, KeepRule, KeepSettings, KeepState
from gangscale.controller.lifecycle import GangState, Record
from gangscale.ingest import Cluster
from gangscale.model import GangKey, Node, NodeGroup, Placement, Pod

NOW = 1_800_000_000.0
CPU = NodeGroup("cpu", "m5.2xlarge", 0.4, 0, 10, 1, {"cpu": 8000, "memory": 32 << 30, "pods": 110})
BIG = NodeGroup("big", "m5.8xlarge", 1.6, 0, 10, 0, {"cpu": 32000, "memory": 128 << 30, "pods": 110})
BOOT = 100.0  # the measured boot of both groups
SETTINGS = KeepSettings(ahead_nodes=4, ahead_dollars_per_hour=20.0, wait_dollars_per_hour=4.0)


def _stamp(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _node(name: str, group: str = "cpu", created: float = NOW - 3600) -> Node:
    return Node(name, {}, (), dict(CPU.allocatable), node_group=group, provider_id=f"sim:///z/{name}",
                created=_stamp(created))


def _seen(arrivals: list[tuple[float, dict[str, int]]], bought: tuple[str, ...] = ("cpu",), **kw) -> KeepState:
    """A state that has watched for two hours and seen gangs needing these nodes per group at these times, each
    bought for (it waited for a launch) in the `bought` groups."""
    log = tuple(Arrival(t, f"hpc/g{i}/native", need, frozenset(bought)) for i, (t, need) in enumerate(arrivals))
    return KeepState(log, frozenset(a.gang for a in log), {"cpu": {"o1": BOOT}, "big": {"o2": BOOT}},
                     start=NOW - 7200, **kw)


def _every(seconds: float, need: dict[str, int]) -> list[tuple[float, dict[str, int]]]:
    """A fitting gang every `seconds` over the last hour."""
    return [(NOW - k * seconds, need) for k in range(1, int(3600 // seconds) + 1)]


def _expected(arrivals, group: NodeGroup, have: int, cap: int, room_dollars: float) -> int:
    """What the keep rule's trade allows, counted here afresh: the most empty nodes k (from `have + 1` to `cap`,
    within the group's maxSize and the dollars) for which the mean gap between the node-demands of the gangs that
    waited for a launch in the group (the last hour's, of at most k nodes, per node), and never less than the time
    since the last, is under the break-even keep boot x (1 + wait value / price); none bought when there is none."""
    b = BOOT * (1 + 4.0 / group.price_per_hour)
    best = have
    for k in range(have + 1, cap + 1):
        if k - have > group.max_size - group.current_size or (k - have) * group.price_per_hour > room_dollars:
            break
        fit = [(t, n[group.name]) for t, n in arrivals if 0 < n.get(group.name, 0) <= k and t > NOW - 3600
               and group.name == "cpu"]  # (the arrivals of `_seen` are bought for in cpu)
        if fit and max(k * 3600 / sum(n for _, n in fit), NOW - max(t for t, _ in fit)) < b:
            best = k
    return best - have


@pytest.mark.parametrize("every", [60.0, 400.0, 900.0, 1500.0])
@pytest.mark.parametrize("empty", [0, 1, 3])
def test_a_group_is_bought_ahead_while_the_keep_rule_would_keep_one_more_empty_node_there(every, empty):
    arrivals = _every(every, {"cpu": 1})
    got = keep.buy_ahead(_seen(arrivals), {"cpu": empty}, {"cpu": CPU}, NOW, SETTINGS)
    want = _expected(arrivals, CPU, empty, 4, 20.0)
    assert got.get("cpu", 0) == want
    assert want > 0 if every <= 400 and empty < 3 else True  # the cases are not all empty


def test_nothing_is_bought_ahead_when_the_next_fitting_gang_is_predicted_later_than_break_even():
    # m5 at $0.4/h: B = 100 x 11 = 1,100 s; one gang every 1,200 s is later than that
    assert keep.buy_ahead(_seen(_every(1200.0, {"cpu": 1})), {}, {"cpu": CPU}, NOW, SETTINGS) == {}
    # nor when the last fitting gang came longer ago than B, however many came before
    quiet = [(t - 1200.0, n) for t, n in _every(60.0, {"cpu": 1})]
    assert keep.buy_ahead(_seen(quiet), {}, {"cpu": CPU}, NOW, SETTINGS) == {}


def test_demand_counts_only_where_the_gangs_waited_for_a_launch():
    # each gang fits one m5.8xlarge or two m5.2xlarge; the planner bought m5.2xlarge for them
    arrivals = _every(120.0, {"cpu": 2, "big": 1})
    got = keep.buy_ahead(_seen(arrivals), {}, {"cpu": CPU, "big": BIG}, NOW, SETTINGS)
    assert set(got) == {"cpu"} and got["cpu"] == _expected(arrivals, CPU, 0, 4, 20.0) > 0
    # gangs that started on the capacity at hand needed no launch: nothing is bought ahead for them
    assert keep.buy_ahead(_seen(arrivals, bought=()), {}, {"cpu": CPU, "big": BIG}, NOW, SETTINGS) == {}


def test_an_arrival_learns_the_groups_its_gang_s_record_bought_in_and_keeps_them():
    gang = "hpc/g0/native"
    state = KeepState((Arrival(NOW - 100, gang, {"cpu": 1, "big": 1}),), frozenset({gang}), start=NOW - 7200)
    rec = Record(GangKey("hpc", "g0", "native"), "uid", GangState.PROVISIONING, "", NOW - 90, NOW - 100,
                 requested={"cpu": 1}, requested_at=NOW - 90)
    seen = keep.observe(state, Cluster(), {"cpu": CPU, "big": BIG}, [rec], NOW, SETTINGS)
    assert seen.arrivals[0].bought == {"cpu"}
    later = keep.observe(seen, Cluster(), {"cpu": CPU, "big": BIG}, [], NOW + 10, SETTINGS)
    assert later.arrivals[0].bought == {"cpu"}  # the record gone (the gang done), the arrival still counts
    assert keep.read_json(keep.to_json(later)).arrivals == later.arrivals
    older = keep.to_json(later)
    older["arrivals"] = [a[:3] for a in older["arrivals"]]  # saved before arrivals carried it
    assert keep.read_json(older).arrivals[0].bought == frozenset()


def test_buying_ahead_stops_at_the_count_the_group_s_max_size_and_the_dollars():
    arrivals = _every(30.0, {"cpu": 1})  # so frequent that only the limits stop it
    groups = {"cpu": CPU}
    assert keep.buy_ahead(_seen(arrivals), {}, groups, NOW, SETTINGS) == {"cpu": 4}
    assert keep.buy_ahead(_seen(arrivals), {"cpu": 3}, groups, NOW, SETTINGS) == {"cpu": 1}
    small = {"cpu": replace(CPU, max_size=3, current_size=1)}
    assert keep.buy_ahead(_seen(arrivals), {}, small, NOW, SETTINGS) == {"cpu": 2}
    poor = replace(SETTINGS, ahead_dollars_per_hour=1.0)  # $1/h: two m5.2xlarge at $0.4
    assert keep.buy_ahead(_seen(arrivals), {}, groups, NOW, poor) == {"cpu": 2}
    # nodes bought ahead still on their way count, in the count and in the dollars
    coming = _seen(arrivals, requests={"cpu": ((NOW - 30, AHEAD, 2),)})
    assert keep.buy_ahead(coming, {}, groups, NOW, SETTINGS) == {"cpu": 2}
    assert keep.buy_ahead(coming, {}, groups, NOW, poor) == {}
    # so do the registered nodes bought ahead that no gang has used yet, in the dollars
    idle = _seen(arrivals, ahead={"a1": (NOW + 600, "cpu"), "a2": (NOW + 600, "cpu")})
    assert keep.buy_ahead(idle, {"cpu": 2}, groups, NOW, poor) == {}


def test_a_backed_off_group_the_grace_rule_or_a_count_of_zero_buys_nothing_ahead():
    arrivals = _seen(_every(30.0, {"cpu": 1}))
    groups = {"cpu": CPU}
    held = {"cpu": backoff.backed_off(CPU, {"cpu": NOW + 60}, NOW)}  # as decide hands a backed-off group over
    assert keep.buy_ahead(arrivals, {}, held, NOW, SETTINGS) == {}
    assert keep.buy_ahead(arrivals, {}, groups, NOW, replace(SETTINGS, rule=KeepRule.GRACE)) == {}
    assert keep.buy_ahead(arrivals, {}, groups, NOW, replace(SETTINGS, ahead_nodes=0)) == {}
    assert ControllerConfig().keep_settings().ahead_nodes == KeepSettings().ahead_nodes == 4  # on by default


def test_a_node_that_registers_for_a_purchase_bought_ahead_is_kept_by_the_rule_and_never_past_its_deadline():
    bought = NOW - 200
    state = _seen(_every(60.0, {"cpu": 1}), requests={"cpu": ((bought, AHEAD, 1),)},
                  known=frozenset({"n0"}), used=frozenset({"n0"}))
    cluster = Cluster(nodes=[_node("n0"), _node("a1", created=NOW - 20)])
    seen = keep.observe(state, cluster, {"cpu": CPU}, [], NOW, SETTINGS)
    deadline = bought + SETTINGS.max_boot_seconds
    assert seen.ahead == {"a1": (deadline, "cpu")}
    assert keep.on_the_way(seen) == {}
    until = keep.keep_until(seen, {"a1": NOW}, {}, cluster, {"cpu": CPU}, NOW, SETTINGS)
    # fitting gangs every minute: the rule keeps it B / lambda (11 x 1,100 s), but its purchase's deadline comes first
    assert until == {"a1": deadline}
    # a node no purchase bought ahead that has not run a pod goes back after the grace, as before
    plain = replace(seen, ahead={})
    assert keep.keep_until(plain, {"a1": NOW}, {}, cluster, {"cpu": CPU}, NOW, SETTINGS) == {
        "a1": NOW + SETTINGS.grace_seconds
    }
    # once a pod runs there it is no longer bought ahead: the rule alone keeps it when it empties
    ran = Pod("hpc", "p", "uid-p", {"cpu": 1000, "pods": 1}, Placement(), node_name="a1", phase="Running")
    after = keep.observe(seen, replace(cluster, bound=[ran]), {"cpu": CPU}, [], NOW + 10, SETTINGS)
    assert after.ahead == {} and "a1" in after.used
    until = keep.keep_until(after, {"a1": NOW + 20}, {}, cluster, {"cpu": CPU}, NOW + 20, SETTINGS)
    assert until["a1"] > deadline


def test_launches_registering_out_of_order_never_give_a_node_bought_ahead_a_later_deadline_than_its_own():
    """A gang's purchase, then two bought ahead; the launches register out of order. Whichever purchase each node
    came from, a node taken as bought ahead gets the deadline of the oldest purchase it may have come from (of
    either kind), so it never stays past its own."""
    gang, first, second = NOW - 400, NOW - 300, NOW - 100
    state = _seen([], requests={"cpu": ((gang, "hpc/g/native", 1), (first, AHEAD, 1), (second, AHEAD, 1))})
    early = Cluster(nodes=[_node("c", created=NOW - 60), _node("b", created=NOW - 50)])
    s1 = keep.observe(state, early, {"cpu": CPU}, [], NOW - 40, SETTINGS)
    late = Cluster(nodes=[*early.nodes, _node("a", created=NOW - 5)])
    s2 = keep.observe(s1, late, {"cpu": CPU}, [], NOW, SETTINGS)
    oldest = gang + SETTINGS.max_boot_seconds
    assert s2.ahead == {"b": (oldest, "cpu"), "a": (oldest, "cpu")}  # c was taken as the gang's
    assert keep.on_the_way(s2) == {}


def test_the_purchases_bought_ahead_survive_a_restart_and_an_older_saved_state_still_reads():
    state = _seen(_every(600.0, {"cpu": 1}), requests={"cpu": ((NOW - 30, AHEAD, 2), (NOW - 20, "ns/g/native", 1))},
                  ahead={"a1": (NOW + 500, "cpu")}, known=frozenset({"a1", "n1"}), used=frozenset({"n1"}))
    back = keep.read_json(keep.to_json(state))
    assert back is not None
    assert back.ahead == {"a1": (NOW + 500, "cpu")}
    assert keep.on_the_way(back) == {"cpu": 2}  # the gang's purchase is its record's, read back with the records
    older = {k: v for k, v in keep.to_json(state).items() if k not in ("ahead", "aheadCalls", "at")}
    old = keep.read_json(older)
    assert old is not None and old.ahead == {} and keep.on_the_way(old) == {}
    assert keep.read_json({**keep.to_json(state), "ahead": {"a1": "soon"}}) is None


def test_a_node_that_registered_while_no_controller_watched_is_not_taken_to_have_run_a_pod():
    """The state is saved at a pass; a restart reads it back. A node created after that pass, idle, never ran a pod
    that the saved state could know of: it goes back after the grace, not after the rule's keep for used nodes."""
    saved = KeepState(start=NOW - 7200, known=frozenset({"n1", "n2"}), used=frozenset({"n1"}), at=NOW - 60)
    back = keep.read_json(keep.to_json(saved))
    assert back is not None and back.unused == frozenset({"n2"})
    cluster = Cluster(nodes=[_node("n1"), _node("n2"), _node("n3", created=NOW - 30)])
    after = keep.observe(back, cluster, {"cpu": CPU}, [], NOW, SETTINGS)
    assert after.used == {"n1"}
    until = keep.keep_until(after, {"n3": NOW}, {}, cluster, {"cpu": CPU}, NOW, SETTINGS)
    assert until == {"n3": NOW + SETTINGS.grace_seconds}


# ------------------------------------------------------------------------------------------------ decide


CFG = ControllerConfig(emptyNodeBuyAhead=4, clusterCeiling={"maxNodes": 5})


def _due(cfg: ControllerConfig = CFG, **kw) -> tuple[State, AheadDue]:
    state = State(cfg, keep=_seen(_every(30.0, {"cpu": 1})), **kw)
    return state, AheadDue(Cluster(nodes=[_node("n1")]), {"cpu": CPU})


def test_decide_buys_ahead_write_ahead_logging_each_call_in_the_keep_state_before_it_is_made():
    state, obs = _due(ControllerConfig(emptyNodeBuyAhead=4))
    d = decide(state, obs, NOW)
    assert d.actions == (BuyAhead("cpu", 4, d.actions[0].token, NOW),)
    assert save_first(d.actions[0]) and d.actions[0].token.startswith("gangscale-ahead-")
    assert d.state.keep.requests["cpu"] == ((NOW, AHEAD, 4),)
    assert keep.on_the_way(d.state.keep) == {"cpu": 4}
    # the next pass sees them on their way and buys none again
    assert decide(d.state, obs, NOW + 10).actions == ()


def test_the_cluster_ceiling_trims_what_is_bought_ahead():
    state, obs = _due()  # maxNodes 5: the group holds 1 node, so 4 more fit; held at 3, 1 more
    assert [a.nodes for a in decide(state, obs, NOW).actions] == [4]
    held = replace(obs, groups={"cpu": replace(CPU, current_size=5)})
    assert decide(state, held, NOW).actions == ()


def test_a_failed_buy_ahead_is_no_purchase_and_a_capacity_error_backs_its_group_off():
    state, obs = _due(ControllerConfig(emptyNodeBuyAhead=4))
    d = decide(state, obs, NOW)
    (action,) = d.actions
    full = decide(d.state, BoughtAhead(Done(action, CapacityError("no capacity", group="cpu"))), NOW)
    assert keep.on_the_way(full.state.keep) == {}
    assert full.state.backoff["cpu"] > NOW and full.backed_off
    assert decide(full.state, obs, NOW + 10).actions == ()  # backed off: nothing bought ahead there
    throttled = decide(d.state, BoughtAhead(Done(action, ThrottledError("slow down", group="cpu"))), NOW)
    assert keep.on_the_way(throttled.state.keep) == {} and "cpu" not in throttled.state.backoff
    went = decide(d.state, BoughtAhead(Done(action, None)), NOW)
    assert keep.on_the_way(went.state.keep) == {"cpu": 4}


def test_the_settings_are_validated():
    with pytest.raises(ValueError, match="emptyNodeBuyAhead"):
        ControllerConfig(emptyNodeBuyAhead=-1)
    with pytest.raises(ValueError, match="emptyNodeBuyAheadMaxDollarsPerHour"):
        ControllerConfig(emptyNodeBuyAheadMaxDollarsPerHour=-1)
    s = ControllerConfig(emptyNodeBuyAhead=2, emptyNodeBuyAheadMaxDollarsPerHour=7.5).keep_settings()
    assert (s.ahead_nodes, s.ahead_dollars_per_hour) == (2, 7.5)


def test_a_node_bought_ahead_wakes_the_loop_a_tick_past_its_purchase_s_deadline_even_when_a_plan_counts_on_it():
    """A plan that counts on the node keeps it from the scale-down until its deadline has passed (strictly, as a
    record's spare); the loop wakes then, not at the next change."""
    from gangscale.controller.lifecycle import TICK
    from gangscale.controller.wakes import next_due

    ahead = KeepState(ahead={"a1": (NOW + 500, "cpu"), "a2": (NOW + 800, "cpu")})
    state = State(ControllerConfig(), keep=ahead)
    assert next_due(state, NOW) == NOW + 500 + TICK
    assert next_due(state, NOW + 500 + TICK) == NOW + 800 + TICK


def test_the_loop_saves_each_purchase_bought_ahead_before_the_call_and_counts_what_went():
    """Write-ahead, as a scale-up: a kill after the save leaves the purchase on its way in the saved state (nothing
    is bought for it twice; its nodes, if any, are known as bought ahead), and no call goes out unsaved."""
    from gangscale.controller.loop import Loop
    from gangscale.controller.metrics import Metrics

    order: list[tuple[str, object]] = []

    class Cloud:
        def run(self, action, ctx=None):
            order.append(("call", action))
            return Done(action, None)

    loop = Loop(ControllerConfig(), Cloud(), Metrics(), save=lambda: order.append(("save", loop.state.keep)))
    loop.state.keep = _seen(_every(30.0, {"cpu": 1}))
    loop.buy_ahead(Cluster(nodes=[_node("n1")]), {"cpu": CPU}, NOW)
    assert [what for what, _ in order] == ["save", "call"]
    saved, call = order[0][1], order[1][1]
    assert keep.on_the_way(saved) == {"cpu": call.nodes} == {"cpu": 4}
    assert loop.metrics.bought_ahead.labels("cpu")._value.get() == 4
    order.clear()
    loop.buy_ahead(Cluster(nodes=[_node("n1")]), {"cpu": CPU}, NOW + 10)
    assert order == []  # on their way: nothing more


# ------------------------------------------------------------------------ launches that did not arrive


DEADLINE = ControllerConfig().provisioning_deadline_seconds


def _bought(cfg: ControllerConfig = ControllerConfig(emptyNodeBuyAhead=4)) -> tuple[State, AheadDue]:
    """The state right after 4 nodes of cpu were bought ahead at NOW."""
    state, obs = _due(cfg)
    d = decide(state, obs, NOW)
    (a,) = d.actions
    return decide(d.state, BoughtAhead(Done(a, None)), NOW).state, obs


def test_launches_bought_ahead_that_have_not_registered_by_the_deadline_go_back_and_back_their_group_off():
    """As a gang's launches at its deadline (lifecycle `Expire`): without this a launch that never joins (a node
    that cannot bootstrap, a group out of capacity that keeps retrying) would stay bought, and the next pass would
    buy as many again."""
    state, obs = _bought()
    assert decide(state, AheadLapsed(), NOW + DEADLINE).actions == ()  # at the deadline still on their way (strict)
    assert decide(state, obs, NOW + DEADLINE).actions == ()
    at = NOW + DEADLINE + 1
    late = decide(state, AheadLapsed(), at)
    (ret,) = late.actions
    assert isinstance(ret, ReturnAhead) and (ret.group, ret.nodes, ret.counted) == ("cpu", 4, 0)
    assert keep.lapsed(late.state.keep, NOW + 1) == {"cpu": 4}  # settled only once given back
    failed = decide(late.state, ReturnedAhead(ReturnOutcome(ret, 0, ThrottledError("slow down", group="cpu"))), at)
    assert keep.lapsed(failed.state.keep, NOW + 1) == {"cpu": 4}  # tried again at the next pass
    assert decide(failed.state, obs, at).actions == ()  # and nothing bought there meanwhile
    went = decide(late.state, ReturnedAhead(ReturnOutcome(ret, 3, None)), at)
    assert keep.lapsed(went.state.keep, NOW + 1) == {} and keep.on_the_way(went.state.keep) == {}
    # launches still on their way at the deadline: the group did not deliver, as for a gang's timeout
    assert went.state.backoff["cpu"] > at
    assert [(b.group, b.why) for b in went.backed_off] == [("cpu", "timed-out: nodes bought ahead did not arrive")]
    assert decide(went.state, obs, at).actions == ()  # backed off: not bought again at once
    # none left on its way (they failed and left the group): no sign the group cannot deliver, bought again
    none_left = decide(late.state, ReturnedAhead(ReturnOutcome(ret, 0, None)), at)
    assert "cpu" not in none_left.state.backoff and not none_left.backed_off
    assert [a.nodes for a in decide(none_left.state, obs, at).actions] == [4]


def test_a_purchase_whose_nodes_all_registered_lapses_with_nothing_to_give_back():
    state, obs = _bought()
    nodes = [_node("n1"), *(_node(f"a{i}", created=NOW + 30) for i in range(4))]
    seen = keep.observe(state.keep, Cluster(nodes=nodes), {"cpu": CPU}, [], NOW + 40, SETTINGS)
    assert keep.on_the_way(seen) == {} and set(seen.ahead) == {"a0", "a1", "a2", "a3"}
    later = keep.observe(seen, Cluster(nodes=nodes), {"cpu": CPU}, [], NOW + DEADLINE + 1, SETTINGS)
    assert keep.lapsed(later, NOW + 1) == {} and later.requests.get("cpu", ()) == ()


def test_a_lapsed_purchase_is_kept_in_the_saved_state_until_given_back_and_wakes_the_loop_at_its_deadline():
    from gangscale.controller.lifecycle import TICK
    from gangscale.controller.wakes import next_due

    state, obs = _bought()
    nodes = [_node("n1"), _node("a0", created=NOW + 30)]  # one of the four registered
    seen = keep.observe(state.keep, Cluster(nodes=nodes), {"cpu": CPU}, [], NOW + DEADLINE + 50, SETTINGS)
    assert keep.lapsed(seen, NOW + 50) == {"cpu": 3}
    back = keep.read_json(keep.to_json(seen))
    assert back is not None and keep.lapsed(back, NOW + 50) == {"cpu": 3}
    assert next_due(replace(state, keep=state.keep), NOW + 1) == NOW + DEADLINE + TICK


def test_what_goes_back_spares_the_launches_gangs_and_purchases_still_in_time_count_on():
    """A gang waits for 2 launches of cpu (one named), and 1 node was bought ahead there since: the give-back may
    take none of those (`counted` 3, the named launch kept by id)."""
    state, obs = _bought()
    key = GangKey("hpc", "g", "native")
    rec = Record(key, "uid-g", GangState.PROVISIONING, "", NOW + 100, requested={"cpu": 2},
                 deadline=NOW + 100 + DEADLINE, launches={"cpu": ("i-gang",)})
    fresh = replace(state.keep, requests={"cpu": (*state.keep.requests["cpu"], (NOW + 200, AHEAD, 1))})
    state = replace(state, records={key: rec}, keep=fresh)
    (ret,) = decide(state, AheadLapsed(), NOW + DEADLINE + 1).actions
    assert isinstance(ret, ReturnAhead)
    assert (ret.nodes, ret.counted, ret.keep_instances) == (4, 3, frozenset({"i-gang"}))


def test_the_actuator_gives_back_only_launches_on_their_way_beyond_what_is_counted_never_a_node_or_a_named_launch():
    from builders import group
    from cloud_adapters.simulated import SimulatedProvider
    from gangscale.catalog import parse_catalog
    from gangscale.controller.actuator import Actuator

    t = [NOW]
    groups, _ = parse_catalog([group("cpu", max_size=10)])
    cloud = SimulatedProvider(groups, clock=lambda: t[0], provisioning_delay=60.0)
    joined = cloud.increase_size("cpu", 1).instance_ids  # registers as a Node
    t[0] += 60
    stuck = cloud.increase_size("cpu", 2).instance_ids  # running without a Node by the deadline
    t[0] += 120
    named, *launching = cloud.increase_size("cpu", 3).instance_ids  # still launching
    registered = Cluster(nodes=[_node("n-joined", created=NOW + 50)])
    registered.nodes[0] = replace(registered.nodes[0], provider_id=f"sim:///z/{joined[0]}")
    actuator = Actuator(cloud)
    # 5 on their way (2 stuck, 3 launching): 1 counted and the named one kept leave 4 that may go; 3 asked for
    n, err = actuator.return_ahead("cpu", 3, 1, {named}, registered)
    left = {i.id for i in cloud.instances("cpu")}
    assert (n, err) == (3, None)
    assert joined[0] in left and named in left and len(left) == 3
    # never more than what is on its way beyond the count: 2 left on their way, both counted
    assert actuator.return_ahead("cpu", 4, 2, {named}, registered) == (0, None)
    assert {i.id for i in cloud.instances("cpu")} == left


def test_an_earlier_leader_s_purchase_bought_ahead_launched_outside_its_group_joins_it_in_time_and_goes_after():
    """aws-fleet launches before it attaches: a kill between leaves the instances outside the group, tagged with
    the purchase's client token (`keep.ahead_token`). Read back, a purchase in time takes them into its group; one
    past its deadline has them terminated; instances of no such purchase are left to the orphan sweep."""
    from cloud_adapters.base import LooseInstance
    from gangscale.controller.actions import Adopt

    fresh, old = NOW - 100, NOW - DEADLINE - 100
    state = State(ControllerConfig(), keep=KeepState(requests={"cpu": ((old, AHEAD, 1), (fresh, AHEAD, 2))}))
    calls = keep.ahead_calls(state.keep)
    assert calls == {keep.ahead_token("cpu", old): ("cpu", old), keep.ahead_token("cpu", fresh): ("cpu", fresh)}
    assert keep.ahead_token("cpu", fresh) != keep.ahead_token("big", fresh) != keep.ahead_token("cpu", old)
    loose = tuple(LooseInstance(i, "cpu", keep.ahead_token("cpu", t), NOW - 200)
                  for i, t in (("i-1", fresh), ("i-2", fresh), ("i-3", old)))
    other = LooseInstance("i-9", "cpu", "gangscale-someone-else", NOW - 200)
    d = decide(state, AheadUnconfirmed(calls, (*loose, other)), NOW)
    assert set(d.actions) == {Adopt("cpu", keep.ahead_token("cpu", fresh), ("i-1", "i-2"), True),
                              Adopt("cpu", keep.ahead_token("cpu", old), ("i-3",), False)}
    # a purchase whose launches all registered is no call to settle
    done = KeepState(requests={"cpu": ((fresh, AHEAD, 0),)})
    assert keep.ahead_calls(done) == {}


def test_the_loop_gives_lapsed_launches_back_before_buying_and_counts_them_as_released_at_the_deadline():
    from gangscale.controller.loop import Loop
    from gangscale.controller.metrics import Metrics

    ran: list[object] = []

    class Cloud:
        def run(self, action, ctx=None):
            ran.append(action)
            return ReturnOutcome(action, 3, None) if isinstance(action, ReturnAhead) else Done(action, None)

    loop = Loop(ControllerConfig(), Cloud(), Metrics(), save=lambda: None)
    loop.state.keep = _bought()[0].keep
    loop.buy_ahead(Cluster(nodes=[_node("n1")]), {"cpu": CPU}, NOW + DEADLINE + 1)
    assert [type(a).__name__ for a in ran] == ["ReturnAhead"]  # given back, then backed off: nothing bought
    assert loop.metrics.released.labels("cpu", "timed-out")._value.get() == 3
    assert keep.lapsed(loop.state.keep, NOW + 1) == {} and loop.state.backoff["cpu"] > NOW + DEADLINE + 1
