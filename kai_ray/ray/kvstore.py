"""The control plane's Store in Ray's GCS key-value store: survives the scheduler actor,
dies with the cluster.

Every record is kept with its revision ({"rev": n, "value": ...}). A batch of records
(a cycle's write-ahead, a thousand admissions at once) is written as ONE journal entry
(`journal/<seq>`) rather than one key each: the GCS serves every request of the cluster
on one thread, and a thousand small writes there slow the placement groups they precede.
When the scheduler is quiet, `compact()` moves journaled records to their own keys and
drops the journal. Reading back takes, for each key, the highest revision found in its
own key or the journal, so a crash at any point of a compaction loses nothing.

The GCS has no compare-and-swap. Creating a key (or a journal entry) is atomic: it
refuses to overwrite, which catches a second writer. An update checks the revision this
process last read or wrote, or reads it first. One scheduler actor writes: it is a named
singleton.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray.experimental import internal_kv

from kai_ray.control import Record, StoreConflict

__all__ = ["BATCH_MIN", "JOURNAL", "KV_NAMESPACE", "KVStore", "notice_key"]

KV_NAMESPACE = "kai-ray"
JOURNAL = "journal/"
BATCH_MIN = 8  # fewer records than this are written to their own keys at once
COMPACT_AFTER = 64  # journal entries after which compaction is due even while busy


def notice_key(workload_id: str) -> str:
    return f"notice/{workload_id}"


class KVStore:
    def __init__(self, prefix: str = "") -> None:
        self._p = prefix
        self._known: dict[str, int] = {}  # key -> revision last read or written here
        self._deleted: set[str] = set()  # keys deleted here (their revision goes on)
        self._journaled: dict[str, Record | None] = {}  # newest via the journal (None: deleted)
        self._entries: list[str] | None = None  # journal keys not compacted; None: not read yet
        self._seq = 0
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------ reading

    def load(self, prefix: str) -> dict[str, Record]:
        found: dict[str, Record | None] = {}
        for key in self._keys(prefix):
            if not key.startswith(JOURNAL):
                found[key] = self._read(key)
        for entry in self._journal():
            for key, value, rev in self._read_entry(entry):
                current = found.get(key)
                if key.startswith(prefix) and (current is None or rev >= current.revision):
                    found[key] = None if value is None else Record(value, rev)
                    self._journaled[key] = found[key]
        out = {k: r for k, r in found.items() if r is not None}
        self._known.update({k: r.revision for k, r in out.items()})
        return out

    def get(self, key: str) -> Record | None:
        if key in self._journaled:
            return self._journaled[key]
        return self._read(key)

    # ------------------------------------------------------------ writing

    def put(self, key: str, value: Any, expected: int) -> int:
        rev = self._check(key, expected)
        blob = json.dumps({"rev": rev, "value": value})
        if expected == 0 and key not in self._deleted:
            if internal_kv._internal_kv_put(self._k(key), blob, overwrite=False, namespace=KV_NAMESPACE):
                raise StoreConflict(f"{key}: exists already; written by someone else")  # Ray: existed
        else:
            internal_kv._internal_kv_put(self._k(key), blob, overwrite=True, namespace=KV_NAMESPACE)
        self._wrote(key, rev)
        self._journaled.pop(key, None)  # its own key is the newest now
        return rev

    def put_many(self, items: Sequence[tuple[str, Any, int]]) -> list[int]:
        if len(items) < BATCH_MIN:
            return [self.put(*item) for item in items]
        revs = [self._check(key, expected) for key, _, expected in items]
        self._append([[key, value, rev] for (key, value, _), rev in zip(items, revs, strict=True)])
        for (key, value, _), rev in zip(items, revs, strict=True):
            self._wrote(key, rev)
            self._journaled[key] = Record(value, rev)
        return revs

    def delete(self, key: str, expected: int) -> None:
        current = self.get(key)
        if current is None:
            return
        if current.revision != expected:
            raise StoreConflict(
                f"{key}: revision {current.revision}, not {expected}; written by someone else"
            )
        rev = expected + 1
        if self._journal():  # an older copy may sit in the journal: outvote it
            self._append([[key, None, rev]])
            self._journaled[key] = None
        internal_kv._internal_kv_del(self._k(key), namespace=KV_NAMESPACE)
        self._wrote(key, rev)
        self._deleted.add(key)

    def overwrite(self, key: str, value: Any) -> None:
        """A key with one writer and no history (a notice): written as is, or deleted."""
        if value is None:
            internal_kv._internal_kv_del(self._k(key), namespace=KV_NAMESPACE)
        else:
            blob = json.dumps({"rev": 0, "value": value})
            internal_kv._internal_kv_put(self._k(key), blob, overwrite=True, namespace=KV_NAMESPACE)

    # ------------------------------------------------------------ the journal

    def compaction_due(self, quiet: bool) -> bool:
        entries = self._entries or []
        return bool(entries) and (quiet or len(entries) >= COMPACT_AFTER)

    def compact(self) -> int:
        """Move journaled records to their own keys, then drop the journal; the number
        of records moved."""
        entries = list(self._journal())
        if not entries:
            return 0
        moved = list(self._journaled.items())

        def write(item: tuple[str, Record | None]) -> None:
            key, record = item
            if record is None:
                internal_kv._internal_kv_del(self._k(key), namespace=KV_NAMESPACE)
            else:
                blob = json.dumps({"rev": record.revision, "value": record.value})
                internal_kv._internal_kv_put(self._k(key), blob, overwrite=True, namespace=KV_NAMESPACE)

        list(self._threads().map(write, moved))
        for entry in entries:
            internal_kv._internal_kv_del(self._k(entry), namespace=KV_NAMESPACE)
        self._journaled.clear()
        self._entries = []
        return len(moved)

    def _append(self, records: list[list[Any]]) -> None:
        self._journal()
        entry = f"{JOURNAL}{self._seq:012d}"
        blob = json.dumps(records)
        if internal_kv._internal_kv_put(self._k(entry), blob, overwrite=False, namespace=KV_NAMESPACE):
            raise StoreConflict(f"{entry}: exists already; another scheduler writes this store")
        assert self._entries is not None
        self._entries.append(entry)
        self._seq += 1

    def _journal(self) -> list[str]:
        if self._entries is None:
            self._entries = sorted(self._keys(JOURNAL))
            self._seq = int(self._entries[-1][len(JOURNAL) :]) + 1 if self._entries else 0
        return self._entries

    def _read_entry(self, entry: str) -> list[tuple[str, Any, int]]:
        raw = internal_kv._internal_kv_get(self._k(entry), namespace=KV_NAMESPACE)
        return [] if raw is None else [(k, v, int(r)) for k, v, r in json.loads(raw)]

    # ------------------------------------------------------------ helpers

    def _check(self, key: str, expected: int) -> int:
        """The revision a write of `key` gets, if `expected` is the one stored."""
        if key in self._deleted and expected == 0:
            return self._known[key] + 1  # re-created: its revisions go on
        current = self._known.get(key)
        if current is None and expected != 0:
            current = getattr(self.get(key), "revision", None)
        if (current or 0) != expected:
            found = "missing" if current is None else f"revision {current}"
            raise StoreConflict(f"{key}: {found}, not revision {expected}; written by someone else")
        return expected + 1

    def _wrote(self, key: str, rev: int) -> None:
        self._known[key] = rev
        self._deleted.discard(key)

    def _read(self, key: str) -> Record | None:
        raw = internal_kv._internal_kv_get(self._k(key), namespace=KV_NAMESPACE)
        if raw is None:
            return None
        data = json.loads(raw)
        if not (isinstance(data, dict) and "rev" in data and "value" in data):
            return Record(data, 1)  # written before records had revisions
        self._known[key] = int(data["rev"])
        return Record(data["value"], int(data["rev"]))

    def _keys(self, prefix: str) -> list[str]:
        keys = internal_kv._internal_kv_list(self._k(prefix), namespace=KV_NAMESPACE)
        return [(k.decode() if isinstance(k, bytes) else k)[len(self._p) :] for k in keys]

    def _k(self, key: str) -> str:
        return self._p + key

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="kai-ray-kv")
        return self._pool
