"""Dependencies point one way: no import cycle between files, and packages layered benchmarks → gangscale → cloud_adapters.

The graph is read from the source with `ast` (nothing is imported), and it counts every import
statement: module level, inside functions, under `if TYPE_CHECKING`, absolute and relative. A lazy
import inside a function is still a dependency; it only changes when the cost is paid.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gangscale", "cloud_adapters", "benchmarks")
# Layers, top to bottom: a package may import only packages below it.
LAYERS = ("benchmarks", "gangscale", "cloud_adapters")


def module_files() -> dict[str, Path]:
    """Dotted module name → file, for every module of our packages."""
    out: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is one of our modules (None: a third-party or stdlib import)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _base(module: str, path: Path, level: int, target: str | None) -> str:
    """The absolute module a relative `from ...x import` names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for _ in range(level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{target}" if target else package


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of ours that `module` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _base(module, path, node.level, node.module) if node.level else (node.module or "")
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        for name in names:
            hit = _resolve(name, modules)
            if hit and hit != module:
                found.add(hit)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    return {m: imports_of(m, p, modules) for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one member (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def edges_between(graph: dict[str, set[str]], source: str, targets: tuple[str, ...]) -> list[str]:
    """`a -> b` for every import from a module under `source` into one under any of `targets`."""
    def under(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    return sorted(f"{a} -> {b}" for a, bs in graph.items() if under(a, source)
                  for b in bs if any(under(b, t) for t in targets))


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_the_cycle_finder_finds_a_cycle_through_three_modules_and_none_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_relative_absolute_and_function_level_imports(graph):
    assert "gangscale.controller.run" in graph["gangscale.cli"]  # imported inside cmd_run
    assert "gangscale.planner" in graph["gangscale.cli"]
    assert "gangscale.solver.problem" in graph["gangscale.planner"] or "gangscale.solver" in graph["gangscale.planner"]


def test_no_two_modules_import_each_other_directly_or_through_others(graph):
    assert cycles(graph) == []


@pytest.mark.parametrize("upper, lower", [(LAYERS[i], LAYERS[j]) for i in range(3) for j in range(i + 1, 3)])
def test_a_lower_package_imports_nothing_from_a_package_above_it(graph, upper, lower):
    assert edges_between(graph, lower, (upper,)) == []


def test_the_solver_imports_nothing_from_kubernetes_the_controller_the_cloud_or_the_scheduler_model(graph):
    banned = ("gangscale.kube", "gangscale.controller", "cloud_adapters", "gangscale.scheduling")
    assert edges_between(graph, "gangscale.solver", banned) == []


def test_benchmarks_use_only_public_entry_points_not_solver_internals(graph):
    assert edges_between(graph, "benchmarks", ("gangscale.solver",)) == []


def test_benchmarks_import_no_private_name_from_gangscale():
    private = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gangscale"):
                private += [f"{path.relative_to(ROOT)}: {node.module}.{a.name}" for a in node.names
                            if a.name.startswith("_")]
    assert private == []
