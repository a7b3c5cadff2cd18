"""Who goes next: job order inside a queue, and queue order level by level down the tree.

Queue order (as KAI's proportion plugin): not over fair share first; starved (would stay
within deserved with the job) first; higher queue priority; queues that would use a
resource they have no allocatable share of last; smaller dominant-resource share with the
job, then without it; smaller allocatable share; older queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kai_ray.core.cluster import EPS, ClusterState, FloatArray, Job, Task
from kai_ray.core.fairshare import FairShares

__all__ = [
    "JobQueues",
    "QueueRank",
    "dominant_share",
    "job_order_key",
    "queue_rank",
    "tasks_to_allocate",
]


def job_order_key(job: Job) -> tuple[int, bool, float, int]:
    """Higher priority first; jobs short of their gang before jobs asking for surplus; older."""
    satisfied = job.active() >= job.gang
    return (-job.info.priority, satisfied, job.info.created_at, job.order)


def tasks_to_allocate(job: Job) -> list[Task]:
    """The gang's missing tasks, or the next surplus task of an elastic job already whole."""
    pending = job.pending()
    need = job.gang - job.active()
    return pending[:need] if need > 0 else pending[:1]


def dominant_share(amount: FloatArray, allocatable: FloatArray, total: FloatArray) -> float:
    """max over resources of amount / allocatable share (over the total where that is 0)."""
    share = 0.0
    for r in range(3):
        if amount[r] <= EPS:
            continue
        base = allocatable[r] if allocatable[r] > EPS else total[r]
        share = max(share, amount[r] / base if base > EPS else float("inf"))
    return share


@dataclass(frozen=True, slots=True)
class QueueRank:
    """Sortable rank of a queue for its next job (smaller goes first)."""

    key: tuple[bool, bool, int, bool, float, float]
    allocatable: tuple[float, float, float]
    created: int

    def __lt__(self, other: QueueRank) -> bool:
        if self.key != other.key:
            return self.key < other.key
        mine, theirs = self.allocatable, other.allocatable
        if mine != theirs:
            # A partial order: smaller in one resource and no larger in any.
            if all(a <= b for a, b in zip(mine, theirs, strict=True)):
                return True
            if all(b <= a for a, b in zip(mine, theirs, strict=True)):
                return False
        return self.created < other.created


def queue_rank(state: ClusterState, shares: FairShares, total: FloatArray, q: int, job_amount: FloatArray) -> QueueRank:
    allocated = state.usage.allocated[q]
    allocatable = shares.allocatable[q]
    with_job = allocated + job_amount
    over = bool((allocated > shares.fair_share[q] + EPS).all())
    starved = bool((with_job <= shares.deserved[q] + EPS).all())
    zero_share = bool(((allocatable <= EPS) & (with_job > EPS)).any())
    key = (
        over,
        not starved,
        -state.tree.priority[q],
        zero_share,
        dominant_share(with_job, allocatable, total),
        dominant_share(allocated, allocatable, total),
    )
    return QueueRank(key, (float(allocatable[0]), float(allocatable[1]), float(allocatable[2])), q)


class JobQueues:
    """Pending jobs by leaf queue, handed out one at a time in queue order, level by level.

    Each inner queue keeps a heap of its children ranked by their next job; taking or
    placing a job re-ranks only the path from its leaf to the top (lazy heap entries:
    an entry is live while it carries its queue's current version).
    """

    def __init__(
        self,
        state: ClusterState,
        rank: Callable[[int, Job], QueueRank],
        jobs: Iterable[Job],
    ) -> None:
        self.state = state
        self.rank = rank
        tree = state.tree
        self.waiting: dict[int, deque[Job]] = {}
        for job in sorted(jobs, key=job_order_key):
            self.waiting.setdefault(job.queue, deque()).append(job)
        self.heaps: dict[int, list[tuple[QueueRank, int, int, int]]] = {}
        self.version = [0] * len(tree)
        self.head: dict[int, Job] = {}
        self._tick = 0
        # Rank bottom-up: deepest queues first so inner queues see their children.
        for q in sorted(self.waiting, key=lambda q: -len(tree.ancestors[q])):
            self.refresh(q)

    def refresh(self, leaf: int) -> None:
        """Re-rank `leaf` and its ancestors after its jobs or usage changed."""
        for q in self.state.tree.ancestors[leaf]:
            self.version[q] += 1
            job = self._head_of(q)
            if job is None:
                self.head.pop(q, None)
                continue
            self.head[q] = job
            self._tick += 1
            entry = (self.rank(q, job), self._tick, q, self.version[q])
            heapq.heappush(self.heaps.setdefault(self.state.tree.parent[q], []), entry)

    def _head_of(self, q: int) -> Job | None:
        if q in self.waiting:
            jobs = self.waiting[q]
            return jobs[0] if jobs else None
        top = self._top(q)
        return None if top is None else self.head.get(top)

    def _top(self, parent: int) -> int | None:
        heap = self.heaps.get(parent)
        while heap:
            _, _, q, version = heap[0]
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
        return self.waiting[q].popleft()

    def done(self, job: Job) -> None:
        self.refresh(job.queue)
