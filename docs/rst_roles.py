"""A griffe extension for the API reference: the docstrings' reST roles, as Markdown.

The source's docstrings use Sphinx roles (``:class:`~managedloop.SessionResult```) and
``::`` literal-block markers, which mkdocstrings' Markdown shows verbatim. This rewrites
them, in the reference only, to inline code (``~`` keeps the last dotted part, as Sphinx
does) and a plain colon (the indented block after a ``::`` is already a Markdown code
block), and fences a doctest paragraph (``>>>`` lines, which Markdown would read as nested
block quotes) as a ``pycon`` block. The source is left as it is. (The docstrings'
doctests are illustrations, not run; the pages' own blocks are.) mkdocs.yml loads it
by path; tests/test_docs_blocks.py pins the rewriting.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:py:)?[a-z]+:`(~?)([^`<]+?)(?:\s*<[^>]+>)?`")
LITERAL = re.compile(r"\s?::$", re.M)


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


def markdown(text: str) -> str:
    """``text`` with reST roles as inline code, ``::`` markers as colons and doctest
    paragraphs fenced."""
    return _fence_doctests(LITERAL.sub(":", ROLE.sub(_code, text)))


try:
    import griffe
except ImportError:  # the test suite checks markdown() without the docs extra installed
    pass
else:

    class RstRoles(griffe.Extension):
        def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
            if obj.docstring is not None:
                obj.docstring.value = markdown(obj.docstring.value)
