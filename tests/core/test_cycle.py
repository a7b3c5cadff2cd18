"""Options of run_cycle that are the caller's to choose."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

from kai_ray.core import SchedulerConfig, run_cycle
from kai_ray.core.rules.policy import DEFAULT_POLICY, job_order_key
from kai_ray.core.state.jobs import Job

from .builders import ClusterBuilder


@pytest.mark.parametrize("pause_gc", [False, True])
def test_the_cyclic_gc_is_paused_during_the_cycle_only_when_the_caller_asks(pause_gc: bool) -> None:
    seen: list[bool] = []

    def watching(job: Job) -> tuple[object, ...]:
        seen.append(gc.isenabled())  # called while allocate orders the jobs
        return job_order_key(job)

    snap = ClusterBuilder().node("n0", gpus=1).job("j", "default").pending().build()
    policy = replace(DEFAULT_POLICY, job_order=watching)
    assert gc.isenabled()
    run_cycle(snap, SchedulerConfig(actions=("allocate",)), 0.0, policy, pause_gc=pause_gc)
    assert seen and set(seen) == {not pause_gc}
    assert gc.isenabled()  # and the caller's setting is back


def test_work_still_reported_on_a_node_that_left_is_no_victim() -> None:
    # "gone" is not among the nodes: its task holds nothing, and moving it would free
    # nothing (consolidation used to take it, and evicting it failed).
    snap = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .node("n1", gpus=2)
        .job("a", "default", gpu=1)
        .running("n0")
        .job("b", "default", gpu=1)
        .running("n1")
        .job("ghost", "default", gpu=0.5)  # the youngest: the first it would move
        .running("gone")
        .job("wants", "default", gpu=2)
        .pending()
        .build()
    )
    result = run_cycle(snap, SchedulerConfig(actions=("consolidation",)), 0.0)
    moved = {d.job for d in result.decisions if type(d).__name__ == "Evict"}
    assert "ghost" not in moved and moved  # a or b moved to make room
