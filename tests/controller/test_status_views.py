"""`gangscale status` shows every gang the controller knows (records, then the last plan's other gangs with their
decision), `--state` filters them, and `gangscale status nodegroups` shows each group's target, ready, upcoming,
min, max and backoff; the same facts are on /metrics (parsed with prometheus_client's own parser)."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from cloud.proxy import query_error
from prometheus_client.parser import text_string_to_metric_families

from gangscale.cli import main
from gangscale.controller.published import STATUS_CONFIGMAP, StatusPublisher
from gangscale.rfc3339 import format_time as iso
from tests.kube.emulator import Emulator

from .conftest import STATE_NS, wait_for
from .test_controller_e2e import gang
from .test_status import _records, put_state, status

API = "scheduling.k8s.io/v1alpha2"


@pytest.fixture
def state_emu(tmp_path):
    emu = Emulator(release="1.36").start()
    try:
        yield emu, emu.kubeconfig(str(tmp_path / "kc"))
    finally:
        emu.stop()


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def metrics_port(ctl) -> int:
    return wait_for(lambda: ctl.logged("starting"), what="start")[0]["metrics_port"]


def test_status_lists_infeasible_and_below_quorum_gangs_beside_the_provisioning_one_and_the_node_groups(
        cluster, world, controllers, tmp_path, capsys):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    ctl = controllers()
    gang(cluster, "train", 2)
    gang(cluster, "huge", 2, cpu="64")  # fits no group
    gang(cluster, "quorum", 2, min_count=3)  # fewer pods than minCount: nothing is bought yet
    wait_for(lambda: world.desired("cpu") == 2, what="the scale-up")
    kc = cluster.kubeconfig(str(tmp_path / "kc"))

    def all_three() -> dict | None:
        assert main(["status", "--kubeconfig", kc, "-o", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        states = {g["name"]: g["state"] for g in doc["gangs"]}
        return doc if states == {"train": "provisioning", "huge": "infeasible", "quorum": "below-quorum"} else None
    doc = wait_for(all_three, what="every gang in `gangscale status`")
    train, *others = doc["gangs"]  # the record first, then the plan's other gangs by name
    assert (train["name"], train["decision"], train["nodesRequested"]) == ("train", "scale-up", 2)
    assert [g["name"] for g in others] == ["huge", "quorum"]
    assert others[1]["minCount"] == 3 and others[1]["pending"] == 2 and others[1]["reason"]
    assert doc["published"]["leader"] == "a" and doc["published"]["updated"].endswith("Z")

    assert main(["status", "--kubeconfig", kc, "-o", "table", "--state", "infeasible,below-quorum"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["default/huge", "default/quorum"] and " - " in rows[0]

    def group_view() -> dict | None:
        assert main(["status", "nodegroups", "--kubeconfig", kc, "-o", "json"]) == 0
        d = json.loads(capsys.readouterr().out)
        return d if d["nodeGroups"] and d["nodeGroups"][0]["target"] == 2 else None
    [cpu] = wait_for(group_view, what="the node-group view")["nodeGroups"]
    assert cpu == {"name": "cpu", "target": 2, "ready": 0, "registered": 0, "upcoming": 2, "minSize": 0,
                   "maxSize": 10, "backoffUntil": None}
    assert main(["status", "nodegroups", "--kubeconfig", kc, "-o", "table"]) == 0
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == ["NODE", "GROUP", "TARGET", "READY", "UPCOMING", "MIN", "MAX", "BACKOFF"]
    assert line.split() == ["cpu", "2", "0", "2", "0", "10", "-"]

    got = samples(metrics_port(ctl))
    assert got[("gangscale_node_group_target_size", (("node_group", "cpu"),))] == 2
    assert got[("gangscale_node_group_upcoming_nodes", (("node_group", "cpu"),))] == 2
    assert got[("gangscale_node_group_max_size", (("node_group", "cpu"),))] == 10
    assert got[("gangscale_node_group_backed_off", (("node_group", "cpu"),))] == 0
    assert got[("gangscale_namespace_nodes", (("namespace", "default"),))] == 2
    assert got[("gangscale_namespace_dollars_per_hour", (("namespace", "default"),))] == pytest.approx(2 * 0.384)
    [build] = [k for k in got if k[0] == "gangscale_build_info"]
    assert dict(build[1])["version"] == "0.1.0" and got[build] == 1
    ctl.assert_no_tracebacks()


def test_a_refused_scale_up_is_counted_by_error_kind_and_shows_as_a_backoff(cluster, world, controllers, proxy,
                                                                           tmp_path, capsys):
    world.asg("cpu", "m5.2xlarge", max_size=10)
    proxy.add("SetDesiredCapacity", lambda req, fwd: query_error("AccessDenied", "not authorized", 403))
    ctl = controllers()
    gang(cluster, "train", 2)
    port = metrics_port(ctl)

    def refused() -> dict | None:
        got = samples(port)
        errors = {k: v for k, v in got.items() if k[0] == "gangscale_cloud_api_errors_total" and v >= 1}
        return got if errors and got.get(("gangscale_node_group_backed_off", (("node_group", "cpu"),))) == 1 else None
    got = wait_for(refused, what="the refused call counted and the group backed off")
    kinds = {dict(k[1])["kind"] for k in got if k[0] == "gangscale_cloud_api_errors_total" and got[k] >= 1}
    assert kinds == {"permission"}
    kc = cluster.kubeconfig(str(tmp_path / "kc"))

    def backed_off() -> str | None:
        assert main(["status", "nodegroups", "--kubeconfig", kc, "-o", "table"]) == 0
        line = capsys.readouterr().out.splitlines()[-1]
        return line if line.split()[-2] == "for" else None
    line = wait_for(backed_off, what="the backoff in `status nodegroups`")
    assert line.split()[:2] == ["cpu", "0"] and line.split()[-1].endswith("m")  # 600 s in this config
    assert world.desired("cpu") == 0


def test_status_merges_the_records_with_the_published_plan_and_filters_by_state(state_emu, capsys):
    emu, kc = state_emu
    now = time.time()
    put_state(emu, json.dumps(_records(now)))
    from gangscale.kube.client import connect

    row = {"api": API, "minCount": 4, "pending": 4, "placed": 0, "bound": 0, "priority": 0}
    with connect(kc) as client:
        err = StatusPublisher(client, STATE_NS).publish({
            "gangs.json": json.dumps([
                {**row, "namespace": "web", "name": "fresh", "decision": "scale-up", "reason": "planned"},
                {**row, "namespace": "ml", "name": "broken", "decision": "invalid", "reason": "spec.minMember: 'two'"},
                {**row, "namespace": "ml", "name": "big", "decision": "infeasible", "reason": "no node group fits"}]),
            "nodegroups.json": json.dumps([{"name": "gpu", "target": 3, "ready": 1, "registered": 2, "upcoming": 1,
                                            "minSize": 0, "maxSize": 8, "backoffUntil": iso(now + 250)}]),
            "pass.json": json.dumps({"leader": "gangscale-0", "mode": "enforce", "gangsOmitted": 0})}, now)
    assert err is None
    doc = json.loads(status(kc, capsys, "-o", "json")[1])
    assert [(g["name"], g["state"]) for g in doc["gangs"]] == [
        ("late", "timed-out"), ("fresh", "provisioning"), ("big", "infeasible"), ("broken", "invalid")]
    assert doc["gangs"][1]["decision"] == "scale-up" and "decision" not in doc["gangs"][0]
    code, text, _ = status(kc, capsys, "-o", "table", "--state", "invalid", "--state", "timed-out")
    assert code == 0
    assert [r.split()[0] for r in text.splitlines()[1:]] == ["ml/late", "ml/broken"]
    assert "spec.minMember: 'two'" in text.splitlines()[2]
    text = status(kc, capsys, "nodegroups", "-o", "table")[1]
    assert text.splitlines()[1].split() == ["gpu", "3", "1", "1", "0", "8", "for", "4m"]
    md = status(kc, capsys, "nodegroups", "-o", "markdown")[1]
    assert md.startswith("| NODE GROUP | TARGET | READY | UPCOMING | MIN | MAX | BACKOFF |")


def test_without_a_published_status_the_node_group_view_says_so(state_emu, capsys):
    _, kc = state_emu
    code, text, _ = status(kc, capsys, "nodegroups", "-o", "table")
    assert code == 0 and text == (f"no node-group status in ConfigMap {STATE_NS}/{STATUS_CONFIGMAP} "
                                  "(the leader writes it after each pass)\n")


def test_a_corrupted_status_configmap_is_one_sentence_and_exit_2(state_emu, capsys):
    emu, kc = state_emu
    put_state(emu, "{}")
    emu.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STATUS_CONFIGMAP, "namespace": STATE_NS},
               "data": {"gangs.json": "{not json"}})
    code, out, err = status(kc, capsys, "nodegroups")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "published status" in err


def test_a_status_no_leader_has_written_for_long_is_flagged_on_stderr(state_emu, capsys):
    emu, kc = state_emu
    put_state(emu, "{}")
    from gangscale.kube.client import connect

    with connect(kc) as client:
        assert StatusPublisher(client, STATE_NS).publish({"gangs.json": "[]", "nodegroups.json": "[]",
                                                         "pass.json": "{}"}, time.time() - 7200) is None
    code, _, err = status(kc, capsys, "nodegroups")
    assert code == 0 and "the published status is 2h old" in err and "is the controller running?" in err
    with connect(kc) as client:
        StatusPublisher(client, STATE_NS).publish({"gangs.json": "[]", "nodegroups.json": "[]", "pass.json": "{}"},
                                                  time.time())
    assert status(kc, capsys, "nodegroups")[2] == ""
