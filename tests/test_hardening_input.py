"""Issue 16, input side: huge quantities, duplicate objects, mistyped fields, floods of warnings.

Each bad object gets a reason naming its field (its gang `invalid`, or a warning when it is a node or a
node group) and everything else is still planned; every plan here passes the independent checker.
"""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from builders import group, node, plan_for, pod, podgroup, snapshot
from checker import check_plan
from gangscale.catalog import parse_catalog
from gangscale.cli import main
from gangscale.ingest import ingest
from gangscale.instance_types import load_instance_types
from gangscale.loader import parse_documents
from gangscale.planner import OFF, make_plan
from gangscale.resources import MAX_UNITS, QuantityError, parse_quantity, to_units
from gangscale.solver.params import SolveOptions
from gangscale.warnlog import PER_KIND, TOTAL, WarningLog, summarise

CATALOG = [group("g", cpu="8", mem="32Gi", max_size=10)]
GOOD = [podgroup("good", min_count=2), pod("good-0", group="good", cpu="6"), pod("good-1", group="good", cpu="6")]


def _decisions(plan) -> dict[str, tuple[str, str]]:
    return {g.name: (g.decision, g.reason) for g in plan.gangs}


def _planned_and_checked(objects: list[dict], catalog: list[dict] = CATALOG):
    plan = plan_for(objects, catalog, time_limit=3)
    errors = check_plan([o for o in objects if _checkable(o)], catalog, plan.to_dict())
    assert not errors, errors
    return plan


def _checkable(o: dict) -> bool:
    """The checker reads well-formed objects only; the bad ones are never placed."""
    return o["metadata"]["name"] != "bad"


def _assert_good_gang_served(plan) -> None:
    assert _decisions(plan)["good"][0] == "scale-up"
    assert plan.scale_up == {"g": 2}


# ------------------------------------------------------------------ item 2: huge quantities


def _two_containers(mem: str) -> dict:
    bad = pod("bad", mem=mem)
    second = copy.deepcopy(bad["spec"]["containers"][0])
    second["name"] = "second"
    bad["spec"]["containers"].append(second)
    return bad


@pytest.mark.parametrize("bad, field", [
    (pod("bad", cpu="10P"), "spec.containers[0].resources.requests.cpu"),
    (_two_containers("5Ei"), "spec.containers[0].resources.requests.memory"),
    (_two_containers("5Ti"), "total request: memory"),  # each container is within the bound, their sum is not
    (pod("bad", cpu=1e308), "spec.containers[0].resources.requests.cpu"),
    (pod("bad", cpu=10**30), "spec.containers[0].resources.requests.cpu"),
], ids=["10P-cpu", "two-5Ei-containers", "two-5Ti-containers-sum", "float-1e308", "int-1e30"])
def test_a_pod_with_a_huge_quantity_is_invalid_with_the_field_named_and_the_rest_is_planned(bad, field):
    plan = _planned_and_checked(GOOD + [bad])
    decision, reason = _decisions(plan)["bad"]
    assert decision == "invalid" and field in reason, reason
    _assert_good_gang_served(plan)


def test_the_json_number_1e308_read_from_a_file_is_an_invalid_quantity():
    doc = b'{"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "bad"}, "spec": {"containers": ' \
          b'[{"name": "c", "resources": {"requests": {"cpu": 1e308}}}]}, "status": {"phase": "Pending"}}'
    bad = parse_documents(doc)[0]
    assert isinstance(bad["spec"]["containers"][0]["resources"]["requests"]["cpu"], float)
    plan = _planned_and_checked(GOOD + [bad])
    assert _decisions(plan)["bad"][0] == "invalid"
    _assert_good_gang_served(plan)


def test_a_node_with_allocatable_above_int64_is_skipped_with_a_warning_naming_the_field():
    huge = node("huge", cpu="8")
    huge["status"]["allocatable"]["memory"] = str(2**63)
    plan = plan_for(GOOD + [huge], CATALOG, time_limit=3)
    assert any(w.startswith("ignored Node huge: status.allocatable.memory") for w in plan.warnings), plan.warnings
    assert "huge" not in plan.existing_nodes
    _assert_good_gang_served(plan)


