"""The plan's plain classes (gangscale.plan, no pydantic on the default `plan` path, issue 11) keep the JSON contract
that gangscale.plan_schema's pydantic models state: the same fields, order, aliases and defaults, and every plan they
write validates there and dumps back byte for byte. The catalog's hand check accepts only what its pydantic model
accepts, with the same values."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangscale import plan as plain
from gangscale import plan_schema as schema
from gangscale.catalog import _plain_entry, _validated_entry, load_catalog
from gangscale.cli import main
from gangscale.model import Pod, new_pod
from gangscale.parse import _ingest_pod

from builders import group, plan_for, pod, podgroup

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ["GangResult", "NewNode", "PriorityBound", "SolverPhase", "SolverGaps", "SolverInfo", "SchedulerInfo",
            "Plan"]


def _schema_fields(cls) -> list[tuple[str, str, object]]:
    return [(name, f.alias or name, "required" if f.is_required() else f.get_default(call_default_factory=True))
            for name, f in cls.model_fields.items()]


def _plain_fields(cls) -> list[tuple[str, str, object]]:
    return [(name, alias, "required" if default is plain._REQUIRED else default)
            for name, alias, default, _convert in cls._fields]


@pytest.mark.parametrize("section", SECTIONS)
def test_each_plain_plan_section_declares_the_schemas_fields_in_order_with_its_aliases_and_defaults(section):
    assert _plain_fields(getattr(plain, section)) == _schema_fields(getattr(schema, section))


def _same_json(doc: dict) -> None:
    """`doc` validates against the schema and dumps back to the same bytes (an int where a float was: a difference)."""
    again = schema.Plan.model_validate(doc).model_dump(by_alias=True, mode="json")
    assert orjson.dumps(again) == orjson.dumps(doc)


def test_the_bundled_examples_plan_validates_against_the_schema_and_dumps_back_unchanged(tmp_path):
    out = tmp_path / "plan.json"
    assert main(["plan", "--cluster", str(ROOT / "config/examples/backlog.yaml"), "--nodegroups",
                 str(ROOT / "config/examples/catalog.yaml"), "-o", "json", "--output-file", str(out)]) == 0
    doc = orjson.loads(out.read_bytes())
    assert doc["gangs"] and doc["newNodes"] and doc["scheduler"]["mode"] == "off"
    _same_json(doc)


def test_a_plan_with_two_priority_levels_and_a_topology_domain_validates_and_dumps_back_unchanged():
    objs = [podgroup("hi", min_count=2), *(pod(f"hi-{i}", group="hi", priority=100) for i in range(2)),
            podgroup("lo", min_count=2), *(pod(f"lo-{i}", group="lo", cpu="3") for i in range(2))]
    plan = plan_for(objs, [group("g", cpu="8", price=0.5)], time_limit=3)
    doc = plan.to_dict()
    assert len(doc["solver"]["byPriority"]) == 2
    _same_json(doc)


def test_numbers_given_as_ints_for_float_fields_are_written_as_floats_as_the_pydantic_models_wrote_them():
    info = dict(status="OPTIMAL", seconds=0, gap=0)
    assert orjson.dumps(plain.SolverInfo(**info).model_dump()) == \
        orjson.dumps(schema.SolverInfo(**info).model_dump(by_alias=True, mode="json"))
    node = plain.NewNode(nodeGroup="g", pods=("a/b",), pricePerHour=3)
    assert orjson.dumps(node.model_dump()) == b'{"nodeGroup":"g","pods":["a/b"],"instanceType":"","pricePerHour":3.0}'


def test_a_plan_section_refuses_a_value_outside_its_literal_an_unknown_field_and_a_missing_one():
    with pytest.raises(ValueError, match="OPTIMAL"):
        plain.SolverInfo(status="DONE", seconds=0.0, gap=0.0)
    with pytest.raises(TypeError, match="secs"):
        plain.SolverInfo(status="OPTIMAL", seconds=0.0, gap=0.0, secs=1)
    with pytest.raises(TypeError, match="gap is required"):
        plain.SolverInfo(status="OPTIMAL", seconds=0.0)


def test_model_copy_changes_only_the_copy_and_list_defaults_are_not_shared():
    a = plain.SchedulerInfo(mode="off")
    a.seeds.append(1)
    assert plain.SchedulerInfo(mode="off").seeds == []
    b = a.model_copy(update={"note": "why"})
    assert (a.note, b.note, b.seeds) == ("", "why", [1]) and a != b and a == a.model_copy()


def test_the_example_catalog_is_read_without_the_pydantic_model_to_the_same_groups():
    raw = __import__("yaml").safe_load((ROOT / "config/examples/catalog.yaml").read_text())["nodeGroups"]
    assert all(_plain_entry(e) is not None for e in raw)
    assert [_plain_entry(e) for e in raw] == [_validated_entry(e) for e in raw]
    assert load_catalog(ROOT / "config/examples/catalog.yaml")[0]


_EDGES = [None, True, False, -1, 0, 1, 2**31 - 1, 2**31, 1_000_000, 1_000_000.5, float("inf"), float("nan"), 2.5, 3.0, "",
          "x", "auto", "4", "2Gi", [], {}, {"a": 1}, ["k"]]
_ODD = st.one_of(st.sampled_from(_EDGES), st.sampled_from(_EDGES), st.sampled_from(_EDGES), st.integers(), st.floats(),
                 st.text(max_size=3))
_VALID = st.fixed_dictionaries({
    "name": st.just("g"), "instanceType": st.sampled_from(["m5.large", "p4d.24xlarge", "zz"]), "maxSize": st.integers(3, 6),
    "minSize": st.integers(0, 3), "currentSize": st.integers(0, 6), "pricePerHour": st.one_of(st.floats(0, 5), st.integers(0, 5)),
    "zone": st.just("z"), "allocatable": st.just({"cpu": "4", "memory": "2Gi"}), "devices": st.just({"gpu.nvidia.com": 1}),
    "labels": st.just({"a": "v"}), "taints": st.just([{"key": "k", "value": "v", "effect": "NoSchedule"}])})
# where one odd value goes: a field, an entry of a map or of a taint, or a key the hand check never takes
_PATHS = ["name", "instanceType", "maxSize", "minSize", "currentSize", "pricePerHour", "zone", "allocatable",
          "allocatable.cpu", "devices", "devices.gpu.nvidia.com", "devices.", "labels", "labels.a", "taints", "taints.0",
          "taints.0.key", "taints.0.value", "taints.0.effect", "taints.0.other", "instance_type", "other"]


def _with(entry: dict, path: str, value: object) -> dict:
    """`entry` with `value` at `path` (one level into a map, or into the first taint)."""
    head, _, rest = path.partition(".")
    if not rest and path.endswith("."):
        return {**entry, head: {"": value}}
    if not rest:
        return {**entry, head: value}
    if head == "taints":
        index, _, key = rest.partition(".")
        return {**entry, "taints": [value] if not key else [{**entry["taints"][int(index)], key: value}]}
    return {**entry, head: {**entry[head], rest: value}}


_ENTRY = st.one_of(_VALID, st.builds(_with, _VALID, st.sampled_from(_PATHS), _ODD))


def _same_as_the_model(raw: dict) -> bool:
    """The hand check takes `raw` only as the model does (True: it took it)."""
    fast = _plain_entry(raw)
    if fast is not None:
        assert _validated_entry(raw) == fast, raw
    return fast is not None


_BASE = {"name": "g", "instanceType": "m5.large", "maxSize": 5, "minSize": 1, "currentSize": 2, "pricePerHour": 1.5,
         "zone": "z", "allocatable": {"cpu": "4", "memory": "2Gi"}, "devices": {"gpu.nvidia.com": 1}, "labels": {"a": "v"},
         "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}


def test_the_catalogs_hand_check_takes_an_entry_with_any_odd_value_in_any_place_only_as_the_pydantic_model_does():
    taken = [_same_as_the_model(_with(_BASE, path, value)) for path in _PATHS for value in _EDGES]
    assert _same_as_the_model(_BASE) and 0 < sum(taken) < len(taken)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_ENTRY)
def test_the_catalogs_hand_check_takes_a_drawn_entry_only_as_the_pydantic_model_does_with_the_same_values(raw):
    _same_as_the_model(raw)


def test_new_pod_builds_the_pod_the_dataclass_constructor_builds_and_refuses_a_missing_field():
    obj = pod("a-0", group="a", priority=5)
    built, _key, _ = _ingest_pod(obj)
    values = [getattr(built, name) for name in Pod.__dataclass_fields__]
    assert new_pod(*values) == Pod(*values) == built
    with pytest.raises(TypeError, match="missing 1 required positional argument"):
        new_pod(*values[:-1])


def test_numpy_numbers_given_to_a_plan_section_are_stored_as_the_python_numbers_pydantic_stored():
    np = pytest.importorskip("numpy")
    info = dict(status="FEASIBLE", seconds=np.float64(0.5), gap=np.float32(0.25), greedyOnly=np.bool_(True),
                gangsStarted=np.int64(3))
    plain_info, schema_info = plain.SolverInfo(**info), schema.SolverInfo(**info)
    for name in ("seconds", "gap", "greedy_only", "gangs_started"):
        assert type(getattr(plain_info, name)) is type(getattr(schema_info, name))
    assert plain_info.model_dump() == schema_info.model_dump(by_alias=True, mode="json")
