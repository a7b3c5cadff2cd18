"""The caches a deep backlog is decided with (incremental/gangs.py, outcomes.py) against
the full rebuild: named cases where a kept line, a kept failure or settling by key would
go wrong if they kept too much. Random sequences: test_incremental.py."""

from __future__ import annotations

import dataclasses
import gc

from kai_ray.core import UNLIMITED, CycleCache, QueueInfo, SchedulerConfig, TaskStatus, run_cycle
from kai_ray.core.model.snapshot import Bind, Evict
from kai_ray.core.rules.policy import DEFAULT_POLICY, Policy
from kai_ray.core.state.jobs import Job
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


def test_a_reclaim_that_tried_victims_is_searched_again_when_the_shares_move() -> None:
    """A gang of queue a would reclaim from b and c (over their shares, overcommitted),
    and no scenario the search tries is valid. Another job of a moves the shares: the
    search finds room. A failure kept from the first cycle rested on every standing, so
    the moved shares search again (and the cycle cache decides as the full rebuild).
    The state was found by a seeded search over such worlds for one that fails first
    and reclaims once a's second job arrives."""
    world = World([node(0, 3, 16.0), node(1, 4, 16.0), node(2, 8, 16.0)], SchedulerConfig())
    for queue, request, count, priority in [
        ("b", 0, 2, 100), ("b", 1, 3, 100), ("c", 1, 3, 100), ("b", 0, 1, 100), ("c", 0, 2, 50),
        ("b", 1, 2, 50), ("b", 1, 1, 50), ("c", 0, 1, 100),
    ]:  # fmt: skip
        world.apply(("submit", request, count, queue, priority, "", "", False, True))
    world.apply(("submit", 0, 2, "a", 50, "", "", False, False))
    cache = CycleCache()
    assert not decide(world, cache)  # tried, no room
    world.apply(("submit", 0, 1, "a", 50, "", "", False, False))
    assert any(isinstance(d, Evict) and d.action == "reclaim" for d in decide(world, cache))


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


