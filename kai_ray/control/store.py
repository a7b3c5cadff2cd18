"""The controller's records in a Store: each key written with the revision last read or
written, so that a write racing another writer fails loudly (StoreConflict) instead of
silently losing one of them."""

from __future__ import annotations

from typing import Any

from kai_ray.control.ports import Store

__all__ = ["Records"]


class Records:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._revision: dict[str, int] = {}

    def load(self, prefix: str) -> dict[str, Any]:
        found = self.store.load(prefix)
        self._revision.update({k: r.revision for k, r in found.items()})
        return {k: r.value for k, r in found.items()}

    def get(self, key: str) -> Any | None:
        record = self.store.get(key)
        if record is None:
            return None
        self._revision[key] = record.revision
        return record.value

    def save(self, key: str, value: Any) -> None:
        self._revision[key] = self.store.put(key, value, self._revision.get(key, 0))

    def delete(self, key: str) -> None:
        self.store.delete(key, self._revision.pop(key, 0))

    def save_many(self, items: dict[str, Any]) -> None:
        """One batch: a cycle's records, written before the effects they lead to."""
        keys = list(items)
        revisions = self.store.put_many([(k, items[k], self._revision.get(k, 0)) for k in keys])
        self._revision.update(zip(keys, revisions, strict=True))
