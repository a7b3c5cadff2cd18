"""What an action that evicts hands the session for its walk of the waiting gangs
(settling.each_waiting_gang): one small value naming what its rule reads, so that the
session, with or without a cycle cache, walks the line for it. The action never asks
whether a cache exists; the cache reads `takes_from`, `verdicts` and `redoable` to keep
the action's failures into the next cycle (incremental/gangs.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kai_ray.core.session.failedsearches import FailedSearches, FailureKey
from kai_ray.core.state.jobs import Job

__all__ = ["GangWalk"]


@dataclass(frozen=True, slots=True)
class GangWalk:
    action: str
    failed: FailedSearches  # the action's failed searches (its key: failedsearches.search_key)
    # The action's step for one job: it must fail a job whose key is in `failed` without
    # a search, and a gang too few tasks are left for.
    step: Callable[[Job], object]
    # quiet(key): the step of a job whose key failed changes nothing at all once the job
    # has a reason (None: never quiet); such a job is passed over once settled.
    quiet: Callable[[FailureKey], bool] | None = None
    # The action's filter of candidate victims (job, victim), and what its search decides
    # from the standings about them (VictimSearch.verdicts): the grounds of a failure.
    takes_from: Callable[[Job, Job], bool] | None = None
    verdicts: Callable[[Job], tuple[object, ...]] | None = None
    # A step that moves room does so by Statement operations and one `failed.clear()`
    # alone, so that one found and taken back may be made again.
    redoable: bool = False
