"""The job solver's capacity bound (solver.solve, capacity.refused_with_all_gone): a victim
search whose job its queue's limit (or, for non-preemptible work, its quota) refuses even
with every candidate gone plays no scenario, and decides as the scenarios would have: the
job waits and nothing is evicted. Where the candidates inside the queue free enough, the
scenarios are played and the job gets in. (Reclaim meets the bound less: a reclaimer
over its limit is over its fair share too, which reclaim checks first.)"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

import pytest

from kai_ray.core import Evict, Pipeline, SchedulerConfig
from kai_ray.core.actions import solver
from kai_ray.core.cycle import prepare_cycle
from kai_ray.core.rules.capacity import refused_with_all_gone

from .builders import ClusterBuilder, cycle


@pytest.fixture
def played(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The jobs of the scenarios the solver simulated, one entry per scenario."""
    seen: list[str] = []
    simulate = solver._simulate

    def spy(ctx, job, tasks, victims, terms):  # type: ignore[no-untyped-def]
        seen.append(job.name)
        return simulate(ctx, job, tasks, victims, terms)

    monkeypatch.setattr(solver, "_simulate", spy)
    yield seen


def _one_queue(limit: float) -> ClusterBuilder:
    """q on n0 (4 GPUs, 1 free): `held` (2 GPUs, not a victim: not below the new job's
    priority) and `victim` (1 GPU, below it); `new` asks for 2 GPUs on one node, which
    the free GPU and the victim's make. What q holds with the victim gone: 2."""
    b = ClusterBuilder().node("n0", gpus=4).queue("q", gpu_quota=2, gpu_limit=limit)
    b.job("held", "q", gpu=1, priority="build-preemptible").running("n0", count=2)
    b.job("victim", "q", gpu=1, priority="train").running("n0")
    b.job("new", "q", gpu=2, priority="build-preemptible").pending()
    return b


@pytest.mark.parametrize(
    ("name", "limit", "gets_in"),
    [
        ("limit-refuses-even-with-every-victim-gone", 3, False),  # 2 + 2 > 3
        ("the-victim-frees-enough-of-the-limit", 4, True),  # 2 + 2 <= 4
        ("no-limit", -1, True),
    ],
)
def test_preempt_plays_no_scenario_the_limit_refuses(
    played: list[str], name: str, limit: float, gets_in: bool
) -> None:
    result = cycle(_one_queue(limit).build(), "allocate", "preempt")
    evicted = {d.job for d in result.decisions if isinstance(d, Evict)}
    pipelined = {d.job for d in result.decisions if isinstance(d, Pipeline)}
    assert (evicted, pipelined) == (({"victim"}, {"new"}) if gets_in else (set(), set())), name
    assert bool(played) == gets_in, name  # a scenario is played only where the limit may let it in


def test_non_preemptible_quota_counts_only_non_preemptible_victims() -> None:
    """Non-preemptible work is held to its queue's quota: a preemptible task gone gives
    none of it back, a non-preemptible one does."""
    b = ClusterBuilder().node("n0", gpus=4).queue("q", gpu_quota=2)
    b.job("np", "q", gpu=1, priority="build").running("n0", count=2)
    b.job("p", "q", gpu=1, priority="train").running("n0", count=2)
    b.job("new", "q", gpu=1, priority="build").pending()
    ctx = prepare_cycle(b.build(), SchedulerConfig(), 0.0)
    jobs = {j.name: j for j in ctx.state.jobs}
    ask = ctx.capacity_amount(jobs["new"].tasks)
    refused = partial(refused_with_all_gone, ctx.state, ctx.shares, jobs["new"], ask)
    assert refused([])  # 2 + 1 > 2
    assert refused(jobs["p"].tasks)  # still 2 + 1: preemptible work is not counted
    assert not refused(jobs["np"].tasks[:1])  # 1 + 1 <= 2
