"""The actions that take capacity back: consolidation, reclaim, preempt, stale gangs.

Each action walks the pending jobs in queue order, decides which running work may be
taken (its policy: a victim filter), and hands the search to victims.free_room_for,
which works inside the Statement so a failed search leaves no trace.
"""

from __future__ import annotations

import numpy as np

from kai_ray.core.allocate import ShapeKey
from kai_ray.core.capacity import capacity_problem, describe_amount, format_resource
from kai_ray.core.cluster import EPS, Job, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.hooks import ReclaimSides
from kai_ray.core.jobqueues import JobQueues
from kai_ray.core.model import TaskStatus
from kai_ray.core.victims import Allowed, Reason, Unit, evict_unit, free_room_for, victim_units
from kai_ray.core.words import count

__all__ = ["EVICTION_ACTIONS", "consolidate", "preempt", "reclaim", "stale_gang_eviction"]


def _waiting_gangs(ctx: CycleContext) -> JobQueues:
    """Jobs whose gang is still incomplete, in queue order."""
    jobs = [j for j in ctx.state.jobs if j.active_count < j.gang and j.pending()]
    return ctx.job_queues(jobs)


def _missing(job: Job) -> list[Task]:
    return job.pending()[: job.gang - job.active()]


def _running_since(job: Job) -> float:
    return min((t.since for t in job.tasks if t.status is TaskStatus.RUNNING), default=0.0)


def _protected(ctx: CycleContext, unit: Unit, min_runtime: float) -> bool:
    """Min runtime protects a gang, not its elastic surplus."""
    return not unit.surplus and ctx.now - _running_since(unit.job) < min_runtime


class _Searches:
    """What one eviction action knows across its pending jobs: the victim units (built
    once; a unit evicted on the way is skipped as no longer live) and the searches that
    failed since the last success, so an equivalent job is not searched again."""

    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        self._units: list[Unit] | None = None
        self.failed: set[tuple[object, ...]] = set()

    @property
    def units(self) -> list[Unit]:
        if self._units is None:  # only when some job waits: most cycles have none
            self._units = victim_units(
                [j for j in self.ctx.state.jobs if j.info.preemptible], self.ctx.policy.victim_order
            )
        return self._units

    def key(self, job: Job) -> tuple[object, ...]:
        info = job.info
        shapes = tuple(id(t.demand) for t in _missing(job))
        return (
            job.queue,
            info.priority,
            info.preemptible,
            shapes,
            job.selector,
            info.topology,
        )

    def run(
        self, ctx: CycleContext, job: Job, victims: list[Unit], allowed: Allowed, action: str, reason: Reason
    ) -> bool:
        key = self.key(job)
        if key in self.failed:
            return False
        if _search(ctx, job, victims, allowed, action, reason):
            self.failed.clear()  # capacity moved: earlier failures may succeed now
            return True
        self.failed.add(key)
        return False


def _search(
    ctx: CycleContext, job: Job, victims: list[Unit], allowed: Allowed, action: str, reason: Reason
) -> bool:
    gang = _missing(job)
    if len(gang) < job.gang - job.active() or not gang:
        return False
    if capacity_problem(ctx.state, ctx.shares, job, ctx.amount(gang)):
        return False
    if not free_room_for(ctx, gang, victims, allowed, action, reason):
        return False
    if not job.pending():
        ctx.reasons.pop(job.name, None)
    return True


def _unprotected(ctx: CycleContext, min_runtime: float) -> Allowed:
    return lambda unit: not _protected(ctx, unit, min_runtime)


def _always(reason: str) -> Reason:
    return lambda unit: reason


# ---------------------------------------------------------------- preempt


def preempt(ctx: CycleContext) -> None:
    """Inside one queue: lower-priority preemptible work makes room for a higher one."""
    order = _waiting_gangs(ctx)
    searches = _Searches(ctx)
    while (job := order.next_job()) is not None:
        queue, priority = job.queue, job.info.priority
        tree = ctx.state.tree
        min_runtime = tree.preempt_min_runtime[queue]
        victims = [u for u in searches.units if u.job.queue == queue and u.job.info.priority < priority]
        reason = f"preempted by {job.name} in {tree.names[queue]}"
        ctx.reasons.setdefault(
            job.name,
            f"no free room, and no lower-priority preemptible job in queue {tree.names[queue]} "
            "can make room for it",
        )
        searches.run(ctx, job, victims, _unprotected(ctx, min_runtime), "preempt", _always(reason))
        order.done(job)


# ---------------------------------------------------------------- reclaim


def reclaim(ctx: CycleContext) -> None:
    """Between queues: a queue under its fair share takes back from queues over theirs."""
    order = _waiting_gangs(ctx)
    searches = _Searches(ctx)
    while (job := order.next_job()) is not None:
        _reclaim_for(ctx, job, searches)
        order.done(job)


