"""Every code block in README.md and docs/ is tagged, every ```python block runs, and so does
every ``>>>`` example in a docstring (the API reference shows them).

The conventions a page follows (so none of its examples can rot):

* A ```python block runs on its own, in a fresh namespace, offline: against the emulators
  of :mod:`managedloop.testing`. Its ``assert`` lines are part of the check.
* ``<!-- docs: continue -->`` on the line before a block runs it in the namespace the
  previous ```python block of the same file left (its imports, its ``agent``...). A run of
  blocks joined this way is one test, named after the file and the first block's line.
* ``<!-- docs: claude-emulator -->`` runs a block written for the real Claude service (its
  credentials from ``ANTHROPIC_API_KEY``) with the process-wide configuration pointed at a
  fresh :class:`~managedloop.testing.ClaudeEmulator`, so the real-service form runs as
  written. Markers combine: ``<!-- docs: continue claude-emulator -->``.
* A block whose only line is ``--8<-- "examples/NAME.py"`` includes that file (mkdocs
  snippets); the file is run by ``tests/test_examples.py``, which this test checks.
* Shell commands are ```console blocks, output and formulas ```text (also ```toml and
  ```json for files): never run, and explicit about it. An untagged fence fails.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import managedloop as ml

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOT_RUN = {"console", "text", "toml", "json"}
MARKER = re.compile(r"<!--\s*docs:\s*([a-z\- ]+?)\s*-->")
KNOWN_MARKS = {"continue", "claude-emulator"}
SNIPPET = re.compile(r'--8<--\s+"([^"]+)"')


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the block's first code line
    lang: str
    code: str
    marks: set[str] = field(default_factory=set)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, with the markers on the line before each."""
    out: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        # Backtick or tilde fences (superfences renders both); a fence closes on a line of
        # the same character, at least as long, and nothing else (CommonMark's rule).
        fence = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, lang = fence.group(1), fence.group(2), fence.group(3).strip()
        closing = re.compile(re.escape(indent) + re.escape(ticks) + re.escape(ticks[0]) + r"*\s*")
        start = i + 1
        j = start
        while j < len(lines) and not closing.fullmatch(lines[j]):
            j += 1
        code = "\n".join(line.removeprefix(indent) for line in lines[start:j]) + "\n"
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.search(prev)
        marks = set(marker.group(1).split()) if marker else set()
        out.append(Block(path, start + 1, lang, code, marks))
        i = j + 1
    return out


def chains(pages: list[Path] = PAGES) -> Iterator[list[Block]]:
    """Each page's ```python blocks, grouped: a block and the ones that continue it."""
    for path in pages:
        current: list[Block] = []
        for block in blocks(path):
            if block.lang != "python":
                continue
            if "continue" not in block.marks and current:
                yield current
                current = []
            current.append(block)
        if current:
            yield current


CHAINS = list(chains())


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _id(chain: list[Block]) -> str:
    return f"{_shown(chain[0].path)}:{chain[0].line}"


def _included(block: Block) -> Path | None:
    lines = [line for line in block.code.splitlines() if line.strip()]
    if len(lines) == 1 and (m := SNIPPET.fullmatch(lines[0].strip())):
        return ROOT / m.group(1)
    return None


@contextlib.contextmanager
def _claude_emulator() -> Iterator[None]:
    from managedloop.testing import ClaudeEmulator

    with ClaudeEmulator() as emu:
        ml.configure(api_key=emu.api_key, bearer_token_file=None, base_url=emu.base_url)
        try:
            yield
        finally:
            ml.configure()  # back to no process-wide configuration


