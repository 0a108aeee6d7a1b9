"""A mkdocs hook (mkdocs.yml ``hooks:``): ``make docs`` runs the examples of the pages in
:data:`PAGES` while it builds them, and a failing example fails the build.

The command-line page's examples drive ``managedloop`` on the emulators, so the page shows
only commands that work. The test suite runs them too (``tests/test_docs_blocks.py``, with
the same conventions: a ```python block runs in a fresh namespace, ``<!-- docs: continue
-->`` on the line before one runs it in the previous block's namespace).
"""

from __future__ import annotations

import contextlib
import io
import re
import signal
from typing import Any

from mkdocs.exceptions import PluginError

PAGES = ("cli.md",)
_BLOCK = re.compile(r"(?:<!--\s*docs:\s*([a-z\- ]+?)\s*-->\s*\n)?```python\n(.*?)^```", re.S | re.M)

# The examples stop `managedloop emulate` with SIGINT, as Ctrl-C would; a build launched
# with SIGINT ignored (a nohup or background job) would hand the ignore to that child, which
# would never stop (tests/conftest.py does the same for the suite).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri not in PAGES:
        return markdown
    namespace: dict[str, Any] = {}
    for match in _BLOCK.finditer(markdown):
        marks = set((match.group(1) or "").split())
        if "continue" not in marks:
            namespace = {"__name__": "docs_block"}
        line = markdown.count("\n", 0, match.start(2)) + 1
        source = "\n" * (line - 1) + match.group(2)  # a traceback names the page's line
        try:
            # stdout and stderr kept out of the build log (some examples show errors on purpose)
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                code = compile(source, f"docs/{page.file.src_uri}", "exec")
                exec(code, namespace)  # noqa: S102 - the page's own examples, as the tests run them
        except Exception as exc:
            where = f"docs/{page.file.src_uri}:{line}"
            raise PluginError(f"{where}: the example failed: {type(exc).__name__}: {exc}") from exc
    return markdown
