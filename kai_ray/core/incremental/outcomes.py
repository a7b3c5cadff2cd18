"""Failed victim searches kept from one cycle to the next, while what they read holds.

With a thousand jobs waiting behind full nodes, reclaim, preempt and consolidation find
the same thing every cycle: nothing can be taken for this gang. A failure found while an
action's state was still the one it began with is kept, per action, with what it rests
on (`Grounds`, failedsearches.py), and the same action of a later cycle starts knowing
it when those grounds are unchanged at its own start:

- the free room: every node's idle and releasing room and its shared devices, equal;
- the candidates: no running job that may be a victim came, changed or left since
  (`victims_changed`, called by the cycle cache as it patches jobs), and no earlier
  action of either cycle evicted or placed anything (a placement makes a candidate);
  for a search no candidate passed the filter of, only the candidates that came
  matter, and only if the filter takes them;
- the standings: every queue's allocated figures and fair shares, equal; or, for a
  search that found no room even with every candidate it could take gone (decided as it
  began, VictimPool.may_fit), or that read no standings while it tried victims (preempt),
  only its verdicts on them that read the standings (VictimSearch.verdicts: reclaim's
  eligibility of each, and the order in which their queues give), made again for a job
  of the key; and where the standings allowed no candidate at all, only that none is
  allowed now (whichever came or left: the free room alone decided it). A reclaim that
  tried victims and found no room rests on every standing: it asked them again after
  each victim.

Time is never a ground: a failure in which min runtime protected a candidate is kept
for its cycle only. A key is the same search (failedsearches.py), so a failure kept for
a key holds for every job of that key. The cycle cache forgets everything when it
rebuilds. The full rebuild, which keeps nothing, is the reference these are checked
against (KAI_RAY_CHECK_INCREMENTAL, tests/core/test_incremental.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from kai_ray.core.model.snapshot import Reason
from kai_ray.core.session.failedsearches import FailedSearches, FailureKey, Grounds
from kai_ray.core.state.jobs import Job

if TYPE_CHECKING:  # the context holds the cache's lines, which hold these
    from kai_ray.core.session.context import CycleContext

__all__ = ["SearchOutcomes", "World"]

TakesFrom = Callable[[Job, Job], bool]  # whether a search for the first may take the second


@dataclass(slots=True)
class World:
    """What kept failures rest on, as an action began."""

    idle: np.ndarray
    releasing: np.ndarray
    fractions: np.ndarray
    devices: tuple[tuple[int, tuple[tuple[int, float, float], ...]], ...]
    candidates: int  # the candidates' epoch
    evictions: int  # evictions standing when the action began
    placements: int  # placements of waiting tasks standing then: each a new candidate
    standings: tuple[object, ...]

    def same_room(self, other: World) -> bool:
        return (
            np.array_equal(self.idle, other.idle)
            and np.array_equal(self.releasing, other.releasing)
            and np.array_equal(self.fractions, other.fractions)
            and self.devices == other.devices
        )


@dataclass(slots=True)
class _Kept:
    world: World
    failures: dict[FailureKey, tuple[Reason | None, object]]


class SearchOutcomes:
    def __init__(self) -> None:
        self.epoch = 0  # bumped whenever a candidate victim came or left
        self._came: list[tuple[int, Job]] = []  # (epoch, job) for each candidate that came
        self._kept: dict[str, _Kept] = {}

    def forget(self) -> None:
        """The state was built afresh: nothing kept applies to its objects."""
        self._kept.clear()
        self._came.clear()
        self.epoch += 1

    def victims_changed(self, job: Job, came: bool) -> None:
        """A job that may be a victim, with running tasks, came (or left) with a patch."""
        self.epoch += 1
        if came and self._kept:  # read only against a state kept before it came
            self._came.append((self.epoch, job))

    def world(self, ctx: CycleContext) -> World:
        nodes, usage, shares = ctx.state.nodes, ctx.state.usage, ctx.shares
        devices = tuple(
            (i, tuple((k, d.idle, d.releasing) for k, d in sorted(held.items())))
            for i, held in enumerate(nodes.devices)
            if held
        )
        standings = (
            [row[:] for row in usage.allocated],
            [row[:] for row in usage.allocated_nonpreemptible],
            shares.deserved.tobytes(),
            shares.fair_share.tobytes(),
            shares.allocatable.tobytes(),
            ctx.total.tobytes(),
        )
        return World(
            nodes.idle.copy(),
            nodes.releasing.copy(),
            nodes.frac_future.copy(),
            devices,
            self.epoch,
            ctx.stmt.evictions,
            ctx.stmt.placements,
            standings,
        )

    def seed(
        self,
        action: str,
        now: World,
        failed: FailedSearches,
        jobs_of: Mapping[FailureKey, Job],
        takes_from: TakesFrom | None,
        verdicts: Callable[[Job], tuple[object, ...]] | None,
    ) -> int:
        """Add to `failed` the failures kept for `action` that still hold; how many."""
        kept = self._kept.get(action)
        if kept is None or not failed.enabled:
            return 0
        then = kept.world
        room = then.same_room(now)
        standings = then.standings == now.standings
        # Work placed earlier in the cycle is a candidate too (a consolidation may move it):
        # the candidates are the same only where neither cycle had placed any yet.
        victims = (
            then.candidates == now.candidates
            and then.evictions == now.evictions == 0
            and then.placements == now.placements == 0
        )
        came = [job for epoch, job in self._came if epoch > then.candidates]
        seeded = 0
        for key, (reason, grounds) in kept.failures.items():
            job = jobs_of.get(key)
            if job is None:
                continue
            if isinstance(grounds, tuple):  # (VERDICTS, the verdicts as they were)
                holds = room and victims and (() if verdicts is None else verdicts(job)) == grounds[1]
            elif grounds == Grounds.NODES:
                holds = True
            elif grounds == Grounds.SHARE:
                holds = standings
            elif grounds == Grounds.ROOM:
                holds = room
            elif grounds == Grounds.NONE_ALLOWED:  # whatever came or left, none is allowed now
                holds = room and verdicts is not None and not _any_allowed(verdicts(job))
            elif grounds == Grounds.NO_VICTIMS:
                placed = then.placements or now.placements  # placed work: new candidates
                holds = room and not placed and not _takes_any(takes_from, job, came)
            else:
                holds = room and victims and standings
            if holds:
                failed.add(key, reason, grounds)
                seeded += 1
        return seeded

    def keep(self, action: str, world: World, failed: FailedSearches) -> None:
        """The failures `failed` found as the action began (its state then: `world`)."""
        self._kept[action] = _Kept(world, dict(failed.at_start()))
        self._trim()

    def nothing_waits(self, action: str) -> None:
        """The action began with no gang waiting: it found no failure to keep. Its old
        ones go, and with them the candidates that came since their state (kept only to
        be read against it): a cluster where nothing waits keeps nothing, however many
        jobs come and go."""
        if self._kept.pop(action, None) is not None:
            self._trim()

    def _trim(self) -> None:
        """Only the candidates that came since the oldest kept state are read."""
        oldest = min((k.world.candidates for k in self._kept.values()), default=self.epoch)
        if self._came and self._came[0][0] <= oldest:
            self._came = [(e, j) for e, j in self._came if e > oldest]


def _takes_any(takes_from: TakesFrom | None, job: Job, came: list[Job]) -> bool:
    return takes_from is not None and any(takes_from(job, v) for v in came)


def _any_allowed(verdicts: tuple[object, ...]) -> bool:
    """Reclaim's verdicts: (each candidate's eligibility, the giving order)."""
    eligible = verdicts[0]
    assert isinstance(eligible, tuple)
    return any(eligible)