def _reclaim_for(ctx: CycleContext, job: Job, searches: _Searches) -> bool:
    state, shares, tree = ctx.state, ctx.shares, ctx.state.tree
    gang = _missing(job)
    if not gang:
        return False
    amount = ctx.amount(gang)
    # My side is judged as it stood before this job's tasks were placed.
    mine_before = {q: state.usage.allocated_row(q) for q in tree.ancestors[job.queue]}
    if not _may_reclaim(ctx, job, amount):
        ctx.reasons.setdefault(job.name, _over_share_reason(ctx, job, amount))
        return False
    victims = _reverse_queue_order(ctx, [u for u in searches.units if u.job.queue != job.queue])

    def allowed(u: Unit) -> bool:
        if _protected(ctx, u, tree.reclaim_min_runtime_for(job.queue, u.job.queue)):
            return False
        lca = tree.lowest_common_ancestor(job.queue, u.job.queue)
        mine, theirs = tree.child_toward(lca, job.queue), tree.child_toward(lca, u.job.queue)
        return _may_take(ctx, mine, theirs, mine_before[mine] + amount)

    def reason(u: Unit) -> str:
        q = job.queue
        return (
            f"reclaimed by queue {tree.names[q]} (fair share "
            f"{describe_amount(shares.fair_share[q])}, allocated {describe_amount(mine_before[q])})"
        )

    checkpoint = ctx.stmt.checkpoint()
    if not searches.run(ctx, job, victims, allowed, "reclaim", reason):
        return False
    if not _within_boundaries(ctx, job):
        ctx.stmt.rollback(checkpoint)
        return False
    return True


def _reverse_queue_order(ctx: CycleContext, units: list[Unit]) -> list[Unit]:
    """Victims queue by queue, the queue that would be served last giving first (as KAI
    lists reclaim victims), keeping the victim order inside each queue."""
    tree, rows = ctx.state.tree, ctx.rows
    assert rows is not None
    ranks: dict[int, object] = {}

    def rank(q: int) -> object:
        if q not in ranks:
            ranks[q] = ctx.policy.queue_rank(ctx.state, rows, q, (0.0, 0.0, 0.0))
        return ranks[q]

    def path_rank(q: int) -> tuple[object, ...]:
        return tuple(rank(a) for a in reversed(tree.ancestors[q]))

    queues = sorted({u.job.queue for u in units}, key=path_rank, reverse=True)
    position = {q: i for i, q in enumerate(queues)}
    return sorted(units, key=lambda u: position[u.job.queue])


def _may_reclaim(ctx: CycleContext, job: Job, amount: np.ndarray) -> bool:
    """The reclaimer's queue stays within its fair share with the job (non-preemptible
    jobs also within the deserved quota of non-preemptible work)."""
    q, usage, shares = job.queue, ctx.state.usage, ctx.shares
    if ((usage.allocated_row(q) + amount) > shares.fair_share[q] + EPS).any():
        return False
    np_after = np.array(usage.allocated_nonpreemptible[q]) + amount
    return job.info.preemptible or not (np_after > shares.deserved[q] + EPS).any()


def _within_boundaries(ctx: CycleContext, job: Job) -> bool:
    """After the victims left and the job is placed, every queue on the reclaimer's path
    stays within its fair share (the only top-level queue excepted: it is the cluster)."""
    tree, usage, shares = ctx.state.tree, ctx.state.usage, ctx.shares
    single_top = len(tree.roots) == 1
    for q in tree.ancestors[job.queue]:
        if not (single_top and tree.parent[q] < 0) and (
            (usage.allocated_row(q) > shares.fair_share[q] + EPS).any()
        ):
            return False
        nonpreemptible = np.array(usage.allocated_nonpreemptible[q])
        if not job.info.preemptible and (nonpreemptible > shares.deserved[q] + EPS).any():
            return False
    return True


def _over_share_reason(ctx: CycleContext, job: Job, amount: np.ndarray) -> str:
    """Names the resource that would go over (the first of gpu, cpu, memory)."""
    q = job.queue
    cannot = f"no free room, and queue {ctx.state.tree.names[q]} cannot reclaim"
    held = ctx.state.usage.allocated[q]
    share = ctx.shares.fair_share[q]
    over = [r for r in range(3) if held[r] + amount[r] > share[r] + EPS]
    if not over:  # what failed was the deserved quota of non-preemptible work
        return f"{cannot}: its non-preemptible jobs would go over its deserved quota"
    r = over[0]
    return (
        f"{cannot}: it would go over its fair share of {format_resource(r, float(share[r]))} "
        f"(it holds {format_resource(r, held[r])}, this job asks for {format_resource(r, float(amount[r]))})"
    )


