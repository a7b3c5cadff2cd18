"""The candidate victims a cycle cache keeps between cycles (incremental/candidates.py)
against those a cycle builds afresh: the same units, in the same victim order, as the
cycle begins and once allocate has placed (a job it grew has another surplus), and the
same decisions."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import DEFAULT_ACTIONS, CycleCache, CycleResult, SchedulerConfig, TaskStatus
from kai_ray.core.cycle import finish_cycle, prepare_cycle, run_action
from kai_ray.core.session.context import CycleContext
from tests.core.test_incremental import World, node, run_steps
from tests.core.test_victimpool import crowded, crowded_world, later
from tests.properties import examples


def described(ctx: CycleContext) -> list[tuple[str, tuple[int, ...], bool]]:
    """The candidates as a cycle would take them now, by job name and task index."""
    ctx.victims = None  # not the ones taken earlier in the cycle: those of this moment
    units = ctx.victim_candidates().units
    return [(u.job.name, tuple(t.index for t in u.tasks), u.surplus) for u in units]


def arrays(ctx: CycleContext) -> list[object]:
    """The candidates' arrays."""
    ctx.victims = None
    return [a.tolist() for a in ctx.victim_candidates().arrays()]


def kept_and_fresh(world: World, cache: CycleCache) -> tuple[CycleResult, CycleResult]:
    """One cycle each way, the candidates compared as it begins and after allocate."""
    snap, config, now = world.snapshot(), world.config, world.now
    inc = prepare_cycle(snap, config, now, cache=cache, changed=world.in_place)
    full = prepare_cycle(snap, config, now)
    assert described(inc) == described(full)
    assert arrays(inc) == arrays(full)
    for name in config.actions:
        run_action(inc, name)
        run_action(full, name)
        if name == "allocate":  # placed, nothing evicted: the kept ones, touched jobs made again
            assert inc.stmt.running_mark == 0
            assert described(inc) == described(full)
            assert arrays(inc) == arrays(full)
    results = finish_cycle(inc), finish_cycle(full)
    cache.restore(inc.stmt)
    return results


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded, st.lists(st.tuples(st.lists(later, max_size=4), st.booleans()), min_size=2, max_size=10))
def test_the_kept_candidates_are_those_built_afresh(
    world_spec: tuple[list[tuple[int, float, bool]], str, list[tuple[Any, ...]]],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
) -> None:
    run_steps(crowded_world(world_spec), CycleCache(), steps, kept_and_fresh)


def test_a_job_allocate_grows_is_a_candidate_with_the_surplus_it_has_now() -> None:
    world = World([node(0, 4, 16.0)], SchedulerConfig(actions=DEFAULT_ACTIONS))
    # Elastic (min 1): two of its three tasks run, one of them surplus.
    world.apply(("submit", 0, 3, "c", 50, "elastic", "", False, True))
    job = world.jobs[0]
    third = dataclasses.replace(job.tasks[2], status=TaskStatus.PENDING, node=None)
    world.jobs[0] = dataclasses.replace(job, tasks=[*job.tasks[:2], third])
    cache = CycleCache()
    kept_and_fresh(world, cache)  # kept from here on (nothing carried out: the same snapshot again)
    inc = prepare_cycle(world.snapshot(), world.config, world.now, cache=cache)
    assert described(inc) == [("j1", (1,), True), ("j1", (0,), False)]
    # Allocate places the third: a candidate too (a placement of the cycle may be taken
    # back), and one more surplus; the gang (min 1) is the first task still.
    run_action(inc, "allocate")
    assert described(inc) == [("j1", (2,), True), ("j1", (1,), True), ("j1", (0,), False)]
    cache.restore(inc.stmt)


def test_a_job_that_came_is_kept_as_the_snapshot_has_it_not_as_the_cycle_grew_it() -> None:
    world = World([node(0, 4, 16.0)], SchedulerConfig(actions=DEFAULT_ACTIONS))
    world.apply(("submit", 6, 1, "b", 50, "", "", False, True))  # a cpu-only job: the cache has candidates
    cache = CycleCache()
    kept_and_fresh(world, cache)
    # Comes with a patch: elastic (min 1), two of its three tasks running; allocate
    # places the third (never carried out), one more surplus then.
    world.apply(("submit", 0, 3, "c", 50, "elastic", "", False, True))
    job = world.jobs[-1]
    third = dataclasses.replace(job.tasks[2], status=TaskStatus.PENDING, node=None)
    world.jobs[-1] = dataclasses.replace(job, tasks=[*job.tasks[:2], third])
    inc = prepare_cycle(world.snapshot(), world.config, world.now, cache=cache)
    run_action(inc, "allocate")
    grown = [("j2", (2,), True), ("j2", (1,), True), ("j2", (0,), False), ("j1", (0,), False)]
    assert described(inc) == grown  # first asked for once allocate grew it
    cache.restore(inc.stmt)
    inc = prepare_cycle(world.snapshot(), world.config, world.now, cache=cache)
    assert described(inc) == [("j2", (1,), True), ("j2", (0,), False), ("j1", (0,), False)]
    cache.restore(inc.stmt)
