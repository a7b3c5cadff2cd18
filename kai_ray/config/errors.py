"""The one error type for mistakes in a user's file, and how pydantic's errors become one.

Every message names the object, the field and the fix, e.g.
`queues.yaml: queue 'team-a': resources.gpu.limit 2 is below its quota 4; raise ...`.
Only the first problem is reported: one clear line is easier to act on than a list.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

__all__ = ["ConfigError", "describe_location", "from_validation_error"]

# Collections whose entries are named objects: key -> the noun a person uses for one entry.
_NOUNS: dict[str, str] = {
    "queues": "queue",
    "jobs": "job",
    "nodes": "node",
    "priorityClasses": "priority class",
    "topologies": "topology",
    "expect": "expectation for job",
}
# Discriminator tags pydantic inserts into error locations; they mean nothing to a user.
TAGS = frozenset({"task-list", "task-count"})


class ConfigError(ValueError):
    """A file a user wrote is invalid. `str()` gives `path: field: what is wrong; the fix`."""

    def __init__(self, message: str, *, path: str | Path | None = None, field: str | None = None) -> None:
        self.message = message
        self.path = None if path is None else str(path)
        self.field = field
        super().__init__(self._text())

    def _text(self) -> str:
        parts = [p for p in (self.path, self.field) if p]
        return ": ".join([*parts, self.message])

    def __str__(self) -> str:
        return self._text()

    def at(self, path: str | Path) -> ConfigError:
        """The same error, naming the file it came from."""
        return ConfigError(self.message, path=path, field=self.field)


def from_validation_error(
    error: ValidationError, raw: object, *, path: str | Path | None = None, top: str = ""
) -> ConfigError:
    """The first problem pydantic found, as a ConfigError naming object and field.

    `raw` is the data that was validated, used to name list entries by their `name`;
    `top` is the collection a top-level list holds (a queues file: "queues").
    """
    first = error.errors()[0]
    loc = tuple(p for p in first["loc"] if p not in TAGS)
    field = describe_location(loc, raw, top=top)
    return ConfigError(_message(first), path=path, field=field or None)


def describe_location(loc: Sequence[int | str], raw: object, *, top: str = "") -> str:
    """('jobs', 2, 'tasks', 0, 'state') -> "job 'train-a': tasks[0].state"."""
    if top:
        loc = (top, *loc)
        raw = {top: raw}
    if len(loc) >= 2 and isinstance(loc[0], str) and loc[0] in _NOUNS:
        name = _entry_name(raw, loc[0], loc[1])
        if name is not None:
            rest = _dotted(loc[2:])
            head = f"{_NOUNS[loc[0]]} {name!r}"
            return f"{head}: {rest}" if rest else head
    return _dotted(loc)


def _entry_name(raw: object, collection: str, key: int | str) -> str | None:
    if not isinstance(raw, Mapping):
        return None
    entries = raw.get(collection)
    if isinstance(entries, Mapping):
        return str(key)
    if isinstance(entries, list) and isinstance(key, int) and 0 <= key < len(entries):
        entry = entries[key]
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
            return str(entry["name"])
    return None


def _dotted(loc: Sequence[int | str]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


_SHAPES = {
    "model_type": "a map of keys",
    "model_attributes_type": "a map of keys",
    "dict_type": "a map",
    "list_type": "a list",
}


def _message(error: Any) -> str:
    kind, msg, value = error["type"], str(error["msg"]), error.get("input")
    if kind == "missing":
        return "this key is required; add it"
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling"
    if kind in ("value_error", "assertion_error"):
        return msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if kind in _SHAPES:
        return f"expected {_SHAPES[kind]} here, not {_short(value)}"
    return f"{msg[:1].lower()}{msg[1:]} (got {_short(value)})"


def _short(value: object, most: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= most else text[: most - 3] + "..."
