"""Hostile files: alias bombs, recursive aliases, deep nesting and catalog numbers are refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml

from gangscale import loader
from gangscale.catalog import MAX_GROUP_SIZE, parse_catalog
from gangscale.loader import MAX_DEPTH, InputError, parse_documents

ROOT = Path(__file__).resolve().parent.parent
CATALOG = str(ROOT / "config/examples/catalog.yaml")
BACKLOG = ROOT / "config/examples/backlog.yaml"


def laughs(levels: int = 9, width: int = 9, leaf: str = "{kind: Pod}") -> list[str]:
    """Anchors a0..a{levels}: each a list of `width` aliases of the one below (width**levels leaves)."""
    lines = [f"  a0: &a0 {leaf}"]
    for i in range(1, levels + 1):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return lines


def items_bomb() -> bytes:
    return ("\n".join(["kind: List", "anchors:", *laughs(), "items: *a9"]) + "\n").encode()


def containers_bomb() -> bytes:
    lines = ["kind: List", "anchors:", *laughs(leaf="{name: c, image: x}"), "items:",
             "- {kind: Pod, metadata: {name: p}, spec: {containers: *a9}}"]
    return ("\n".join(lines) + "\n").encode()


def run_cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gangscale", *args], input=stdin, capture_output=True, cwd=ROOT,
                          timeout=120)


def test_an_alias_bomb_of_a_few_hundred_bytes_is_refused_naming_the_budget():
    data = items_bomb()
    assert len(data) < 800
    with pytest.raises(InputError, match="YAML aliases would add more than 100,000 nodes"):
        parse_documents(data, "bomb.yaml")


def test_an_alias_bomb_is_refused_on_the_pyyaml_path_too():
    data = b"---\n" + items_bomb() + b"---\nkind: List\nitems: []\n"  # several documents: PyYAML reads them
    with pytest.raises(InputError, match="alias bomb"):
        parse_documents(data, "bomb.yaml")


def test_yaml_rs_stops_replaying_aliases_at_the_budget_and_leaves_the_refusal_to_pyyaml():
    text = items_bomb().decode()
    assert loader._load_yaml_fast(text, 100_000) is None
    assert loader._load_yaml_fast("a: &x {b: 1}\nc: *x\n", 100_000) == [{"a": {"b": 1}, "c": {"b": 1}}]


def test_aliases_within_the_budget_across_documents_add_up():
    doc = "\n".join(["kind: List", "anchors:", *laughs(levels=5, width=9, leaf="1"), "items: []"]) + "\n"  # 59,049 leaves
    parse_documents(doc.encode(), "one.yaml")  # one document: within the 100,000 budget
    with pytest.raises(InputError, match="alias bomb"):
        parse_documents(("---\n" + doc + "---\n" + doc).encode(), "two.yaml")


@pytest.mark.parametrize("bomb", [items_bomb, containers_bomb], ids=["items", "containers"])
def test_gangscale_plan_refuses_an_alias_bomb_with_one_line_and_exit_2(bomb):
    proc = run_cli("plan", "--cluster", "-", "--nodegroups", CATALOG, "-o", "json", stdin=bomb())
    assert proc.returncode == 2, proc.stderr[-500:]
    assert proc.stderr.decode().count("\n") == 1 and "alias bomb" in proc.stderr.decode()


def test_a_recursive_alias_is_refused_instead_of_looping_forever():
    with pytest.raises(InputError, match="recursive structure"):  # PyYAML builds a cycle
        parse_documents(b"kind: List\nitems: &a [*a]\n---\nkind: List\n", "loop.yaml")
    assert parse_documents(b"kind: List\nitems: &a [*a]\n") == [{"kind": "List", "items": [None]}]  # yaml-rs: a tree


def test_a_cluster_dumped_by_pyyaml_with_anchors_loads_like_its_json():
    objects = loader.read_objects(BACKLOG)
    shared = {"cpu": "1", "memory": "1Gi"}
    for o in objects:  # share one requests map between all containers: safe_dump writes &id001 / *id001
        for c in o.get("spec", {}).get("containers", []):
            c.setdefault("resources", {})["requests"] = shared
    text = yaml.safe_dump({"kind": "List", "items": objects})
    assert "&id001" in text
    expected = orjson.loads(orjson.dumps({"kind": "List", "items": objects}))
    assert parse_documents(text.encode()) == [expected]
    assert parse_documents(b"---\n" + text.encode()) == [expected]


def nested_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_json_nested_exactly_1000_deep_is_refused_in_one_line():
    with pytest.raises(InputError, match=f"nested more than {MAX_DEPTH} levels deep"):
        parse_documents(nested_json(1000), "deep.json")
    proc = run_cli("plan", "--cluster", "-", "--nodegroups", CATALOG, "-o", "json", stdin=nested_json(1000))
    assert proc.returncode == 2 and proc.stderr.decode().count("\n") == 1, proc.stderr[-500:]


def test_a_catalog_nested_1000_deep_is_refused_in_one_line(tmp_path):
    cat = tmp_path / "catalog.json"
    cat.write_bytes(b'{"nodeGroups": [{"name": "g", "labels": ' + b'{"a": ' * 998 + b"1" + b"}" * 998 + b"}]}")
    proc = run_cli("plan", "--cluster", str(BACKLOG), "--nodegroups", str(cat), "-o", "json")
    assert proc.returncode == 2 and "nested more than" in proc.stderr.decode(), proc.stderr[-500:]


@pytest.mark.parametrize("wrap", [
    lambda inner: b"x: " + inner,  # yaml-rs
    lambda inner: b"---\nx: " + inner,  # PyYAML
    lambda inner: b'{"x": ' + inner + b"}",  # orjson
    lambda inner: b'{"big": 100000000000000000000000, "x": ' + inner + b"}",  # orjson, walked in Python
], ids=["yaml-rs", "pyyaml", "json", "json-bigint"])
def test_one_level_past_the_depth_limit_is_refused_on_every_path_and_the_limit_itself_loads(wrap):
    with pytest.raises(InputError, match="levels deep"):
        parse_documents(wrap(nested_json(MAX_DEPTH + 1)), "deep")
    parse_documents(wrap(nested_json(MAX_DEPTH)), "ok")  # the innermost list is inside exactly MAX_DEPTH containers


def test_a_shared_subtree_counts_its_depth_where_each_alias_hangs_it():
    deep = "&d " + "[" * (MAX_DEPTH - 2) + "1" + "]" * (MAX_DEPTH - 2)  # 1 is inside 99 containers
    parse_documents(f"---\na: {deep}\nb: [*d]\n".encode())  # 100 under b: fine
    with pytest.raises(InputError, match="levels deep"):
        parse_documents(f"---\na: {deep}\nb: [[*d]]\n".encode())


def test_20000_levels_of_block_sequence_do_not_crash_the_yaml_reader():
    proc = run_cli("plan", "--cluster", "-", "--nodegroups", CATALOG, stdin=b"- " * 20000 + b"x\n")
    assert proc.returncode == 2 and proc.stderr.decode().count("\n") == 1, (proc.returncode, proc.stderr[-300:])


def entry(**kw) -> dict:
    return {"name": "g", "instanceType": "m5.large", "pricePerHour": 0.1, "maxSize": 3, **kw}


@pytest.mark.parametrize("field, value, reason", [
    ("pricePerHour", float("inf"), "finite"),
    ("pricePerHour", float("nan"), "finite"),
    ("pricePerHour", 1e308, "less than or equal"),
    ("maxSize", 1e30, "maximum size"),
    ("maxSize", MAX_GROUP_SIZE + 1, "less than or equal"),
    ("maxSize", 2.5, "fractional"),
    ("currentSize", 10**20, "less than or equal"),
    ("minSize", float("inf"), "finite"),
])
def test_a_catalog_entry_with_a_non_finite_price_or_an_absurd_size_is_skipped_naming_the_field(field, value, reason):
    groups, warnings = parse_catalog([entry(**{field: value}), entry(name="ok")])
    assert [g.name for g in groups] == ["ok"]
    assert len(warnings) == 1 and f"node group g: skipped: {field}:" in warnings[0] and reason in warnings[0]


def test_a_huge_but_valid_integer_max_size_is_still_accepted():
    groups, warnings = parse_catalog([entry(maxSize=1_000_000_000)])
    assert groups[0].max_size == 1_000_000_000 and not warnings


def test_the_yaml_spelling_of_an_infinite_price_is_refused(tmp_path):
    cat = tmp_path / "catalog.yaml"
    cat.write_text("nodeGroups:\n- {name: g, instanceType: m5.large, pricePerHour: .inf, maxSize: 3}\n"
                   "- {name: h, instanceType: m5.large, maxSize: 1e30}\n")
    from gangscale.catalog import load_catalog

    groups, warnings = load_catalog(cat)
    assert groups == [] and "pricePerHour" in warnings[0] and "maxSize" in warnings[1]
