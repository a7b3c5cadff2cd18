"""The Store on Ray's GCS key-value store: revisions and conflicts, a batch written as
one journal entry, compaction, and reading back whatever point a crash stopped at."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kai_ray.control import StoreConflict
from kai_ray.ray.kvstore import BATCH_MIN, JOURNAL, KVStore

ray = pytest.importorskip("ray")
pytestmark = [pytest.mark.ray, pytest.mark.timeout(60)]


@pytest.fixture
def prefix(ray_cluster: Any) -> str:
    return f"kvtest-{uuid.uuid4().hex[:8]}/"


def records(n: int, rev: int = 0) -> list[tuple[str, Any, int]]:
    return [(f"wl/w{i}", {"i": i, "rev": rev + 1}, rev) for i in range(n)]


def test_a_batch_is_one_journal_entry_read_back_and_compacted(prefix: str) -> None:
    store = KVStore(prefix)
    assert store.put_many(records(20)) == [1] * 20
    assert store._keys(JOURNAL) == [f"{JOURNAL}000000000000"] and store._keys("wl/") == []
    assert store.get("wl/w3").value == {"i": 3, "rev": 1}  # type: ignore[union-attr]
    fresh = KVStore(prefix)  # a restarted scheduler
    loaded = fresh.load("wl/")
    assert len(loaded) == 20 and loaded["wl/w7"].value == {"i": 7, "rev": 1} and loaded["wl/w7"].revision == 1
    assert fresh.put_many(records(20, rev=1)) == [2] * 20  # updates: revisions go on
    assert fresh.compaction_due(quiet=True) and fresh.compact() == 20
    assert fresh._keys(JOURNAL) == [] and len(fresh._keys("wl/")) == 20
    assert {k: r.revision for k, r in KVStore(prefix).load("wl/").items()} == {
        f"wl/w{i}": 2 for i in range(20)
    }


def test_the_newest_revision_wins_and_a_delete_is_not_undone_by_the_journal(prefix: str) -> None:
    store = KVStore(prefix)
    store.put_many(records(BATCH_MIN))  # journal: every record at revision 1
    store.put("wl/w0", {"i": 0, "rev": 2}, 1)  # its own key: newer than the journal
    store.delete("wl/w1", 1)
    loaded = KVStore(prefix).load("wl/")
    assert loaded["wl/w0"].value == {"i": 0, "rev": 2} and "wl/w1" not in loaded
    assert store.put("wl/w1", {"i": 1, "again": True}, 0) == 3  # the id comes back
    assert KVStore(prefix).load("wl/")["wl/w1"].value == {"i": 1, "again": True}
    store.compact()
    assert KVStore(prefix).load("wl/")["wl/w1"].revision == 3


def test_a_second_writer_is_refused(prefix: str) -> None:
    one, two = KVStore(prefix), KVStore(prefix)
    one.put("queues", [1], 0)
    with pytest.raises(StoreConflict, match="exists already"):
        two.put("queues", [2], 0)
    with pytest.raises(StoreConflict, match="revision 1, not revision 5"):
        two.put("queues", [2], 5)
    one._journal(), two._journal()  # both read the journal before either wrote to it
    one.put_many(records(BATCH_MIN))
    with pytest.raises(StoreConflict, match="another scheduler writes this store"):
        two.put_many([(f"other/{i}", i, 0) for i in range(BATCH_MIN)])
