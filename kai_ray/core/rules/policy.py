"""Policy: the rules the actions consult, through a small fixed set of typed hooks.

The actions (allocate.py, evictions.py, victims.py) are algorithms and never import this
module: they receive a `Policy` in the cycle context, so a rule changes here, not there.
A hook keeps the contract written on `Policy`: the cycle's shortcuts and the cycle cache
rely on it.

Orderings:
- job order inside a queue: higher priority; then, as KAI's elastic plugin, jobs short of
  their gang, then jobs exactly at it, then jobs beyond it; older;
- queue order (as KAI's proportion plugin), level by level: not over fair share first;
  starved (would stay within deserved with the job) first; higher queue priority; queues
  that would use a resource they have no allocatable share of last; smaller dominant-
  resource share with the job, then without it; smaller allocatable share; older queue;
- victim order: lowest priority first, then elastic surplus (last task first), then
  youngest (KAI's victim queue: its job order reversed, an elastic job giving a task at
  a time);
- the order queues give victims in (victim_queue_rank): queue order reversed, each
  queue's dominant share taken with its next victims gone, as KAI's victim queue.

Eligibility:
- who may be a victim at all (preemptible jobs);
- whom a job may preempt (its own queue, strictly lower priority) and reclaim from (other
  queues);
- min runtime: how long a running gang is protected (never its elastic surplus);
- reclaim: whether a queue may reclaim at all (within its fair share with the job),
  which victim it may take from another queue (KAI's strategies), and the bounds its
  path must keep once the victims are gone;
- preemption delay: how long a job must still wait for new nodes before it may evict
  others (counted from when it last started waiting; preemptiondelay.py applies it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kai_ray.core.model.snapshot import TaskStatus
from kai_ray.core.rules.fairshare import FairShares
from kai_ray.core.rules.hooks import NO_SHARE_BASE, ReclaimSides, ShareRows
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task, Unit
from kai_ray.core.state.nodes import EPS, FloatArray

if TYPE_CHECKING:
    from kai_ray.core.state.typedusage import TypedUsage

__all__ = [
    "DEFAULT_POLICY",
    "Policy",
    "QueueRank",
    "TieBreak",
    "allocate_count",
    "dominant_share",
    "job_order_key",
    "may_be_victim",
    "may_preempt",
    "may_reclaim",
    "may_reclaim_from",
    "min_runtime_protects",
    "preemption_delay_left",
    "queue_rank",
    "reclaim_allows",
    "reclaim_keeps_bounds",
    "tasks_to_allocate",
    "victim_order_key",
    "waiting_since",
]


def job_order_key(job: Job) -> tuple[int, int, float, int]:
    """Higher priority first; then jobs short of their gang, then jobs exactly at it, then
    jobs beyond it (KAI's elastic plugin: an elastic job goes back in line after each
    surplus task, so elastic jobs of a queue share what is free); older first."""
    info, active = job.info, job.active_count
    if info.subgroups:  # short while any subgroup is below its minimum (Job.is_whole)
        gang = info.gang_size
        elastic = 0 if not job.is_whole() else (1 if active == gang else 2)
    else:
        gang = info.min_member if info.min_member > 0 else len(job.tasks)  # job.gang, inlined: hot
        elastic = 0 if active < gang else (1 if active == gang else 2)
    return (-info.priority, elastic, info.created_at, job.order)


def allocate_count(job: Job) -> int:
    """How many tasks the job's next step asks for: the gang's missing tasks, or the next
    surplus task of an elastic job already whole (fewer when fewer are pending)."""
    if job.is_whole():
        return min(job.pending_count, 1)
    return job.missing_count()


def tasks_to_allocate(job: Job) -> list[Task]:
    """The tasks of the job's next step (see allocate_count; Job.next_step)."""
    return job.next_step()


def dominant_share(amount: Sequence[float], allocatable: Sequence[float], total: Sequence[float]) -> float:
    """max over resources of amount / allocatable share; a resource with no allocatable
    share counts amount x 1000, as KAI's (hooks.NO_SHARE_BASE; `total` is not needed)."""
    share = 0.0
    for r in range(3):
        if amount[r] <= EPS:
            continue
        base = allocatable[r] if allocatable[r] > EPS else NO_SHARE_BASE
        share = max(share, amount[r] / base)
    return share


