"""The shape rules of the code: small functions everywhere in gangscale/ and cloud_adapters/, one way to name a gang,
and comments that state contracts, not history."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.test_docs_history import ALLOWED, PATTERNS

ROOT = Path(__file__).resolve().parent.parent
MAX_LINES = 60
PACKAGES = ("gangscale", "cloud_adapters")
# Functions still over 60 lines while a split is under way elsewhere (none now). An entry that no longer
# exceeds the limit fails the test below.
PENDING_SPLIT: set[str] = set()


def long_functions(package: str) -> list[str]:
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    out.append(f"{path.relative_to(ROOT)} {node.name} (line {node.lineno}) has {lines} lines")
    return out


def _name(entry: str) -> str:
    return entry.split(" (line")[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_is_longer_than_60_lines(package):
    assert [f for f in long_functions(package) if _name(f) not in PENDING_SPLIT] == []


def test_every_function_pending_a_split_is_still_over_the_limit():
    still_long = {_name(f) for package in PACKAGES for f in long_functions(package)}
    assert PENDING_SPLIT <= still_long


def test_the_controller_never_builds_a_gang_key_by_hand_or_parses_upcoming_node_names():
    for path in sorted((ROOT / "gangscale/controller").rglob("*.py")):
        text = path.read_text()
        assert '"/".join(' not in text, path
        assert "/upcoming-" not in text, path
        assert '.split(":", 1)' not in text, path


def test_indented_json_and_yaml_output_is_written_only_by_output_render():
    # loader.py indents JSON only to measure nesting depth (it never writes it out)
    allowed = {ROOT / "gangscale/output.py", ROOT / "gangscale/loader.py"}
    writers = []
    for package in ("gangscale", "cloud_adapters", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text()
            if path not in allowed and ("OPT_INDENT_2" in text or "safe_dump(" in text):
                writers.append(str(path.relative_to(ROOT)))
    assert writers == []


def test_every_object_a_snapshot_is_built_from_is_frozen():
    # a stage that knows more makes a copy (`replace`); nothing rewrites a snapshot's parts in place
    import dataclasses

    from gangscale.ingest import Cluster
    from gangscale.model import Gang, GangKey, Node, NodeGroup, Placement, Pod, Taint, Toleration
    from gangscale.snapshot import ClusterSnapshot, NodeView, PreDecision, SnapshotPolicy

    kinds = (Node, NodeGroup, Taint, Pod, Placement, Toleration, Gang, GangKey, Cluster, NodeView, PreDecision,
             SnapshotPolicy, ClusterSnapshot)
    assert [k.__name__ for k in kinds if not dataclasses.fields(k) or not k.__dataclass_params__.frozen] == []


def test_a_gang_has_one_key_the_planner_and_the_controller_both_use():
    # one shape for a gang's key: the GangKey, never a tuple or a string rebuilt by hand
    from gangscale.ingest import ingest
    from gangscale.model import GangKey
    from gangscale.snapshot import build_snapshot

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                    "workloadRef": {"name": "missing", "podGroup": "g"}}}
    snap = build_snapshot(ingest([pod]), [])
    assert snap.decided and all(type(k) is GangKey for k in snap.decided)
    assert all(type(g.key) is GangKey and g.key in snap.decided for g in snap.gangs)


def test_a_gang_has_one_name_for_its_key_and_no_code_uses_another():
    from gangscale.model import Gang

    assert not hasattr(Gang, "gang_key")
    uses = [f"{path.relative_to(ROOT)}:{node.lineno}" for package in ("gangscale", "cloud_adapters", "benchmarks")
            for path in sorted((ROOT / package).rglob("*.py")) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Attribute) and node.attr == "gang_key"]
    assert uses == []

def test_no_module_outside_ingest_keys_anything_by_a_bare_three_string_tuple():
    # ingest's own (namespace, family, name) object keys stay inside parse/ingest*; a gang is a GangKey elsewhere
    offenders = []
    for package in ("gangscale", "benchmarks"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "parse.py" or path.name.startswith("ingest"):
                continue
            if "tuple[str, str, str]" in path.read_text():
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_controller_holds_gangs_back_with_gang_states_not_string_literals():
    offenders = []
    for path in sorted((ROOT / "gangscale/controller").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "PreDecision" and node.args \
                    and isinstance(node.args[0], ast.Constant):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_the_solvers_problem_and_every_part_of_it_are_frozen():
    # a Problem is documented as never changed: the greedy and the solvers only read it
    import dataclasses

    from gangscale.solver.problem import Arrays, BinKind, GangInfo, PodClass, Problem, Shape

    kinds = (Problem, Arrays, Shape, PodClass, GangInfo, BinKind)
    assert [k.__name__ for k in kinds if not k.__dataclass_params__.frozen] == []


def test_no_test_reaches_into_a_private_attribute_of_the_controller_or_its_cluster_cache():
    # tests drive the controller and the simulated cloud through their public methods only
    import re

    names = r"(rec|reconciler|sim|ctl|controller|actuator|elector|store|inf|informer|cache|policy)"
    pattern = re.compile(rf"\b{names}\._[a-z]\w*")
    hits = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in sorted((ROOT / "tests").rglob("test_*.py"))
            for m in pattern.finditer(p.read_text())]
    assert hits == []


# ------------------------------------------------------------------ one executor for every side effect

# NodeGroupProvider's methods that change the cloud (cloud_adapters/base.py), and apply.py's scale-up over them
PROVIDER_MUTATORS = frozenset(
    {"increase_size", "atomic_increase_size", "delete_instances", "decrease_target_size", "adopt", "terminate_loose"}
)
# the Actuator's five cloud changes (controller/actuator.py), each a call of the provider's mutators
ACTUATOR_MUTATORS = frozenset({"apply", "release", "scale_down", "settle_call", "terminate_loose"})
# the controller's writers to the cluster (pods, node taints, PodGroup conditions, Events, the status ConfigMap)
WRITERS = {
    "pod_gates": {"remove", "delete"},
    "node_taints": {"set_taint"},
    "conditions": {"write"},
    "events": {"emit", "emit_on"},
    "status": {"publish"},
}


def _receiver(func: ast.expr) -> str:
    """The last name of a method call's receiver: `self.pod_gates.remove` -> "pod_gates"."""
    if not isinstance(func, ast.Attribute):
        return ""
    value = func.value
    return value.attr if isinstance(value, ast.Attribute) else getattr(value, "id", "")


