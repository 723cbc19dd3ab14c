"""Where a policy's idle capacity goes (metrics' stranded causes), and `simulate --controller-config`."""

from __future__ import annotations

import logging

import pytest

from benchmarks.cli import main
from benchmarks.sim.engine import Engine
from benchmarks.sim.policies import CONTROLLER_CONFIG_ENV
from .test_simulate import cpu_group, hand_trace, two_pod_gang


@pytest.fixture(autouse=True)
def _quiet():
    logging.getLogger("gangscale").setLevel(logging.ERROR)
    yield
    logging.getLogger("gangscale").setLevel(logging.NOTSET)


def _run(policy: str, horizon: int = 2 * 3600) -> dict:
    """Two nodes Ready at 300 s, the gang runs on them until 2,100 s (past its 900 s deadline: its nodes are no
    spares), then nothing arrives."""
    return Engine(hand_trace([two_pod_gang(runtime=1800)], [cpu_group("cpu")], horizon=horizon), policy).run()


def test_the_nodes_kept_empty_after_a_gang_ends_are_stranded_for_no_gang_and_the_causes_add_up(monkeypatch):
    monkeypatch.setenv(CONTROLLER_CONFIG_ENV, '{"emptyNodeGraceSeconds": 10, "lateLaunchSeconds": 0}')  # exact launches
    r = _run("gangscale-observe")
    causes = r["stranded_node_hours_by_cause"]
    kept = causes["after_a_pod_then_gone"] * 3600
    grace = 10  # the fixed grace, plus at most one scan
    assert 2 * grace <= kept <= 2 * (grace + 10)  # both nodes, in the same pass
    assert causes["before_first_pod_then_used"] == causes["never_used"] == causes["after_a_pod_then_reused"] == 0
    assert abs(sum(causes.values()) - r["stranded_node_hours"]) < 1e-6
    assert r["booting_node_hours"] == pytest.approx(2 * 300 / 3600, abs=1e-3)  # two launches of 300 s, billed


def test_the_controller_config_option_reaches_both_gangscale_policies(monkeypatch, tmp_path):
    monkeypatch.setenv(CONTROLLER_CONFIG_ENV, '{"emptyNodeGraceSeconds": 1800}')
    for policy in ("gangscale-observe", "gangscale-gate"):
        r = _run(policy)
        assert r["stranded_node_hours_by_cause"]["after_a_pod_then_gone"] * 3600 >= 2 * 1800  # kept 30 min each
    bad = tmp_path / "c.yaml"
    bad.write_text("gateMode: all\n")
    assert main(["simulate", "--controller-config", str(bad), "--out", str(tmp_path / "o")]) == 2
    bad.write_text("emptyNodeGracSeconds: 10\n")
    assert main(["simulate", "--controller-config", str(bad), "--out", str(tmp_path / "o")]) == 2
