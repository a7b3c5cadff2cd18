"""When the rest of an action's line is sure to fail, so that queue order stops mattering.

An action takes its waiting jobs in queue order, one at a time, re-ranking the queue
after each. Once every job still in line is sure to fail its search, nothing can change
the state any more: each job left would only be given its reason, whatever the order. The
action then goes through them as they come, without ranking queues (at a thousand waiting
jobs, ranking is most of a steady cycle).

A job is sure to fail when its search key is among the action's failed ones
(failedsearches.py), or, where the action gives up on a gang that can no longer complete, when
too few of its tasks are left. A job whose gang is whole (elastic surplus) is never
sure. Kept in O(1) per job: counts per key, and the keys failed since the last look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from kai_ray.core.cluster import Job
from kai_ray.core.failedsearches import FailedSearches, FailureKey, search_key
from kai_ray.core.jobqueues import JobQueues

if TYPE_CHECKING:  # the context holds a waiting line, which holds a SureToFail
    from kai_ray.core.context import CycleContext

__all__ = ["SureToFail", "each_waiting_gang", "every_key_fails", "settle", "walk"]


def each_waiting_gang(
    ctx: CycleContext,
    action: str,
    failed: FailedSearches,
    step: Callable[[Job], object],
    quiet: Callable[[FailureKey], bool] | None = None,
    takes_from: Callable[[Job, Job], bool] | None = None,
    verdicts: Callable[[Job], tuple[object, ...]] | None = None,
    redoable: bool = False,
) -> None:
    """`step` for each job whose gang is incomplete, in queue order; once every job left
    is sure to fail (its step can change nothing but its reason), for the rest as they
    come. `step` must fail a job whose key is in `failed` without a search, and a gang
    too few tasks are left for. `quiet(key)`: the action knows that the step of a job
    whose key failed changes nothing at all once the job has a reason (None: never
    quiet); such a job is passed over once settled, which keeps a deep line from costing
    a step per job per cycle. `takes_from(job, victim)`: the action's filter of
    candidate victims, and `verdicts(job)` what its search decides from the standings
    about them (VictimSearch.verdicts; None: nothing): for failures kept between cycles.
    `redoable`: a step that moves room does so by Statement operations and one
    `failed.clear()` alone, so that one found and taken back may be made again.

    With a cycle cache (ctx.kept), the line and the failures come from it
    (incremental/gangs.py); this walk is the reference it is checked against."""
    if ctx.kept is not None and failed.enabled:
        ctx.kept.each_waiting_gang(ctx, action, failed, step, quiet, takes_from, verdicts, redoable)
        return
    order = ctx.waiting_gangs()
    sure = SureToFail(order.remaining(), failed, action) if failed.enabled else None
    walk(ctx, order, sure, step, quiet)


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


class SureToFail:
    """Which jobs still in an action's line are sure to fail, kept in O(1) per job.

    In-line jobs are kept by search key, in groups (`capped` ones apart: their queue
    checks come before the key, so they still take a step when settled); a job whose
    gang can no longer complete is sure on its own (`incomplete`). `fork` copies the
    groups for another cycle's action: a line kept between cycles
    (incremental/waitingline.py) keeps one and forks it, rather than keying a thousand
    jobs each cycle."""

    def __init__(
        self,
        jobs: Iterable[Job],
        failed: FailedSearches,
        action: str,
        incomplete_fails: bool = True,
        is_capped: Callable[[Job], bool] | None = None,
    ) -> None:
        self.failed, self.action, self.incomplete_fails = failed, action, incomplete_fails
        self.is_capped = is_capped
        self.keys: dict[int, FailureKey | None] = {}  # per keyed job in line: None = never sure
        # Keyed jobs in line by key, by name: the uncapped, then the capped ones.
        self.groups: dict[FailureKey | None, dict[str, Job]] = {}
        self.capped: dict[FailureKey | None, dict[str, Job]] = {}
        self.incomplete: dict[int, Job] = {}  # in line, sure to fail: too few tasks left
        self._unsure = 0  # jobs in line not sure to fail (as of the last sync)
        self._synced = len(failed.added)  # failed.added[:synced] are counted as sure
        self._clears = failed.clears
        for job in jobs:
            self.add(job)

    def fork(self, failed: FailedSearches) -> SureToFail:
        """The same jobs, for an action that starts now with `failed`."""
        other = SureToFail((), failed, self.action, self.incomplete_fails, self.is_capped)
        other.keys = self.keys.copy()
        other.groups = {key: group.copy() for key, group in self.groups.items() if group}
        other.capped = {key: group.copy() for key, group in self.capped.items() if group}
        other.incomplete = self.incomplete.copy()
        other._unsure = sum(
            len(group)
            for groups in (other.groups, other.capped)
            for key, group in groups.items()
            if not other._sure(key)
        )
        return other

    def add(self, job: Job) -> None:
        """The job joined the line."""
        if self.incomplete_fails and job.incomplete():
            self.incomplete[id(job)] = job
            return
        if job.is_whole():  # one more task of an elastic job (Job.next_step)
            key = search_key(job, lambda: job.pending()[:1], self.action, 1)
        else:
            key = search_key(job, job.missing, self.action, job.missing_count())
        self.keys[id(job)] = key
        groups = self.capped if self.is_capped is not None and self.is_capped(job) else self.groups
        group = groups.get(key)
        if group is None:
            group = groups[key] = {}
        group[job.info.name] = job
        if not self._sure(key):
            self._unsure += 1

    def _sure(self, key: FailureKey | None) -> bool:
        return key is not None and self.failed.known(key)

    def representatives(self) -> list[tuple[FailureKey | None, Job]]:
        """One job in line per key."""
        return [(key, next(iter(group.values()))) for key, group in self.groups.items() if group]

    def key_of(self, job: Job) -> FailureKey | None:
        return self.keys.get(id(job))

    def tried(self, job: Job) -> None:
        """The job left the line."""
        if id(job) not in self.keys:
            self.incomplete.pop(id(job), None)
            return
        self._sync()
        key = self.keys.pop(id(job))
        groups = self.groups
        group = groups.get(key)
        if group is None or group.pop(job.info.name, None) is None:
            groups = self.capped
            group = groups[key]
            group.pop(job.info.name)
        if not group:  # a line kept for long meets many keys: keep only those in it
            del groups[key]
        if not self._sure(key):
            self._unsure -= 1

    def pushed_back(self, job: Job) -> None:
        self.tried(job)
        self.add(job)

    def all_fail(self) -> bool:
        self._sync()
        return self._unsure == 0

    def unsure(self) -> int:
        """Jobs in line not sure to fail."""
        self._sync()
        return self._unsure

    def _sync(self) -> None:
        """Count the keys that failed since the last look (all again after a clear)."""
        failed = self.failed
        if failed.clears != self._clears:  # a search succeeded: every failure forgotten
            self._clears, self._synced = failed.clears, 0
            self._unsure = len(self.keys)
        groups, capped = self.groups, self.capped
        for key in failed.added[self._synced :]:  # a failed key is added once per clear
            group, more = groups.get(key), capped.get(key)
            self._unsure -= (0 if group is None else len(group)) + (0 if more is None else len(more))
        self._synced = len(failed.added)
