"""The allocate action: jobs in queue order, each gang placed whole or not at all, then
elastic surplus tasks one at a time. Tasks may land on capacity still being released
(Pipelined); a gang with a pipelined task waits as a whole."""

from __future__ import annotations

import functools

from kai_ray.core.actions.reservations import Reservations
from kai_ray.core.model.snapshot import Reason
from kai_ray.core.model.subgroups import tally
from kai_ray.core.model.words import agree, count
from kai_ray.core.rules.capacity import capacity_problem, capped
from kai_ray.core.rules.reasons import explain_unplaced, unmet_affinity
from kai_ray.core.session.allocateline import AllocateLine
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey, search_key
from kai_ray.core.state.jobs import Job, Task

__all__ = ["allocate", "allocate_gangs", "allocate_step"]


def allocate(ctx: CycleContext) -> None:
    # Capacity only shrinks during allocate, so a gang that did not fit fails the same way
    # for every job with the same placement inputs for the rest of the action.
    failed = ctx.failed_searches()
    # Reservations hold room for some jobs and not others (reservations.py): each job
    # takes its own step. The holds stay for the rest of the cycle.
    reservations = Reservations.made(ctx) if ctx.config.reserve_after_s > 0 else None
    if reservations is None:
        step = functools.partial(allocate_step, ctx, action="allocate", failed=failed)
    else:
        step = functools.partial(_step, ctx, failed=failed, reservations=reservations)
    line = AllocateLine(ctx, failed, step, each_job=reservations is not None)
    while (job := line.next_job()) is not None:
        placed = step(job)
        # An elastic job, whole, goes back in line for each surplus task it places.
        line.served(job, placed, again=placed and job.pending_count > 0)


def _step(ctx: CycleContext, job: Job, failed: FailedSearches, reservations: Reservations) -> bool:
    """Allocate's step, with the reservations lifted that this job may use."""
    lifted = reservations.lift(job)
    try:
        return allocate_step(ctx, job, "allocate", failed, reservations)
    finally:
        reservations.restore(lifted)


def allocate_gangs(ctx: CycleContext, jobs: list[Job]) -> None:
    """Allocate's step for the gang of each of these jobs, in queue order (no failures
    remembered: a few jobs, tried once)."""
    order = ctx.job_queues(jobs)
    while (job := order.next_job()) is not None:
        allocate_step(ctx, job, "allocate")
        order.done(job)


def allocate_step(
    ctx: CycleContext,
    job: Job,
    action: str,
    failed: FailedSearches | None = None,
    reservations: Reservations | None = None,
) -> bool:
    """One step for the job: its missing gang, all or nothing; or, once the gang is whole,
    one surplus task. True when something was placed."""
    pending = job.pending()
    if job.incomplete():
        ctx.stmt.set_reason(job.name, Reason("gang-incomplete", _incomplete_words(job, pending)))
        return False
    pipelined_before = ctx.stmt.pipelined
    if not job.is_whole():
        placed = job.missing()
        if not _place_gang(ctx, job, placed, action, failed, reservations):
            return False
    else:
        placed = _place_surplus(ctx, job, pending[:1], action)
        if not placed:
            return False
    if ctx.stmt.pipelined != pipelined_before:
        ctx.stmt.pipeline_job(job)
    if len(placed) == len(pending):
        ctx.stmt.clear_reason(job.name)
    return True


def _incomplete_words(job: Job, pending: list[Task]) -> str:
    """Which part of the gang too few tasks are left for (the gang, or its subgroups)."""
    if not job.info.subgroups:
        left = job.active() + len(pending)
        return (
            f"gang needs {count(job.gang, 'task')} but only {left} {agree(left, 'exists', 'exist')} "
            "(some failed or finished); it cannot start whole"
        )
    held, waiting = job.active_by_subgroup(), tally(t.info.subgroup for t in pending)
    lacking = [name for name, n in job.short().items() if n > waiting.get(name, 0)]
    parts = []
    for name in lacking:
        left = held.get(name, 0) + waiting.get(name, 0)
        least = count(job.info.subgroups[name], "task")
        parts.append(f"subgroup {name} needs {least} but only {left} {agree(left, 'exists', 'exist')}")
    return f"{'; '.join(parts)} (some failed or finished); the gang cannot start whole"


