"""The layer rule of DESIGN.md, checked over ``src/`` with the standard library only.

Imports point down only, and there is no import circle::

    cli                        the ``managedloop`` command (``cli/``: one module per host)
    console                    the web console (``managedloop console``)
    contrib                    optional integrations (``contrib.temporal``)
    managedloop (the root)     the curated public API
    testing                    the public test kit (loopback emulators, scripted models)
    session                    the loop
    providers (the package)    the hosts' public names, loaded on first use
    providers.<host>           a host: never imports session, testing, cli or the root
    hosts                      the host contract (``providers.base``: its private alias)
    provisioning               specs, digests, ensure/teardown
    stores                     the Store protocol and its backends
    artifacts                  artifact vocabulary with per-host backends
    tools, handler             @tool, Toolset, the tool-call runner
    core                       results, errors, config, telemetry, _retry, _validate, ...

Modules of one layer may import each other (the circle check still covers them). Besides
the order, private stays private: a package's private modules (``_x.py``) are imported only
from inside that package (so ``testing`` uses only public provider names, never
``managedloop.providers.<host>._private``), and no module imports a private name (``_x``)
from another module. Every import counts: module level, inside functions (lazy
loads), under ``TYPE_CHECKING`` (a type-level dependency is still a dependency), and
``importlib.import_module("literal")``. A name computed at run time (a lazy ``_WHERE``
table, an f-string) is not seen: the facades that load that way also name their targets
under ``TYPE_CHECKING``.

To see the graph by hand: ``python -m tests.test_layers`` prints every edge.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
ROOT = "managedloop"

# Layer ranks, highest on top, by the module's second name part (``managedloop.<part>``);
# ``providers`` is split further in ``layer``. Anything not listed is core (rank 10).
_RANKS: dict[str, tuple[int, str]] = {
    "cli": (110, "cli"),
    "console": (107, "console"),  # the web console: reads the record, webhooks, temporal
    "contrib": (105, "contrib"),  # optional integrations: above the root, imported by none
    "__main__": (120, "entry point"),  # `python -m managedloop`: runs the cli
    "webhooks": (85, "webhooks"),  # above session (it runs ml.run) and testing, as DESIGN.md
    "testing": (80, "testing"),
    "session": (70, "session"),
    "hosts": (50, "host contract"),  # managedloop.hosts; providers.base is its alias
    "provisioning": (40, "provisioning"),
    "stores": (35, "stores"),
    "artifacts": (30, "artifacts"),
    "tools": (20, "tools"),
    "handler": (20, "tools"),
    "_mcp": (20, "tools"),  # the MCP side of Toolset.from_mcp
}
_ROOT_RANK = (100, "package root")
_FACADE_RANK = (65, "providers facade")
_HOST_RANK = (60, "host")
_CONTRACT_RANK = (50, "host contract")
_CORE_RANK = (10, "core")

# Nothing remains to fix. A test fails when a listed entry is fixed, so these sets only ever
# shrink: never add to them, fix the import instead.
KNOWN_VIOLATIONS: frozenset[tuple[str, str, str]] = frozenset()  # none left: keep it so
KNOWN_CIRCLES: frozenset[tuple[str, ...]] = frozenset()  # none left: keep it so


@dataclass(frozen=True, order=True)
class Import:
    importer: str  # module name
    target: str  # module name (a submodule when ``from pkg import submodule``)
    names: tuple[str, ...]  # names taken with ``from target import ...``
    file: str  # path relative to src/
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / ROOT).rglob("*.py"))}


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _import_module_literal(node: ast.AST) -> str | None:
    """The module ``importlib.import_module("...")`` loads, when it is a literal."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    if called == "import_module" and isinstance(first, ast.Constant):
        return first.value if isinstance(first.value, str) else None
    return None