class TieBreak:
    """The last criteria, reached only when every key before them ties: smaller
    allocatable share (a partial order: smaller in one resource, larger in none), then
    the older queue. Kept out of the key tuple so ranking stays plain tuple comparison.
    Both depend on the two queues alone for as long as their fair shares stand: each
    pair's answer is kept with the shares (ShareRows.tie_order), since heaps of queues
    ask the same few pairs again and again."""

    __slots__ = ("created", "rows")

    def __init__(self, rows: ShareRows, created: int) -> None:
        self.rows = rows
        self.created = created

    def __lt__(self, other: TieBreak) -> bool:
        rows, mine, theirs = self.rows, self.created, other.created
        if rows is not other.rows:
            return _ranks_first(rows.allocatable[mine], other.rows.allocatable[theirs], mine, theirs)
        known = rows.tie_order.get((mine, theirs))
        if known is None:
            allocatable = rows.allocatable
            known = _ranks_first(allocatable[mine], allocatable[theirs], mine, theirs)
            rows.tie_order[mine, theirs] = known
        return known


def _ranks_first(mine: Sequence[float], theirs: Sequence[float], created: int, other: int) -> bool:
    if mine != theirs:
        if all(a <= b for a, b in zip(mine, theirs, strict=True)):
            return True
        if all(b <= a for a, b in zip(mine, theirs, strict=True)):
            return False
    return created < other


# Sortable rank of a queue for its next job (smaller goes first). Flat, so that heaps
# compare plain numbers element by element and reach the TieBreak only on a full tie.
QueueRank = tuple[bool, bool, int, bool, float, float, TieBreak]


def queue_rank(state: ClusterState, rows: ShareRows, q: int, job_amount: Sequence[float]) -> QueueRank:
    # Runs for every job tried (twice in a two-level tree): plain float arithmetic.
    typed = state.usage.typed
    if typed is not None:
        return _typed_queue_rank(state, rows, typed, q, job_amount)
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
        TieBreak(rows, q),
    )


def _typed_queue_rank(
    state: ClusterState, rows: ShareRows, typed: TypedUsage, q: int, job_amount: Sequence[float]
) -> QueueRank:
    """queue_rank where queues name GPU types (docs/gpu-types.md): each named type a
    resource of its own in place of the plain gpu total. `job_amount` is [gpu, cpu,
    memory] and, where given, the type column its GPUs count on (typedqueues.rank_column);
    a job of any type counts them on the type where its queue stands lowest."""
    _, a1, a2 = state.usage.allocated[q]
    j0 = job_amount[0]
    w1, w2 = a1 + job_amount[1], a2 + job_amount[2]
    fair, deserved, allocatable = rows.fair_share[q], rows.deserved[q], rows.allocatable[q]
    _, b1, b2 = rows.share_base[q]
    # Asked for every job tried: the thresholds come with EPS added (rank_rows), the
    # types are walked by index and compared in place (a zip of the rows, enumerate or
    # max() each cost more than the comparisons themselves).
    held, (over_at, due_at, base) = typed.allocated[q], typed.rank_rows[q]
    col = int(job_amount[3]) if len(job_amount) > 3 else -1
    if j0 > EPS and col < 0:  # any type: the one where its queue stands lowest (first on a tie)
        col, lowest = 0, (held[0] + j0) / base[0]
        for c in range(1, len(held)):
            x = (held[c] + j0) / base[c]
            if x < lowest:
                col, lowest = c, x
    over = a1 > fair[1] + EPS and a2 > fair[2] + EPS
    starved = w1 <= deserved[1] + EPS and w2 <= deserved[2] + EPS
    zero_share = (allocatable[1] <= EPS and w1 > EPS) or (allocatable[2] <= EPS and w2 > EPS)
    share_with = w1 / b1 if w1 > EPS else 0.0
    x = w2 / b2 if w2 > EPS else 0.0
    if x > share_with:
        share_with = x
    share_without = a1 / b1 if a1 > EPS else 0.0
    x = a2 / b2 if a2 > EPS else 0.0
    if x > share_without:
        share_without = x
    # One walk over the few types with what the queue holds; the job's GPUs then go on
    # its column alone. They only add (j0 >= 0): that column's held share is below its
    # share with them, and its deserved check is implied by theirs.
    most = 0.0  # the largest held share of a type: in both dominant shares
    c = 0
    for h in held:
        if over and h <= over_at[c]:
            over = False
        if starved and h > due_at[c]:
            starved = False
        if h > EPS:
            x = h / base[c]
            if x > most:
                most = x
        c += 1  # noqa: SIM113 (enumerate costs more here: see above)
    if most > share_without:
        share_without = most
    if most > share_with:
        share_with = most
    if col >= 0:
        w = held[col] + j0
        if starved and w > due_at[col]:
            starved = False
        if w > EPS:
            x = w / base[col]
            if x > share_with:
                share_with = x
    return (
        over,
        not starved,
        -state.tree.priority[q],
        zero_share,
        share_with,
        share_without,
        TieBreak(rows, q),
    )