def two_queues_reclaiming() -> World:
    """Queues a and b under dept, alike; queue c holds the two 4-GPU nodes with eight
    preemptible one-GPU jobs, over its share: a and b may each take one back."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    world.queues = [
        QueueInfo("dept", quota=(4, UNLIMITED, UNLIMITED)),
        QueueInfo("a", parent="dept", quota=(2, UNLIMITED, UNLIMITED)),
        QueueInfo("b", parent="dept", quota=(2, UNLIMITED, UNLIMITED)),
        QueueInfo("c", quota=(4, UNLIMITED, UNLIMITED)),
    ]
    for _ in range(8):
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
    return world


def wait(world: World, queue: str, tasks: int, nowhere: bool) -> None:
    """A gang of one-GPU tasks; `nowhere`: on a rack that does not exist (it never runs)."""
    world.apply(("submit", 0, tasks, queue, 50, False, "", False, False))
    if nowhere:
        world.jobs[-1] = dataclasses.replace(world.jobs[-1], node_selector={"rack": "r9"})


def takers(world: World, cache: CycleCache, policy: Policy = DEFAULT_POLICY) -> dict[str, str]:
    """Decided both ways: each job reclaimed -> the queue that took it."""
    snapshot = world.snapshot()
    inc = run_cycle(snapshot, world.config, world.now, policy, cache=cache)
    assert inc == run_cycle(snapshot, world.config, world.now, policy)
    return {d.job: d.reason.split()[3] for d in inc.decisions if isinstance(d, Evict)}


def test_a_run_of_settled_jobs_is_not_taken_past_a_queue_that_ties() -> None:
    """With ranks that tie, queues a and b take turns: a1, b1, a2, b2, a3. a1, a2 and
    b1 can never run and are passed over; b2 comes first and reclaims one of queue c's
    jobs, youngest first (with every queue tied the solver also moves two of c's jobs to
    make that room: their evictions name their taker too). a3, behind it, finds c's
    moved jobs first among its victims (as KAI, a task moved this cycle may be taken
    again), every scenario they lead to gives the room back, and it waits a cycle: only
    b takes. Taking a's run (a2, then a3) at once would put a3 before b2, a3 would take
    first, and the kept line would decide otherwise than the full rebuild (takers
    checks both)."""
    ties = dataclasses.replace(DEFAULT_POLICY, queue_rank=lambda state, rows, q, amount: (0,))
    world = two_queues_reclaiming()
    cache = CycleCache()
    takers(world, cache, ties)
    for queue, nowhere in (("a", True), ("b", True), ("a", True), ("b", False), ("a", False)):
        wait(world, queue, 1, nowhere)
    assert set(takers(world, cache, ties).values()) == {"b"}


def test_a_run_of_settled_jobs_ends_where_the_queue_ranks_otherwise() -> None:
    """a1 (one GPU) and a2 (three: more than a's deserved two) never run; a3 and b1
    reclaim. After a1, queue a with a2 next ranks behind b: b1 reclaims first. Taking
    a2 in a's run would let a3 come before b1."""
    world = two_queues_reclaiming()
    cache = CycleCache()
    takers(world, cache)
    wait(world, "a", 1, True)
    wait(world, "a", 3, True)
    wait(world, "a", 1, False)
    wait(world, "b", 1, False)
    assert sorted(takers(world, cache).values()) == ["a", "b"]


def test_allocate_tries_the_rest_of_its_line_by_key_without_reordering_it() -> None:
    """One GPU is free. b_small came first but queue b already holds three GPUs, so
    queue order serves a first: its ten 2-GPU jobs fail, then a_small takes the GPU.
    Trying the one-GPU key early (b_small stands for it) must not let b_small keep it."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    for queue in ("b", "b", "b", "c", "c", "c", "c"):
        world.apply(("submit", 0, 1, queue, 150, False, "", False, True))
    cache = CycleCache()
    decide(world, cache)
    world.apply(("submit", 0, 1, "b", 50, False, "", False, False))
    for _ in range(10):
        world.apply(("submit", 0, 2, "a", 50, False, "", False, False))
    world.apply(("submit", 0, 1, "a", 50, False, "", False, False))
    bound = {d.job for d in decide(world, cache) if isinstance(d, Bind)}
    assert bound == {world.jobs[-1].name}


def test_a_run_takes_only_jobs_that_have_their_reason() -> None:
    """Reclaim alone (no allocate to give reasons first): a1, a2 and a3 ask three GPUs
    each, a's fair share; b1 asks one. a1 reclaims; then a2 is turned away by a's fair
    share, and a3, of a2's key, comes next in a's line without a reason yet: it takes
    its step and is told why it waits, as the full walk tells it, rather than being
    passed over in a2's run."""
    world = two_queues_reclaiming()
    world.config = dataclasses.replace(world.config, actions=("reclaim",))
    for queue, tasks in (("a", 3), ("a", 3), ("a", 3), ("b", 1)):
        wait(world, queue, tasks, False)
    a1, a2, a3 = (j.name for j in world.jobs if j.queue == "a")
    cache = CycleCache()
    takers(world, cache)
    result = run_cycle(world.snapshot(), world.config, world.now, cache=cache)
    assert result == run_cycle(world.snapshot(), world.config, world.now)
    assert a1 not in result.waiting
    assert {result.waiting[a2].code, result.waiting[a3].code} == {"fair-share"}


def test_jobs_that_came_and_finished_while_nothing_waits_are_let_go() -> None:
    """A gang waits once (the actions keep what they found), then nothing waits while
    running jobs come and finish: the cache must not hold on to them. A scheduler runs
    for months; what it keeps of jobs that are gone is a leak."""
    world = World([node(i, 4, 16.0) for i in range(2)], SchedulerConfig())
    cache = CycleCache()
    world.apply(("submit", 0, 9, "a", 50, False, "", False, False))  # nine GPUs: waits
    decide(world, cache)
    world.apply(("finish", 0))
    decide(world, cache)
    finished: set[str] = set()
    for _ in range(5):
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
        finished.add(world.jobs[0].name)
        decide(world, cache)
        world.apply(("finish", 0))
        decide(world, cache)
    assert cache.state is not None and not cache.state.jobs
    gc.collect()
    assert [o.info.name for o in gc.get_objects() if isinstance(o, Job) and o.info.name in finished] == []