def test_a_node_group_with_allocatable_above_the_bound_is_skipped_with_a_warning():
    catalog = CATALOG + [group("giant", cpu="10P", price=0.01)]
    groups, warnings = parse_catalog(catalog)
    assert [g.name for g in groups] == ["g"]
    assert any("giant" in w and "allocatable" in w and "cpu" in w for w in warnings), warnings
    plan = make_plan(snapshot(GOOD, catalog), SolveOptions(time_limit=3))
    _assert_good_gang_served(plan)


def test_an_integer_field_beyond_int32_makes_the_gang_invalid():
    plan = plan_for(GOOD + [pod("bad", priority=10**30), podgroup("bad2", min_count=2**40),
                            pod("bad2-0", group="bad2")], CATALOG, time_limit=3)
    assert "spec.priority must be at most 2147483647" in _decisions(plan)["bad"][1]
    assert "minCount must be at most" in _decisions(plan)["bad2"][1]
    _assert_good_gang_served(plan)


def test_the_bound_leaves_room_for_a_million_pods_and_every_known_instance_type():
    assert 1_000_000 * MAX_UNITS < 2**63 - 1
    at_bound = np.full(1_000_000, MAX_UNITS, dtype=np.int64)
    assert int(at_bound.sum()) == 1_000_000 * MAX_UNITS  # no wrap-around in numpy int64
    assert to_units("memory", "8Ti") == MAX_UNITS
    with pytest.raises(QuantityError):
        to_units("memory", "8796093022209")
    for itype in load_instance_types().values():
        assert all(v <= MAX_UNITS // 4 for v in itype.allocatable().values()), itype.name


# ------------------------------------------------------------------ item 6: grammar and types


@pytest.mark.parametrize("bad", ["١٢", " 2 ", "2 ", "\t2", "２", "1e3 ", "9" * 5000, "1" + "0" * 70 + "m"])
def test_quantities_outside_the_api_servers_ascii_grammar_are_refused(bad):
    with pytest.raises(QuantityError):
        parse_quantity(bad)


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p["spec"].update(tolerations=[{"key": {"a": 1}, "operator": "Exists"}]), "spec.tolerations[0].key"),
    (lambda p: p["spec"].update(tolerations=[{"key": "k", "effect": ["NoSchedule"]}]), "spec.tolerations[0].effect"),
    (lambda p: p["spec"].update(tolerations=[{"key": "k", "value": 7}]), "spec.tolerations[0].value"),
    (lambda p: p["spec"].update(tolerations=[{"key": "k", "effect": "Sometimes"}]), "spec.tolerations[0].effect"),
    (lambda p: p["metadata"].update(namespace=7), "metadata.namespace"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="١٢"), "requests.cpu"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(memory=" 2 "), "requests.memory"),
    # shapes the API server refuses: a null list entry decodes to an empty struct, names are required
    (lambda p: p["spec"]["containers"].append(None), "spec.containers[1] must be an object"),
    (lambda p: p["spec"].update(containers=[]), "spec.containers is missing"),
    (lambda p: p["spec"].update(initContainers=[None]), "spec.initContainers[0] must be an object"),
    (lambda p: p["spec"].update(topologySpreadConstraints=[None]), "spec.topologySpreadConstraints[0] must be an object"),
    (lambda p: p["spec"].update(workloadRef={"podGroup": "workers"}), "spec.workloadRef.name is missing"),
    (lambda p: p["spec"].update(schedulingGroup={}), "spec.schedulingGroup.podGroupName is missing"),
    (lambda p: p["status"].update(phase=7), "status.phase must be a string"),
    # falsy but present: ingest's fast paths skip only a missing field (None), never an empty wrong type
    (lambda p: p["metadata"].update(ownerReferences={}), "metadata.ownerReferences must be a list"),
    (lambda p: p["spec"].update(schedulingGates={}), "spec.schedulingGates must be a list"),
    (lambda p: p["metadata"].update(annotations=[]), "metadata.annotations must be an object"),
    (lambda p: p["spec"].update(schedulingGroup=""), "spec.schedulingGroup.podGroupName is missing"),
    (lambda p: p["spec"].update(workloadRef=[]), "spec.workloadRef.name is missing"),
    (lambda p: p["spec"].update(priority=True), "spec.priority must be an integer"),
], ids=["toleration-key-object", "toleration-effect-list", "toleration-value-int", "toleration-effect-unknown",
        "namespace-int", "unicode-digits", "spaces", "null-container", "no-containers", "null-init-container",
        "null-spread-constraint", "workload-ref-without-name", "scheduling-group-without-name", "phase-int",
        "owner-references-empty-object", "scheduling-gates-empty-object", "annotations-empty-list",
        "scheduling-group-empty-string", "workload-ref-empty-list", "priority-bool"])
