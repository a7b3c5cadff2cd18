"""diff_jobs: the new list rebuilt from the old one and the pieces, whatever the edits."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from kai_ray.core.incremental.jobdiff import Run, diff_jobs, first_difference


def splice(old: list[Item], pieces: list[Run | int], added: Callable[[int], Item]) -> list[Item]:
    """The new list the pieces describe: old items for the kept runs, `added(position)`
    for each new position."""
    out: list[Item] = []
    for piece in pieces:
        if isinstance(piece, Run):
            out += old[piece.start : piece.start + piece.length]
        else:
            out.append(added(piece))
    return out


class Item:
    def __init__(self, n: int) -> None:
        self.n = n

    def __repr__(self) -> str:
        return f"Item({self.n})"


edits = st.lists(
    st.tuples(st.sampled_from(["remove", "replace", "insert", "append", "keep"]), st.integers(0, 200)),
    max_size=12,
)


@given(st.integers(0, 60), edits)
def test_the_new_list_is_the_kept_runs_and_the_new_items(size: int, ops: list[tuple[str, int]]) -> None:
    old = [Item(i) for i in range(size)]
    new = list(old)
    for kind, at in ops:
        if kind == "remove" and new:
            del new[at % len(new)]
        elif kind == "replace" and new:
            new[at % len(new)] = Item(1000 + at)
        elif kind == "insert":
            new.insert(at % (len(new) + 1), Item(2000 + at))
        elif kind == "append":
            new.append(Item(3000 + at))
    olds = {id(x) for x in old}
    diff = diff_jobs(old, [id(x) for x in old], new, lambda x: id(x) in olds)
    assert diff is not None  # kept items never move under these edits
    rebuilt = splice(old, diff.pieces, lambda p: new[p])
    assert len(rebuilt) == len(new) and all(a is b for a, b in zip(rebuilt, new, strict=True))
    news = {id(x) for x in new}
    assert diff.removed == [p for p, x in enumerate(old) if id(x) not in news]
    added = [p for p in diff.pieces if not isinstance(p, Run)]
    assert added == [p for p, x in enumerate(new) if id(x) not in olds]


def test_a_kept_item_that_moved_or_comes_twice_asks_for_a_full_look() -> None:
    old = [Item(i) for i in range(5)]
    ids = [id(x) for x in old]
    moved = [old[0], old[3], old[1], old[2], old[4]]
    assert diff_jobs(old, ids, moved, lambda x: x in old) is None
    twice = [*old, old[2]]
    assert diff_jobs(old, ids, twice, lambda x: x in old) is None


def test_an_unchanged_list_is_one_run() -> None:
    old = [Item(i) for i in range(1000)]
    diff = diff_jobs(old, [id(x) for x in old], list(old), lambda x: True)
    assert diff is not None and diff.pieces == [Run(0, 1000)] and diff.removed == []


class Value:
    """Equal when the values are: a backend may hand over an equal JobInfo again."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Value) and other.n == self.n

    __hash__ = None  # type: ignore[assignment]


@given(
    st.lists(st.integers(0, 3), min_size=0, max_size=300),
    st.lists(st.tuples(st.integers(0, 299), st.integers(0, 4)), max_size=4),
    st.integers(0, 20),
    st.integers(0, 20),
    st.booleans(),
)
def test_first_difference_finds_the_first_item_neither_the_same_nor_equal(
    values: list[int], changes: list[tuple[int, int]], i: int, j: int, copy_equal: bool
) -> None:
    old = [Value(v) for v in values]
    # The same objects, or equal copies of them; then a few items changed.
    new = [Value(x.n) if copy_equal else x for x in old]
    for at, value in changes:
        if new:
            new[at % len(new)] = Value(value)
    i, j = min(i, len(old)), min(j, len(new))
    n = min(len(old) - i, len(new) - j)
    expected = next((k for k in range(n) if old[i + k] != new[j + k]), None)
    assert first_difference(old, i, new, j) == expected


def test_an_equal_item_is_kept_and_an_unequal_one_is_new() -> None:
    old = [Value(i) for i in range(100)]
    new = [Value(i) for i in range(100)]  # equal, none the same object
    new[40] = Value(1000)
    diff = diff_jobs(old, [id(x) for x in old], new, lambda x: any(x is y for y in old))
    assert diff is not None
    assert diff.pieces == [Run(0, 40), 40, Run(41, 59)] and diff.removed == [40]
