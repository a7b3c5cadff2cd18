"""The consolidation action: move preemptible jobs so that a gang that fits the cluster's
total free room, but nowhere at once, can start. Moves only: it commits when every moved
job is placed again (Releasing where it was, Pipelined where it goes)."""

from __future__ import annotations

from kai_ray.core.actions.preemptiondelay import HeldBack
from kai_ray.core.actions.scenarios import free_gpus
from kai_ray.core.actions.solver import solve
from kai_ray.core.actions.terms import Terms
from kai_ray.core.actions.victims import GivingOrder, Unit, victim_units
from kai_ray.core.rules.capacity import quota_problem
from kai_ray.core.rules.reasons import unmet_affinity
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey, Grounds, search_key
from kai_ray.core.session.gangwalk import GangWalk
from kai_ray.core.session.settling import each_waiting_gang
from kai_ray.core.state.gputypes import usable_victim
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS

__all__ = ["consolidate"]


def consolidate(ctx: CycleContext) -> None:
    """Move preemptible jobs to free room for a gang that fits in the total free
    capacity but nowhere at once; commit only when every moved job is placed again."""
    if "spread" in (ctx.config.gpu_placement, ctx.config.cpu_placement):
        return  # consolidation packs; it would undo a spread placement
    failed = ctx.failed_searches()
    held = HeldBack(ctx, "consolidation", failed)
    room = _TotalRoom(ctx, failed)
    step = lambda job: _step(ctx, job, failed, held, room)  # noqa: E731
    # A failed key: no search, no reason (see _step).
    each_waiting_gang(ctx, GangWalk("consolidation", failed, step, quiet=lambda key: True))


class _TotalRoom:
    """Whether a gang fits its nodes' free room taken together, by its placement inputs
    alone (its key in allocate's terms: the queue does not matter here), until jobs move."""

    def __init__(self, ctx: CycleContext, failed: FailedSearches) -> None:
        self.ctx, self.failed = ctx, failed
        self._fits: dict[FailureKey, bool] = {}
        self._clears = failed.clears

    def enough(self, job: Job, gang: list[Task]) -> bool:
        if self.failed.clears != self._clears:
            self._fits.clear()
            self._clears = self.failed.clears
        key = search_key(job, gang, "allocate")
        fits = self._fits.get(key)
        if fits is None:
            fits = self._fits[key] = _room_in_total(self.ctx, job, gang)
        return fits


def _step(ctx: CycleContext, job: Job, failed: FailedSearches, held: HeldBack, room: _TotalRoom) -> None:
    if job.incomplete():
        return  # too few tasks are left for its gang (or a subgroup's): it never starts part-way
    gang = job.next_step()  # as in reclaim and preempt
    if not gang:
        return
    # The key first: summing the free room over ten thousand nodes for each of a
    # thousand look-alike jobs would cost more than the rest of the action.
    key = search_key(job, gang, "consolidation")
    if failed.known(key):
        pass  # the same gang already found no moves (or no total room)
    elif not ctx.policy.may_be_victim(job) or unmet_affinity(ctx.placer, gang) is not None:
        failed.add(key, None, Grounds.NODES)  # never moved for: nothing to find, ever
    elif held.known(key) and (waits := held.waits(job)) is not None:
        ctx.stmt.set_reason(job.name, waits)  # a look-alike would move others: this one too
    elif not room.enough(job, gang):
        failed.add(key, None, Grounds.ROOM)  # room alone decided it: the same for look-alikes
    elif quota_problem(ctx.state, ctx.shares, job, ctx.capacity_amount(gang)) is not None:
        failed.add(key, None, Grounds.SHARE)  # non-preemptible work over quota: no victim helps
    else:
        start = ctx.stmt.checkpoint()
        if not _consolidate_for(ctx, job, gang):
            # Moves read the room and the candidates, never the queues' standings.
            failed.add(key, None, (Grounds.VERDICTS, ()))
        elif (waits := held.waits(job)) is not None:  # a move stops the moved job: wait first
            ctx.stmt.rollback(start)
            held.add(key)
            ctx.stmt.set_reason(job.name, waits)
        else:
            failed.clear()  # jobs moved: an earlier failure may succeed now


def _room_in_total(ctx: CycleContext, job: Job, gang: list[Task]) -> bool:
    """The gang's GPUs fit the free and releasing GPUs of the cluster taken together (KAI's
    check before it consolidates: GPUs alone, shared devices' free parts included, on
    every schedulable node; a CPU job always passes). Not only the job's own nodes: work
    moved off them frees room for it there and goes where the job may not (another GPU
    type, nodes outside its selector or affinity, nodes it does not tolerate)."""
    nodes = ctx.state.nodes
    need = float(sum(t.demand[0] for t in gang))
    need += sum(t.fraction_on(nodes, 0) for t in gang if t.fraction_request) if len(nodes) else 0.0
    free = float(free_gpus(ctx)[nodes.schedulable].sum())
    return free + EPS >= need


def _consolidate_for(ctx: CycleContext, job: Job, gang: list[Task]) -> bool:
    """KAI's solver (solver.py) with consolidation's terms: any preemptible job may be
    moved (the first max_consolidation_preemptees jobs in victim order), and a scenario
    holds only when every victim is placed again: moves, never evictions."""
    movable = [j for j in ctx.state.jobs if ctx.policy.may_be_victim(j) and j is not job]
    units = victim_units(movable, ctx.policy.victim_order)
    type_mask = ctx.placer.type_mask(job)
    if type_mask is not None:  # moving work off GPUs it cannot use frees nothing for it
        units = list(filter(usable_victim(type_mask), units))
    jobs: dict[int, None] = {}
    kept: list[Unit] = []
    for u in units:  # KAI counts jobs, not units
        if id(u.job) not in jobs and len(jobs) >= ctx.config.max_consolidation_preemptees:
            continue
        jobs[id(u.job)] = None
        kept.append(u)
    reason = f"moved to defragment for {job.name}"
    terms = Terms(
        action="consolidation",
        units=kept,
        allowed=lambda u: True,
        evict_reason=lambda u: reason,
        valid=lambda scenario: not scenario.stopped,
        giving=GivingOrder(ctx),  # KAI's victims queue: the queue that gives first, as for reclaim
    )
    if solve(ctx, job, gang, terms) is None:
        return False
    if not job.pending():
        ctx.stmt.clear_reason(job.name)
    return True
