"""Fuzz: hostile mutations of real clusters and catalogs go through loader, ingest and planner.

Starting from the bundled example and the fixtures, hypothesis replaces random
leaves with hostile values (huge, negative, NaN, unicode digits, wrong types),
deletes keys, duplicates objects and nests deeply. Properties: no exception
escapes (a file may be refused with `InputError`), every plan serialises and
passes the independent checker, and planning 1,000 pods stays near --time-limit.
Derandomized, so CI sees the same examples every run.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from checker import check_plan
from gangscale.catalog import parse_catalog
from gangscale.ingest import ingest
from gangscale.loader import InputError, iter_objects, parse_documents, read_documents, read_objects
from gangscale.planner import SolveOptions, make_plan
from gangscale.snapshot import build_snapshot

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests/fixtures/kube"
TIME_LIMIT = 1.0
SLACK = 1.0  # issue 16: ingest and plan within --time-limit + 1 s (measured: at most 0.81 s in all at load 8 on 2 cores)

# No shrinking: one plan takes up to a second, and the mutation log below already names the culprit.
FUZZ = settings(derandomize=True, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Case:
    """A mutated cluster and catalog; its repr is the list of mutations, not 400 kB of objects."""

    def __init__(self, objects: list[Any], catalog: list[Any], log: list[str]):
        self.objects, self.catalog, self.log = objects, catalog, log

    def __repr__(self) -> str:
        return f"Case({self.log})"


def _catalog(path: Path) -> list[dict]:
    (doc,) = read_documents(path)
    return doc["nodeGroups"]


EXAMPLE = (read_objects(ROOT / "config/examples/backlog.yaml"), _catalog(ROOT / "config/examples/catalog.yaml"))


def _fixtures() -> list[dict]:
    """Every fixture file's objects; namespaced ones moved to a namespace per file (they reuse names)."""
    out: list[dict] = []
    for f in sorted([*FIXTURES.glob("*.yaml"), *FIXTURES.glob("inputs/*.yaml")]):  # inputs: DRA, Kueue, YuniKorn
        if f.name == "catalog.yaml":
            continue
        for o in read_objects(f):
            if o["kind"] not in ("Node", "DeviceClass", "ResourceSlice"):  # namespaced objects only
                o["metadata"]["namespace"] = f"{o['metadata'].get('namespace', 'default')}-{f.stem}"
                if "uid" in o["metadata"]:
                    o["metadata"]["uid"] += f"-{f.stem}"
            out.append(o)
    return out


# The fixtures' groups plus one whose GPUs NVIDIA's DRA driver runs, so DRA gangs are planned, not infeasible.
DRA_GROUP = {"name": "gpu-dra", "instanceType": "g5.12xlarge", "maxSize": 4, "devices": {"gpu.nvidia.com": "auto"}}
FIXTURE = (_fixtures(), [*_catalog(FIXTURES / "catalog.yaml"), DRA_GROUP])


def nested(depth: int) -> Any:
    v: Any = "x"
    for _ in range(depth):
        v = {"a": [v]}
    return v


HOSTILE = [
    -5, -1, 0, -1e308, float("nan"), float("inf"), 0.5, True,
    "١٢", " 2 ", "-3", "NaN", "", "😀", "x" * 300, "1.5.6", "0x10",
    {}, [], {"a": 1}, [1, "two"], 7, nested(40),
    # Past int64 (issue 16 item 2) and null where an object is expected (item 6).
    10**30, 2**63, 1e308, "10P", "5Ei", "1e308", None,
]


def paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every key path into obj (dict keys and list indices), parents before children."""
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.extend(paths(v, (*prefix, k)))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out.extend(paths(v, (*prefix, i)))
    return out


def _parent(obj: Any, path: tuple) -> Any:
    for k in path[:-1]:
        obj = obj[k]
    return obj


@st.composite
def mutated(draw, base: tuple[list[dict], list[dict]], duplicates: bool = False) -> Case:
    objects, catalog = copy.deepcopy(base[0]), copy.deepcopy(base[1])
    log: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        target = objects if draw(st.integers(0, 3)) else catalog
        if not target:
            continue
        i = draw(st.integers(0, len(target) - 1))
        op = draw(st.sampled_from(["replace", "replace", "replace", "delete", "nest", *(["duplicate"] if duplicates else [])]))
        if op == "duplicate":
            target.insert(i, copy.deepcopy(target[i]))
            log.append(f"duplicate #{i}")
            continue
        ps = paths(target[i])
        if not ps:
            continue
        path = draw(st.sampled_from(ps))
        parent = _parent(target[i], path)
        if op == "delete":
            del parent[path[-1]]
        elif op == "nest":
            parent[path[-1]] = nested(draw(st.integers(1, 60)))
        else:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        log.append(f"{op} {'objects' if target is objects else 'catalog'}#{i}.{'.'.join(map(str, path))}")
    return Case(objects, catalog, log)


def through_files(objects: list[Any], catalog: list[Any]) -> tuple[list[Any], list[Any]] | None:
    """Write both as YAML and read them back as the CLI would; None when the loader refuses a file."""
    try:
        cluster_docs = parse_documents(yaml.safe_dump({"kind": "List", "items": objects}).encode(), "cluster")
        catalog_docs = parse_documents(yaml.safe_dump({"nodeGroups": catalog}).encode(), "catalog")
    except InputError:
        return None
    return list(iter_objects(cluster_docs)), catalog_docs[0]["nodeGroups"]


def checker_catalog(groups) -> list[dict]:
    """The catalog as parsed: the checker compares the plan against what was accepted."""
    return [{"name": g.name, "pricePerHour": g.price_per_hour, "currentSize": g.current_size, "maxSize": g.max_size,
             "labels": dict(g.labels), "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in g.taints],
             "allocatable": {k: f"{v}m" if k == "cpu" else str(v) for k, v in g.allocatable.items()}}
            for g in groups]


PROBE_GROUP = {"name": "probe", "allocatable": {}, "pricePerHour": 0.0, "labels": {}, "taints": [], "maxSize": 10**9}


def readable(o: Any) -> bool:
    """Whether tests/checker.py (written for well-formed objects) can read o: check a plan that places it."""
    plan: dict[str, Any] = {"newNodes": [], "existingNodes": {}, "gangs": [], "scaleUp": {}, "costPerHour": 0.0,
                            "lowerBoundPerHour": 0.0}
    try:
        meta = o["metadata"]
        if o["kind"] == "Pod":
            if not isinstance(o["status"]["phase"], str):  # the checker wants one; ingest takes none as Pending
                return False
            plan["newNodes"] = [{"nodeGroup": "probe", "pods": [f"{meta.get('namespace', 'default')}/{meta['name']}"]}]
            plan["scaleUp"] = {"probe": 1}
        elif o["kind"] == "Node":
            plan["existingNodes"] = {meta["name"]: []}
        check_plan([o], [PROBE_GROUP], plan)
        return True
    except Exception:  # noqa: BLE001 - the checker's own limits
        return False


def _without_nulls(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _without_nulls(x) for k, x in v.items() if x is not None}
    return [_without_nulls(x) for x in v] if isinstance(v, list) else v


def stored(o: Any) -> Any:
    """o as the API server would store it: a `null` field is an absent one (a `null` list entry stays,
    and is refused), and a pod created without status.phase is Pending."""
    if not (isinstance(o, dict) and o.get("kind") == "Pod"):
        return o
    o = _without_nulls(o)
    status = o.get("status", {})
    if isinstance(status, dict) and status.get("phase", "") == "":
        o["status"] = {**status, "phase": "Pending"}
    return o


def plan_and_check(objects: list[Any], catalog: list[Any], base_objects: list[dict], strict: bool = True) -> float:
    """Load, ingest and plan; assert ingest and planning keep to --time-limit + 1 s and the plan is valid.
    Returns that wall time."""
    loaded = through_files(objects, catalog)
    if loaded is None:
        return 0.0
    objs, entries = loaded
    start = time.perf_counter()
    groups, warnings = parse_catalog(entries)
    snap = build_snapshot(ingest(objs), groups, warnings)
    plan = make_plan(snap, SolveOptions(time_limit=TIME_LIMIT, workers=2))
    seconds = time.perf_counter() - start
    assert seconds <= TIME_LIMIT + SLACK, f"ingest and plan took {seconds:.2f} s at --time-limit {TIME_LIMIT}"
    doc = plan.to_dict()
    doc = orjson.loads(orjson.dumps(doc))  # serialisable, and no NaN (orjson writes it as null)
    assert not isinstance(doc.get("costPerHour"), float) or math.isfinite(doc["costPerHour"])
    # The checker reads well-formed objects only and checks the plan against those. A malformed pod
    # the API server would reject (e.g. a workloadRef without a name, a null container) must be
    # `invalid`, never planned: strict tests fail when a pod the checker cannot read is placed.
    assert all(readable(o) for o in base_objects)
    ok = [s for s in map(stored, objs) if readable(s)]
    known = {f"{o['metadata'].get('namespace', 'default')}/{o['metadata']['name']}" for o in ok if o["kind"] == "Pod"}
    planned = {p for n in doc["newNodes"] for p in n["pods"]} | {p for ps in doc["existingNodes"].values() for p in ps}
    if not strict and not planned <= known:
        return seconds
    errors = check_plan(ok, checker_catalog(groups), doc)
    assert not errors, errors
    return seconds


@pytest.mark.slow
@settings(FUZZ, max_examples=25)
@given(mutated(EXAMPLE))
def test_mutations_of_the_bundled_example_never_escape_and_every_plan_passes_the_checker(case):
    objects, catalog = case.objects, case.catalog
    plan_and_check(objects, catalog, EXAMPLE[0])  # within --time-limit + 1 s, as every case below


@pytest.mark.slow
@settings(FUZZ, max_examples=25)
@given(mutated(FIXTURE))
def test_mutations_of_the_fixtures_never_escape_and_every_plan_passes_the_checker(case):
    objects, catalog = case.objects, case.catalog
    plan_and_check(objects, catalog, FIXTURE[0])


def thousand_pods() -> tuple[list[dict], list[dict]]:
    """The example ten times over, one namespace per copy (nodes once): 1,040 pods."""
    objects, catalog = EXAMPLE
    out = [o for o in objects if o["kind"] == "Node"]
    for k in range(10):
        for o in objects:
            if o["kind"] != "Node":
                c = copy.deepcopy(o)
                c["metadata"]["namespace"] = f"{c['metadata'].get('namespace', 'default')}-{k}"
                if "uid" in c["metadata"]:
                    c["metadata"]["uid"] = f"{c['metadata']['uid']}-{k}"
                out.append(c)
    return out, catalog


THOUSAND = thousand_pods()


@pytest.mark.slow
@settings(FUZZ, max_examples=4)
@given(mutated(THOUSAND))
def test_planning_1000_mutated_pods_stays_within_the_time_limit(case):
    objects, catalog = case.objects, case.catalog
    assert sum(1 for o in objects if isinstance(o, dict) and o.get("kind") == "Pod") >= 1000
    plan_and_check(objects, catalog, THOUSAND[0])


@pytest.mark.slow
@settings(FUZZ, max_examples=25)
@given(mutated(EXAMPLE, duplicates=True))
def test_huge_quantities_and_duplicated_objects_never_escape_and_every_plan_passes_the_checker(case):
    plan_and_check(case.objects, case.catalog, EXAMPLE[0], strict=True)


def test_the_fuzzed_fixtures_include_dra_kueue_and_yunikorn_gangs_and_their_plan_passes_the_checker():
    objects, catalog = copy.deepcopy(FIXTURE[0]), FIXTURE[1]
    assert {"ResourceClaimTemplate", "ResourceSlice", "Workload"} <= {o["kind"] for o in objects}
    groups, warnings = parse_catalog(catalog)
    plan = make_plan(build_snapshot(ingest(objects), groups, warnings), SolveOptions(time_limit=5.0, workers=2)).to_dict()
    decisions = {g["name"]: g["decision"] for g in plan["gangs"]}
    assert decisions["dra-train"] == "scale-up" and decisions["spark-pi-0001"] == "scale-up"
    assert decisions["job-train-3f2a1"] == "waiting-for-admission"
    assert any("dra-train-0" in p for n in plan["newNodes"] if n["nodeGroup"] == "gpu-dra" for p in n["pods"])
    assert check_plan(objects, checker_catalog(groups), plan) == []
