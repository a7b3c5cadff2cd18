"""Answers that read the free room of some nodes are kept while none of those nodes
changed (rules/roomfacts.py): a waiting gang's room reason, said again for each
look-alike, is worked out anew only after its own GPU type's nodes moved, and always
reads as it would worked out afresh. The GPU index's count of nodes releasing GPUs
(nodeindex.py, for Placer._short_of_room) stays what a fresh count says."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kai_ray.core import SchedulerConfig
from kai_ray.core.cycle import prepare_cycle
from kai_ray.core.model.snapshot import ClusterSnapshot
from kai_ray.core.model.words import gang_words
from kai_ray.core.rules import reasons
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.jobs import Job

from .builders import ClusterBuilder


def _context(snap: ClusterSnapshot) -> CycleContext:
    return prepare_cycle(snap, SchedulerConfig(actions=("allocate",)), 0.0)


def _job(ctx: CycleContext, name: str) -> Job:
    return next(j for j in ctx.state.jobs if j.name == name)


def _two_types() -> ClusterBuilder:
    b = ClusterBuilder()
    for i in range(2):
        b.node(f"h{i}", gpus=8, gpu_type="H100").node(f"a{i}", gpus=8, gpu_type="A100")
    return b


def test_an_answer_is_kept_while_its_types_nodes_stand_and_worked_out_after_they_move() -> None:
    b = _two_types()
    b.job("on-a100", "default", gpu=2, gpu_types=("A100",)).pending()
    b.job("on-h100", "default", gpu=2, gpu_types=("H100",)).pending()
    ctx = _context(b.build())
    placer, stmt = ctx.placer, ctx.stmt
    h100 = placer.gpu_types.of(placer.gpu_types.index["H100"])
    worked: list[int] = []

    def ask() -> int:
        return placer.room_facts.get(("test",), h100, h100.tobytes(), lambda: worked.append(1) or len(worked))

    assert ask() == 1
    a100_job = _job(ctx, "on-a100")
    assert placer.place_gang(stmt, a100_job, a100_job.missing(), "allocate")
    assert ask() == 1  # an A100 node moved: the H100 nodes' answer stands
    h100_job = _job(ctx, "on-h100")
    mark = stmt.checkpoint()
    assert placer.place_gang(stmt, h100_job, h100_job.missing(), "allocate")
    assert ask() == 2  # an H100 node moved
    stmt.rollback(mark)
    assert ask() == 3  # and moved back: a rollback is a change too


@pytest.mark.parametrize("seed", range(6))
def test_a_kept_room_reason_reads_as_one_worked_out_afresh(seed: int) -> None:
    """Through random placements, evictions and rollbacks on a cluster of two types, each
    waiting gang's room reason (kept) equals the words read from the nodes now."""
    rng = random.Random(seed)
    b = ClusterBuilder()
    for i in range(8):
        b.node(f"n{i}", gpus=rng.choice((2, 4, 8)), gpu_type=rng.choice(("H100", "A100")))
    for i in range(6):
        b.job(f"r{i}", "default", gpu=rng.choice((1, 2))).running(f"n{rng.randrange(8)}")
    for i in range(16):
        types = rng.choice((("H100",), ("A100",), ()))
        b.job(f"w{i}", "default", gpu=rng.choice((1, 2, 4)), gpu_types=types).pending(rng.choice((1, 2, 4)))
    ctx = _context(b.build())
    placer, stmt = ctx.placer, ctx.stmt
    waiting = [j for j in ctx.state.jobs if j.name.startswith("w")]
    marks, said = [], set()
    for step in range(40):
        roll = rng.random()
        if roll < 0.2 and marks:
            stmt.rollback(marks.pop(rng.randrange(len(marks))))
            del marks[len(marks) // 2 :]  # later checkpoints are gone with it
        elif roll < 0.35:
            running = [t for j in ctx.state.jobs for t in j.tasks if t.status.value == "Running"]
            if running:
                marks.append(stmt.checkpoint())
                stmt.evict(rng.choice(running), "reclaim", "test")
        else:
            job = rng.choice(waiting)
            if not job.is_whole():
                marks.append(stmt.checkpoint())
                if not placer.place_gang(stmt, job, job.missing(), "allocate"):
                    stmt.rollback(marks.pop())
        for job in waiting:
            if job.is_whole():
                continue
            gang = job.missing()
            mask = placer.base_mask(job)
            by_type = placer.type_mask(job)
            if by_type is not None:
                mask = mask & by_type
            words = gang_words(len(gang), gang[0].request)
            kept = reasons._room_reason(placer, gang[0], mask, words)
            assert kept == reasons._room_words(placer, gang[0], mask, words, mask.tobytes()), (seed, step)
            said.add(kept)
    assert len(said) > 3  # the words moved with the state


@pytest.mark.parametrize("seed", range(4))
def test_the_index_counts_the_nodes_releasing_gpus_through_evictions_and_rollbacks(seed: int) -> None:
    rng = random.Random(seed)
    b = ClusterBuilder()
    for i in range(6):
        b.node(f"n{i}", gpus=8)
    for i in range(14):
        b.job(f"r{i}", "default", gpu=rng.choice((1, 2))).running(f"n{rng.randrange(6)}")
    b.job("gone", "default", gpu=1).releasing("n0")
    ctx = _context(b.build())
    buckets, stmt, nodes = ctx.placer.buckets, ctx.stmt, ctx.state.nodes

    def fresh() -> int:
        return int(np.count_nonzero((nodes.releasing[:, 0] > 1e-9) & np.array(buckets.indexed)))

    assert buckets.releasing_nodes == fresh() == 1
    running = [t for j in ctx.state.jobs for t in j.tasks if t.status.value == "Running"]
    rng.shuffle(running)
    marks = []
    for task in running:
        marks.append(stmt.checkpoint())
        stmt.evict(task, "reclaim", "test")
        assert buckets.releasing_nodes == fresh()
    assert buckets.releasing_nodes == len({t.node for t in running} | {nodes.index["n0"]}) > 1
    for mark in reversed(marks[::3]):
        stmt.rollback(mark)
        assert buckets.releasing_nodes == fresh()
    assert buckets.releasing_nodes == 1
