"""docs/semantics.md's index of rules points at functions that exist."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"


def _index() -> list[tuple[str, str, list[str]]]:
    """(rule, module, [names]) for each row `| rule | [package/]file.py:name, name |`."""
    rows = []
    for rule, where in re.findall(r"^\| ([^|]+?) \| ([\w/]+\.py:[^|]+?) \|$", DOCS.read_text(), re.MULTILINE):
        module, names = where.split(":", 1)
        rows.append(
            (rule, module.removesuffix(".py").replace("/", "."), [n.strip() for n in names.split(",")])
        )
    return rows


def test_the_rule_index_names_functions_that_exist() -> None:
    rows = _index()
    assert len(rows) >= 25
    for rule, module, names in rows:
        found = importlib.import_module(f"kai_ray.core.{module}")
        for name in names:
            target: object = found
            for part in name.split("."):
                assert hasattr(target, part), f"{rule}: {module}.py has no {name}"
                target = getattr(target, part)
            assert callable(target), f"{rule}: {module}.py:{name} is not a function"
