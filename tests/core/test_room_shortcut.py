"""A gang that asks for more whole GPUs than its nodes have idle fails at once
(placement.py, Placer._short_of_room): the GPU index keeps the idle total of its nodes
(nodeindex.py), and a gang short of it places no task to take back. Where some of those
nodes are releasing GPUs the gang may still wait for them (pipelined): no shortcut."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kai_ray.core import SchedulerConfig
from kai_ray.core.cycle import prepare_cycle
from kai_ray.core.model.snapshot import ClusterSnapshot
from kai_ray.core.rules.nodeindex import GpuBuckets
from kai_ray.core.session.context import CycleContext

from .builders import ClusterBuilder, cycle, outcome


def _h100_half_used() -> ClusterBuilder:
    """An H100 node with 4 of its 8 GPUs taken, an empty A100 node."""
    b = ClusterBuilder().node("h0", gpus=8, gpu_type="H100").node("a0", gpus=8, gpu_type="A100")
    return b.job("busy", "default", gpu=4, gpu_types=("H100",)).running("h0")


def _context(snap: ClusterSnapshot) -> CycleContext:
    return prepare_cycle(snap, SchedulerConfig(actions=("allocate",)), 0.0)


def _whole_idle(ctx: CycleContext, buckets: GpuBuckets) -> int:
    nodes = ctx.state.nodes
    rows = np.flatnonzero(nodes.schedulable)
    return int(sum(max(0, int(nodes.idle[r, 0] + 1e-9)) for r in rows if buckets.indexed[r]))


def test_a_gang_short_of_its_types_idle_gpus_places_nothing_to_take_back() -> None:
    snap = _h100_half_used().job("j", "default", gpu=4, gpu_types=("H100",)).pending(2).build()
    ctx = _context(snap)
    job = next(j for j in ctx.state.jobs if j.name == "j")
    before = len(ctx.stmt.changed_tasks)
    assert not ctx.placer.place_gang(ctx.stmt, job, job.missing(), "allocate")
    assert len(ctx.stmt.changed_tasks) == before  # no task was placed, then taken back
    assert job.active_count == 0


def test_the_same_gang_fits_where_its_type_has_the_room() -> None:
    snap = _h100_half_used().job("j", "default", gpu=4, gpu_types=("A100",)).pending(2).build()
    assert outcome(cycle(snap, "allocate"))["j"] == {"bind@a0"}


def test_releasing_gpus_of_the_type_keep_the_gang_trying_to_pipeline() -> None:
    b = ClusterBuilder().node("h0", gpus=8, gpu_type="H100").node("a0", gpus=8, gpu_type="A100")
    b.job("leaving", "default", gpu=4, gpu_types=("H100",)).releasing("h0")
    b.job("busy", "default", gpu=4, gpu_types=("H100",)).running("h0")
    snap = b.job("j", "default", gpu=2, gpu_types=("H100",)).pending(2).build()
    ctx = _context(snap)
    job = next(j for j in ctx.state.jobs if j.name == "j")
    assert ctx.placer.buckets.whole == 8  # the A100 node's: H100 has none idle
    assert ctx.placer.place_gang(ctx.stmt, job, job.missing(), "allocate")
    assert ctx.stmt.pipelined  # both tasks wait for the releasing half of h0


@pytest.mark.parametrize("seed", range(5))
def test_the_index_keeps_the_idle_total_through_places_and_rollbacks(seed: int) -> None:
    rng = random.Random(seed)
    b = ClusterBuilder()
    for i in range(6):
        b.node(f"n{i}", gpus=rng.choice((2, 4, 8)))
    for i in range(12):
        b.job(f"w{i}", "default", gpu=rng.choice((1, 2))).pending(rng.choice((1, 2, 3)))
    ctx = _context(b.build())
    buckets = ctx.placer.buckets
    marks = []
    for job in ctx.state.jobs:
        marks.append(ctx.stmt.checkpoint())
        ctx.placer.place_gang(ctx.stmt, job, job.missing(), "allocate")
        assert buckets.whole == _whole_idle(ctx, buckets)
    for mark in reversed(marks[::2]):
        ctx.stmt.rollback(mark)
        assert buckets.whole == _whole_idle(ctx, buckets)


@pytest.mark.parametrize("seed", range(4))
def test_a_nodes_own_check_says_what_the_all_node_check_says_of_it(seed: int) -> None:
    """Placer.fits_at (one node's row, for the solver's pipelined plays) answers as fits
    over a mask of that node alone, fractions of a device included."""
    rng = random.Random(seed)
    b = ClusterBuilder()
    for i in range(5):
        memory = rng.choice((40, 80)) * 2**30
        b.node(f"n{i}", gpus=rng.choice((1, 2, 4)), cpu=rng.choice((2, 8)), gpu_memory=memory)
    for i in range(8):
        if rng.random() < 0.4:
            b.job(f"f{i}", "default", gpu=rng.choice((0.25, 0.5)), cpu=1).running(f"n{rng.randrange(5)}")
        else:
            b.job(f"w{i}", "default", gpu=1, cpu=rng.choice((1, 3))).running(f"n{rng.randrange(5)}")
    b.job("half", "default", gpu=0.5, cpu=2).pending()
    b.job("slice", "default", gpu_memory=30 * 2**30, cpu=1).pending()
    b.job("whole", "default", gpu=2, cpu=4).pending()
    ctx = _context(b.build())
    nodes, said = ctx.state.nodes, set()
    for job in (j for j in ctx.state.jobs if j.name in ("half", "slice", "whole")):
        task = job.tasks[0]
        for node in range(len(nodes)):
            alone = np.zeros(len(nodes), dtype=bool)
            alone[node] = True
            answer = ctx.placer.fits_at(task, node)
            assert answer == bool(ctx.placer.fits(task, alone, future=False)[node])
            said.add(answer)
    assert said == {True, False}  # some nodes full, some with room