def victim_queue_rank(state: ClusterState, rows: ShareRows, q: int, victim: Sequence[float]) -> QueueRank:
    """A queue's rank in the order queues give victims (reversed: the largest gives first),
    as KAI's victim queue ranks it: its queue order, with its dominant share taken as if
    its next victim were gone already (KAI counts the victims a queue is to give as gone
    when it compares shares, and nothing else of them)."""
    base = queue_rank(state, rows, q, (0.0, 0.0, 0.0))
    if not any(v > EPS for v in victim) or state.usage.typed is not None:
        return base  # with GPU types, a victim's GPUs are of a type not known here
    a = state.usage.allocated[q]
    b = rows.share_base[q]
    left = [max(0.0, a[r] - victim[r]) for r in range(3)]
    share = max(left[r] / b[r] if left[r] > EPS else 0.0 for r in range(3))
    return (*base[:4], share, *base[5:])


def victim_order_key(u: Unit) -> tuple[int, bool, float, int, int]:
    info = u.job.info
    return (info.priority, not u.surplus, -info.created_at, -u.job.order, -u.tasks[0].index)


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


def reclaim_may_take_from(s: ReclaimSides) -> bool:
    """KAI's filter on reclaim's candidates, by the two sides as the search begins: a
    reclaimer that would go over its side's deserved quota takes only from a side over
    its allocatable share (MaintainFairShare); one within it takes from a side over its
    deserved quota in a resource the job asks for, or exactly at it in every such one."""
    if any(a > d + EPS for a, d in zip(s.my_after, s.my_deserved, strict=True)):
        return any(a > c + EPS for a, c in zip(s.their_allocated, s.their_allocatable, strict=True))
    asks = [r for r, x in enumerate(s.asked) if x > EPS] if s.asked else [0, 1, 2]
    under = False
    for r in asks:
        if s.their_allocated[r] > s.their_deserved[r] + EPS:
            return True
        if s.their_allocated[r] < s.their_deserved[r] - EPS:
            under = True
    return not under


# ---------------------------------------------------------------- eligibility


def may_be_victim(job: Job) -> bool:
    """Only preemptible jobs are ever evicted or moved to make room for another."""
    return job.info.preemptible


def may_preempt(preemptor: Job, victim: Job) -> bool:
    """Preempt stays inside one queue and takes only strictly lower priority."""
    return victim.queue == preemptor.queue and victim.info.priority < preemptor.info.priority


def may_reclaim_from(reclaimer: Job, victim: Job) -> bool:
    """Reclaim takes from other queues only (inside a queue, preempt decides)."""
    return victim.queue != reclaimer.queue


def min_runtime_protects(unit: Unit, min_runtime: float, now: float) -> bool:
    """A gang that has run for less than its min runtime may not be taken; its elastic
    surplus may (the job keeps running without it). Which min runtime applies (preempt:
    the victim's queue, inherited; reclaim: below the two queues' common ancestor) is read
    off the queue tree (queues.py)."""
    return not unit.surplus and now - unit.job.running_since() < min_runtime


def waiting_since(job: Job) -> float:
    """When the job last started waiting: the latest `since` of its pending tasks, which is
    their creation, or their return to pending after an eviction (as KAI counts a pending
    workload's age from the later of its creation and its last eviction, so a gang that
    ran, was evicted and waits again waits its delay again); its creation time when the
    snapshot holds no pending task of it."""
    pending = TaskStatus.PENDING
    return max((t.info.since for t in job.tasks if t.info.status is pending), default=job.info.created_at)


def preemption_delay_left(job: Job, delay: float, now: float) -> float:
    """Seconds the job must still wait for new nodes before it may evict others (0 or
    less: it may)."""
    return delay - (now - waiting_since(job))


def may_reclaim(state: ClusterState, shares: FairShares, job: Job, amount: FloatArray) -> bool:
    """The reclaimer's queue stays within its fair share with the job (non-preemptible
    jobs also within the deserved quota of non-preemptible work)."""
    q, usage = job.queue, state.usage
    if ((usage.allocated_row(q) + amount) > shares.fair_share[q] + EPS).any():
        return False
    np_after = np.array(usage.allocated_nonpreemptible[q]) + amount
    return job.info.preemptible or not (np_after > shares.deserved[q] + EPS).any()


