"""What changed between two job lists, at the cost of what changed.

A backend hands the core its whole job list every cycle; between two cycles most of it is
the very same objects in the same order. `diff_jobs` finds where the lists part with
C-level list equality over slices (`first_difference`: an item that is the same object
is never compared further; an equal one counts as the same job), so ten thousand
unchanged jobs cost a few microseconds and each difference a few tens more. It returns
the new list as pieces: runs kept from the old list, and positions of jobs new to it;
and the old positions that are gone.

A kept job must keep its place relative to the other kept jobs (a backend appends new
jobs and drops finished ones; a changed job is a new object in the old one's place).
When kept jobs moved, or one object appears twice, the answer is None: the caller then
looks at every job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = ["JobDiff", "Run", "as_list", "diff_jobs", "first_difference"]

_SCAN = 32  # items compared one by one once the difference is narrowed to this many

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Run:
    """old[start:start + length] kept as it is."""

    start: int
    length: int


@dataclass(slots=True)
class JobDiff:
    pieces: list[Run | int]  # the new list in order: kept runs, and new positions (int)
    removed: list[int]  # old positions no longer in the list


def diff_jobs(
    old: Sequence[object], old_ids: Sequence[int], new: Sequence[object], known: Callable[[object], bool]
) -> JobDiff | None:
    """`old_ids`: id() of each old item (a list, for C-level index lookups); `known(x)`:
    whether x is an item of `old` (by identity). Items equal to the old ones count as
    kept. None: kept items changed order."""
    old, new = as_list(old), as_list(new)  # slices of both are compared: one type
    pieces: list[Run | int] = []
    removed: list[int] = []
    i = j = 0
    n_old, n_new = len(old), len(new)
    while i < n_old and j < n_new:
        k = first_difference(old, i, new, j)
        run = min(n_old - i, n_new - j) if k is None else k
        if run:
            pieces.append(Run(i, run))
            i, j = i + run, j + run
        if k is None:
            break
        item = new[j]
        if not known(item):
            pieces.append(j)  # new to the list (a new job, or a changed one in its old place)
            j += 1
            if i + 1 < n_old and j < n_new and (old[i + 1] is new[j] or old[i + 1] == new[j]):
                removed.append(i)  # it took old[i]'s place, and the lists go on alike
                i += 1
            continue
        try:
            later = old_ids.index(id(item), i + 1)
        except ValueError:
            return None  # an old item met again behind the walk: moved, or in twice
        removed.extend(range(i, later))
        i = later
    removed.extend(range(i, n_old))
    for p in range(j, n_new):
        if known(new[p]):
            return None  # an old item again at the end: moved, or in twice
        pieces.append(p)
    return JobDiff(pieces, removed)


def first_difference(old: Sequence[object], i: int, new: Sequence[object], j: int) -> int | None:
    """The first k where old[i + k] and new[j + k] differ (neither the same object nor
    equal), or None when none does before one list runs out. Slices are compared with
    list equality, halving the part that differs: C-level, and an item that is the same
    object costs no __eq__ call."""
    n = min(len(old) - i, len(new) - j)
    if old[i : i + n] == new[j : j + n]:
        return None
    lo, hi = 0, n  # old and new match over [0, lo); they differ somewhere in [lo, hi)
    while hi - lo > _SCAN:
        mid = (lo + hi) // 2
        if old[i + lo : i + mid] == new[j + lo : j + mid]:
            lo = mid
        else:
            hi = mid
    for k in range(lo, hi):
        a, b = old[i + k], new[j + k]
        if not (a is b or a == b):
            return k
    raise AssertionError("list equality and item equality disagree")


def as_list(items: Sequence[T]) -> list[T]:
    """The list itself, or a list of the items (slices of two lists compare; a list and a
    tuple never do)."""
    return items if isinstance(items, list) else list(items)
