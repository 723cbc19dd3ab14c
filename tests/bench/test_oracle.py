"""The simulator's hindsight keep rule (benchmarks/sim/oracle.py): which empty nodes it keeps, and for how long; and
what the gangs that start on arrival start on (`started_on_arrival_by_capacity`)."""

from __future__ import annotations

import logging

import pytest

from benchmarks.generate import PodT
from benchmarks.sim.engine import Engine
from benchmarks.sim.oracle import SLACK, Demand, Horizon, keep_until, parse_oracle
from benchmarks.sim.trace import GangSpec, Trace


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("gangscale").setLevel(logging.ERROR)
    yield
    logging.getLogger("gangscale").setLevel(logging.NOTSET)


def _rank_gang(name: str, arrival: int, runtime: int, ranks: int = 1) -> GangSpec:
    """6-core ranks: one m5.2xlarge each."""
    return GangSpec(name, "hpc", "cpu-mpi", "native", (("rank", ranks, PodT("6", "8Gi")),), ranks, arrival, runtime)


def _trace(gangs: list[GangSpec], max_size: int = 10) -> Trace:
    """One m5.2xlarge group, every launch exactly 300 s, no failures."""
    cat = [{"name": "cpu", "instanceType": "m5.2xlarge", "zone": "us-east-1a", "minSize": 0, "maxSize": max_size,
            "currentSize": 0}]
    return Trace("hand", 0, gangs, cat, {"cpu": (300.0, 0.0)}, 0.0, [], [], 3600)


def test_the_oracle_policy_names_say_its_horizon():
    assert parse_oracle("gangscale-oracle") == Horizon()
    assert parse_oracle("gangscale-oracle-2x") == Horizon(factor=2.0)
    assert parse_oracle("gangscale-oracle-600s") == Horizon(seconds=600.0)
    assert parse_oracle("gangscale-gate") is None and parse_oracle("gangscale-oracle-2") is None


def test_a_node_is_kept_only_for_a_gang_that_fits_whole_on_the_empty_nodes():
    two = [Demand(500, "pair", ({"cpu": 2},))]
    assert keep_until(two, {"n1": "cpu"}, {"cpu": 1.0}, {"cpu": 1000.0}, 0.0) == {"n1": 1.0}
    both = keep_until(two, {"n1": "cpu", "n2": "cpu"}, {"cpu": 1.0}, {"cpu": 1000.0}, 0.0)
    assert both == {"n1": 500.0 + SLACK, "n2": 500.0 + SLACK}


def test_a_gang_of_two_roles_is_matched_only_when_each_role_has_its_nodes():
    gang = [Demand(100, "llm", ({"cpu": 1}, {"gpu": 1}))]
    prices, limits = {"cpu": 1.0, "gpu": 30.0}, {"cpu": 1000.0, "gpu": 1000.0}
    assert keep_until(gang, {"c": "cpu"}, prices, limits, 0.0) == {"c": 1.0}
    assert keep_until(gang, {"c": "cpu", "g": "gpu"}, prices, limits, 0.0) == {"c": 100.0 + SLACK, "g": 100.0 + SLACK}


def test_a_role_goes_to_the_group_where_its_nodes_cost_least_and_an_arrival_past_the_horizon_keeps_nothing():
    d = [Demand(100, "one", ({"dear": 1, "cheap": 1},)), Demand(900, "late", ({"dear": 1},))]
    until = keep_until(d, {"a": "dear", "b": "cheap"}, {"dear": 3.0, "cheap": 1.0}, {"dear": 500.0, "cheap": 500.0}, 0.0)
    assert until == {"a": 1.0, "b": 100.0 + SLACK}


@pytest.mark.parametrize(("policy", "on_arrival"), [("gangscale-oracle", True), ("gangscale-oracle-100s", False)])
def test_the_oracle_keeps_an_emptied_node_for_the_next_gang_only_within_its_horizon(policy, on_arrival):
    # the first gang runs 300-900 s on one node; the second comes 300 s after it empties, within the node's
    # break-even keep (300 s boot x (1 + $4 / $0.384) = 3,425 s) but past a 100 s horizon
    e = Engine(_trace([_rank_gang("first", 0, 600), _rank_gang("second", 1200, 600)]), policy)
    r = e.run()
    assert e.gangs["first"].start == 300
    if on_arrival:
        assert e.gangs["second"].start == 1200 and r["instances_launched"] == 1
        assert r["started_on_arrival_by_capacity"]["kept_after_a_pod"] == 1
    else:
        assert e.gangs["second"].start == 1500 and r["instances_launched"] == 2
        assert r["time_to_start_parts"]["started_on_arrival"] == 0


def test_a_gang_that_starts_on_a_node_bought_for_a_gang_that_cannot_start_counts_as_started_on_a_node_that_never_ran_a_pod():
    # CA buys both nodes the group allows for a three-rank gang that can never have its third; a one-rank gang that
    # comes once they are Ready starts at once on one of them
    e = Engine(_trace([_rank_gang("three", 0, 600, ranks=3), _rank_gang("one", 600, 600)], max_size=2), "ca")
    r = e.run()
    assert e.gangs["three"].start is None and e.gangs["one"].start == 600
    assert r["started_on_arrival_by_capacity"] == {"never_ran_a_pod": 1, "kept_after_a_pod": 0, "beside_other_pods": 0}
