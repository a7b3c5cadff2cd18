"""What the readers of a KAI snapshot share: the error for input that cannot be read, the
warnings for what is read but has no equivalent, and safe access to the JSON of
Kubernetes objects (a field of the wrong type is an error naming the object and the
field, never a KeyError or a TypeError)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from kai_ray.core.model.words import listed

__all__ = [
    "FIX",
    "KaiSnapshotError",
    "Notes",
    "as_list",
    "as_map",
    "in_node_pool",
    "instant",
    "key_of",
    "object_name",
    "section",
]

Obj = Mapping[str, Any]
# The fix for a snapshot that is not as KAI writes it: another snapshot, unchanged.
FIX = "take the snapshot again from KAI's /get-snapshot endpoint and pass it unchanged"


class KaiSnapshotError(ValueError):
    """A KAI snapshot that cannot be read; the message names the object, the field and the fix."""


class Notes:
    """Warnings, one line per kind of thing not understood, naming a few of the objects it
    was found on (a thousand pods with the same annotation make one line, not a thousand)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, str], list[str]] = {}

    def add(self, text: str, kind: str = "", name: str = "") -> None:
        """`text` found on object `name` (of `kind`: pod, node, ...); both empty for the
        snapshot as a whole."""
        names = self._seen.setdefault((kind, text), [])
        if name and name not in names:
            names.append(name)

    def lines(self) -> list[str]:
        out = []
        for (kind, text), names in self._seen.items():
            if not names:
                out.append(text)
                continue
            noun = kind if len(names) == 1 else f"{kind}s"
            out.append(f"{noun} {listed(names)}: {text}")
        return out


def as_map(value: object, where: str) -> Obj:
    """`value` as an object ({} for null or absent); KaiSnapshotError for anything else."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise KaiSnapshotError(f"{where}: expected an object, found {type(value).__name__}; {FIX}")
    return value


def as_list(value: object, where: str) -> Sequence[Any]:
    """`value` as a list ([] for null or absent); KaiSnapshotError for anything else."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise KaiSnapshotError(f"{where}: expected a list, found {type(value).__name__}; {FIX}")
    return value


def section(obj: Obj, part: str, where: str) -> Obj:
    """`metadata.labels`, `metadata.annotations`: {} when absent."""
    return as_map(as_map(obj.get("metadata"), f"{where}: metadata").get(part), f"{where}: metadata.{part}")


def object_name(obj: object, where: str) -> str:
    """metadata.name of an object of the snapshot; KaiSnapshotError naming `where` (e.g.
    "rawObjects.pods[3]") when it is missing."""
    meta = as_map(as_map(obj, where).get("metadata"), f"{where}: metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise KaiSnapshotError(f"{where}: metadata.name: missing; every object has a name; {FIX}")
    return name


def key_of(obj: Obj) -> tuple[str, str]:
    """(namespace, name) of a namespaced object (after object_name checked the name)."""
    meta = obj["metadata"]
    return str(meta.get("namespace") or "default"), str(meta["name"])


def in_node_pool(labels: Obj, pool: tuple[str, str] | None) -> bool:
    """Whether an object with these labels is in a partitioned KAI's node pool (label key,
    value; no value: objects without the key), as KAI selects its nodes and pod groups."""
    if pool is None:
        return True
    key, value = pool
    return labels.get(key) == value if value else key not in labels


def instant(value: object, where: str) -> float | None:
    """An RFC 3339 time of the API server (`2026-11-27T01:45:19Z`, fractions kept) as epoch
    seconds; None when absent."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            stamp = None
        if stamp is not None and stamp.tzinfo is not None:
            return stamp.timestamp()
    raise KaiSnapshotError(
        f"{where}: {value!r} is not a time; the API server writes times like 2026-01-31T12:00:00Z; {FIX}"
    )