def test_a_mistyped_field_makes_the_pods_gang_invalid_with_the_field_named(mutate, field):
    bad = pod("bad")
    mutate(bad)
    plan = _planned_and_checked(GOOD + [bad])
    decision, reason = _decisions(plan)["bad"]
    assert decision == "invalid" and field in reason, reason
    _assert_good_gang_served(plan)


@pytest.mark.parametrize("status", [{}, None, {"phase": ""}], ids=["no-phase", "null-status", "empty-phase"])
def test_a_pod_without_a_phase_is_pending_as_the_api_server_makes_it_and_is_planned(status):
    other = [podgroup("other", min_count=1), {**pod("other-0", group="other", cpu="1"), "status": status}]
    plan = plan_for(GOOD + other, CATALOG, time_limit=3)
    assert _decisions(plan)["other"][0] == "scale-up"
    stored = GOOD + [other[0], {**other[1], "status": {"phase": "Pending"}}]  # as the API server stores it
    assert not check_plan(stored, CATALOG, plan.to_dict())


@pytest.mark.parametrize("bad", [
    {**podgroup("bad"), "spec": 5, "metadata": {"name": "bad", "namespace": 7}},
    {**node("bad"), "metadata": {"name": "bad", "namespace": 7}},
    {**node("bad"), "metadata": {"name": "bad", "namespace": {"x": 1}}, "status": {"allocatable": {"cpu": "١"}}},
    {"kind": "Node", "apiVersion": "v1", "metadata": {"name": {"x": 1}, "namespace": [7]}},
], ids=["podgroup", "node", "node-bad-allocatable", "node-name-object"])
def test_an_object_with_a_non_string_namespace_is_skipped_with_a_warning(bad):
    plan = plan_for(GOOD + [bad], CATALOG, time_limit=3)
    _assert_good_gang_served(plan)
    assert any(w.startswith(f"ignored {bad['kind']} ") for w in plan.warnings), plan.warnings


# ------------------------------------------------------------------ item 4: duplicates


def test_a_node_listed_twice_is_counted_once_and_two_3_cpu_pods_are_not_put_on_its_4_cpus():
    n1 = node("n1", cpu="4")
    n1["metadata"]["uid"] = "uid-n1"
    objects = [pod("a", cpu="3"), pod("b", cpu="3"), n1, copy.deepcopy(n1)]
    catalog = [group("g", cpu="4", max_size=10)]  # one 3-CPU pod per node, new or existing
    plan = plan_for(objects, catalog, time_limit=3)
    assert not check_plan(objects, catalog, plan.to_dict())
    assert sum(len(p) for p in plan.existing_nodes.values()) == 1 and plan.scale_up == {"g": 1}
    assert [w for w in plan.warnings if "Node n1" in w and "listed more than once" in w]