def reclaim_keeps_bounds(
    state: ClusterState, shares: FairShares, job: Job, asked: FloatArray, gave: Mapping[int, FloatArray]
) -> bool:
    """KAI's bound on a reclaim, with its victims gone and the job placed: at every level
    of the reclaimer's path, its queue may end over its fair share only while it stays
    less saturated (held / fair share) than each sibling that gave victims, in each
    resource either of them involves; a non-preemptible job also keeps its queues'
    non-preemptible work within their deserved quota. `asked`: what the job's placed
    tasks count against its queue; `gave`: what each queue off the
    reclaimer's path lost to the victims. So a queue inside a department over its share
    may still take from its own sibling: the department's total is unchanged.
    """
    tree, usage = state.tree, state.usage
    path = tree.ancestors[job.queue]
    wants = frozenset(r for r in range(3) if asked[r] > EPS)
    for q in path:
        mine = usage.allocated[q]
        for s, freed in gave.items():
            if tree.parent[s] != tree.parent[q]:
                continue
            theirs, my_fair, their_fair = usage.allocated[s], shares.fair_share[q], shares.fair_share[s]
            for r in wants | {r for r in range(3) if freed[r] > EPS}:
                if _more_saturated(mine[r], float(my_fair[r]), theirs[r], float(their_fair[r])):
                    return False
        nonpreemptible = np.array(usage.allocated_nonpreemptible[q])
        if not job.info.preemptible and (nonpreemptible > shares.deserved[q] + EPS).any():
            return False
    return True


def _more_saturated(mine: float, my_fair: float, theirs: float, their_fair: float) -> bool:
    """The reclaimer, over its fair share, would be at least as saturated as the sibling
    (KAI's saturation rule; two unlimited shares compare as equal and pass)."""
    if np.isinf(my_fair) and np.isinf(their_fair):
        return False
    ratio = _saturation(mine, my_fair)
    return ratio > 1 + EPS and their_fair > EPS and ratio >= _saturation(theirs, their_fair) - EPS


def _saturation(held: float, fair: float) -> float:
    if fair <= EPS:
        return float(np.inf) if held > EPS else 0.0
    return 0.0 if np.isinf(fair) else held / fair


@dataclass(frozen=True, slots=True)
class Policy:
    """The hooks. Node scoring is configuration (binpack or spread, SchedulerConfig).

    The contract every hook keeps. A cycle skips searches whose outcome it knows, and
    the cycle cache (incremental/) keeps work from one cycle to the next; both rely on:

    - Search keys hold every input a hook reads. A search that failed is not run again
      in the action for a job with the same key (failedsearches.search_key), and the
      waiting line kept between cycles keeps its jobs' keys. The key holds what
      placement reads and, per action, what of the pending job the eligibility hooks
      read (failedsearches._VICTIM_INPUTS: preempt, its queue, priority and
      preemptibility; reclaim, its queue and preemptibility). A hook that reads more of
      the pending job (may_preempt, may_reclaim_from, may_reclaim,
      reclaim_keeps_bounds) needs it added there. An action also lists the candidates
      it may take once per those inputs (victimpool.ActionCandidates.taken_by).
      preemption_delay_left reads the job's waiting time, which no key holds: it only
      ever holds back a search that would succeed, and such a search is never recorded
      as failed (preemptiondelay.py).
    - Job keys are functions of the job. `job_order` reads the job alone: its info, its
      tasks' statuses, its order; never the time, the queues' usage or other jobs. The
      cache keeps the waiting line sorted by these keys and keys again only the jobs
      that came or went. The same holds for `victim_order` (the unit alone: its job and
      tasks) and `may_be_victim` (the job alone): the cache keeps the candidate victims
      in victim order between cycles (incremental/candidates.py).

    A hook that breaks either makes the cycle decide differently from one that runs
    every search (SchedulerConfig.skip_failed_searches=False), and the cache decide
    differently from the full rebuild, with no error of its own. With
    KAI_RAY_CHECK_INCREMENTAL set (the test suite sets it) every cycle a backend runs
    is decided both ways, and a difference raises IncrementalMismatch
    (kai_ray/control/cycles.py).
    """

    job_order: Callable[[Job], tuple[object, ...]] = job_order_key
    queue_rank: Callable[[ClusterState, ShareRows, int, Sequence[float]], QueueRank] = queue_rank
    victim_order: Callable[[Unit], tuple[object, ...]] = victim_order_key
    victim_queue_rank: Callable[[ClusterState, ShareRows, int, Sequence[float]], QueueRank] = (
        victim_queue_rank
    )
    may_be_victim: Callable[[Job], bool] = may_be_victim
    may_preempt: Callable[[Job, Job], bool] = may_preempt
    may_reclaim_from: Callable[[Job, Job], bool] = may_reclaim_from
    min_runtime_protects: Callable[[Unit, float, float], bool] = min_runtime_protects
    may_reclaim: Callable[[ClusterState, FairShares, Job, FloatArray], bool] = may_reclaim
    reclaim_allows: Callable[[ReclaimSides], bool] = reclaim_allows
    reclaim_may_take_from: Callable[[ReclaimSides], bool] = reclaim_may_take_from
    reclaim_keeps_bounds: Callable[
        [ClusterState, FairShares, Job, FloatArray, Mapping[int, FloatArray]], bool
    ] = reclaim_keeps_bounds
    preemption_delay_left: Callable[[Job, float, float], float] = preemption_delay_left


DEFAULT_POLICY = Policy()
