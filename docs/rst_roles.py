"""A griffe extension for the API reference: the docstrings' reST roles, as Markdown.

The source's docstrings use Sphinx roles (``:class:`~managedloop.SessionResult```) and
``::`` literal-block markers, which mkdocstrings' Markdown shows verbatim. This rewrites
them, in the reference only, to inline code (``~`` keeps the last dotted part, as Sphinx
does) and a plain colon (the indented block after a ``::`` is already a Markdown code
block), and fences a doctest paragraph (``>>>`` lines, which Markdown would read as nested
block quotes) as a ``pycon`` block, and turns a reST simple table (``====  ====`` borders
around a header row) into a Markdown table. The source is left as it is. (The docstrings'
doctests run in tests/test_docs_blocks.py, like the pages' own blocks.) mkdocs.yml loads it
by path; tests/test_docs_blocks.py pins the rewriting.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]+?)(?:\s*<[^>]+>)?`")
LITERAL = re.compile(r"\s?::$", re.M)
BORDER = re.compile(r"^(\s*)(=+)((?:\s+=+)+)\s*$")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2).strip()
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


def _fence_doctests(text: str) -> str:
    out: list[str] = []
    in_doctest = False
    for line in text.split("\n"):
        if not in_doctest and line.lstrip().startswith(">>>"):
            out.append("```pycon")
            in_doctest = True
        elif in_doctest and not line.strip():
            out.append("```")
            in_doctest = False
        out.append(line)
    if in_doctest:
        out.append("```")
    return "\n".join(out)


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    """A row cut at the border's columns (the last column runs to the end of the line); a
    cell that overflows its column by a few characters ends at the next space."""
    cells: list[str] = []
    pos = 0
    for _, column_end in spans[:-1]:
        end = column_end
        while end < len(line) and not line[end].isspace():
            end += 1
        cells.append(line[pos:end].strip())
        pos = end
    return [*cells, line[pos:].strip()]


def _tables(text: str) -> str:
    """reST simple tables (border, header, border, rows, border) as Markdown tables; a row
    whose first cell is empty continues the row above it."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        border = BORDER.match(lines[i])
        ends = [j for j in range(i + 2, len(lines)) if lines[j].strip() == lines[i].strip()]
        if border is None or len(ends) < 2 or ends[0] != i + 2:
            out.append(lines[i])
            i += 1
            continue
        spans = [(m.start(), m.end()) for m in re.finditer(r"=+", lines[i])]
        header = _cells(lines[i + 1], spans)
        rows: list[list[str]] = []
        for line in lines[i + 3 : ends[1]]:
            cells = _cells(line, spans)
            if rows and not cells[0]:
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
            elif line.strip():
                rows.append(cells)
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * len(header))
        out.extend("| " + " | ".join(r) + " |" for r in rows)
        i = ends[1] + 1
    return "\n".join(out)


def markdown(text: str) -> str:
    """``text`` with reST roles as inline code, ``::`` markers as colons, doctest
    paragraphs fenced and simple tables as Markdown tables."""
    # Tables first: a role rewritten shorter would shift the columns.
    return _fence_doctests(LITERAL.sub(":", ROLE.sub(_code, _tables(text))))


try:
    import griffe
except ImportError:  # the test suite checks markdown() without the docs extra installed
    pass
else:

    class RstRoles(griffe.Extension):
        def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = markdown(obj.docstring.value)
