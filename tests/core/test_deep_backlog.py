"""The caches a deep backlog is decided with (incremental/gangs.py, outcomes.py) against
the full rebuild: named cases where a kept line, a kept failure or settling by key would
go wrong if they kept too much. Random sequences: test_incremental.py."""

from __future__ import annotations

from kai_ray.core import CycleCache, SchedulerConfig, TaskStatus
from kai_ray.core.model import Evict
from tests.core.test_incremental import World, both, node


def full_world() -> World:
    """Two 4-GPU nodes, all held by queue c's preemptible one-GPU jobs (c is over its
    fair share); queue a, under its share, waits."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    for _ in range(8):
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
    return world


def decide(world: World, cache: CycleCache) -> list[object]:
    inc, full = both(world, cache)
    assert inc == full
    return full.decisions


def test_a_gang_allocate_tried_is_still_in_reclaims_line() -> None:
    """Allocate places part of the gang (one GPU is free) and takes it back: the job is
    touched, and the kept line must hand it to reclaim as it waits now."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    for _ in range(7):
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
    cache = CycleCache()
    decide(world, cache)
    world.apply(("submit", 0, 2, "a", 50, False, "", False, False))
    decisions = decide(world, cache)
    assert any(isinstance(d, Evict) and d.action == "reclaim" for d in decisions)


def test_reclaimers_take_their_victims_in_queue_order_not_in_key_order() -> None:
    """Queues a and b each wait with a one-GPU job, and each may take one of queue c's
    (youngest first). b's job comes first in the snapshot, but queue order serves a
    first: settling by key must not let b take the youngest."""
    world = full_world()
    cache = CycleCache()
    decide(world, cache)
    world.apply(("submit", 0, 1, "b", 50, False, "", False, False))
    world.apply(("submit", 0, 1, "a", 50, False, "", False, False))
    taken = {d.job for d in decide(world, cache) if isinstance(d, Evict)}
    assert len(taken) == 2


def test_a_kept_failure_is_dropped_when_a_victim_comes() -> None:
    """Reclaim found nothing to take for queue a (no candidate in another queue); a job
    of queue c starts running: the kept failure no longer holds."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    for _ in range(8):  # a's own work fills the cluster: nothing for a to reclaim
        world.apply(("submit", 0, 1, "a", 50, False, "", False, True))
    world.apply(("submit", 0, 1, "a", 50, False, "", False, False))
    cache = CycleCache()
    decide(world, cache)
    decide(world, cache)  # the failure kept, and used
    world.jobs = [j for j in world.jobs if j.tasks[0].status is TaskStatus.PENDING]  # a's work ends
    for _ in range(8):  # now c holds the cluster, over its share: a may take from it
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
    decisions = decide(world, cache)
    assert any(isinstance(d, Evict) and d.action == "reclaim" for d in decisions)


def test_a_kept_failure_is_dropped_when_the_standings_allow_a_victim() -> None:
    """No victim was allowed (queue c within its share); c's share shrinks as queue a
    asks for more: the same candidates, now allowed."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    for _ in range(4):
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
    for _ in range(4):
        world.apply(("submit", 0, 1, "b", 50, False, "", False, True))
    world.apply(("submit", 0, 1, "a", 50, False, "", False, False))
    cache = CycleCache()
    first = decide(world, cache)
    decide(world, cache)
    for _ in range(6):  # a asks for more: the fair shares move
        world.apply(("submit", 0, 1, "a", 50, False, "", False, False))
    later = decide(world, cache)
    assert first != later or any(isinstance(d, Evict) for d in later)


def test_nothing_changes_when_nothing_can_be_taken() -> None:
    """A steady backlog: every cycle after the first is settled by keys and kept
    failures, and decides what the full rebuild decides (nothing)."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    for _ in range(8):
        world.apply(("submit", 0, 1, "a", 150, False, "", False, True))  # not preemptible
    for i in range(40):
        world.apply(("submit", i % 2, 1 + i % 3, "abc"[i % 3], 50, False, "", False, False))
    cache = CycleCache()
    for _ in range(3):
        assert decide(world, cache) == []
