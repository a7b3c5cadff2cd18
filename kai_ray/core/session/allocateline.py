"""Allocate's waiting line as the session serves it: the jobs in queue order, each given
back once served (an elastic job that placed a task goes back in line for the next), and,
with the memos on, the rest of the line settled at once when every job left is sure to
fail (settling.py): queue order no longer matters then, and each job is given its reason
as its step would give it, without ranking the queues.

Allocate itself (allocate.py) reads none of this: it asks for the next job, takes its
step, and says whether the job goes back in line.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import repeat

from kai_ray.core.model.snapshot import Reason
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import FailedSearches
from kai_ray.core.session.jobqueues import JobQueues
from kai_ray.core.session.settling import every_key_fails
from kai_ray.core.session.suretofail import SureToFail
from kai_ray.core.state.jobs import Job

__all__ = ["AllocateLine"]

Step = Callable[[Job], bool]  # allocate's step for one job: True when it placed something


class AllocateLine:
    def __init__(self, ctx: CycleContext, failed: FailedSearches, step: Step, each_job: bool) -> None:
        """`each_job`: every job takes its own step, none settled (reservations hold room
        for some jobs and not others, so look-alikes need not fail alike)."""
        line = ctx.waiting_line()
        self.ctx, self.step = ctx, step
        self.order: JobQueues = line.job_queues(ctx.state, ctx.rank, ctx.forget)
        self.sure: SureToFail | None = None
        # Which jobs are sure to fail matters once some search failed: until then only
        # gangs too short to complete are, and they fail in line as they would settled.
        # A line kept between cycles keeps its jobs' keys (forked at once); a line made
        # now keys the jobs still in it at the first failure, not every job up front (a
        # line that all fits keys none).
        self._failed = None if each_job or not failed.enabled else failed
        if self._failed is not None and ctx.kept is not None:
            self.sure = line.sure_to_fail(failed)
        self._line = line
        self._placements, self._probed = 0, -1  # placements made, and when keys were last tried
        self._settled = False

    def next_job(self) -> Job | None:
        """The next job in queue order; None when the line is empty or was settled."""
        return None if self._settled else self.order.next_job()

    def served(self, job: Job, placed: bool, again: bool) -> None:
        """The job took its step (`placed`: it placed something); `again`: it goes back
        in line for another step. Settles the rest of the line once it is sure to fail."""
        self._placements += placed
        sure = self.sure
        if again:
            self.order.push_back(job)
            if sure is not None:
                sure.pushed_back(job)
        else:
            self.order.done(job)
            if sure is not None:
                sure.tried(job)
        if sure is None:
            if self._failed is None or not self._failed.any_failed():
                return
            sure = self.sure = self._line.sure_to_fail_of(self.order.remaining(), self._failed)
        if sure.all_fail() or (self._worth_a_probe(sure) and self._unknown_keys_fail(sure)):
            self._settle(sure)

    def _worth_a_probe(self, sure: SureToFail) -> bool:
        """With a cycle cache, a deep line settles key by key (incremental/gangs.py): when
        most of it is sure to fail, what is left is worth a try by key, once per placement."""
        if self.ctx.kept is None or self._probed == self._placements:
            return False
        if 4 * sure.unsure() > len(sure.keys) or any(sure.capped.values()):
            return False
        self._probed = self._placements
        return True

    def _unknown_keys_fail(self, sure: SureToFail) -> bool:
        """One step for one job of each key not known to fail yet, on the state as it is.
        Every job before the first of them in line is sure to fail, so a walk would reach
        that one with the state unchanged, and the next one too if it fails: when all fail,
        each fails as (and with the reason) it would in line, and the rest settles. When
        one would place, everything tried is taken back, failures included (in line, a
        key met after a placement fails on a smaller room, and says so)."""
        return every_key_fails(self.ctx, sure.representatives(), sure.failed, self.step, keep_found=False)

    def _settle(self, sure: SureToFail) -> None:
        """Each job still in line gets its reason, as its step gives it (all fail): a job
        with a failed key and no queue check to make gets that key's reason, a whole
        group in one go; the others take their step."""
        self._settled = True
        for job in [
            *sure.incomplete.values(),
            *(j for group in sure.capped.values() for j in group.values()),
        ]:
            self.step(job)
        said: list[tuple[str, Reason]] = []
        mark = self.ctx.stmt.state_mark
        for key, group in sure.groups.items():
            if group:
                if key is not None and sure.failed.said_on(key) != mark:
                    self.step(next(iter(group.values())))  # its words said on this state
                reason = sure.failed.reason(key) if key is not None else None
                assert reason is not None, "allocate remembers why each failed gang failed"
                said += zip(group, repeat(reason))
        self.ctx.stmt.set_reasons(said)
