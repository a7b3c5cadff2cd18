"""docs/semantics.md's index of rules: each rule names where it is stated (functions
that exist) and every place it is applied (functions that exist and do call it)."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

DOCS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"
_ROW = re.compile(r"^\| ([^|]+?) \| ([\w/]+\.py:[^|]+?) \| ([^|]+?) \|$", re.MULTILINE)


def _module(path: str) -> ModuleType:
    return importlib.import_module("kai_ray." + path.removesuffix(".py").replace("/", "."))


def _target(module: ModuleType, name: str) -> object:
    target: object = module
    for part in name.split("."):
        assert hasattr(target, part), f"{module.__name__} has no {name}"
        target = getattr(target, part)
    return target


def _index() -> list[tuple[str, str, list[str], list[tuple[str, str]]]]:
    """(rule, module, [names stated], [(module, name) applied]) per row of the table."""
    rows = []
    for rule, stated, applied in _ROW.findall(DOCS.read_text()):
        module, names = stated.split(":", 1)
        places = [tuple(place.strip().split(":", 1)) for place in applied.split(";")]
        rows.append((rule, module, [n.strip() for n in names.split(",")], places))
    return rows  # type: ignore[return-value]


def test_the_rule_index_names_functions_that_exist() -> None:
    rows = _index()
    assert len(rows) >= 40
    for rule, module, names, _ in rows:
        for name in names:
            found = _target(_module(module), name)
            assert callable(found) or isinstance(found, property), (
                f"{rule}: {module}:{name} is not a function"
            )


def test_each_place_a_rule_is_applied_calls_it() -> None:
    for rule, _, names, places in _index():
        words = {n.split(".")[-1] for n in names}
        for module, name in places:
            found = _target(_module(module), name)
            source = inspect.getsource(found) if callable(found) else inspect.getsource(_module(module))
            assert any(re.search(rf"\b{re.escape(w)}\b", source) for w in words), (
                f"{rule}: {module}:{name} does not call {', '.join(sorted(words))}"
            )
