"""The policy's candidate victims kept from one cycle to the next, patched.

Reclaim and preempt search over every unit the policy lets be a victim, in victim order
(CycleContext.victim_candidates). With a few hundred running gangs, building them is a
pass over every running job (its units, its surplus) and a sort, each cycle, for a set
that changes by a few jobs at a time. The cycle cache keeps them instead, as the
snapshot has them, in victim order, and patches them as candidate jobs come and go.

Why that is the same list: a job's units are read from the job alone (its running
tasks, its surplus) and its victim order from the unit alone (the contract: `Policy`),
and a job the cache keeps is exactly as the snapshot made it. Ties in victim order go to
the earlier job, then the earlier unit of a job, as the stable sort of the full build
does: orders keep their comparisons between patches, and the cache forgets the list
whenever it numbers its jobs afresh.

A cycle takes them before it evicts anything (Statement.running_mark 0), and only when
it searches for victims: nothing is made or patched for a cycle that does not. It may
have placed tasks by then, which changes no task that runs but may change a job's
surplus (its active count): a job's units are settled in only from a cycle that has not
touched it, and the units of the jobs a cycle touched are made again for it, where they
differ in a patched copy. The full build stays the reference
(KAI_RAY_CHECK_INCREMENTAL; tests/core/test_incremental.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from kai_ray.core.session.candidates import Candidates, Piece, unit_piece, victim_units
from kai_ray.core.state.jobs import Job, Unit

if TYPE_CHECKING:
    from kai_ray.core.session.context import CycleContext

__all__ = ["KeptCandidates"]

Entry = tuple[Any, int, int, Unit]  # (victim order, job order, unit's place in its job, unit)
Order = Callable[[Unit], Any]


class KeptCandidates:
    """Kept in victim order: the units of the jobs settled in (`_entries`), and the
    jobs not settled in yet (`_came`). Work is done only when a cycle asks for them: a
    cycle that searches for no victim costs nothing here."""

    def __init__(self) -> None:
        self._entries: list[Entry] | None = None  # None: not made (or forgotten)
        self._by_job: dict[int, list[Entry]] = {}
        # Candidate jobs not settled in: came with a patch, or touched by every cycle
        # that asked since (a cycle's placements may change a job's surplus: its units
        # are read as the snapshot has it, in a cycle that has not touched it).
        self._came: dict[int, Job] = {}
        self._pieces: dict[int, Piece] = {}  # per settled unit, by id: its part of the arrays
        self._order: Order | None = None
        self._width = 0  # the arrays' columns
        self._built: Candidates | None = None  # the settled entries' Candidates, while they stand

    def forget(self) -> None:
        """The jobs were built or numbered afresh: made again when next asked for."""
        self._entries, self._built = None, None
        self._by_job.clear()
        self._came.clear()
        self._pieces.clear()

    def start(self, order: Order, width: int) -> None:
        """As a cycle begins: the policy's victim order and the arrays' columns."""
        if order is not self._order or width != self._width:
            self.forget()
            self._order, self._width = order, width

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
            self._pieces.pop(id(entry[3]), None)
        self._built = None

    def candidates(self, ctx: CycleContext) -> Candidates | None:
        """The candidates as CycleContext.victim_candidates would build them now; None once the cycle
        evicted."""
        if ctx.stmt.running_mark != 0:
            return None
        if self._entries is None:  # every candidate job waits to be settled in
            self._entries = []
            may_be_victim = ctx.policy.may_be_victim
            self._came = {id(j): j for j in ctx.state.jobs if j.active_count and may_be_victim(j)}
        touched = ctx.stmt.touched_jobs
        self._settle(touched)
        redone = self._touched(touched, ctx.policy.may_be_victim)
        if redone:
            return self._made(self._patched(redone), settled=False)
        if self._built is None:
            self._built = self._made(self._entries, settled=True)
        return self._built.for_cycle()

    def _settle(self, touched: set[Job]) -> None:
        """The jobs not settled in that this cycle has not touched: as the snapshot has them."""
        entries = self._entries
        assert entries is not None
        settled = [job for job in self._came.values() if job not in touched]
        if not settled:
            return
        for job in settled:
            del self._came[id(job)]
            fresh = self._entries_of(job, victim_units([job], self._victim_order()))
            if fresh:
                self._by_job[id(job)] = fresh
                entries.extend(fresh)
        entries.sort(key=_keys)  # sorted runs: one merge, in effect
        self._built = None

    def _victim_order(self) -> Order:
        assert self._order is not None
        return self._order

    def _made(self, entries: Sequence[Entry], settled: bool) -> Candidates:
        """`settled`: the entries are all settled units (their pieces are kept; a unit
        made for one cycle only is not, its id being its own only while it lives)."""
        pieces, width = self._pieces, self._width
        joined = []
        for entry in entries:
            u = entry[3]
            piece = pieces.get(id(u))
            if piece is None:
                piece = unit_piece(u, width)
                if settled:
                    pieces[id(u)] = piece
            joined.append(piece)
        return Candidates([entry[3] for entry in entries], width, joined)

    def _entries_of(self, job: Job, units: Sequence[Unit]) -> list[Entry]:
        order = self._victim_order()
        return [(order(u), job.order, i, u) for i, u in enumerate(units)]

    def _touched(self, jobs: Iterable[Job], may_be_victim: Callable[[Job], bool]) -> dict[int, list[Entry]]:
        """This cycle's units of the candidate jobs it touched where they are not those
        settled in (or none are): made again."""
        redone: dict[int, list[Entry]] = {}
        for job in jobs:
            kept = self._by_job.get(id(job))
            # A job none of whose tasks ran: a candidate only by what the cycle placed.
            if kept is None and id(job) not in self._came and not may_be_victim(job):
                continue
            units = victim_units([job], self._victim_order())
            if kept is None and not units:
                continue
            if kept is None or not _same(units, [entry[3] for entry in kept]):
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
