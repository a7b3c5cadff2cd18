"""Preemption delay (KAI's preemptionDelay, issue #1832): a gang that could start only by
evicting others first waits a while for new nodes, where an autoscaler can add them.

The rule holds back a search that would succeed, not the search: reclaim, preempt and
consolidation search as usual, and when the search would evict or move running work
for a job still within its delay, it is rolled back and the job is told why it waits.
So the delay never changes why a job waits when evicting would not help it anyway (its
queue over its fair share, no lower-priority work to take), and never holds back a
placement that takes nobody's room. Consolidation counts: a move stops the moved job
and starts it again elsewhere, which is what the delay spares running work.

Time alone ends the wait, so nothing of it outlives the cycle: a held-back search is
never recorded as failed (failedsearches.py), and the job's search runs again each cycle
until, the first cycle after its delay, it commits as it would have at once without one.
"""

from __future__ import annotations

import math

from kai_ray.core.model.snapshot import Reason
from kai_ray.core.model.words import number
from kai_ray.core.session.context import CycleContext
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey
from kai_ray.core.state.jobs import Job

__all__ = ["HeldBack"]

_DOING = {"reclaim": "reclaiming", "preempt": "preempting", "consolidation": "moving other jobs"}


class HeldBack:
    """One eviction action's view of the delay, and its searches held back by it, by
    search key: a look-alike still within its own delay waits too without searching
    again. That holds until room moves: a held-back search is rolled back, so the state
    is as it was, and a search that commits clears `failed`, and these with it."""

    __slots__ = ("_clears", "_keys", "action", "ctx", "delay", "failed")

    def __init__(self, ctx: CycleContext, action: str, failed: FailedSearches) -> None:
        self.ctx, self.action, self.failed = ctx, action, failed
        self.delay = ctx.preemption_delay  # 0 where the cluster cannot grow
        self._keys: set[FailureKey] = set()
        self._clears = failed.clears

    def waits(self, job: Job) -> Reason | None:
        """Why the job may not evict yet; None when it may (no delay, or it is over)."""
        if self.delay <= 0:
            return None
        left = self.ctx.policy.preemption_delay_left(job, self.delay, self.ctx.now)
        if left <= 0:
            return None
        text = (
            f"waiting up to {number(self.delay)}s for new nodes before {_DOING[self.action]} "
            f"(an autoscaler may add them); {number(math.ceil(left))}s left"
        )
        return Reason("preemption-delay", text)

    def known(self, key: FailureKey) -> bool:
        """A look-alike's search was held back, and room has not moved since."""
        if self.failed.clears != self._clears:
            self._keys.clear()
            self._clears = self.failed.clears
        return key in self._keys

    def add(self, key: FailureKey) -> None:
        if self.failed.enabled and not self.known(key):
            self._keys.add(key)
