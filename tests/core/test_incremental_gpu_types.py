"""The incremental cycle against the full rebuild on clusters with GPU types and queues
that name them (docs/gpu-types.md): the per-type figures, the free GPUs per type and the
GPU index per type kept between cycles decide as the full rebuild does."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kai_ray.core import (
    PREEMPT,
    TRY_NEXT_TYPE,
    UNLIMITED,
    ClusterSnapshot,
    CycleCache,
    GpuTypeFungibility,
    GpuTypeShare,
    JobInfo,
    NodeInfo,
    Pipeline,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    run_cycle,
)
from tests.properties import examples

from .test_incremental import World, ops, run_both_ways, worlds

TYPES = ("H100", "A100")
ACCEPTS: list[tuple[str, ...]] = [(), ("H100",), ("A100", "H100")]
SHARES = {
    "dept": (GpuTypeShare("H100", 2.0, 6.0),),
    "a": (GpuTypeShare("H100", 1.0), GpuTypeShare("A100", 1.0, 4.0)),
    "c": (GpuTypeShare("A100", 2.0, -1.0, 2.0),),
}


# How each queue's work picks a type (docs/gpu-types.md, "Fungibility"): held to its
# first type (a, and its children through dept), a type within quota first (c).
MODES = {
    "dept": GpuTypeFungibility(when_can_preempt=PREEMPT),
    "c": GpuTypeFungibility(when_can_borrow=TRY_NEXT_TYPE),
}


class TypedWorld(World):
    """Nodes of two types, queues naming them, each job accepting a type, two or any."""

    def __init__(self, nodes: list[NodeInfo], config: SchedulerConfig) -> None:
        super().__init__([_typed(n) for n in nodes], config)
        self.queues = [
            dataclasses.replace(q, gpu_types=SHARES.get(q.name, ()), gpu_type_fungibility=MODES.get(q.name))
            for q in self.queues
        ]

    def apply(self, op: tuple[Any, ...]) -> None:
        before = len(self.nodes)
        super().apply(op)
        self.nodes[before:] = [_typed(n) for n in self.nodes[before:]]  # nodes added
        if op[0] == "submit":  # the new job, before any cycle sees it
            self.jobs[-1].gpu_types = ACCEPTS[self.serial % len(ACCEPTS)]


def _typed(n: NodeInfo) -> NodeInfo:
    return dataclasses.replace(n, gpu_type=TYPES[int(n.name[1:]) % 2])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds, st.lists(st.tuples(st.lists(ops, max_size=5), st.booleans()), min_size=2, max_size=12))
def test_the_incremental_cycle_decides_as_the_full_rebuild_with_gpu_types(
    world_spec: tuple[list[tuple[int, float, bool]], str, float, float],
    steps: list[tuple[list[tuple[Any, ...]], bool]],
) -> None:
    run_both_ways(world_spec, steps, TypedWorld)


def test_a_job_new_to_the_cache_is_held_to_its_first_type() -> None:
    """whenCanPreempt Preempt for a job the cache patches in (not built with the rest):
    it preempts on its first type rather than take the free room of its second."""
    nodes = [
        NodeInfo("h0", gpus=8, cpu=64.0, gpu_type="H100"),
        NodeInfo("a0", gpus=8, cpu=64.0, gpu_type="A100"),
    ]
    queues = [QueueInfo("team", quota=(16.0, UNLIMITED, UNLIMITED), gpu_type_fungibility=MODES["dept"])]
    low = JobInfo(
        "low",
        "team",
        [TaskInfo("low-0", TaskStatus.RUNNING, Request(gpu=8.0, cpu=1.0), "h0")],
        priority=50,
        preemptible=True,
        gpu_types=("H100",),
    )
    j = JobInfo(
        "j",
        "team",
        [TaskInfo("j-0", TaskStatus.PENDING, Request(gpu=4.0, cpu=1.0))],
        priority=100,
        gpu_types=("H100", "A100"),
    )
    cache = CycleCache()
    run_cycle(ClusterSnapshot(nodes, queues, [low]), SchedulerConfig(), 0.0, cache=cache)
    kept = run_cycle(ClusterSnapshot(nodes, queues, [low, j]), SchedulerConfig(), 1.0, cache=cache)
    full = run_cycle(ClusterSnapshot(nodes, queues, [low, j]), SchedulerConfig(), 1.0)
    assert kept.decisions == full.decisions
    assert Pipeline("j", "j-0", "h0") in kept.decisions
