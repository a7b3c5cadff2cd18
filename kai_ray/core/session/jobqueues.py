"""Pending jobs handed out one at a time in queue order, level by level down the tree.

A mechanism: the order itself comes from the policy (a job key and a queue rank)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any

from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job

__all__ = ["JobQueues", "line_entries"]

_LATE = 1 << 64  # above every job order: a job pushed back goes after the jobs of its key


def line_entries(jobs: Iterable[Job], job_key: Callable[[Job], Any]) -> dict[int, list[tuple[Any, ...]]]:
    """Per leaf queue, (*job key, job.order, job) for each job, in ascending order: ties
    between keys go to the job earlier in the snapshot, as a stable sort would."""
    lines: dict[int, list[tuple[Any, ...]]] = {}
    for job in jobs:
        entry = (*job_key(job), job.order, job)
        line = lines.get(job.queue)
        if line is None:
            lines[job.queue] = [entry]
        else:
            line.append(entry)
    for line in lines.values():
        line.sort()
    return lines


class JobQueues:
    """Pending jobs by leaf queue, handed out one at a time in queue order, level by level.

    Each inner queue keeps a heap of its children ranked by their next job; taking or
    placing a job re-ranks only the path from its leaf to the top (lazy heap entries:
    an entry is live while it carries its queue's current version).
    """

    def __init__(
        self,
        state: ClusterState,
        rank: Callable[[int, Job], Any],
        lines: dict[int, list[tuple[Any, ...]]],
        job_key: Callable[[Job], Any],
        forget: Callable[[Job], None] | None = None,
    ) -> None:
        """`lines`: per leaf queue, entries (*job key, job.order, job) in ascending order
        (line_entries makes them; a sorted list is a heap). JobQueues takes them over."""
        self.state = state
        self.rank = rank
        self.forget = forget
        self.job_key = job_key
        tree = state.tree
        # A job may come back in line (push_back): after every job of its key so far.
        self.waiting = lines
        self._arrival = _LATE
        # Per inner queue, its children as (*rank, tick, child, version): flat tuples.
        self.heaps: dict[int, list[tuple[Any, ...]]] = {}
        self.version = [0] * len(tree)
        self.head: dict[int, Job] = {}
        self._tick = 0
        # Rank bottom-up, each queue once: deepest first, so that an inner queue's head
        # (its best child's) is known; then by index, so that ranks that tie go the same
        # way however `lines` was built.
        ancestors = tree.ancestors
        queues = {q for leaf in self.waiting for q in ancestors[leaf]}
        for q in sorted(queues, key=lambda q: (-len(ancestors[q]), q)):
            self._enter(q)

    def _enter(self, q: int) -> None:
        job = self._head_of(q)
        if job is not None:
            self.head[q] = job
            self._tick += 1
            heap = self.heaps.setdefault(self.state.tree.parent[q], [])
            heapq.heappush(heap, (*self.rank(q, job), self._tick, q, self.version[q]))

    def refresh(self, leaf: int) -> None:
        """Re-rank `leaf` and its ancestors after its jobs or usage changed."""
        parent_of, version = self.state.tree.parent, self.version
        for q in self.state.tree.ancestors[leaf]:
            heap = self.heaps.setdefault(parent_of[q], [])
            # The queue just served is usually its parent's top entry: replace it in one
            # sift rather than push a new one and leave the old to be popped later.
            on_top = bool(heap) and heap[0][-2] == q and heap[0][-1] == version[q]
            version[q] += 1
            job = self._head_of(q)
            if job is None:
                self.head.pop(q, None)
                continue
            self.head[q] = job
            self._tick += 1
            entry = (*self.rank(q, job), self._tick, q, version[q])
            if on_top:
                heapq.heapreplace(heap, entry)
            else:
                heapq.heappush(heap, entry)

    def _head_of(self, q: int) -> Job | None:
        if q in self.waiting:
            jobs = self.waiting[q]
            job: Job | None = jobs[0][-1] if jobs else None
            return job
        top = self._top(q)
        return None if top is None else self.head.get(top)

    def _top(self, parent: int) -> int | None:
        heap = self.heaps.get(parent)
        while heap:
            top = heap[0]
            q: int = top[-2]
            version: int = top[-1]
            if version == self.version[q] and q in self.head:
                return q
            heapq.heappop(heap)
        return None

    def next_job(self) -> Job | None:
        """Take the next job to try, or None when every queue is drained. Call `done`
        with it once tried, so its queue is ranked again."""
        q = self._top(-1)
        while q is not None and q not in self.waiting:
            q = self._top(q)
        if q is None:
            return None
        job: Job = heapq.heappop(self.waiting[q])[-1]
        return job

    def take_run(self, job: Job, joins: Callable[[Job], bool]) -> list[Job]:
        """`job` was just taken and trying it changed nothing: the jobs its queue would
        hand out next, one after another, taken at once without ranking queues again:
        those that `joins` (trying them would change nothing either, and the queue ranks
        with them as with `job`), while its queue ranks strictly first among its siblings
        at every level (a tie goes to the sibling waiting longer, so it would not come
        next). The caller then calls `done` once, with `job`. `forget` is called for each
        job taken."""
        line = self.waiting.get(job.queue)
        if not line or not joins(line[0][-1]):
            return []
        if not all(self._strictly_first(q) for q in self.state.tree.ancestors[job.queue]):
            return []
        taken: list[Job] = []
        forget = self.forget
        while line and joins(line[0][-1]):
            other = heapq.heappop(line)[-1]
            taken.append(other)
            if forget is not None:
                forget(other)
        return taken

    def _strictly_first(self, q: int) -> bool:
        """Queue q's entry tops its parent's heap and ranks better than every other
        live one there (ticks aside)."""
        heap = self.heaps.get(self.state.tree.parent[q], [])
        if not heap or heap[0][-2] != q or heap[0][-1] != self.version[q]:
            return False
        rank = heap[0][:-3]
        version, head = self.version, self.head
        return all(
            rank < entry[:-3]
            for entry in heap[1:]
            if entry[-2] != q and entry[-1] == version[entry[-2]] and entry[-2] in head
        )

    def remaining(self) -> list[Job]:
        """The jobs still in line, in no particular order (and none of them taken)."""
        return [entry[-1] for heap in self.waiting.values() for entry in heap]

    def push_back(self, job: Job) -> None:
        """The job took a step and wants more (elastic surplus): back in line, by its key."""
        self._arrival += 1
        heapq.heappush(self.waiting[job.queue], (*self.job_key(job), self._arrival, job))
        self.done(job)

    def done(self, job: Job) -> None:
        """The job was tried (its tasks may have changed): rank its queue again."""
        if self.forget is not None:
            self.forget(job)
        self.refresh(job.queue)
