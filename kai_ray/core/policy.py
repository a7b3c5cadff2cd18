"""Policy: the rules the actions consult, through a small fixed set of typed hooks.

The actions (allocate.py, evictions.py, victims.py) are algorithms and never import this
module: they receive a `Policy` in the cycle context, so a rule changes here, not there.

- job order inside a queue: higher priority; jobs short of their gang before jobs asking
  for elastic surplus; older;
- queue order (as KAI's proportion plugin), level by level: not over fair share first;
  starved (would stay within deserved with the job) first; higher queue priority; queues
  that would use a resource they have no allocatable share of last; smaller dominant-
  resource share with the job, then without it; smaller allocatable share; older queue;
- victim order: elastic surplus first (last task first), lowest priority, youngest;
- reclaim: which victim a queue may take from another (KAI's strategies).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kai_ray.core.cluster import EPS, ClusterState, Job, Task
from kai_ray.core.hooks import ReclaimSides, ShareRows, Unit

__all__ = [
    "DEFAULT_POLICY",
    "Policy",
    "QueueRank",
    "TieBreak",
    "allocate_count",
    "dominant_share",
    "job_order_key",
    "queue_rank",
    "reclaim_allows",
    "tasks_to_allocate",
    "victim_order_key",
]


def job_order_key(job: Job) -> tuple[int, bool, float, int]:
    """Higher priority first; jobs short of their gang before jobs asking for surplus; older."""
    satisfied = job.active() >= job.gang
    return (-job.info.priority, satisfied, job.info.created_at, job.order)


def allocate_count(job: Job) -> int:
    """How many tasks the job's next step asks for: the gang's missing tasks, or the next
    surplus task of an elastic job already whole (fewer when fewer are pending)."""
    need = job.gang - job.active()
    return min(job.pending_count, need if need > 0 else 1)


def tasks_to_allocate(job: Job) -> list[Task]:
    """The tasks of the job's next step (see allocate_count)."""
    return job.pending()[: allocate_count(job)]


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


# Sortable rank of a queue for its next job (smaller goes first). Flat, so that heaps
# compare plain numbers element by element and reach the TieBreak only on a full tie.
QueueRank = tuple[bool, bool, int, bool, float, float, TieBreak]


def queue_rank(state: ClusterState, rows: ShareRows, q: int, job_amount: Sequence[float]) -> QueueRank:
    # Runs for every job tried (twice in a two-level tree): plain float arithmetic.
    a0, a1, a2 = state.usage.allocated[q]
    j0, j1, j2 = job_amount
    w0, w1, w2 = a0 + j0, a1 + j1, a2 + j2
    fair, deserved, allocatable = rows.fair_share[q], rows.deserved[q], rows.allocatable[q]
    b0, b1, b2 = rows.share_base[q]
    over = a0 > fair[0] + EPS and a1 > fair[1] + EPS and a2 > fair[2] + EPS
    starved = w0 <= deserved[0] + EPS and w1 <= deserved[1] + EPS and w2 <= deserved[2] + EPS
    zero_share = (
        (allocatable[0] <= EPS and w0 > EPS)
        or (allocatable[1] <= EPS and w1 > EPS)
        or (allocatable[2] <= EPS and w2 > EPS)
    )
    share_with = max(w0 / b0 if w0 > EPS else 0.0, w1 / b1 if w1 > EPS else 0.0, w2 / b2 if w2 > EPS else 0.0)
    share_without = max(
        a0 / b0 if a0 > EPS else 0.0, a1 / b1 if a1 > EPS else 0.0, a2 / b2 if a2 > EPS else 0.0
    )
    return (
        over,
        not starved,
        -state.tree.priority[q],
        zero_share,
        share_with,
        share_without,
        TieBreak(allocatable, q),
    )


def victim_order_key(u: Unit) -> tuple[bool, int, float, int, int]:
    info = u.job.info
    return (not u.surplus, info.priority, -info.created_at, -u.job.order, -u.tasks[0].index)


def reclaim_allows(s: ReclaimSides) -> bool:
    """KAI's reclaim strategies, for one more victim (either one suffices):
    MaintainFairShare: the victim's side is still over its allocatable share in some
    resource; GuaranteeDeservedQuota: the reclaimer's side stays within its deserved quota
    in every resource and the victim's side is over its deserved quota in some resource.
    A stable schedule stays stable: a side within its fair share (or deserved quota) is
    never a victim, and a reclaimer must end within its own."""
    if any(a > c + EPS for a, c in zip(s.their_allocated, s.their_allocatable, strict=True)):
        return True
    mine_within = all(a <= d + EPS for a, d in zip(s.my_after, s.my_deserved, strict=True))
    theirs_over = any(a > d + EPS for a, d in zip(s.their_allocated, s.their_deserved, strict=True))
    return mine_within and theirs_over


@dataclass(frozen=True, slots=True)
class Policy:
    """The hooks. Node scoring is configuration (binpack or spread, SchedulerConfig)."""

    job_order: Callable[[Job], tuple[object, ...]] = job_order_key
    queue_rank: Callable[[ClusterState, ShareRows, int, Sequence[float]], QueueRank] = queue_rank
    victim_order: Callable[[Unit], tuple[object, ...]] = victim_order_key
    reclaim_allows: Callable[[ReclaimSides], bool] = reclaim_allows


DEFAULT_POLICY = Policy()
