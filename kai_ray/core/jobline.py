"""The snapshot's job list as the cycle cache keeps it between cycles (incremental.py).

Per position of the last snapshot's list: its JobInfo, the entry built from it, the job's
place in line (`order`), and the job itself (None when invalid) twice over: once for
every job and once for jobs with pending tasks, so that the state's lists are one
C-level `filter` away. A new snapshot's list is applied as a JobDiff (jobdiff.py): the
kept runs are copied as slices, only new jobs are looked at.

Orders: only their comparison matters (ties between jobs broken by their place in the
snapshot), so they are spaced GAP apart, and a job new to the line takes a value
between its neighbours' without renumbering the others. When no value is left between
two neighbours, the line is built again (apply returns False).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kai_ray.core.cluster import Job
from kai_ray.core.jobdiff import JobDiff, Run, diff_jobs, splice
from kai_ray.core.model import JobInfo

__all__ = ["GAP", "Entry", "JobLine"]

GAP = 1 << 20  # between consecutive orders when the line is numbered afresh


@dataclass(slots=True)
class Entry:
    info: JobInfo  # what the job was built from
    job: Job | None  # None: invalid (its reason is in state.invalid)
    extended: frozenset[str]  # extended resources its tasks ask for


class JobLine:
    def __init__(self) -> None:
        self.infos: list[JobInfo] = []
        self.entries: list[Entry] = []
        self._ids: list[int] = []
        self._orders: list[int] = []
        self._jobs: list[Job | None] = []
        self._waiting: list[Job | None] = []

    def number(self, entries: Sequence[Entry]) -> None:
        """The line afresh, in this order; every job's order set."""
        self.entries = list(entries)
        self.infos = [e.info for e in self.entries]
        self._ids = [id(i) for i in self.infos]
        self._orders = [p * GAP for p in range(len(self.entries))]
        for e, order in zip(self.entries, self._orders, strict=True):
            if e.job is not None:
                e.job.order = order
        self._jobs = [e.job for e in self.entries]
        self._waiting = [j if j is not None and j.pending_count else None for j in self._jobs]

    def same(self, infos: Sequence[JobInfo]) -> bool:
        """The last list's jobs, in its order: the same objects or equal ones (a job built
        from an equal JobInfo is the same job)."""
        last = self.infos
        return len(infos) == len(last) and last == list(infos)

    def diff(self, infos: Sequence[JobInfo], known: dict[str, Entry]) -> JobDiff | None:
        def is_known(info: object) -> bool:
            entry = known.get(info.name)  # type: ignore[attr-defined]
            return entry is not None and entry.info is info

        return diff_jobs(self.infos, self._ids, infos, is_known)

    def apply(self, infos: Sequence[JobInfo], diff: JobDiff, made: dict[int, Entry]) -> bool:
        """The new list: `made` holds the entry of each new position. False: no order left
        between two neighbours (number the line afresh)."""
        orders = self._new_orders(diff.pieces)
        if orders is None:
            return False
        for position, entry in made.items():
            if entry.job is not None:
                entry.job.order = orders[position]
        pieces = diff.pieces
        # Kept runs keep the objects their jobs were built from (the new list may hold
        # equal ones there): infos, ids and entries stay one another's.
        self.infos = splice(self.infos, pieces, infos.__getitem__)
        self._ids = splice(self._ids, pieces, lambda p: id(infos[p]))
        self.entries = splice(self.entries, pieces, made.__getitem__)
        self._jobs = splice(self._jobs, pieces, lambda p: made[p].job)
        self._waiting = splice(self._waiting, pieces, lambda p: _if_waiting(made[p].job))
        self._orders = orders
        return True

    def jobs(self) -> list[Job]:
        return list(filter(None, self._jobs))

    def waiting(self) -> list[Job]:
        """The jobs with pending tasks as the snapshot has them."""
        return list(filter(None, self._waiting))

    def _new_orders(self, pieces: Sequence[Run | int]) -> list[int] | None:
        old = self._orders
        # Per piece, the order of the next kept run: the bound a new job stays below.
        uppers: list[int | None] = []
        upper: int | None = None
        for piece in reversed(pieces):
            uppers.append(upper)
            if isinstance(piece, Run):
                upper = old[piece.start]
        uppers.reverse()
        out: list[int] = []
        lower: int | None = None
        for piece, bound in zip(pieces, uppers, strict=True):
            if isinstance(piece, Run):
                out += old[piece.start : piece.start + piece.length]
                lower = out[-1]
                continue
            if lower is None:
                value = 0 if bound is None else bound - GAP
            elif bound is None:
                value = lower + GAP
            else:
                value = (lower + bound) // 2
                if value <= lower:
                    return None
            out.append(value)
            lower = value
        return out


def _if_waiting(job: Job | None) -> Job | None:
    return job if job is not None and job.pending_count else None
