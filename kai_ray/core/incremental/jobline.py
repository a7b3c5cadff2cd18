"""The snapshot's job list as the cycle cache keeps it between cycles (cache.py).

Per position of the last snapshot's list: its JobInfo, the entry built from it (with the
job, None when invalid) and the job's place in line (`order`). A new snapshot's list is
applied as a JobDiff (jobdiff.py), in place: the jobs gone are deleted, the new ones
inserted; nothing else is looked at.

Orders: only their comparison matters (ties between jobs broken by their place in the
snapshot), so they are spaced GAP apart, and a job new to the line takes a value
between its neighbours' without renumbering the others. When no value is left between
two neighbours, the line is built again (apply returns False).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kai_ray.core.incremental.jobdiff import JobDiff, Run, as_list, diff_jobs
from kai_ray.core.model.snapshot import JobInfo
from kai_ray.core.state.jobs import Job

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

    def number(self, entries: Sequence[Entry]) -> None:
        """The line afresh, in this order; every job's order set."""
        self.entries = list(entries)
        self.infos = [e.info for e in self.entries]
        self._ids = [id(i) for i in self.infos]
        self._orders = [p * GAP for p in range(len(self.entries))]
        for e, order in zip(self.entries, self._orders, strict=True):
            if e.job is not None:
                e.job.order = order

    def same(self, infos: Sequence[JobInfo]) -> bool:
        """The last list's jobs, in its order: the same objects or equal ones (a job built
        from an equal JobInfo is the same job)."""
        last = self.infos
        return len(infos) == len(last) and last == as_list(infos)

    def diff(self, infos: Sequence[JobInfo], known: dict[str, Entry]) -> JobDiff | None:
        def is_known(info: object) -> bool:
            entry = known.get(info.name)  # type: ignore[attr-defined]
            return entry is not None and entry.info is info

        return diff_jobs(self.infos, self._ids, infos, is_known)

    def apply(self, infos: Sequence[JobInfo], diff: JobDiff, made: dict[int, Entry]) -> bool:
        """The new list, edited in place (a few deletions and insertions move pointers;
        copying the lists would touch every job): `made` holds the entry of each new
        position, and its job's order is set. Kept runs keep the objects their jobs were
        built from (the new list may hold equal ones there). False: no order was left
        between two neighbours; the line is then half edited, to be numbered afresh."""
        lists = (self.infos, self.entries, self._ids, self._orders)
        for position in reversed(diff.removed):
            for values in lists:
                del values[position]
        orders = self._orders
        for p in diff.pieces:
            if isinstance(p, Run):
                continue
            order = _between(orders[p - 1] if p > 0 else None, orders[p] if p < len(orders) else None)
            if order is None:
                return False
            info, entry = infos[p], made[p]
            self.infos.insert(p, info)
            self.entries.insert(p, entry)
            self._ids.insert(p, id(info))
            orders.insert(p, order)
            if entry.job is not None:
                entry.job.order = order
        return True

    def jobs(self) -> list[Job]:
        return [e.job for e in self.entries if e.job is not None]

    def waiting(self) -> list[Job]:
        """The jobs with pending tasks as the snapshot has them."""
        return [e.job for e in self.entries if e.job is not None and e.job.pending_count]


def _between(lower: int | None, upper: int | None) -> int | None:
    """An order between two neighbours' (None: either end of the line), or None when
    none is left."""
    if lower is None:
        return 0 if upper is None else upper - GAP
    if upper is None:
        return lower + GAP
    value = (lower + upper) // 2
    return value if value > lower else None
