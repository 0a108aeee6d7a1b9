"""The facades that load names on first use (``managedloop._lazy``).

Each facade names its lazy attributes twice: under ``if TYPE_CHECKING:`` for type checkers
and in its run-time ``_LAZY`` table. These tests read the first from the source and hold it
against the second, so neither list can change alone.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import types

import pytest

from managedloop._lazy import on_first_use

FACADES = ("managedloop", "managedloop.provisioning", "managedloop.stores")


def _type_checking_block(module: types.ModuleType) -> list[ast.stmt]:
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            return node.body
    raise AssertionError(f"{module.__name__} has no `if TYPE_CHECKING:` block")


def _imported(block: list[ast.stmt]) -> dict[str, set[str]]:
    return {
        node.module or "": {alias.name for alias in node.names}
        for node in block
        if isinstance(node, ast.ImportFrom)
    }


@pytest.mark.parametrize("name", FACADES)
def test_type_checkers_see_exactly_the_names_that_load_on_first_use(name: str) -> None:
    module = importlib.import_module(name)
    seen = _imported(_type_checking_block(module))
    if name == "managedloop":
        assert seen.pop("managedloop._loops") == {"syncify"}  # builds the *_sync faces
    assert seen == {where: set(names) for where, names in module._LAZY.items()}
    lazy = {n for names in module._LAZY.values() for n in names}
    assert lazy <= set(module.__all__)  # so `from ... import *` binds each


def test_the_roots_blocking_faces_are_the_ones_type_checkers_see() -> None:
    import managedloop as ml

    faces = {
        node.targets[0].id: ast.unparse(node.value)
        for node in _type_checking_block(ml)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    assert faces == {name: f"syncify({name.removesuffix('_sync')})" for name in ml._SYNC}
    assert set(ml._SYNC) <= set(ml.__all__)


def _module(**lazy: tuple[str, ...]) -> tuple[types.ModuleType, dict[str, int]]:
    made: dict[str, int] = {}

    def build(name: str) -> object:
        made[name] = made.get(name, 0) + 1
        return f"built {name}"

    module = types.ModuleType("fake")
    module.__all__ = ["dumps", "twin"]  # type: ignore[attr-defined]
    module.__getattr__, module.__dir__ = on_first_use(  # type: ignore[method-assign]
        vars(module), lazy, {"twin": build}
    )
    return module, made


def test_a_name_loads_once_and_then_is_a_plain_attribute() -> None:
    module, made = _module(json=("dumps",))
    import json

    assert "dumps" not in vars(module)
    assert module.dumps is json.dumps
    assert vars(module)["dumps"] is json.dumps  # stored: __getattr__ is not asked again
    assert module.twin == "built twin"
    assert module.twin == "built twin"
    assert made == {"twin": 1}


def test_dir_lists_every_public_name_and_unknown_names_raise() -> None:
    module, _ = _module(json=("dumps",))
    assert {"dumps", "twin", "__name__"} <= set(dir(module))
    with pytest.raises(AttributeError, match=r"^module 'fake' has no attribute 'nope'$"):
        module.nope  # noqa: B018
