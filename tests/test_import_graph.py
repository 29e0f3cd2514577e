"""The library's modules import each other without a circle: A imports B (at the top, inside a
function, or for type checking only) and B imports A back is refused, wherever it stands.

import-linter's contracts (pyproject.toml) order the packages; this test also holds between the
modules of one package, where a lazy import inside a function had hidden four circles (the session
and its file format, the sweep spec and its cells, the Sia workload reader and the newTrace
generator, the simulator's results and their tables)."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent / "heteroplan"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> nx.DiGraph:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                # "from pkg import mod" names a module; "from mod import name" names mod
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # "import a.b.c" of a name inside a.b
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_no_module_of_the_library_imports_a_module_that_imports_it_back() -> None:
    graph = _import_graph()
    # the package faces (__init__.py) re-export their modules' names: an __init__ importing a
    # module of its own package is how a package is built, not a circle between rooms
    faces = {n for n in graph if (ROOT.parent / n.replace(".", "/") / "__init__.py").exists()}
    rooms = graph.subgraph(n for n in graph if n not in faces)
    circles = [sorted(c) for c in nx.strongly_connected_components(rooms) if len(c) > 1]
    assert not circles, f"modules importing each other: {circles}"


def test_the_graph_sees_lazy_and_relative_imports() -> None:
    """The oracle itself: an import inside a function counts (the session imports its file codec
    only in save/load's reach, and the codec must not import the session back)."""
    graph = _import_graph()
    assert graph.has_edge("heteroplan.scheduling.session", "heteroplan.scheduling.storage")
    assert graph.has_edge("heteroplan.sim.metrics", "heteroplan.sim.tables")
    assert not graph.has_edge("heteroplan.scheduling.storage", "heteroplan.scheduling.session")
    # a function-local import is an edge: heteroplan.workload.sia reads newtrace inside bundled_workload
    assert graph.has_edge("heteroplan.workload.sia", "heteroplan.workload.newtrace")
