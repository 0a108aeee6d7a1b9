"""Names a package loads on first use (PEP 562): one ``__getattr__``/``__dir__`` pair.

A facade that must stay cheap to import (the package root, ``provisioning``, ``stores``)
names its heavy attributes under ``if TYPE_CHECKING:`` for type checkers, and at run time
hands the same list, grouped by defining module, to :func:`on_first_use`::

    if TYPE_CHECKING:
        from managedloop.stores._file import FileStore
    else:
        from managedloop import _lazy

        _LAZY = {"managedloop.stores._file": ("FileStore",)}
        __getattr__, __dir__ = _lazy.on_first_use(globals(), _LAZY)

The ``__getattr__`` stays out of type checkers' sight on purpose: with it they would take
any misspelt attribute for ``Any``. ``tests/test_lazy.py`` reads each facade's
``TYPE_CHECKING`` imports and checks they name exactly its ``_LAZY`` table, so the two
lists cannot drift apart.

Invariants: a name is loaded once, then stored in the module's namespace, so later reads
are plain module attributes that never reach ``__getattr__``; ``dir()`` lists the loaded
names and every name of ``__all__``; an unknown name raises ``AttributeError`` as a module
without ``__getattr__`` would.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["on_first_use"]


def on_first_use(
    namespace: dict[str, Any],
    lazy: Mapping[str, tuple[str, ...]],
    made: Mapping[str, Callable[[str], object]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__``.

    ``namespace`` is the module's ``globals()``; ``lazy`` maps each defining module to the
    names to take from it; ``made`` maps a name to the function that builds its value from
    the name (the root's ``*_sync`` faces, each ``syncify`` of its async verb).
    """
    module = namespace["__name__"]
    where = {name: source for source, names in lazy.items() for name in names}
    builders = dict(made or {})

    def load(name: str) -> Any:  # the module's __getattr__
        if name in where:
            value = getattr(importlib.import_module(where[name]), name)
        elif name in builders:
            value = builders[name](name)
        else:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        namespace[name] = value  # once: later reads are plain module attributes
        return value

    def listing() -> list[str]:  # the module's __dir__
        return sorted(set(namespace) | set(namespace["__all__"]))

    return load, listing
