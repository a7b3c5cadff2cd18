"""The allocate action: jobs in queue order, each gang placed whole or not at all, then
elastic surplus tasks one at a time. Tasks may land on capacity still being released
(Pipelined); a gang with a pipelined task waits as a whole."""

from __future__ import annotations

from kai_ray.core.capacity import capacity_problem, capped
from kai_ray.core.cluster import Job, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.reasons import explain_unplaced
from kai_ray.core.words import agree, count

__all__ = ["allocate", "allocate_step"]

ShapeKey = tuple[object, ...]


def allocate(ctx: CycleContext) -> None:
    waiting = [j for j in ctx.state.jobs if j.active_count < len(j.tasks) and j.pending()]
    order = ctx.job_queues(waiting)
    # A gang that did not fit fails the same way for every job of the same shape: capacity
    # only shrinks during allocate, so remember the failure and skip the search.
    failed: dict[ShapeKey, str] = {}
    while (job := order.next_job()) is not None:
        placed = allocate_step(ctx, job, "allocate", failed)
        if placed and job.active_count < len(job.tasks) and job.pending():
            order.push_back(job)  # an elastic job goes back in line for each surplus task
        else:
            order.done(job)


def allocate_step(
    ctx: CycleContext, job: Job, action: str, failed: dict[ShapeKey, str] | None = None
) -> bool:
    """One step for the job: its missing gang, all or nothing; or, once the gang is whole,
    one surplus task. True when something was placed."""
    pending = job.pending()
    missing = job.gang - job.active()
    if missing > len(pending):
        left = job.active() + len(pending)
        ctx.reasons[job.name] = (
            f"gang needs {count(job.gang, 'task')} but only {left} {agree(left, 'exists', 'exist')} "
            "(some failed or finished); it cannot start whole"
        )
        return False
    pipelined_before = ctx.stmt.pipelined
    if missing > 0:
        placed = pending[:missing]
        if not _place_gang(ctx, job, placed, action, failed):
            return False
    else:
        placed = _place_surplus(ctx, job, pending[:1], action)
        if not placed:
            return False
    if ctx.stmt.pipelined != pipelined_before:
        ctx.stmt.pipeline_job(job)
    if len(placed) == len(pending):
        ctx.reasons.pop(job.name, None)
    return True


def _place_gang(
    ctx: CycleContext, job: Job, gang: list[Task], action: str, failed: dict[ShapeKey, str] | None
) -> bool:
    problem = capacity_problem(ctx.state, ctx.shares, job, ctx.amount(gang)) if capped(ctx.state, job) else ""
    if problem:
        ctx.reasons[job.name] = problem
        return False
    key = _shape(job, gang)
    if failed is not None and key in failed:
        ctx.reasons[job.name] = failed[key]
        return False
    if ctx.placer.place_gang(ctx.stmt, job, gang, action):
        return True
    reason = explain_unplaced(ctx.placer, gang)
    ctx.reasons[job.name] = reason
    if failed is not None:
        failed[key] = reason
    return False


def _place_surplus(ctx: CycleContext, job: Job, surplus: list[Task], action: str) -> list[Task]:
    placed: list[Task] = []
    for task in surplus:
        problem = capacity_problem(ctx.state, ctx.shares, job, ctx.amount([task]))
        if problem:
            ctx.reasons[job.name] = (
                f"elastic job at {job.active()} of {count(len(job.tasks), 'task')}; {problem}"
            )
            break
        mask = ctx.placer.job_mask(job)
        if not ctx.placer.place_all(ctx.stmt, [task], mask, action):
            ctx.reasons[job.name] = (
                f"elastic job: no room for more tasks ({explain_unplaced(ctx.placer, [task])})"
            )
            break
        placed.append(task)
    return placed


def _shape(job: Job, tasks: list[Task]) -> ShapeKey:
    """Jobs that fail to place the same way: equal requests share one demand array."""
    demand = tasks[0].demand
    if job.uniform or all(t.demand is demand for t in tasks):
        shapes: object = (id(demand), len(tasks))
    else:
        shapes = tuple(id(t.demand) for t in tasks)
    # The active count too: whether the whole gang could ever fit depends on it.
    return (shapes, job.selector, job.info.topology, job.info.spread, job.active_count)