def _may_take(ctx: CycleContext, mine: int, theirs: int, my_after: np.ndarray) -> bool:
    shares = ctx.shares
    return ctx.policy.reclaim_allows(
        ReclaimSides(
            my_after=my_after.tolist(),
            my_deserved=shares.deserved[mine].tolist(),
            their_allocated=list(ctx.state.usage.allocated[theirs]),
            their_deserved=shares.deserved[theirs].tolist(),
            their_allocatable=shares.allocatable[theirs].tolist(),
        )
    )


# ---------------------------------------------------------------- consolidation


def consolidate(ctx: CycleContext) -> None:
    """Move preemptible jobs to free room for a gang that fits in the total free
    capacity but nowhere at once; commit only when every moved job is placed again."""
    if "spread" in (ctx.config.gpu_placement, ctx.config.cpu_placement):
        return  # consolidation packs; it would undo a spread placement
    order = _waiting_gangs(ctx)
    tried: set[ShapeKey] = set()
    while (job := order.next_job()) is not None:
        gang = _missing(job)
        if gang and job.info.preemptible and _fits_in_total(ctx, job, gang):
            key = (tuple(id(t.demand) for t in gang), job.selector)
            if key not in tried and not _consolidate_for(ctx, job, gang):
                tried.add(key)
        order.done(job)


def _fits_in_total(ctx: CycleContext, job: Job, gang: list[Task]) -> bool:
    nodes = ctx.state.nodes
    mask = ctx.placer.base_mask(job)
    need = sum((t.demand for t in gang), start=np.zeros(nodes.idle.shape[1]))
    need[0] += sum(t.fraction_on(nodes, 0) for t in gang if t.fraction_request) if len(nodes) else 0
    free = nodes.idle[mask].sum(axis=0)
    return bool((free + EPS >= need).all()) and not capacity_problem(
        ctx.state, ctx.shares, job, ctx.amount(gang)
    )


def _consolidate_for(ctx: CycleContext, job: Job, gang: list[Task]) -> bool:
    stmt = ctx.stmt
    start = stmt.checkpoint()
    preemptible = [j for j in ctx.state.jobs if j.info.preemptible and j is not job]
    candidates = victim_units(preemptible, ctx.policy.victim_order)
    candidates = candidates[: ctx.config.max_consolidation_preemptees]
    reason = f"moved to defragment for {job.name}"
    moved: list[Unit] = []
    for unit in candidates:
        evict_unit(ctx, unit, "consolidation", reason)
        moved.append(unit)
        attempt = stmt.checkpoint()
        if ctx.placer.place_gang(stmt, job, gang, "consolidation") and _replace(ctx, moved):
            stmt.pipeline_job(job)
            ctx.reasons.pop(job.name, None)
            return True
        stmt.rollback(attempt)
    stmt.rollback(start)
    return False


def _replace(ctx: CycleContext, moved: list[Unit]) -> bool:
    """Place every moved task again, elsewhere, as pipelined (it starts once it stopped)."""
    for unit in moved:
        old = {t.node for t in unit.tasks}
        mask = ctx.placer.job_mask(unit.job).copy()
        mask[list(old)] = False
        for t in unit.tasks:
            spot = ctx.placer.spot(t, mask, allow_pipeline=True)
            if spot is None:
                return False
            ctx.stmt.place(t, spot[0], spot[1], True, "consolidation")
    return True


# ---------------------------------------------------------------- stale gangs


def stale_gang_eviction(ctx: CycleContext) -> None:
    """A gang that kept fewer than minMember active tasks for the grace period is evicted
    whole: holding part of a gang blocks others and cannot make progress."""
    grace = ctx.config.stale_gang_grace_period
    if grace < 0:
        return
    for job in ctx.state.jobs:
        active = job.active()
        if active == 0 or active >= job.gang:
            continue
        if any(t.status is TaskStatus.SUCCEEDED for t in job.tasks):
            continue
        since = _stale_since(ctx, job)
        if ctx.now - since < grace:
            continue
        reason = f"gang below minMember ({active} of {count(job.gang, 'task')}) for {ctx.now - since:g}s"
        for t in job.running():
            ctx.stmt.evict(t, "stalegangeviction", reason)


def _stale_since(ctx: CycleContext, job: Job) -> float:
    if job.info.stale_since is not None:
        return job.info.stale_since
    inactive = [t.since for t in job.tasks if not t.status.is_active]
    return max(inactive) if inactive else ctx.now


EVICTION_ACTIONS = {
    "consolidation": consolidate,
    "reclaim": reclaim,
    "preempt": preempt,
    "stalegangeviction": stale_gang_eviction,
}
