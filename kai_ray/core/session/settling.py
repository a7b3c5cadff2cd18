"""When the rest of an action's line is sure to fail, so that queue order stops mattering.

An action takes its waiting jobs in queue order, one at a time, re-ranking the queue
after each. Once every job still in line is sure to fail its search, nothing can change
the state any more: each job left would only be given its reason, whatever the order. The
action then goes through them as they come, without ranking queues (at a thousand waiting
jobs, ranking is most of a steady cycle).

Which jobs are sure to fail is kept by suretofail.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey
from kai_ray.core.session.gangwalk import GangWalk
from kai_ray.core.session.jobqueues import JobQueues
from kai_ray.core.session.suretofail import SureToFail
from kai_ray.core.state.jobs import Job

__all__ = ["each_waiting_gang", "every_key_fails", "settle", "walk"]


def each_waiting_gang(ctx: CycleContext, walk_: GangWalk) -> None:
    """The action's step for each job whose gang is incomplete, in queue order; once
    every job left is sure to fail (its step can change nothing but its reason), for the
    rest as they come (GangWalk says what the step and its search read).

    With a cycle cache (ctx.kept), the line and the failures come from it
    (incremental/gangs.py); this walk is the reference it is checked against."""
    failed = walk_.failed
    if ctx.kept is not None and failed.enabled:
        ctx.kept.each_waiting_gang(ctx, walk_)
        return
    order = ctx.waiting_gangs()
    sure = SureToFail(order.remaining(), failed, walk_.action) if failed.enabled else None
    walk(ctx, order, sure, walk_.step, walk_.quiet)


def walk(
    ctx: CycleContext,
    order: JobQueues,
    sure: SureToFail | None,
    step: Callable[[Job], object],
    quiet: Callable[[FailureKey], bool] | None,
    moved: Callable[[], bool] | None = None,
    same_rank: Callable[[Job, Job], bool] | None = None,
) -> None:
    """The jobs of `order` in queue order until every one left is sure to fail, then the
    rest as they come (settle). `moved()`: called after a step that moved room (when
    `sure`'s failures were cleared); True when it settled the rest of the line itself.
    `same_rank(a, b)`: whether a queue ranks the same with either job next; with it, a
    run of jobs whose steps would change nothing, which the queue just served would hand
    out next anyway, is taken at once (JobQueues.take_run)."""
    clears = -1 if sure is None else sure.failed.clears
    reasons = ctx.stmt.reasons
    while (job := order.next_job()) is not None:
        step(job)
        if sure is None:
            order.done(job)
            continue
        key = sure.key_of(job)
        sure.tried(job)
        if same_rank is not None and sure.failed.clears == clears:  # nothing moved: ranks stand
            for other in order.take_run(job, _joins_run(sure, quiet, reasons, job, key, same_rank)):
                sure.tried(other)
        order.done(job)
        if sure.all_fail():
            settle(ctx, sure.incomplete.values(), sure.groups.items(), sure.failed, step, quiet)
            return
        if moved is not None and sure.failed.clears != clears:
            if moved():
                return
            clears = sure.failed.clears


def every_key_fails(
    ctx: CycleContext,
    reps: Iterable[tuple[FailureKey | None, Job]],
    failed: FailedSearches,
    moves: Callable[[Job], bool],
    keep_found: bool,
) -> bool:
    """One try for one job of each key not known to fail (`moves(job)`: True when the try
    changed the state), on the state as it is. True when every key failed (the state
    and `failed` as trying them in line would leave them). Otherwise everything tried is
    rolled back, and `failed` knows what it knew, plus, with `keep_found`, the keys that
    failed before one did not (they failed on this very state). A whole gang's key (None)
    is never sure to fail."""
    stmt = ctx.stmt
    start, known, first = stmt.checkpoint(), failed.saved(), failed.first
    for key, job in reps:
        if key is not None and failed.known(key):
            continue
        if key is None or moves(job) or not failed.known(key):
            stmt.rollback(start)
            failed.restore(known, first)
            return False
        if keep_found:
            known[key] = (failed.reason(key), failed.grounds.get(key))
    return True


def _changes_nothing(
    sure: SureToFail, quiet: Callable[[FailureKey], bool] | None, reasons: Mapping[str, object], job: Job
) -> bool:
    """The job's step would change nothing at all: its key failed, the action is quiet
    about that key, and the job has a reason already."""
    key = sure.key_of(job)
    if key is None or quiet is None or not sure.failed.known(key):
        return False
    return quiet(key) and job.name in reasons


def _joins_run(
    sure: SureToFail,
    quiet: Callable[[FailureKey], bool] | None,
    reasons: Mapping[str, object],
    job: Job,
    key: FailureKey | None,
    same_rank: Callable[[Job, Job], bool],
) -> Callable[[Job], bool]:
    """Whether a job may join the run after `job` (`key`: its search key, as it was in
    line): its step would change nothing, and its queue ranks the same with it next.
    Both hold at once for a job of the same key when that key's steps change nothing
    once a job has a reason (a keyed job's next step asks its missing tasks, and the key
    holds their requests and number): then only its reason is looked up."""
    keys = sure.keys
    quiet_key = key is not None and quiet is not None and sure.failed.known(key) and quiet(key)

    def joins(other: Job) -> bool:
        if quiet_key and keys.get(id(other)) == key:
            return other.info.name in reasons
        return _changes_nothing(sure, quiet, reasons, other) and same_rank(job, other)

    return joins


def settle(
    ctx: CycleContext,
    incomplete: Iterable[Job],
    groups: Iterable[tuple[FailureKey | None, Mapping[str, Job]]],
    failed: FailedSearches,
    step: Callable[[Job], object],
    quiet: Callable[[FailureKey], bool] | None,
) -> None:
    """Every job left is sure to fail: each takes its step, as it comes, unless the
    action is quiet about its key and it has a reason already (then its step would
    change nothing)."""
    for job in list(incomplete):
        step(job)
    reasons = ctx.stmt.reasons
    for key, group in list(groups):
        if not group:
            continue
        if key is not None and quiet is not None and failed.known(key) and quiet(key):
            jobs = [job for name, job in group.items() if name not in reasons]
        else:
            jobs = list(group.values())
        for job in jobs:
            step(job)
