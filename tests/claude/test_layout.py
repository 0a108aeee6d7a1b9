"""The Claude host's packages have no import circle (issue 9).

Read from the source with :mod:`ast` (standard library only, nothing imported): every
``import`` counts, including those under ``if TYPE_CHECKING:`` and inside functions, since
a lazy or type-only import that closes a loop is still two modules that need each other.
``from pkg import name`` ties to ``pkg.name`` when that is a module of the tree, otherwise
to ``pkg`` (its ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import managedloop

SRC = Path(managedloop.__file__).resolve().parent.parent
PACKAGES = ("managedloop.providers.claude", "managedloop.testing._claude")


def _modules() -> dict[str, Path]:
    """Every module under src/managedloop, by dotted name."""
    out: dict[str, Path] = {}
    for path in (SRC / "managedloop").rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``source`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found & known


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of two or more modules (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _graph(package: str) -> dict[str, set[str]]:
    modules = _modules()
    inside = {name for name in modules if name == package or name.startswith(package + ".")}
    return {
        name: _imports(modules[name].read_text(encoding="utf-8"), inside) - {name}
        for name in inside
    }


def test_the_circle_finder_finds_a_circle() -> None:
    # The finder itself: a loop through three modules is one group, a chain is none.
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_type_only_and_lazy_imports() -> None:
    # The shape of the circle issue 9 found: a type-only import one way, a lazy one back.
    source = """
from typing import TYPE_CHECKING
from p import sub, name
if TYPE_CHECKING:
    from p.typed import Thing
def f():
    import p.lazy
"""
    known = {"p", "p.sub", "p.typed", "p.lazy", "p.unused"}
    assert _imports(source, known) == {"p", "p.sub", "p.typed", "p.lazy"}


def test_no_import_circle_inside_the_claude_packages() -> None:
    for package in PACKAGES:
        graph = _graph(package)
        assert len(graph) > 2, package  # the package was found and read
        assert _circles(graph) == [], package
