"""The module import graph of ``fleet`` (``fleet.core`` included) has no cycle.

Theory of operation: the graph is built from the source with :mod:`ast`, one
node per module and one edge per imported ``fleet`` module.  Every import
statement counts, wherever it stands: at module level, under
``if TYPE_CHECKING:`` and inside a function (a lazy import).  A type-only
import is still a dependency that readers and type checkers follow, and a lazy
import is one the module needs to work; a lazy import makes importing cheaper,
it does not change the direction of a dependency.  So "no cycle" means every
module can be read, typed and tested after the modules it imports.

``import a.b.c`` is an edge to ``a.b.c``; ``from a.b import c`` is an edge to
``a.b.c`` when that is a module and to ``a.b`` otherwise.  Edges to the parent
packages that Python also runs are left out: package ``__init__`` files hold
only a docstring (``tests/test_layering.py``).  A cycle is reported as the
chain of modules with the line of each import.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: importer -> imported -> line of the first import of it
Graph = dict[str, dict[str, int]]


def _module_files(root: Path, package: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((root / package.replace(".", "/")).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """``name`` or its closest enclosing module of the graph (None outside it)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def build_graph(root: Path, package: str) -> Graph:
    """The import graph of ``package`` (a directory under ``root``), from its source."""
    modules = _module_files(root, package)
    graph: Graph = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                imported = _resolve(target, modules)
                if imported is not None and imported != module:
                    edges.setdefault(imported, node.lineno)
        graph[module] = edges
    return graph


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module.

    Each cycle is a list of modules whose last one imports the first.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(module: str) -> None:  # Tarjan's algorithm
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component: set[str] = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == module:
                    break
            if len(component) > 1:
                components.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: Graph, component: set[str]) -> list[str]:
    """A shortest cycle through the first module (by name) of a component."""
    start = min(component)
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for module in frontier:
            for imported in sorted(graph[module]):
                if imported == start:
                    return paths[module]
                if imported in component and imported not in paths:
                    paths[imported] = [*paths[module], imported]
                    following.append(imported)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


def describe(graph: Graph, cycle: list[str]) -> str:
    """``a (l.3) -> b (l.9) -> a``: each module with the line that imports the next."""
    steps = [
        f"{module} (l.{graph[module][cycle[(i + 1) % len(cycle)]]})"
        for i, module in enumerate(cycle)
    ]
    return " -> ".join([*steps, cycle[0]])


def test_fleet_import_graph_is_acyclic() -> None:
    graph = build_graph(ROOT, "fleet")
    assert "fleet.core.cells.allocator" in graph["fleet.core.cells.placer"]
    cycles = [describe(graph, cycle) for cycle in find_cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_a_planted_cycle_is_named_with_its_lines(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "fleet", tmp_path / "fleet")
    # A type-only import closes a cycle too: quota imports jobs.
    jobs = tmp_path / "fleet" / "core" / "jobs.py"
    jobs.write_text(
        jobs.read_text(encoding="utf-8")
        + "\nfrom typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
        + "    from fleet.core.quota import QuotaTree\n",
        encoding="utf-8",
    )
    graph = build_graph(tmp_path, "fleet")
    described = [describe(graph, cycle) for cycle in find_cycles(graph)]
    assert len(described) == 1, described
    assert re.search(r"fleet\.core\.jobs \(l\.\d+\) -> fleet\.core\.quota \(l\.", described[0])


def test_lazy_and_relative_imports_are_edges(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text('"""p"""\n')
    (pkg / "sub" / "__init__.py").write_text('"""s"""\n')
    (pkg / "sub" / "a.py").write_text("def f() -> None:\n    from . import b\n")
    (pkg / "sub" / "b.py").write_text("from ..sub.a import f\n")
    graph = build_graph(tmp_path, "pkg")
    assert graph["pkg.sub.a"] == {"pkg.sub.b": 2}
    assert graph["pkg.sub.b"] == {"pkg.sub.a": 1}
    assert [describe(graph, c) for c in find_cycles(graph)] == [
        "pkg.sub.a (l.2) -> pkg.sub.b (l.1) -> pkg.sub.a"
    ]
