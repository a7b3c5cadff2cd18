"""What the victim bound sums, kept in step with the statement rather than summed anew
for each search (actions/victimpool.py LiveFrees, session/candidates.py
Candidates.live): after evictions, placements and rollbacks, in any order, the kept
figures equal those worked out from scratch."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kai_ray.core import SchedulerConfig
from kai_ray.core.actions.victimpool import LiveFrees, VictimPool
from kai_ray.core.cycle import prepare_cycle
from kai_ray.core.session.candidates import Candidates, SharedUnits, victim_units
from kai_ray.core.session.context import CycleContext

from .builders import ClusterBuilder


def _cycle(seed: int, jobs: int = 10) -> tuple[CycleContext, Candidates, SharedUnits]:
    rng = random.Random(seed)
    b = ClusterBuilder().queue("q", gpu_quota=0)
    for i in range(4):
        b.node(f"n{i}", gpus=8 * max(1, jobs // 10))
    for i in range(jobs):
        b.job(f"r{i}", "q", gpu=1, min_member=rng.choice((0, 1)))
        for _ in range(rng.choice((1, 2, 3))):
            b.running(f"n{rng.randrange(4)}")
    b.job("w", "q", gpu=2).pending(2)
    b.job("big", "q", gpu=8).pending(5)  # 40 GPUs: more than the cluster's 32
    ctx = prepare_cycle(b.build(), SchedulerConfig(), 0.0)
    units = victim_units(ctx.state.jobs, ctx.policy.victim_order)
    candidates = Candidates(units, ctx.state.nodes.idle.shape[1])
    members = SharedUnits(u for u in units if rng.random() < 0.8)
    candidates.keep_places(members)
    return ctx, candidates, members


def _fresh_live(ctx: CycleContext, candidates: Candidates) -> np.ndarray:
    return np.array([u.live() for u in candidates.units], dtype=bool)


def _fresh_frees(ctx: CycleContext, candidates: Candidates, members: SharedUnits) -> np.ndarray:
    sums = np.zeros_like(ctx.state.nodes.idle)
    for u in members:
        if u.live():
            for t in u.tasks:
                sums[t.node] += t.demand
    return sums


@pytest.mark.parametrize("seed", range(6))
def test_kept_figures_equal_fresh_ones_through_evictions_and_rollbacks(seed: int) -> None:
    rng = random.Random(seed)
    ctx, candidates, members = _cycle(seed)
    kept = LiveFrees(candidates, candidates.places(members), ctx)
    marks: list[int] = []
    for _ in range(12):
        running = [t for u in candidates.units for t in u.tasks if t.takeable]
        if marks and (not running or rng.random() < 0.3):
            ctx.stmt.rollback(marks.pop())
        else:
            marks.append(ctx.stmt.checkpoint())
            ctx.stmt.evict(rng.choice(running), "reclaim", "test")
        assert (candidates.live(ctx.stmt) == _fresh_live(ctx, candidates)).all()
        assert np.allclose(kept.now(), _fresh_frees(ctx, candidates, members))


def test_many_changed_at_once_are_counted_anew_alike() -> None:
    """Past a few dozen changes at once (a scenario of many victims), liveness and the
    sums are worked out anew in one pass: the same figures."""
    ctx, candidates, members = _cycle(1, jobs=60)
    kept = LiveFrees(candidates, candidates.places(members), ctx)
    candidates.live(ctx.stmt)
    mark = ctx.stmt.checkpoint()
    running = [t for u in candidates.units for t in u.tasks if t.takeable]
    assert len(running) > 100  # more than either threshold
    for t in running:
        ctx.stmt.evict(t, "reclaim", "test")
    assert not candidates.live(ctx.stmt).any()
    assert np.allclose(kept.now(), 0.0)
    ctx.stmt.rollback(mark)
    assert (candidates.live(ctx.stmt) == _fresh_live(ctx, candidates)).all()
    assert np.allclose(kept.now(), _fresh_frees(ctx, candidates, members))


def test_the_bound_on_a_shared_list_answers_as_on_a_plain_one() -> None:
    ctx, candidates, members = _cycle(0)
    gangs = [next(j for j in ctx.state.jobs if j.name == name).missing() for name in ("w", "big")]
    running = [t for u in members for t in u.tasks if t.takeable]
    for step in range(len(running) + 1):
        kept = [VictimPool(ctx, candidates, members).may_fit(g, None) for g in gangs]
        fresh = [VictimPool(ctx, candidates, list(members)).may_fit(g, None) for g in gangs]
        assert kept == fresh == [True, False]
        assert isinstance(members.derived.get("live frees"), LiveFrees)
        if step < len(running):
            ctx.stmt.evict(running[step], "reclaim", "test")
