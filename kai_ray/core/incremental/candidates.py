"""The policy's candidate victims kept from one cycle to the next, patched.

Reclaim and preempt search over every unit the policy lets be a victim, in victim order
(victimpool.shared_candidates). With a few hundred running gangs, building them is a
pass over every running job (its units, its surplus) and a sort, each cycle, for a set
that changes by a few jobs at a time. The cycle cache keeps them instead, as the
snapshot has them, in victim order, and patches them as candidate jobs come and go.

Why that is the same list: a job's units are read from the job alone (its running
tasks, its surplus) and its victim order from the unit alone (the contract: `Policy`),
and a job the cache keeps is exactly as the snapshot made it. Ties in victim order go to
the earlier job, then the earlier unit of a job, as the stable sort of the full build
does: orders keep their comparisons between patches, and the cache forgets the list
whenever it numbers its jobs afresh.

A cycle takes them before it evicts anything (Statement.running_mark 0). It may have
placed tasks by then, which changes no task that runs but may change a job's surplus
(its active count): a touched job's units are made again, and where they differ, that
cycle takes a patched copy. The full build stays the reference
(KAI_RAY_CHECK_INCREMENTAL; tests/core/test_incremental.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kai_ray.core.cluster import Job
from kai_ray.core.hooks import Unit
from kai_ray.core.victimpool import Candidates, Piece, unit_piece, victim_units

if TYPE_CHECKING:
    from kai_ray.core.context import CycleContext

__all__ = ["KeptCandidates"]

# (victim order, job order, unit's place in its job, unit, its part of the arrays)
Entry = tuple[Any, int, int, Unit, Piece]
Order = Callable[[Unit], Any]


class KeptCandidates:
    def __init__(self) -> None:
        self._entries: list[Entry] | None = None  # None: not made (or forgotten)
        self._by_job: dict[int, list[Entry]] = {}
        self._came: dict[int, Job] = {}  # came with a patch: put in once their orders are set
        self._order: Order | None = None
        self._width = 0  # the arrays' columns
        self._built: Candidates | None = None  # the entries' Candidates, while they stand

    def forget(self) -> None:
        """The jobs were built or numbered afresh: made again when next asked for."""
        self._entries, self._built = None, None
        self._by_job.clear()
        self._came.clear()

    def came(self, job: Job) -> None:
        """A job that may be a victim, with running tasks, came with a patch."""
        if self._entries is not None:
            self._came[id(job)] = job

    def left(self, job: Job) -> None:
        """Such a job left (finished, changed, or no longer running)."""
        if self._entries is None or self._came.pop(id(job), None) is not None:
            return
        for entry in self._by_job.pop(id(job), ()):
            at = bisect.bisect_left(self._entries, entry[:3], key=_keys)
            assert self._entries[at] is entry, "a unit's entry is where its keys put it"
            del self._entries[at]
        self._built = None

    def start(
        self, jobs: Iterable[Job], may_be_victim: Callable[[Job], bool], order: Order, width: int
    ) -> None:
        """As a cycle begins (the state is the snapshot's, the jobs' orders set): made if
        they are not, else the jobs that came since put in. Never later: a job's units
        are read as the snapshot has it (a cycle's placements may change its surplus)."""
        entries = self._entries
        if entries is not None and order is self._order and width == self._width:
            for job in self._came.values():
                for entry in self._add(job):
                    bisect.insort(entries, entry, key=_keys)
                self._built = None
            self._came.clear()
            return
        self.forget()
        self._order, self._width = order, width
        taken = (job for job in jobs if job.active_count and may_be_victim(job))
        self._entries = sorted((entry for job in taken for entry in self._add(job)), key=_keys)

    def candidates(self, ctx: CycleContext) -> Candidates | None:
        """The candidates as shared_candidates would build them now; None once the cycle
        evicted (or when not made)."""
        entries = self._entries
        if entries is None or ctx.stmt.running_mark != 0:
            return None
        assert not self._came, "the jobs that came are put in as the cycle begins"
        redone = self._touched(ctx.stmt.touched_jobs)
        if redone:
            return self._made(self._patched(redone))
        if self._built is None:
            self._built = self._made(entries)
        return self._built.for_cycle()

    def _made(self, entries: Sequence[Entry]) -> Candidates:
        return Candidates([entry[3] for entry in entries], self._width, [entry[4] for entry in entries])

    def _add(self, job: Job) -> list[Entry]:
        """The job's entries, known as its own (its order set by now)."""
        assert self._order is not None
        entries = self._entries_of(job, victim_units([job], self._order))
        if entries:
            self._by_job[id(job)] = entries
        return entries

    def _entries_of(self, job: Job, units: Sequence[Unit]) -> list[Entry]:
        order = self._order
        assert order is not None
        return [(order(u), job.order, i, u, unit_piece(u, self._width)) for i, u in enumerate(units)]

    def _touched(self, jobs: Iterable[Job]) -> dict[int, list[Entry]]:
        """The kept jobs this cycle touched whose units are not those kept, made again."""
        redone: dict[int, list[Entry]] = {}
        for job in jobs:
            kept = self._by_job.get(id(job))
            if kept is None:  # no task of it runs, and none starts running inside a cycle
                continue
            assert self._order is not None
            units = victim_units([job], self._order)
            if not _same(units, [entry[3] for entry in kept]):
                redone[id(job)] = self._entries_of(job, units)
        return redone

    def _patched(self, redone: dict[int, list[Entry]]) -> list[Entry]:
        assert self._entries is not None
        entries = [entry for entry in self._entries if id(entry[3].job) not in redone]
        for fresh in redone.values():
            for entry in fresh:
                bisect.insort(entries, entry, key=_keys)
        return entries


def _keys(entry: Entry) -> tuple[Any, int, int]:
    return entry[:3]


def _same(units: Sequence[Unit], kept: Sequence[Unit]) -> bool:
    return len(units) == len(kept) and all(
        a.surplus == b.surplus and len(a.tasks) == len(b.tasks) and all(map(_is, a.tasks, b.tasks))
        for a, b in zip(units, kept, strict=True)
    )


def _is(a: object, b: object) -> bool:
    return a is b
