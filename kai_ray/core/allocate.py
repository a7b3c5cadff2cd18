"""The allocate action: jobs in queue order, each gang placed whole or not at all, then
elastic surplus tasks one at a time. Tasks may land on capacity still being released
(Pipelined); a gang with a pipelined task waits as a whole."""

from __future__ import annotations

import functools
from itertools import repeat

from kai_ray.core.capacity import capacity_problem, capped
from kai_ray.core.cluster import Job, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.failedsearches import FailedSearches, search_key
from kai_ray.core.jobqueues import JobQueues
from kai_ray.core.model import Reason
from kai_ray.core.reasons import explain_unplaced, unmet_affinity
from kai_ray.core.reservations import Reservations
from kai_ray.core.settling import SureToFail, every_key_fails
from kai_ray.core.subgroups import tally
from kai_ray.core.words import agree, count

__all__ = ["allocate", "allocate_gangs", "allocate_step"]


def allocate(ctx: CycleContext) -> None:
    line = ctx.waiting_line()
    order = line.job_queues(ctx.state, ctx.rank, ctx.forget)
    # Capacity only shrinks during allocate, so a gang that did not fit fails the same way
    # for every job with the same placement inputs for the rest of the action.
    failed = FailedSearches(ctx.config.skip_failed_searches)
    if ctx.config.reserve_after_s > 0:
        # Reservations hold room for some jobs and not others: each job is walked. The
        # holds stay for the rest of the cycle (the actions that evict see the room taken).
        ctx.reservations = Reservations(ctx)
        ctx.reservations.make()
        try:
            _walk(ctx, order, failed, None)
        finally:
            ctx.reservations = None
        return
    _walk(ctx, order, failed, line.sure_to_fail(failed) if failed.enabled else None)


def _walk(ctx: CycleContext, order: JobQueues, failed: FailedSearches, sure: SureToFail | None) -> None:
    placements, probed = 0, -1  # with a cache: placements made, and when keys were last tried
    reservations = ctx.reservations
    while (job := order.next_job()) is not None:
        lifted = reservations.lift(job) if reservations is not None else []
        placed = allocate_step(ctx, job, "allocate", failed)
        if reservations is not None:
            reservations.restore(lifted)
        placements += placed
        if placed and job.pending_count:
            order.push_back(job)  # an elastic job goes back in line for each surplus task
            if sure is not None:
                sure.pushed_back(job)
        else:
            order.done(job)
            if sure is not None:
                sure.tried(job)
        if sure is not None and sure.all_fail():
            # No job left can place anything: queue order no longer matters, so each is
            # given its reason as allocate_step would, without ranking the queues.
            _settle(ctx, sure)
            return
        if sure is not None and ctx.kept is not None and probed != placements and _mostly_sure(sure):
            probed = placements
            if _unknown_keys_fail(ctx, sure, failed):
                _settle(ctx, sure)
                return


def allocate_gangs(ctx: CycleContext, jobs: list[Job]) -> None:
    """Allocate's step for the gang of each of these jobs, in queue order (no failures
    remembered: a few jobs, tried once)."""
    order = ctx.job_queues(jobs)
    while (job := order.next_job()) is not None:
        allocate_step(ctx, job, "allocate")
        order.done(job)


def _mostly_sure(sure: SureToFail) -> bool:
    """Most of the line is sure to fail: what is left of it is worth a try by key."""
    return 4 * sure.unsure() <= len(sure.keys) and not any(sure.capped.values())


def _unknown_keys_fail(ctx: CycleContext, sure: SureToFail, failed: FailedSearches) -> bool:
    """One step for one job of each key not known to fail yet, on the state as it is.
    Every job before the first of them in line is sure to fail, so a walk would reach
    that one with the state unchanged, and the next one too if it fails: when all fail,
    each fails as (and with the reason) it would in line, and the rest settles. When one
    would place, everything tried is taken back, failures included (in line, a key met
    after a placement fails on a smaller room, and says so)."""
    moves = functools.partial(allocate_step, ctx, action="allocate", failed=failed)
    return every_key_fails(ctx, sure.representatives(), failed, moves, keep_found=False)


def _settle(ctx: CycleContext, sure: SureToFail) -> None:
    """Each job still in line gets its reason, as allocate_step gives it (all_fail()
    holds): a job with a failed key and no queue check to make gets that key's reason,
    a whole group in one go; the others go through allocate_step."""
    for job in [*sure.incomplete.values(), *(j for group in sure.capped.values() for j in group.values())]:
        allocate_step(ctx, job, "allocate", sure.failed)
    said: list[tuple[str, Reason]] = []
    for key, group in sure.groups.items():
        if group:
            reason = sure.failed.reason(key) if key is not None else None
            assert reason is not None, "allocate remembers why each failed gang failed"
            said += zip(group, repeat(reason))
    ctx.stmt.set_reasons(said)


def allocate_step(ctx: CycleContext, job: Job, action: str, failed: FailedSearches | None = None) -> bool:
    """One step for the job: its missing gang, all or nothing; or, once the gang is whole,
    one surplus task. True when something was placed."""
    pending = job.pending()
    if job.incomplete():
        ctx.stmt.set_reason(job.name, Reason("gang-incomplete", _incomplete_words(job, pending)))
        return False
    pipelined_before = ctx.stmt.pipelined
    if not job.is_whole():
        placed = job.missing()
        if not _place_gang(ctx, job, placed, action, failed):
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
    ctx: CycleContext, job: Job, gang: list[Task], action: str, failed: FailedSearches | None
) -> bool:
    if capped(ctx.state, job):
        problem = capacity_problem(ctx.state, ctx.shares, job, ctx.amount(gang))
        if problem is not None:
            ctx.stmt.set_reason(job.name, problem)
            return False
    # Before the look-alikes' shared failures: this reason names the job's own task.
    unmet = unmet_affinity(ctx.placer, gang) if job.per_task else None
    if unmet is not None:
        ctx.stmt.set_reason(job.name, unmet)
        return False
    key = search_key(job, gang, action) if failed is not None else ()
    reservations = ctx.reservations
    if reservations is not None:
        key = reservations.scoped(key)
    if failed is not None and failed.known(key):
        reason = failed.reason(key)
        assert reason is not None, "allocate remembers why each failed gang failed"
        ctx.stmt.set_reason(
            job.name, reason if reservations is None else reservations.reason_for(job, reason)
        )
        return False
    if ctx.placer.place_gang(ctx.stmt, job, gang, action):
        return True
    reason = explain_unplaced(ctx.placer, gang)
    if job.info.subgroups:
        reason = _naming_the_subgroup(ctx, job, gang, action, reason)
    if reservations is not None:
        reason = reservations.blocking(job, gang, action) or reason
    if failed is not None:
        failed.add(key, reason)
    if reservations is not None:
        reason = reservations.reason_for(job, reason)  # a look-alike's reason does not name it
    ctx.stmt.set_reason(job.name, reason)
    return False


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
        problem = capacity_problem(ctx.state, ctx.shares, job, ctx.amount([task]))
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
