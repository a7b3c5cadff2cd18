"""Options of run_cycle that are the caller's to choose."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

from kai_ray.core import SchedulerConfig, run_cycle
from kai_ray.core.cluster import Job
from kai_ray.core.policy import DEFAULT_POLICY, job_order_key

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
