"""Which jobs still in an action's line are sure to fail its search, kept in O(1) per job.

A job is sure to fail when its search key is among the action's failed ones
(failedsearches.py), or, where the action gives up on a gang that can no longer complete, when
too few of its tasks are left. A job whose gang is whole (elastic surplus) is never
sure. Kept as counts per key, and the keys failed since the last look. settling.py reads
it to settle the rest of a line at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kai_ray.core.session.failedsearches import FailedSearches, FailureKey, search_key
from kai_ray.core.state.jobs import Job

__all__ = ["SureToFail"]


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
