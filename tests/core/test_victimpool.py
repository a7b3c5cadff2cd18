"""The victim pool's shortcuts (core/actions/victimpool.py) change no decision: the bound that
ends a hopeless search before it evicts, and the candidates shared between searches and
actions. Each is checked against a cycle without it: the bound never refusing, and the
candidates built afresh for every search."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import DEFAULT_ACTIONS, UNLIMITED, QueueInfo, SchedulerConfig, run_cycle
from kai_ray.core.actions.victimpool import ActionCandidates, VictimPool
from kai_ray.core.model.snapshot import Evict
from kai_ray.core.rules.policy import DEFAULT_POLICY, may_reclaim_from
from kai_ray.core.session import context as session_context
from kai_ray.core.session.candidates import Candidates
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.jobs import Unit
from kai_ray.core.state.statement import Statement
from tests.core.test_incremental import World, node, ops
from tests.properties import examples


@contextmanager
def without_shortcuts(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every search runs in full, over candidates built for it."""
    with monkeypatch.context() as m:
        m.setattr(VictimPool, "may_fit", lambda self, tasks, ever: True)
        m.setattr(VictimPool, "_taken_by", lambda self, ever: self.live)  # every node tried in full
        m.setattr(CycleContext, "victim_candidates", _fresh_build)
        m.setattr(ActionCandidates, "taken_by", _filtered_for_each_search)
        m.setattr(Candidates, "live", _live_unit_by_unit)
        yield


def _filtered_for_each_search(self: ActionCandidates, inputs: object, takes: Any) -> list[Unit]:
    return [u for u in self.get().units if takes(u)]


def _live_unit_by_unit(self: Candidates, mark: int) -> np.ndarray:
    return np.array([u.live() for u in self.units], dtype=bool)


_kept_build = CycleContext.victim_candidates


def _fresh_build(ctx: Any) -> Any:
    ctx.victims = None  # nothing kept: built for this search
    return _kept_build(ctx)


def count_evictions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times any search evicts a task, kept or rolled back."""
    calls = [0]
    evict = Statement.evict

    def counted(self: Statement, *args: Any) -> None:
        calls[0] += 1
        evict(self, *args)

    monkeypatch.setattr(Statement, "evict", counted)
    return calls


def full_of_c(gpus_per_node: int = 3) -> World:
    """Two nodes, all held by queue c's preemptible one-GPU jobs (submitted to n1, n0,
    n1, ... in turn); c deserves nothing, queue a deserves the whole cluster."""
    world = World([node(i, gpus_per_node, 16.0) for i in range(2)], SchedulerConfig())
    gpus = 2 * gpus_per_node
    world.queues = [
        QueueInfo("a", quota=(gpus, UNLIMITED, UNLIMITED)),
        QueueInfo("c", quota=(0, UNLIMITED, UNLIMITED)),
    ]
    for _ in range(gpus):
        world.apply(("submit", 0, 1, "c", 50, False, "", False, True))
    return world


def test_a_gang_no_eviction_could_place_is_refused_before_any_victim_is_tried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Queue a asks for three two-GPU tasks: six GPUs, its share, but each node holds
    one such task at most. The full search evicts on both nodes before it finds the
    third place missing; the bound refuses it first. Both leave the same result."""
    world = full_of_c()
    world.apply(("submit", 1, 3, "a", 50, False, "", False, False))
    calls = count_evictions(monkeypatch)
    bounded = run_cycle(world.snapshot(), world.config, world.now)
    assert calls[0] == 0
    with without_shortcuts(monkeypatch):
        full = run_cycle(world.snapshot(), world.config, world.now)
    assert calls[0] > 0
    assert bounded == full
    assert not any(isinstance(d, Evict) for d in full.decisions)


def test_a_gang_that_fits_once_victims_leave_is_not_refused() -> None:
    """Two two-GPU tasks, one per node: the bound lets the search run, and it takes two
    victims on each node."""
    world = full_of_c()
    world.apply(("submit", 1, 2, "a", 50, False, "", False, False))
    result = run_cycle(world.snapshot(), world.config, world.now)
    assert sum(isinstance(d, Evict) for d in result.decisions) == 4