def run_chain(chain: list[Block]) -> dict[str, Any]:
    """Run a chain's blocks in order in one namespace; return the namespace."""
    namespace: dict[str, Any] = {"__name__": "docs_block"}
    for block in chain:
        unknown = block.marks - KNOWN_MARKS
        assert not unknown, f"{_id([block])}: unknown docs marker(s) {sorted(unknown)}"
        if (included := _included(block)) is not None:
            assert included.exists(), f"{_id([block])}: {included} does not exist"
            assert included.name in EXAMPLES_RUN, (
                f"{_id([block])}: {included.name} is not run by tests/test_examples.py"
            )
            continue
        # Padded so a traceback's line numbers are the page's own.
        source = "\n" * (block.line - 1) + block.code
        # dont_inherit: a block runs as a user's script would, not under this module's
        # `from __future__ import annotations` (pydantic models defined in it need that).
        code = compile(source, _shown(block.path), "exec", dont_inherit=True)
        with contextlib.ExitStack() as stack:
            if "claude-emulator" in block.marks:
                stack.enter_context(_claude_emulator())
            exec(code, namespace)
    return namespace


def _examples_run() -> set[str]:
    text = (ROOT / "tests" / "test_examples.py").read_text()
    return set(re.findall(r'"([a-z_]+\.py)"', text))


EXAMPLES_RUN = _examples_run()


@pytest.mark.parametrize("chain", CHAINS, ids=[_id(c) for c in CHAINS])
def test_python_block_runs(chain: list[Block]) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        run_chain(chain)


def test_every_fence_says_what_it_is() -> None:
    bad = [
        f"{_shown(b.path)}:{b.line - 1} ```{b.lang}"
        for path in PAGES
        for b in blocks(path)
        if b.lang != "python" and b.lang not in NOT_RUN
    ]
    assert bad == [], "tag each block python (runs) or one of " + ", ".join(sorted(NOT_RUN))


def test_the_pages_have_python_blocks_to_run() -> None:
    """A parser that found nothing would pass every page: pin what it must find."""
    names = {c[0].path.relative_to(ROOT).as_posix() for c in CHAINS}
    assert {"README.md", "docs/hosts.md", "docs/quickstart/local.md"} <= names
    assert sum(len(c) for c in CHAINS) >= 20


def test_a_continued_block_sees_the_previous_ones_names(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```python\nx = 1\n```\n\ntext\n\n<!-- docs: continue -->\n```python\nassert x == 1\n```\n"
        "\n```python\nassert 'x' not in globals()\n```\n\n```console\n$ not run\n```\n"
    )
    found = blocks(page)
    assert [(b.lang, b.marks) for b in found] == [
        ("python", set()),
        ("python", {"continue"}),
        ("python", set()),
        ("console", set()),
    ]
    assert found[1].line == 9
    grouped = list(chains([page]))
    assert [[b.line for b in chain] for chain in grouped] == [[2, 9], [13]]
    for chain in grouped:
        run_chain(chain)  # the second chain fails if the first one's names leaked into it


def test_tilde_fences_are_blocks_too(tmp_path: Path) -> None:
    """pymdownx.superfences renders ``~~~`` fences as code like backtick ones: a parser
    that knew only backticks would neither run a ~~~python block nor flag an untagged one."""
    page = tmp_path / "page.md"
    page.write_text(
        "~~~python\nx = 1\n```\nstill code\n~~~\n\n"
        "- a list item:\n\n    ~~~~ python\n    y = 2\n    ~~~~\n\n~~~\nuntagged\n~~~\n"
    )
    found = blocks(page)
    assert [(b.lang, b.line, b.code) for b in found] == [
        ("python", 2, "x = 1\n```\nstill code\n"),
        ("python", 10, "y = 2\n"),
        ("", 14, "untagged\n"),
    ]


