"""When the rest of an action's line is sure to fail, so that queue order stops mattering.

An action takes its waiting jobs in queue order, one at a time, re-ranking the queue
after each. Once every job still in line is sure to fail its search, nothing can change
the state any more: each job left would only be given its reason, whatever the order. The
action then goes through them as they come, without ranking queues (at a thousand waiting
jobs, ranking is most of a steady cycle).

A job is sure to fail when its search key is among the action's failed ones
(failures.py), or, where the action gives up on a gang that can no longer complete, when
too few of its tasks are left. A job whose gang is whole (elastic surplus) is never
sure. Kept in O(1) per job: counts per key, and the keys failed since the last look.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kai_ray.core.cluster import Job
from kai_ray.core.context import CycleContext
from kai_ray.core.failures import FailedSearches, FailureKey, search_key

__all__ = ["SureToFail", "each_waiting_gang"]


def each_waiting_gang(
    ctx: CycleContext,
    action: str,
    failed: FailedSearches,
    step: Callable[[Job], object],
    incomplete_fails: bool = True,
) -> None:
    """`step` for each job whose gang is incomplete, in queue order; once every job left
    is sure to fail (its step can change nothing but its reason), for the rest as they
    come. `step` must fail a job whose key is in `failed` without a search (and, with
    `incomplete_fails`, a gang too few tasks are left for)."""
    order = ctx.waiting_gangs()
    sure = SureToFail(order.remaining(), failed, action, incomplete_fails) if failed.enabled else None
    while (job := order.next_job()) is not None:
        step(job)
        order.done(job)
        if sure is not None:
            sure.tried(job)
            if sure.all_fail():
                for rest in order.remaining():
                    step(rest)
                return


class SureToFail:
    def __init__(
        self, jobs: Iterable[Job], failed: FailedSearches, action: str, incomplete_fails: bool = True
    ) -> None:
        self.failed, self.action, self.incomplete_fails = failed, action, incomplete_fails
        self.keys: dict[int, FailureKey | None] = {}  # per job in line: None = never sure
        self.count: dict[FailureKey | None, int] = {}  # jobs in line per key
        self._unsure = 0  # jobs in line not sure to fail (as of the last sync)
        self._synced = len(failed.added)  # failed.added[:synced] are counted as sure
        self._clears = failed.clears
        for job in jobs:
            self._add(job)

    def _add(self, job: Job) -> None:
        missing, pending = job.gang - job.active_count, job.pending_count
        if missing > pending and self.incomplete_fails:
            return  # gang incomplete: sure to fail
        n = missing if missing <= pending else pending
        key = search_key(job, job.missing, self.action, n) if missing > 0 else None
        self.keys[id(job)] = key
        count = self.count
        count[key] = count.get(key, 0) + 1
        if key is None or not self.failed.known(key):
            self._unsure += 1

    def _sure(self, key: FailureKey | None) -> bool:
        return key is not None and self.failed.known(key)

    def key_of(self, job: Job) -> FailureKey | None:
        return self.keys.get(id(job))

    def tried(self, job: Job) -> None:
        """The job left the line."""
        if id(job) not in self.keys:
            return
        self._sync()
        key = self.keys.pop(id(job))
        self.count[key] -= 1
        if not self._sure(key):
            self._unsure -= 1

    def pushed_back(self, job: Job) -> None:
        self.tried(job)
        self._add(job)

    def all_fail(self) -> bool:
        self._sync()
        return self._unsure == 0

    def _sync(self) -> None:
        """Count the keys that failed since the last look (all again after a clear)."""
        failed = self.failed
        if failed.clears != self._clears:  # a search succeeded: every failure forgotten
            self._clears, self._synced = failed.clears, 0
            self._unsure = sum(self.count.values())
        for key in failed.added[self._synced :]:
            if key in self.count:  # a failed key is added once per clear
                self._unsure -= self.count[key]
        self._synced = len(failed.added)