def test_candidates_are_shared_while_the_same_evictions_stand(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two of reclaim's searches (two keys: preemptible and not), each evicting and
    rolling back, then preempt: the victims are built once in the cycle."""
    world = full_of_c()
    world.apply(("submit", 1, 3, "a", 50, False, "", False, False))
    world.apply(("submit", 1, 3, "a", 100, False, "", False, False))
    builds = [0]
    real = session_context.victim_units

    def counted(*args: Any) -> Any:
        builds[0] += 1
        return real(*args)

    monkeypatch.setattr(session_context, "victim_units", counted)
    calls = count_evictions(monkeypatch)
    monkeypatch.setattr(VictimPool, "may_fit", lambda self, tasks, ever: True)
    result = run_cycle(world.snapshot(), world.config, world.now)
    assert calls[0] >= 4 and not any(isinstance(d, Evict) for d in result.decisions)
    assert builds[0] == 1


def test_the_victims_a_search_may_take_are_listed_once_per_victim_inputs() -> None:
    """Reclaim for three gangs of queue a: two non-preemptible ones of different
    priorities (different searches, the same victim inputs: queue and preemptibility)
    and a preemptible one. The policy's filter is asked once per candidate for each of
    the two sets of inputs, and decides as a filter asked for every search would."""
    world = full_of_c()
    world.apply(("submit", 1, 3, "a", 50, False, "", False, False))
    world.apply(("submit", 1, 3, "a", 100, False, "", False, False))
    world.apply(("submit", 1, 3, "a", 75, False, "", True, False))
    asked: list[tuple[str, str]] = []

    def counted(reclaimer: Any, victim: Any) -> bool:
        asked.append((reclaimer.name, victim.name))
        return bool(may_reclaim_from(reclaimer, victim))

    policy = dataclasses.replace(DEFAULT_POLICY, may_reclaim_from=counted)
    actions = ("reclaim",)
    config = SchedulerConfig(actions=actions)
    run_cycle(world.snapshot(), config, world.now, policy)
    candidates = 6  # queue c's one-GPU jobs
    assert len(asked) == 2 * candidates
    assert len({reclaimer for reclaimer, _ in asked}) == 2


SLOW_OK = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]  # the patch is undone each time


def submit(queues: list[str], running: bool) -> st.SearchStrategy[tuple[Any, ...]]:
    """A job of whole or fractional GPUs (one to three tasks), elastic or not."""
    return st.tuples(
        st.just("submit"),
        st.sampled_from([0, 0, 1, 1, 2, 4]),
        st.integers(1, 3),
        st.sampled_from(queues),
        st.sampled_from([50, 50, 75, 100, 125]),
        st.sampled_from(["", "", "elastic"]),
        st.sampled_from(["", "", "required"]),
        st.sampled_from([False, False, True]),
        st.just(running),
    )


# Full clusters with queues over their share running, and others waiting: most cycles
# search for victims, some succeed, many fail (the bound decides those).
crowded = st.tuples(
    st.lists(st.tuples(st.sampled_from([2, 3, 4, 8]), st.just(16.0), st.just(False)), min_size=2, max_size=4),
    st.sampled_from(["binpack", "spread"]),
    st.lists(submit(["b", "c", "c"], running=True), min_size=4, max_size=14),
)
later = st.one_of(submit(["a", "a", "b", "c"], running=False), ops)


def crowded_world(world_spec: tuple[list[tuple[int, float, bool]], str, list[tuple[Any, ...]]]) -> World:
    shapes, placement, running = world_spec
    nodes = [node(i, gpus, cpu, extended=ext) for i, (gpus, cpu, ext) in enumerate(shapes)]
    world = World(nodes, SchedulerConfig(actions=DEFAULT_ACTIONS, gpu_placement=placement))
    for op in running:
        world.apply(op)
    return world


@settings(max_examples=examples(200), deadline=None, suppress_health_check=SLOW_OK)
@given(crowded, st.lists(st.tuples(st.lists(later, max_size=4), st.booleans()), min_size=2, max_size=10))
def test_the_shortcuts_decide_as_full_searches(
    monkeypatch: pytest.MonkeyPatch,
    world_spec: tuple[list[tuple[int, float, bool]], str, list[tuple[Any, ...]]],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
) -> None:
    world = crowded_world(world_spec)
    for step, carried_out in steps:
        for op in step:
            world.apply(op)
        result = run_cycle(world.snapshot(), world.config, world.now)
        with without_shortcuts(monkeypatch):
            reference = run_cycle(world.snapshot(), world.config, world.now)
        assert result == reference
        if carried_out:
            world.carry_out(result)


def test_a_search_after_a_success_sees_that_success_s_victims_gone() -> None:
    """Queue c runs four one-GPU jobs on two 2-GPU nodes; youngest first, they are
    j4 (n0), j3 (n1), j2 (n0), j1 (n1). Queue a reclaims for two one-GPU jobs: the first
    takes j4 on n0. For the second, n0's first victim is now j2, behind n1's j3: j3 goes.
    A pool that still counted j4 running would put n0 first and take j2."""
    world = full_of_c(gpus_per_node=2)
    for _ in range(2):
        world.apply(("submit", 0, 1, "a", 50, False, "", False, False))
    result = run_cycle(world.snapshot(), world.config, world.now)
    assert {d.job for d in result.decisions if isinstance(d, Evict)} == {"j4", "j3"}


def test_a_victim_whose_side_may_not_give_is_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 2-GPU nodes: n0 runs c's j4 and b's j2, n1 runs c's j3 and j1. Queue c is
    over its fair share, b is not (it may not give). Queue a reclaims for one two-GPU
    task: n0 cannot be freed without b's j2, so the scenarios that take it are judged
    invalid and n1 is freed, with or without the shortcuts."""
    world = World([node(i, 2, 16.0) for i in range(2)], SchedulerConfig())
    world.queues = [
        QueueInfo("a", quota=(2, UNLIMITED, UNLIMITED)),
        QueueInfo("b", quota=(2, UNLIMITED, UNLIMITED)),
        QueueInfo("c", quota=(0, UNLIMITED, UNLIMITED)),
    ]
    for queue in ("c", "b", "c", "c"):  # j1 on n1, j2 on n0, j3 on n1, j4 on n0
        world.apply(("submit", 0, 1, queue, 50, False, "", False, True))
    world.apply(("submit", 1, 1, "a", 50, False, "", False, False))
    skipping = run_cycle(world.snapshot(), world.config, world.now)
    with without_shortcuts(monkeypatch):
        full = run_cycle(world.snapshot(), world.config, world.now)
    assert skipping == full
    assert {d.job for d in full.decisions if isinstance(d, Evict)} == {"j3", "j1"}
