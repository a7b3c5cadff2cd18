"""What changed between two job lists, at the cost of what changed.

A backend hands the core its whole job list every cycle; between two cycles most of it is
the very same objects in the same order. `diff_jobs` walks both lists with C-level
identity comparisons (`map(operator.is_not, ...)` under `itertools.compress`), stopping
only where they differ, so ten thousand unchanged jobs cost a few tens of microseconds
and each difference a few more. It returns the new list as pieces: runs kept from the
old list, and positions of jobs new to it; and the old positions that are gone.

A kept job must keep its place relative to the other kept jobs (a backend appends new
jobs and drops finished ones; a changed job is a new object in the old one's place).
When kept jobs moved, or one object appears twice, the answer is None: the caller then
looks at every job.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import compress, count
from typing import TypeVar

__all__ = ["JobDiff", "Run", "diff_jobs", "splice"]

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
    whether x is an item of `old` (by identity). None: kept items changed order."""
    pieces: list[Run | int] = []
    removed: list[int] = []
    i = j = 0
    n_old, n_new = len(old), len(new)
    while i < n_old and j < n_new:
        a, b = iter(old), iter(new)
        a.__setstate__(i)  # type: ignore[attr-defined]  # list iterators start anywhere in O(1)
        b.__setstate__(j)  # type: ignore[attr-defined]
        k = next(compress(count(), map(operator.is_not, a, b)), None)
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


def splice(old: Sequence[T], pieces: Sequence[Run | int], added: Callable[[int], T]) -> list[T]:
    """The new list of a value kept per position: old values for the kept runs, and
    `added(position)` for each new position."""
    out: list[T] = []
    for piece in pieces:
        if isinstance(piece, Run):
            out += old[piece.start : piece.start + piece.length]
        else:
            out.append(added(piece))
    return out
