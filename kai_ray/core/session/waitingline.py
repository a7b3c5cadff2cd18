"""The jobs waiting at the start of a cycle, in line: what allocate starts from.

Per leaf queue, the jobs with pending tasks as the snapshot has them, in the policy's job
order (entries `(*job key, job.order, job)`, kept sorted), and allocate's SureToFail for
them (their search keys, grouped). A cycle builds one from its state; the cycle cache
(cache.py) keeps one between cycles and adds or removes only the jobs that came or
went, so that a steady cycle neither keys nor sorts a thousand waiting jobs again. The
evicting actions' lines (their incomplete gangs, keyed per action) take a job one cycle
after it came (`begin_cycle`; the cycle it came in takes it as `new`): where little
waits, most jobs are placed in the cycle they come and are never keyed for them.

Why that is the same line: a job's order key and search key are read from the job alone
(its info, its tasks' states, its order), and a job the cache keeps is exactly as the
snapshot made it. The line therefore holds only while the cycle has changed nothing:
`CycleContext.waiting_line` hands it out then, and builds a fresh one otherwise. Orders
must keep their comparisons: a cache that numbers its jobs afresh builds the line again.
The policy's job key must be a function of the job (the contract: `Policy`, policy.py).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kai_ray.core.session.failedsearches import FailedSearches
from kai_ray.core.session.jobqueues import JobQueues, line_entries
from kai_ray.core.session.suretofail import SureToFail
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job

__all__ = ["WaitingLine"]


class WaitingLine:
    def __init__(
        self, jobs: Iterable[Job], job_key: Callable[[Job], Any], is_capped: Callable[[Job], bool]
    ) -> None:
        """`jobs`: those with pending tasks, in snapshot order."""
        self.job_key, self.is_capped = job_key, is_capped
        self.lines = line_entries(jobs, job_key)
        self._entry: dict[int, tuple[Any, ...]] = {}  # id(job) -> its entry
        for line in self.lines.values():
            for entry in line:
                self._entry[id(entry[-1])] = entry
        self._names: dict[int, tuple[str, ...]] = {}  # per leaf, its jobs' names in line
        self._sure: SureToFail | None = None  # made when first asked for, then kept
        # The jobs whose gang is incomplete (what the actions that evict walk), in line,
        # and per such action their search keys, grouped: made when first asked for.
        self._gangs: dict[int, list[tuple[Any, ...]]] | None = None
        self._gang_keys: dict[str, SureToFail] = {}
        # Incomplete gangs not in those yet: most are placed in the cycle they come and
        # leave with the next patch, never keyed for the actions that evict. Those that
        # came with the patch being made (`_arriving`) are this cycle's `_new` once it
        # begins, and join the kept lines as the next one begins, if still in line.
        self._arriving: dict[int, Job] = {}
        self._new: dict[int, Job] = {}

    def __len__(self) -> int:
        return len(self._entry)

    def __contains__(self, job: Job) -> bool:
        return id(job) in self._entry

    # ------------------------------------------------------------ kept between cycles

    def add(self, job: Job) -> None:
        """A job with pending tasks came (its order set among the others')."""
        entry = (*self.job_key(job), job.order, job)
        self._entry[id(job)] = entry
        line = self.lines.get(job.queue)
        if line is None:
            self.lines[job.queue] = [entry]
        else:
            line.insert(bisect.bisect_right(line, entry), entry)
        self._names.pop(job.queue, None)
        if self._sure is not None:
            self._sure.add(job)
        if self._gangs is not None:
            self._arriving[id(job)] = job

    def remove(self, job: Job) -> None:
        """A job in line went (finished, changed, or no longer pending)."""
        entry = self._entry.pop(id(job))
        line = self.lines[job.queue]
        at = bisect.bisect_left(line, entry)
        assert line[at] is entry, "a job's entry is where its key puts it"
        del line[at]
        if not line:
            del self.lines[job.queue]
        self._names.pop(job.queue, None)
        if self._sure is not None:
            self._sure.tried(job)
        if self._arriving.pop(id(job), None) is not None or self._new.pop(id(job), None) is not None:
            return  # not among the incomplete gangs yet
        if self._gangs is not None:
            line = self._gangs[job.queue]
            del line[bisect.bisect_left(line, entry)]
            if not line:
                del self._gangs[job.queue]
            for keys in self._gang_keys.values():
                keys.tried(job)

    # ------------------------------------------------------------ what a cycle takes

    def job_queues(
        self, state: ClusterState, rank: Callable[[int, Job], Any], forget: Callable[[Job], None]
    ) -> JobQueues:
        """The line to take jobs from (copies: the line itself stays as it is)."""
        lines = {q: line.copy() for q, line in self.lines.items()}
        return JobQueues(state, rank, lines, self.job_key, forget)

    def sure_to_fail(self, failed: FailedSearches) -> SureToFail:
        """Allocate's SureToFail for the whole line, starting with `failed` (kept, forked)."""
        if self._sure is None:
            jobs = [entry[-1] for line in self.lines.values() for entry in line]
            self._sure = self.sure_to_fail_of(jobs, FailedSearches())
        return self._sure.fork(failed)

    def sure_to_fail_of(self, jobs: Iterable[Job], failed: FailedSearches) -> SureToFail:
        """Allocate's SureToFail for these jobs of the line, starting with `failed`."""
        return SureToFail(jobs, failed, "allocate", True, self.is_capped)

    def begin_cycle(self) -> None:
        """As a cycle begins, before it changes any job: the incomplete gangs new to the
        last cycle that are still in line join the kept lines, keyed as the snapshot
        has them; those that came with this cycle's patch are its `new` ones."""
        for job in self._new.values():
            entry = self._entry[id(job)]
            assert self._gangs is not None, "a gang waits to join lines that are made"
            line = self._gangs.setdefault(job.queue, [])
            line.insert(bisect.bisect_right(line, entry), entry)
            for keys in self._gang_keys.values():
                keys.add(job)
        self._new, self._arriving = self._arriving, {}

    def new(self) -> list[Job]:
        """The incomplete gangs in line that came with this cycle's patch: not in the
        kept lines (gang_lines, gang_keys) this cycle."""
        return list(self._new.values())

    def gang_lines(self) -> dict[int, list[tuple[Any, ...]]]:
        """Per leaf queue, the entries of the jobs whose gang is incomplete, in line (the
        line's own lists: copy before taking from them)."""
        if self._gangs is None:
            self._gangs = {}
            for q, line in self.lines.items():
                gangs = list(line)
                if gangs:
                    self._gangs[q] = gangs
        return self._gangs

    def gang_keys(self, action: str) -> SureToFail:
        """The incomplete gangs in line, grouped by their search key in `action` (the
        line's own: fork before counting failures with it)."""
        keys = self._gang_keys.get(action)
        if keys is None:
            jobs = [entry[-1] for line in self.gang_lines().values() for entry in line]
            keys = self._gang_keys[action] = SureToFail(jobs, FailedSearches(), action)
        return keys

    def entry_of(self, job: Job) -> tuple[Any, ...] | None:
        return self._entry.get(id(job))

    def queue_order(self, state: ClusterState, touched: set[Job]) -> dict[str, tuple[str, ...]]:
        """Per leaf queue, its jobs still pending at the end of the cycle in the order
        allocate would serve them next. A queue none of whose jobs the cycle touched is
        as the line has it; in the others, the touched jobs are keyed again (a cycle
        never makes a task pending, so no job outside the line can join)."""
        tree = state.tree
        changed: dict[int, list[Job]] = {}
        for job in touched:
            if id(job) in self._entry:
                changed.setdefault(job.queue, []).append(job)
        order: dict[str, tuple[str, ...]] = {}
        for q, name in enumerate(tree.names):
            if not tree.is_leaf[q]:
                continue
            line = self.lines.get(q, ())
            if q not in changed:
                names = self._names.get(q)
                if names is None:
                    names = self._names[q] = tuple(entry[-1].info.name for entry in line)
                order[name] = names
                continue
            order[name] = tuple(entry[-1].info.name for entry in self._line_again(line, changed[q]))
        return order

    def _line_again(self, line: Sequence[tuple[Any, ...]], touched: list[Job]) -> list[tuple[Any, ...]]:
        """A queue's line with the jobs the cycle touched keyed again: the others keep
        their entries, in the order they had (nothing of theirs changed); those still
        pending go where their key puts them now (ties: the snapshot's order)."""
        gone = {id(job) for job in touched}
        entries = [entry for entry in line if id(entry[-1]) not in gone]
        for job in touched:
            if job.pending_count:
                entry = (*self.job_key(job), job.order, job)
                entries.insert(bisect.bisect_right(entries, entry), entry)
        return entries