@pytest.mark.parametrize("same", ["uid", "name"])
def test_pods_listed_twice_are_placed_once(same):
    objects = copy.deepcopy(GOOD)
    for i, o in enumerate(objects[1:]):
        o["metadata"]["uid"] = f"uid-{i}"
    twice = objects + copy.deepcopy(objects[1:])
    if same == "uid":  # a copy under another name but the same uid is still the same pod
        for o in twice[3:]:
            o["metadata"]["name"] += "-copy"
    plan = plan_for(twice, CATALOG, time_limit=3, scheduler=OFF)  # the solver's reasons; observe mode: tests/scheduling
    assert not check_plan(objects, CATALOG, plan.to_dict())
    assert plan.scale_up == {"g": 2}
    g = _decisions(plan)["good"]
    assert g[0] == "scale-up" and g[1].startswith("2 of 2 pending pods placed"), g
    assert sum(1 for w in plan.warnings if "listed more than once" in w) == 2


def test_execute_buys_two_nodes_for_a_two_pod_gang_listed_twice(tmp_path, capsys):
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(CATALOG))
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"kind": "List", "items": GOOD + GOOD[1:]}))
    code = main(["plan", "--cluster", str(cluster), "--nodegroups", str(catalog), "--provider", "simulated",
                 "--simulated-state", str(tmp_path / "sim.json"), "--execute", "-o", "json", "--time-limit", "3"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scaleUp"] == {"g": 2}
    assert out["execution"]["actions"][0]["after"] == 2
    assert json.loads((tmp_path / "sim.json").read_text())["groups"]["g"]["target"] == 2


# ------------------------------------------------------------------ item 11: warning floods


def test_a_million_integers_give_a_handful_of_warnings_not_a_million():
    cluster = ingest(range(1_000_000))
    assert len(cluster.warnings) == PER_KIND + 1
    assert cluster.warnings[-1] == f"... and {1_000_000 - PER_KIND:,} more like this"


def test_the_plan_of_a_20_mb_list_of_integers_stays_small(tmp_path, capsys):
    cluster = tmp_path / "ints.json"
    cluster.write_text(json.dumps({"kind": "List", "items": [*GOOD, *range(2_500_000)]}))
    assert cluster.stat().st_size > 20_000_000
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps(CATALOG))
    assert main(["plan", "--cluster", str(cluster), "--nodegroups", str(catalog), "-o", "json",
                 "--time-limit", "3"]) == 0
    out = capsys.readouterr().out
    plan = json.loads(out)
    assert plan["scaleUp"] == {"g": 2}
    assert len(plan["warnings"]) == PER_KIND + 1 and "2,499,990 more like this" in plan["warnings"][-1]
    assert len(out) < 20_000


def test_many_kinds_of_warnings_are_capped_overall_and_counted():
    objs = [{"kind": "Node", "apiVersion": "v1", "metadata": {"name": f"n{i}"}, "status": {"allocatable": {f"r{i}": "x"}}}
            for i in range(3 * TOTAL)]
    objs += [{"kind": f"Kind{c}", "apiVersion": "v1", "metadata": {"name": "x"}} for c in "abc"]  # not read
    warnings = ingest(objs).warnings
    assert len(warnings) <= 2 * TOTAL + 1
    kept = [w for w in warnings if not w.startswith("... and ")]
    summarised = sum(int(w.split()[2].replace(",", "")) for w in warnings if w.startswith("... and "))
    assert len(kept) + summarised == 3 * TOTAL


def test_warning_log_keeps_the_first_of_each_kind_and_counts_the_rest():
    log = WarningLog(per_kind=2, total=5)
    for i in range(4):
        log.add(f"a{i}", "a")
    log.add("b0", "b")
    for c in "cdefg":
        log.add(c, c)
    assert log.lines() == ["a0", "a1", "... and 2 more like this", "b0", "c", "d", "... and 3 more warnings"]


def test_summarising_again_keeps_earlier_counts_and_cuts_huge_lines():
    once = summarise([f"ignored Node n{i}: bad" for i in range(100)] + ["x" * 10**6])
    twice = summarise(once + ["... and 5 more like this"])
    assert once[PER_KIND] == f"... and {100 - PER_KIND:,} more like this"
    assert twice[:len(once)] == once and twice[-1] == "... and 5 more like this"
    assert max(len(w) for w in twice) <= 500