def _place_gang(
    ctx: CycleContext,
    job: Job,
    gang: list[Task],
    action: str,
    failed: FailedSearches | None,
    reservations: Reservations | None,
) -> bool:
    if capped(ctx.state, job):
        problem = capacity_problem(ctx.state, ctx.shares, job, ctx.capacity_amount(gang))
        if problem is not None:
            ctx.stmt.set_reason(job.name, problem)
            return False
    # Before the look-alikes' shared failures: this reason names the job's own task.
    unmet = unmet_affinity(ctx.placer, gang) if job.per_task else None
    if unmet is not None:
        ctx.stmt.set_reason(job.name, unmet)
        return False
    # Keyed only once some search failed: until then none is known to fail, and a line
    # that all fits keys no job (the key is the same after a failed try: rolled back).
    key = _search_key(job, gang, action, reservations) if failed is not None and failed.any_failed() else ()
    if failed is not None and key and failed.known(key):
        reason = failed.reason(key)
        assert reason is not None, "allocate remembers why each failed gang failed"
        mark = ctx.stmt.state_mark
        if failed.said_on(key) != mark:
            # Room only shrinks in allocate: the look-alike fails too, but the words read
            # the state (free room in figures), and the state moved since: said anew.
            reason = _why_unplaced(ctx, job, gang, action, reservations)
            failed.restate(key, reason, mark)
        ctx.stmt.set_reason(
            job.name, reason if reservations is None else reservations.reason_for(job, reason)
        )
        return False
    if ctx.placer.place_gang(ctx.stmt, job, gang, action):
        return True
    reason = _why_unplaced(ctx, job, gang, action, reservations)
    if failed is not None:
        key = key or _search_key(job, gang, action, reservations)
        failed.add(key, reason, said_on=ctx.stmt.state_mark)
    if reservations is not None:
        reason = reservations.reason_for(job, reason)  # a look-alike's reason does not name it
    ctx.stmt.set_reason(job.name, reason)
    return False


def _search_key(job: Job, gang: list[Task], action: str, reservations: Reservations | None) -> FailureKey:
    key = search_key(job, gang, action)
    return key if reservations is None else reservations.scoped(key)


def _why_unplaced(
    ctx: CycleContext, job: Job, gang: list[Task], action: str, reservations: Reservations | None
) -> Reason:
    """Why the gang found no room, in words read from the state as it is now."""
    reason = explain_unplaced(ctx.placer, gang)
    if job.info.subgroups:
        reason = _naming_the_subgroup(ctx, job, gang, action, reason)
    if reservations is not None:
        reason = reservations.blocking(job, gang, action) or reason
    return reason


def _naming_the_subgroup(
    ctx: CycleContext, job: Job, gang: list[Task], action: str, reason: Reason
) -> Reason:
    """The reason of a gang with subgroups that did not fit, naming the first subgroup
    (in task order) that does not fit beside the ones before it: each placed in turn,
    then all taken back. A reason about the job as a whole (its node selector) is kept."""
    if reason.code == "node-selector":
        return reason
    parts: dict[str, list[Task]] = {}
    for t in gang:
        parts.setdefault(t.info.subgroup, []).append(t)
    if len(parts) == 1:
        return Reason(reason.code, f"subgroup {next(iter(parts))}: {reason.text}")
    stmt = ctx.stmt
    start = stmt.checkpoint()
    for name, part in parts.items():
        if not ctx.placer.place_gang(stmt, job, part, action):
            why = explain_unplaced(ctx.placer, part)  # with the subgroups before it placed
            stmt.rollback(start)
            return Reason(why.code, f"subgroup {name} does not fit beside the rest of its gang: {why.text}")
    stmt.rollback(start)  # each fits in turn, not all at once (a topology domain): the gang's words
    return reason


def _place_surplus(ctx: CycleContext, job: Job, surplus: list[Task], action: str) -> list[Task]:
    placed: list[Task] = []
    for task in surplus:
        problem = capacity_problem(ctx.state, ctx.shares, job, ctx.capacity_amount([task]))
        if problem is not None:
            at = f"elastic job at {job.active()} of {count(len(job.tasks), 'task')}"
            ctx.stmt.set_reason(job.name, Reason(problem.code, f"{at}; {problem.text}"))
            break
        mask = ctx.placer.within_type_limits(job, [task], ctx.placer.job_mask(job))
        if not ctx.placer.place_all(ctx.stmt, [task], mask, action):
            why = explain_unplaced(ctx.placer, [task])
            ctx.stmt.set_reason(
                job.name, Reason(why.code, f"elastic job: no room for more tasks ({why.text})")
            )
            break
        placed.append(task)
    return placed
