"""Who goes next: job order inside a queue, and queue order level by level down the tree.

Queue order (as KAI's proportion plugin): not over fair share first; starved (would stay
within deserved with the job) first; higher queue priority; queues that would use a
resource they have no allocatable share of last; smaller dominant-resource share with the
job, then without it; smaller allocatable share; older queue.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kai_ray.core.cluster import EPS, ClusterState, FloatArray, Job, Task
from kai_ray.core.fairshare import FairShares

__all__ = [
    "JobQueues",
    "QueueRank",
    "ShareRows",
    "TieBreak",
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


def dominant_share(amount: Sequence[float], allocatable: Sequence[float], total: Sequence[float]) -> float:
    """max over resources of amount / allocatable share (over the total where that is 0)."""
    share = 0.0
    for r in range(3):
        if amount[r] <= EPS:
            continue
        base = allocatable[r] if allocatable[r] > EPS else total[r]
        share = max(share, amount[r] / base if base > EPS else float("inf"))
    return share


class TieBreak:
    """The last criteria, reached only when every key before them ties: smaller
    allocatable share (a partial order: smaller in one resource, larger in none), then
    the older queue. Kept out of the key tuple so ranking stays plain tuple comparison."""

    __slots__ = ("allocatable", "created")

    def __init__(self, allocatable: Sequence[float], created: int) -> None:
        self.allocatable = allocatable
        self.created = created

    def __lt__(self, other: TieBreak) -> bool:
        mine, theirs = self.allocatable, other.allocatable
        if mine != theirs:
            if all(a <= b for a, b in zip(mine, theirs, strict=True)):
                return True
            if all(b <= a for a, b in zip(mine, theirs, strict=True)):
                return False
        return self.created < other.created


# Sortable rank of a queue for its next job (smaller goes first).
QueueRank = tuple[tuple[bool, bool, int, bool, float, float], TieBreak]


@dataclass(frozen=True, slots=True)
class ShareRows:
    """Fair shares as plain floats: ranking runs once per job and tiny numpy calls cost
    more than the arithmetic."""

    deserved: list[list[float]]
    fair_share: list[list[float]]
    allocatable: list[list[float]]
    total: list[float]

    @staticmethod
    def of(shares: FairShares, total: FloatArray) -> ShareRows:
        return ShareRows(
            shares.deserved.tolist(), shares.fair_share.tolist(), shares.allocatable.tolist(), total.tolist()
        )


def queue_rank(state: ClusterState, rows: ShareRows, q: int, job_amount: Sequence[float]) -> QueueRank:
    allocated = state.usage.allocated[q]
    allocatable, fair, deserved = rows.allocatable[q], rows.fair_share[q], rows.deserved[q]
    a0, a1, a2 = allocated
    with_job = [a0 + job_amount[0], a1 + job_amount[1], a2 + job_amount[2]]
    over = a0 > fair[0] + EPS and a1 > fair[1] + EPS and a2 > fair[2] + EPS
    starved = (
        with_job[0] <= deserved[0] + EPS
        and with_job[1] <= deserved[1] + EPS
        and with_job[2] <= deserved[2] + EPS
    )
    zero_share = (
        (allocatable[0] <= EPS and with_job[0] > EPS)
        or (allocatable[1] <= EPS and with_job[1] > EPS)
        or (allocatable[2] <= EPS and with_job[2] > EPS)
    )
    share_with = share_without = 0.0
    for r in (0, 1, 2):
        base = allocatable[r] if allocatable[r] > EPS else rows.total[r]
        if base <= EPS:
            base = 1e-300  # a resource nobody has: any use of it ranks last
        if with_job[r] > EPS and with_job[r] / base > share_with:
            share_with = with_job[r] / base
        if allocated[r] > EPS and allocated[r] / base > share_without:
            share_without = allocated[r] / base
    key = (over, not starved, -state.tree.priority[q], zero_share, share_with, share_without)
    return key, TieBreak(allocatable, q)


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
        forget: Callable[[Job], None] | None = None,
    ) -> None:
        self.state = state
        self.rank = rank
        self.forget = forget
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
        """The job was tried (its tasks may have changed): rank its queue again."""
        if self.forget is not None:
            self.forget(job)
        self.refresh(job.queue)
