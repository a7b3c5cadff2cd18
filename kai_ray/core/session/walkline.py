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
walks as an entry of its own, as it is now. Past a few dozen such jobs the runs are
made again.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from kai_ray.core.state.jobs import Job

__all__ = ["WalkLine"]

Entry = tuple[Any, ...]  # (*job key, job.order, job), as line_entries makes them
REMAKE_AFTER = 64  # touched jobs past which the runs are made again


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
        self._base: _Base | None = None  # the lines without acting jobs (lines())
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
        self,
        touched: set[Job],
        acting: list[Job],
        waiting: Callable[[Job], bool],
        state: Hashable,
    ) -> dict[int, list[Entry]]:
        """Per leaf queue, the line to walk: each run as one entry (its first job that
        still waits untouched), the touched jobs that wait as they are now, and the
        acting jobs; in line order. The caller may consume the lists.

        A search plays many scenarios over one state: the lines without the acting jobs
        are kept while the touched jobs and which of them wait stay the same, and only
        the acting jobs' queues are made again for each. `state` names which jobs wait
        (a Statement's state mark: equal marks, the same jobs waiting)."""
        key = (len(touched), state)
        base = self._base
        if base is None or base.key != key:
            base = self._base = _Base(key, self, touched, waiting)
        out = {q: list(line) for q, line in base.lines.items()}
        if not acting:
            return out
        acting_ids = {id(j) for j in acting}
        mine: dict[int, list[Entry]] = {}
        for job in acting:
            mine.setdefault(job.queue, []).append((*self.job_key(job), job.order, job))
        for q, entries in mine.items():
            own = [e for e in base.own.get(q, ()) if id(e[-1]) not in acting_ids] + entries
            own.sort(key=lambda e: e[:-1])
            line = _merge(self.runs.get(q, []), own, base.skip, acting_ids)
            if line:
                out[q] = line
            else:
                out.pop(q, None)
        return out


class _Base:
    """The lines with no job acting, for one set of touched jobs and which of them wait:
    each queue's touched jobs that wait (in line order) and the ids of all touched."""

    def __init__(
        self, key: Hashable, walk: WalkLine, touched: set[Job], waiting: Callable[[Job], bool]
    ) -> None:
        self.key = key
        self.skip = {id(j) for j in touched}
        self.own: dict[int, list[Entry]] = {}
        for job in touched:
            if waiting(job):
                self.own.setdefault(job.queue, []).append((*walk.job_key(job), job.order, job))
        for entries in self.own.values():
            entries.sort(key=lambda e: e[:-1])
        queues = walk.runs.keys() | self.own.keys()
        made = {q: _merge(walk.runs.get(q, []), self.own.get(q, []), self.skip) for q in queues}
        self.lines = {q: line for q, line in made.items() if line}


def _merge(
    runs: list[list[Entry]], own: list[Entry], skip: set[int], also: set[int] | frozenset[int] = frozenset()
) -> list[Entry]:
    """The runs, each cut where an entry of `own` falls inside it, each piece as its
    first entry not skipped (in `skip` or `also`; none: the piece is gone), merged with
    `own` in line order."""
    out: list[Entry] = []
    keys = [e[:-1] for e in own]
    for run in runs:
        lo, hi = run[0][:-1], run[-1][:-1]
        cut_from, cut_to = bisect.bisect_left(keys, lo), bisect.bisect_right(keys, hi)
        start = 0
        for k in range(cut_from, cut_to):
            end = bisect.bisect_left(run, keys[k], key=lambda e: e[:-1])
            _first_alive(run, start, end, skip, also, out)
            start = end
        _first_alive(run, start, len(run), skip, also, out)
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