def side_effect_calls(path: Path) -> list[str]:
    """`line: receiver.method` for each call in `path` that changes the cloud or writes to the cluster."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        recv = _receiver(node.func)
        cloud = name in PROVIDER_MUTATORS and recv in {"_provider", "provider"} or name == "apply_plan"
        acts = name in ACTUATOR_MUTATORS and recv == "actuator"
        if cloud or acts or name in WRITERS.get(recv, ()):
            out.append(f"{node.lineno}: {recv}.{name}")
    return out


def test_the_provider_mutators_listed_are_exactly_the_node_group_providers_methods_that_change_the_cloud():
    from cloud_adapters.base import NodeGroupProvider
    from gangscale.controller.actuator import Actuator

    assert all(callable(getattr(NodeGroupProvider, m, None)) for m in PROVIDER_MUTATORS)
    assert all(callable(getattr(Actuator, m, None)) for m in ACTUATOR_MUTATORS)


def test_only_the_executor_changes_the_cloud_or_writes_pods_nodes_conditions_events_and_status():
    # execute.py runs every action; the actuator is its arm on the cloud (it alone holds the provider)
    allowed = {"gangscale/controller/execute.py", "gangscale/controller/actuator.py"}
    found = {
        str(p.relative_to(ROOT)): calls
        for p in sorted((ROOT / "gangscale/controller").rglob("*.py"))
        if (calls := side_effect_calls(p)) and str(p.relative_to(ROOT)) not in allowed
    }
    assert found == {}
    arm = side_effect_calls(ROOT / "gangscale/controller/actuator.py")
    assert [c for c in arm if "actuator." in c or any(f" {w}." in c for w in WRITERS)] == []


def test_the_side_effect_scan_sees_each_kind_of_call(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "self.actuator.release(a)\nself._provider.delete_instances(g, [])\nself.pod_gates.remove(n, p, [])\n"
        "self.events.emit(t, r, m)\nself.conditions.write(o, c, m)\nnode_taints.set_taint(n, t, True)\n"
        "apply_plan(p)\nstep.emit(t, r, m)\nseen.remove(x)\n"
    )
    assert [c.split(": ")[1] for c in side_effect_calls(src)] == [
        "actuator.release", "_provider.delete_instances", "pod_gates.remove", "events.emit", "conditions.write",
        "node_taints.set_taint", ".apply_plan",
    ]


# ------------------------------------------------------------------ comments state contracts, not history

HISTORY_PACKAGES = ("gangscale", "cloud_adapters", "benchmarks")
# beside tests/test_docs_history.py's forms: an issue number joined by a hyphen ("the issue-11 backlog")
CODE_PATTERNS = {**PATTERNS, "issue number (hyphenated)": re.compile(r"\b[Ii]ssues?-\d+")}
PROSE_KEYWORDS = ("help", "description", "epilog")  # argparse's user-visible texts


def prose(source: str) -> list[tuple[int, str]]:
    """The text of a module a reader takes as its word, by first line: comments (tokenize), docstrings and other
    bare string statements, and the `help=`/`description=`/`epilog=` strings of calls (ast). String data (a
    fixture's timestamp, an API version passed to a client) is not prose and is never returned."""
    out = [(t.start[0], t.string.lstrip("#")) for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) or (isinstance(node, ast.keyword) and node.arg in PROSE_KEYWORDS):
            value = node.value
            parts = value.values if isinstance(value, ast.JoinedStr) else [value]
            out += [(value.lineno, p.value) for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
    return out


def history_in(source: str) -> list[str]:
    """Each date or issue number in the module's prose, as `line N: <kind>: <match>` (wrapped text is joined, so
    a date split over two lines is still found)."""
    found = []
    for line, text in prose(source):
        clean = " ".join(text.split())
        for allowed in ALLOWED:
            clean = clean.replace(allowed, "")
        found += [f"line {line}: {kind}: {m.group(0)!r}" for kind, pattern in CODE_PATTERNS.items()
                  for m in pattern.finditer(clean)]
    return found


@pytest.mark.parametrize("package", HISTORY_PACKAGES)
def test_no_comment_or_docstring_cites_an_issue_number_or_a_date(package):
    found = [f"{path.relative_to(ROOT)} {hit}" for path in sorted((ROOT / package).rglob("*.py"))
             for hit in history_in(path.read_text())]
    assert found == []


@pytest.mark.parametrize("source", [
    "x = 1  # measured 1 Dec, loaded machine\n",
    "# issue 10: a simulated week of 5,000 gangs\n",
    'def f():\n    """Issue 9\'s Done-when for gate mode."""\n',
    '"""Cost repair: on the issue-11 backlog the plan\nwas 4% above the bound."""\n',
    'class C:\n    """Fixed in #123."""\n',
    'x = 1\n"""The attribute\'s note: until 1 Dec 2026 it was 600."""\n',
    '"""A run on\n2026-11-30 (seed 17)."""\n',
    '"""Measured 2\nDec."""\n',
    'parser.add_argument("--grace", help="10 s (changed from 600 s in #41)")\n',
    'p = ArgumentParser(description=f"plan {x} (see issues 9/10)")\n',
])
def test_each_form_of_history_in_code_prose_is_caught(source):
    assert history_in(source), source


@pytest.mark.parametrize("source", [
    'EPOCH = "2026-03-02T08:00:00Z"  # the backlogs\' creation time\n',
    'POLICY = {"Version": "2012-10-17"}\n',
    "# botocore data/eks/2017-11-01/service-2.json: shape ScoringStrategyType\n",
    '"""Alpha in 1.35 and 1.36 (KEP-3521, KEP-5732), `scheduling.k8s.io/v1alpha2`."""\n',
    "x = 1  # 10 s, not 600 s; 1,000 records; 0.5 s + 40 us per pod; 2 GiB; 13-32% fewer\n",
    "COLOR = '#1b7837'  # kubernetes/autoscaler#5118 says why\n",
    'msg = "issue 12 and 1 Dec 2026 in a string are data, not prose"\n',
    '"""May the gang start: a Decimal 2 or Octal 7 is no month."""\n',
    "# class -1 marks an open bin; the health issues of a node group\n",
])
def test_quantities_versions_sources_and_string_data_are_not_history(source):
    assert history_in(source) == [], source