def test_a_failing_block_names_its_page_and_line() -> None:
    page = ROOT / "docs" / "_probe_never_committed.md"  # never read: the block is given
    block = Block(page, 7, "python", "x = 1\nraise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError) as info:
        run_chain([block])
    frame = info.traceback[-1]
    assert str(frame.path).endswith("docs/_probe_never_committed.md")
    assert frame.lineno + 1 == 8  # pytest's lineno is 0-based: the page's line 8


def test_an_unknown_marker_fails() -> None:
    block = Block(ROOT / "README.md", 1, "python", "pass\n", {"contniue"})
    with pytest.raises(AssertionError, match="unknown docs marker"):
        run_chain([block])


def test_the_claude_marker_points_configuration_at_an_emulator_and_resets_it() -> None:
    from managedloop.config import resolve

    block = Block(
        ROOT / "README.md",
        1,
        "python",
        "from managedloop.config import resolve\nseen = resolve('base_url')\n",
        {"claude-emulator"},
    )
    namespace = run_chain([block])
    assert namespace["seen"].startswith("http://127.0.0.1:")
    assert resolve("base_url") == "https://api.anthropic.com"


def test_the_reference_shows_rest_roles_as_inline_code() -> None:
    """docs/rst_roles.py (a griffe extension mkdocs.yml loads) rewrites the docstrings'
    Sphinx roles and ``::`` markers for the Markdown API reference."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rst_roles", ROOT / "docs" / "rst_roles.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.markdown(":class:`~managedloop.SessionResult` and :func:`redact_url`") == (
        "`SessionResult` and `redact_url`"
    )
    assert module.markdown(":py:meth:`a.b.c <target>` here") == "`a.b.c` here"
    assert module.markdown("the tree::\n\n    A\n    └── B\n") == "the tree:\n\n    A\n    └── B\n"
    assert module.markdown("ends with a list ::\nnext") == "ends with a list:\nnext"
    assert module.markdown("``x`` :: inside a line stays") == "``x`` :: inside a line stays"
    assert module.markdown("A.\n\n>>> import x\n>>> x.y\n\nB.") == (
        "A.\n\n```pycon\n>>> import x\n>>> x.y\n```\n\nB."
    )
    assert module.markdown(">>> last") == "```pycon\n>>> last\n```"
    table = (
        "Intro:\n\n=====  ==========\nname   what\n=====  ==========\n"
        "``a``  first\nb      second,\n       continued\n"
        "longer overflows\n=====  ==========\n\nAfter."
    )
    assert module.markdown(table) == (
        "Intro:\n\n| name | what |\n|---|---|\n| ``a`` | first |\n"
        "| b | second, continued |\n| longer | overflows |\n\nAfter."
    )


def _doctest_modules() -> list[str]:
    """The modules of src/managedloop whose docstrings hold a ``>>>`` example (the API
    reference renders them as ``pycon`` blocks)."""
    src = ROOT / "src"
    names = []
    for path in sorted((src / "managedloop").rglob("*.py")):
        if ">>> " in path.read_text(encoding="utf-8"):
            parts = path.relative_to(src).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_there_are_docstring_examples_to_run() -> None:
    assert len(_doctest_modules()) >= 5


@pytest.mark.parametrize("name", _doctest_modules())
def test_docstring_examples_run(name: str) -> None:
    """Every ``>>>`` example in a docstring runs as a doctest (offline: an emulator or an
    object that sends nothing), so the reference's ``pycon`` blocks cannot rot either."""
    import doctest
    import importlib

    module = importlib.import_module(name)
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=False)
    assert results.attempted > 0, f"{name}: no example found"
    assert results.failed == 0, f"{name}: {results.failed} of its examples failed"


def test_the_command_line_page_covers_every_command_key_and_exit_code() -> None:
    """docs/cli.md: in the site's nav, run by ``make docs`` (docs/run_examples.py), with a
    runnable example of every command, every spec-file key and the whole exit-code table."""
    from managedloop.cli import HOSTS, exits
    from managedloop.cli.opsargs import COMMANDS
    from managedloop.cli.specfile import _AGENT_FIELDS, _CREDENTIALS, _SETTINGS

    page = ROOT / "docs" / "cli.md"
    text = page.read_text()
    assert "cli.md" in (ROOT / "mkdocs.yml").read_text()
    assert '"cli.md"' in (ROOT / "docs" / "run_examples.py").read_text()
    code = "".join(b.code for b in blocks(page) if b.lang == "python")
    for command in ("demo", "run", "emulate", *COMMANDS):
        assert f'"{command}"' in code, f"no runnable example of {command}"
    for exit_code, _ in exits.TABLE:
        assert f"| `{exit_code}` |" in text
    keys = {"store", "kind", *_AGENT_FIELDS}
    for host in HOSTS[1:]:
        keys |= set(_SETTINGS[host]) | {f"{c}_env" for c in _CREDENTIALS[host]}
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert missing == [], f"docs/cli.md does not document {missing}"