def imports(known: dict[str, Path]) -> Iterator[Import]:
    """Every import of one of our modules by one of our modules."""
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        file = str(path.relative_to(SRC))
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if (loaded := _import_module_literal(node)) is not None:
                if loaded.split(".")[0] == ROOT:
                    yield Import(name, loaded, (), file, node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == ROOT:
                        yield Import(name, alias.name, (), file, node.lineno)
            elif isinstance(node, ast.ImportFrom):
                target = _resolve(name, is_package, node)
                if target.split(".")[0] != ROOT:
                    continue
                plain: list[str] = []
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in known:  # ``from pkg import module`` depends on the module
                        yield Import(name, sub, (), file, node.lineno)
                    else:
                        plain.append(alias.name)
                if plain:
                    yield Import(name, target, tuple(plain), file, node.lineno)


def layer(module: str) -> tuple[int, str]:
    parts = module.split(".")
    if len(parts) == 1:
        return _ROOT_RANK
    if parts[1] == "providers":
        if len(parts) == 2:
            return _FACADE_RANK
        return _CONTRACT_RANK if parts[2] == "base" else _HOST_RANK
    return _RANKS.get(parts[1], _CORE_RANK)


def private_owner(module: str) -> str | None:
    """The package whose private module (``_x``) ``module`` is, else None."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(edges: list[Import]) -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for e in edges:
        if e.target == e.importer:
            continue
        (mine, my_label), (theirs, their_label) = layer(e.importer), layer(e.target)
        if theirs > mine:
            found.add((e.file, e.target, f"upward: {my_label} imports {their_label}"))
        owner = private_owner(e.target)
        if owner is not None and not _inside(e.importer, owner):
            found.add((e.file, e.target, f"private module of {owner}"))
        private = [n for n in e.names if n.startswith("_") and not n.startswith("__")]
        if private:
            found.add((e.file, e.target, f"private name: {', '.join(sorted(private))}"))
    return found


def circles(edges: list[Import]) -> list[tuple[str, ...]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if e.target != e.importer:
            graph.setdefault(e.importer, set()).add(e.target)
            graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[tuple[str, ...]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(tuple(sorted(component)))
    return sorted(found)


def _edges() -> list[Import]:
    return sorted(imports(modules()))


def _show(items: set[tuple[str, str, str]]) -> str:
    return "\n".join(f"  {file}: imports {target} ({rule})" for file, target, rule in sorted(items))


def test_no_import_circle() -> None:
    new = set(circles(_edges())) - KNOWN_CIRCLES
    assert not new, "import circles:\n" + "\n".join("  " + " <-> ".join(c) for c in sorted(new))


def test_known_circles_are_still_real() -> None:
    gone = KNOWN_CIRCLES - set(circles(_edges()))
    assert not gone, "broken; delete from KNOWN_CIRCLES:\n" + "\n".join(map(str, sorted(gone)))


def test_imports_point_down_only() -> None:
    found = violations(_edges())
    new = found - KNOWN_VIOLATIONS
    assert not new, "layer violations:\n" + _show(new)


def test_the_checker_sees_each_kind_of_violation() -> None:
    # Once the known sets are empty, this keeps a checker that finds nothing from passing.
    def edge(importer: str, target: str, *names: str) -> Import:
        return Import(importer, target, names, importer.replace(".", "/") + ".py", 1)

    edges = [
        edge("managedloop.providers.x._conn", "managedloop.session.driver"),
        edge("managedloop.testing.x", "managedloop.providers.x._wire"),
        edge("managedloop.testing.x", "managedloop.providers.x"),  # public: fine
        edge("managedloop.tools", "managedloop.handler", "_hidden", "public"),
        edge("managedloop.handler", "managedloop.results"),  # down: fine
        edge("managedloop.a", "managedloop.b"),
        edge("managedloop.b", "managedloop.c"),
        edge("managedloop.c", "managedloop.a"),
    ]
    assert violations(edges) == {
        (
            "managedloop/providers/x/_conn.py",
            "managedloop.session.driver",
            "upward: host imports session",
        ),
        (
            "managedloop/testing/x.py",
            "managedloop.providers.x._wire",
            "private module of managedloop.providers.x",
        ),
        ("managedloop/tools.py", "managedloop.handler", "private name: _hidden"),
    }
    assert circles(edges) == [("managedloop.a", "managedloop.b", "managedloop.c")]
    order = [
        "managedloop.cli",
        "managedloop",
        "managedloop.testing.chat",
        "managedloop.session.driver",
        "managedloop.providers",
        "managedloop.providers.local._http",
        "managedloop.providers.base",
        "managedloop.provisioning.specs",
        "managedloop.artifacts",
        "managedloop.tools",
        "managedloop.errors",
    ]
    ranks = [layer(m)[0] for m in order]
    assert ranks == sorted(ranks, reverse=True)
    assert len(set(ranks)) == len(ranks)


def test_known_violations_are_still_real() -> None:
    # A fixed violation must leave KNOWN_VIOLATIONS, so the list only ever shrinks.
    gone = KNOWN_VIOLATIONS - violations(_edges())
    assert not gone, "fixed; delete from KNOWN_VIOLATIONS:\n" + _show(gone)


if __name__ == "__main__":  # pragma: no cover - a reading aid
    for edge in _edges():
        sys.stdout.write(f"{edge.file}:{edge.line}: {edge.importer} -> {edge.target}\n")
