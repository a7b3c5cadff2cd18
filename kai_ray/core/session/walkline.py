"""Allocate's line as the solver's simulation walks it (solver._allocate_over), kept
small: every waiting job heads its queue in turn, but only the job being placed and
its victims act. The others matter only through how their queue ranks while they head
it, and a queue ranks alike with any of a run of consecutive jobs that ask for the same
(no two queues ever tie: a queue's rank ends with its own index), so it hands out the
whole run before any other queue gets a turn. A run therefore walks as one entry.

(A policy whose queue ranks tie would see a run walk as one entry where allocate would
alternate tied queues entry by entry; the default policy's ranks end with the queue.)

The runs are made once per cycle, from the jobs waiting then, and reused while few jobs
change: a job the cycle touched (placed, evicted, or tried) is left out of its run and
walks as an entry of its own, as it is now. Past some hundreds of such jobs the runs
are made again (a run's front the cycle placed is passed once, _merge's `starts`, so the
runs are made again for the entries of their own that pile up, not for those).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from kai_ray.core.state.jobs import Job
from kai_ray.core.state.statement import Statement

__all__ = ["WalkLine"]

Entry = tuple[Any, ...]  # (*job key, job.order, job), as line_entries makes them
# Touched jobs past which the runs are made again (at 64, 31 remakes took about a tenth
# of a 1,000-job reclaim).
REMAKE_AFTER = 512


class WalkLine:
    def __init__(
        self,
        jobs: Iterable[Job],
        job_key: Callable[[Job], tuple[object, ...]],
        asks: Callable[[Job], list[float]],
    ) -> None:
        self.job_key = job_key
        self.asks = asks
        self.left_out: set[int] = set()  # ids of the jobs touched when the runs were made
        # The lines without acting jobs (lines()), as of `_seen` changed tasks of `_stmt`:
        # the ids of the touched jobs, per queue those that wait, and per queue its line.
        self._stmt: Statement | None = None
        self._seen = 0
        self._skip: set[int] = set()
        self._own: dict[int, dict[int, Entry]] = {}
        self._lines: dict[int, list[Entry]] = {}
        self._starts: dict[int, int] = {}  # per run, its first entries skipped (_merge)
        lines: dict[int, list[Entry]] = {}
        for job in jobs:
            lines.setdefault(job.queue, []).append((*job_key(job), job.order, job))
        # Per leaf queue, its runs: consecutive entries (in line) whose jobs ask alike.
        self.runs: dict[int, list[list[Entry]]] = {}
        for q, line in lines.items():
            line.sort()
            runs: list[list[Entry]] = []
            last: object = None
            for entry in line:
                ask = tuple(asks(entry[-1]))
                if runs and ask == last:
                    runs[-1].append(entry)
                else:
                    runs.append([entry])
                    last = ask
            self.runs[q] = runs

    @classmethod
    def made(cls, touched: set[Job], **kwargs: Any) -> WalkLine:
        line = cls(**kwargs)
        line.left_out = {id(j) for j in touched}
        return line

    def stale(self, touched: set[Job]) -> bool:
        return len(touched) - len(self.left_out) > REMAKE_AFTER

    def lines(
        self, stmt: Statement, acting: list[Job], waiting: Callable[[Job], bool]
    ) -> dict[int, list[Entry]]:
        """Per leaf queue, the line to walk: each run as one entry (its first job that
        still waits untouched), the touched jobs that wait as they are now, and the
        acting jobs; in line order. The caller may consume the lists.

        A search plays many scenarios, and a reclaim after a large allocate one search
        per reclaimer, over a cycle that touched thousands of jobs: the lines without
        the acting jobs are kept, and only the queues of the jobs the statement changed
        since (its changed_tasks) are made again, and the acting jobs' queues."""
        self._catch_up(stmt, waiting)
        out = {q: list(line) for q, line in self._lines.items()}
        if not acting:
            return out
        acting_ids = {id(j) for j in acting}
        mine: dict[int, list[Entry]] = {}
        for job in acting:
            mine.setdefault(job.queue, []).append((*self.job_key(job), job.order, job))
        for q, entries in mine.items():
            own = [e for e in self._own.get(q, {}).values() if id(e[-1]) not in acting_ids] + entries
            own.sort(key=lambda e: e[:-1])
            line = _merge(self.runs.get(q, []), own, self._skip, self._starts, acting_ids)
            if line:
                out[q] = line
            else:
                out.pop(q, None)
        return out

    def _catch_up(self, stmt: Statement, waiting: Callable[[Job], bool]) -> None:
        """The lines with no job acting, brought up to the statement: every job it
        touched leaves its run (`_skip`), and walks as an entry of its own while it waits
        (`_own`, per queue). A job is touched only where one of its tasks changes, and
        whether it waits and its key change only so: the tasks the statement changed
        since the last call (undone ones included) name every job to look at again."""
        changed = stmt.changed_tasks
        if self._stmt is not stmt:
            self._stmt, self._seen = stmt, len(changed)
            jobs: Iterable[Job] = stmt.touched_jobs
            self._skip, self._own, self._lines, self._starts = set(), {}, {}, {}
            dirty = set(self.runs)
        else:
            if self._seen == len(changed):
                return
            jobs = {id(t.job): t.job for t in changed[self._seen :]}.values()
            self._seen = len(changed)
            dirty = set()
        for job in jobs:
            self._skip.add(id(job))
            own = self._own.setdefault(job.queue, {})
            own.pop(id(job), None)
            if waiting(job):
                own[id(job)] = (*self.job_key(job), job.order, job)
            dirty.add(job.queue)
        for q in dirty:
            entries = sorted(self._own.get(q, {}).values(), key=lambda e: e[:-1])
            line = _merge(self.runs.get(q, []), entries, self._skip, self._starts)
            if line:
                self._lines[q] = line
            else:
                self._lines.pop(q, None)


def _merge(
    runs: list[list[Entry]],
    own: list[Entry],
    skip: set[int],
    starts: dict[int, int],
    also: set[int] | frozenset[int] = frozenset(),
) -> list[Entry]:
    """The runs, each cut where an entry of `own` falls inside it, each piece as its
    first entry not skipped (in `skip` or `also`; none: the piece is gone), merged with
    `own` in line order. `starts`: per run (by id), how many of its first entries are
    in `skip`, which only grows: a run whose front the cycle placed is not walked again."""
    out: list[Entry] = []
    keys = [e[:-1] for e in own]
    for run in runs:
        lo, hi = run[0][:-1], run[-1][:-1]
        cut_from, cut_to = bisect.bisect_left(keys, lo), bisect.bisect_right(keys, hi)
        first = starts.get(id(run), 0)
        while first < len(run) and id(run[first][-1]) in skip:
            first += 1
        starts[id(run)] = first
        start = 0
        for k in range(cut_from, cut_to):
            end = bisect.bisect_left(run, keys[k], key=lambda e: e[:-1])
            _first_alive(run, max(start, first), end, skip, also, out)
            start = end
        _first_alive(run, max(start, first), len(run), skip, also, out)
    out.extend(own)
    out.sort(key=lambda e: e[:-1])
    return out


def _first_alive(
    run: list[Entry], start: int, end: int, skip: set[int], also: set[int] | frozenset[int], out: list[Entry]
) -> None:
    for i in range(start, end):
        job_id = id(run[i][-1])
        if job_id not in skip and job_id not in also:
            out.append(run[i])
            return
