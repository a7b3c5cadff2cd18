"""The statement: everything done after a checkpoint can be undone exactly."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from kai_ray.core import SchedulerConfig
from kai_ray.core.actions.solver import solve
from kai_ray.core.actions.terms import Terms
from kai_ray.core.actions.victims import victim_units
from kai_ray.core.model.snapshot import TaskStatus
from kai_ray.core.rules.fairshare import compute_fair_shares
from kai_ray.core.rules.placement import Placer
from kai_ray.core.rules.policy import victim_order_key
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.build import build_state
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.nodes import cluster_total
from kai_ray.core.state.queues import build_queue_tree
from kai_ray.core.state.statement import Statement

from .builders import ClusterBuilder


def _context(builder: ClusterBuilder) -> CycleContext:
    snap = builder.build()
    tree = build_queue_tree(snap.queues)
    state = build_state(snap, tree)
    total = cluster_total(state.nodes)
    shares = compute_fair_shares(tree, total, state.usage.requested)
    config = SchedulerConfig()
    return CycleContext(state, shares, config, 0.0, total, Placer(state, config), Statement(state))


def _fingerprint(state: ClusterState) -> object:
    nodes = state.nodes
    return (
        nodes.idle.tolist(),
        nodes.releasing.tolist(),
        [{i: (d.idle, d.releasing) for i, d in devs.items()} for devs in nodes.devices],
        copy.deepcopy(state.usage.allocated),
        copy.deepcopy(state.usage.allocated_nonpreemptible),
        [(t.status, t.node, t.device, t.evicted_from, t.evict_reason) for j in state.jobs for t in j.tasks],
        [(j.active_count, j.pending_count) for j in state.jobs],
    )


def _counts_agree(state: ClusterState) -> None:
    """The per-job counters the Statement keeps match the tasks' statuses."""
    for j in state.jobs:
        statuses = [t.status for t in j.tasks]
        assert j.pending_count == statuses.count(TaskStatus.PENDING), j.name
        assert j.active_count == sum(s.is_active for s in statuses), j.name


def _cluster() -> ClusterBuilder:
    return (
        ClusterBuilder()
        .node("n0", gpus=4)
        .node("n1", gpus=4)
        .queue("q", gpu_quota=8)
        .job("frac-a", "q", gpu=0.5)
        .running("n0", group=0)
        .job("frac-b", "q", gpu=0.5)
        .running("n0", group=0)
        .job("whole", "q", gpu=2)
        .running("n1")
        .job("old", "q", gpu=1)
        .releasing("n1")
        .job("gang", "q", gpu=2, priority="inference")
        .pending(3)
    )


def test_rollback_restores_every_field_after_places_and_evictions() -> None:
    ctx = _context(_cluster())
    before = _fingerprint(ctx.state)
    checkpoint = ctx.stmt.checkpoint()
    jobs = ctx.state.job_index
    ctx.stmt.evict(jobs["frac-a"].tasks[0], "preempt", "test")
    ctx.stmt.evict(jobs["whole"].tasks[0], "preempt", "test")
    gang = jobs["gang"].tasks
    ctx.stmt.place(gang[0], 0, -1, False, "allocate")
    ctx.stmt.place(gang[1], 1, -1, True, "allocate")
    ctx.stmt.pipeline_job(ctx.state.job_index["gang"])
    assert ctx.stmt.pipelined == 1
    _counts_agree(ctx.state)
    assert _fingerprint(ctx.state) != before
    ctx.stmt.rollback(checkpoint)
    assert _fingerprint(ctx.state) == before
    assert ctx.stmt.pipelined == 0
    _counts_agree(ctx.state)


def test_node_watchers_are_told_of_every_change_evictions_and_undos_included() -> None:
    """What a watcher keeps of a node (the free GPUs per type, now and once released)
    is read off the node each time it is told: after evictions, placements and their
    rollback, it is what the node holds. Evictions once told no one, and a rolled-back
    search left a type's room counted twice (found by the feature-effect suite)."""
    ctx = _context(_cluster())
    nodes = ctx.state.nodes
    seen: dict[int, tuple[list[float], list[float]]] = {}

    def watch(n: int) -> None:
        seen[n] = (nodes.idle[n].tolist(), nodes.releasing[n].tolist())

    nodes.watchers.append(watch)

    def agree() -> None:
        for n in seen:
            assert seen[n] == (nodes.idle[n].tolist(), nodes.releasing[n].tolist()), nodes.names[n]

    jobs = ctx.state.job_index
    checkpoint = ctx.stmt.checkpoint()
    ctx.stmt.evict(jobs["whole"].tasks[0], "preempt", "test")
    assert 1 in seen
    agree()
    ctx.stmt.place(jobs["gang"].tasks[0], 1, -1, True, "allocate")
    agree()
    ctx.stmt.evict(jobs["frac-a"].tasks[0], "preempt", "test")
    agree()
    ctx.stmt.rollback(checkpoint)
    agree()


def test_blocks_keep_the_counts_and_roll_back() -> None:
    ctx = _context(_cluster())
    gang = ctx.state.job_index["gang"]
    assert gang.uniform and gang.pending_count == 3
    before = _fingerprint(ctx.state)
    checkpoint = ctx.stmt.checkpoint()
    ctx.stmt.place_block(gang.tasks[:2], 0, "allocate")
    assert (gang.active_count, gang.pending_count) == (2, 1)
    assert [t.node for t in gang.tasks] == [0, 0, -1]
    _counts_agree(ctx.state)
    ctx.stmt.rollback(checkpoint)
    assert _fingerprint(ctx.state) == before


def test_a_failed_victim_search_leaves_no_trace() -> None:
    # The gang needs 3 x 2 GPUs; even evicting every victim frees only 4 + 2 whole GPUs
    # minus what stays, so the search must fail and roll everything back.
    builder = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .node("n1", gpus=2)
        .queue("q", gpu_quota=4)
        .job("keep", "q", gpu=2, priority="build")
        .running("n0")
        .job("victim", "q", gpu=1)
        .running("n1")
        .job("gang", "q", gpu=2, priority="inference")
        .pending(2)
    )
    ctx = _context(builder)
    before = _fingerprint(ctx.state)
    gang = ctx.state.job_index["gang"]
    ok = solve(ctx, gang, gang.tasks, _preempt_terms(ctx))
    assert ok is None
    assert _fingerprint(ctx.state) == before


def test_a_successful_victim_search_evicts_only_what_is_needed() -> None:
    builder = (
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("half-old", "q", gpu=0.5)
        .running("n0", group=0)
        .job("whole", "q", gpu=1)
        .running("n0")
        .job("half-new", "q", gpu=0.5)
        .running("n0", group=0)
        .job("build", "q", gpu=1, priority="build")
        .pending()
    )
    ctx = _context(builder)
    build = ctx.state.job_index["build"]
    assert solve(ctx, build, build.tasks, _preempt_terms(ctx)) is not None
    evicted = {j.name for j in ctx.state.jobs for t in j.tasks if t.status is TaskStatus.RELEASING}
    assert evicted == {"whole"}
    assert build.tasks[0].status is TaskStatus.PIPELINED


def test_a_recorded_search_redone_on_the_state_it_began_on_leaves_the_same() -> None:
    from kai_ray.core import Reason

    ctx = _context(_cluster())
    stmt, gang = ctx.stmt, ctx.state.job_index["gang"]
    stmt.set_reason("gang", Reason("no-room", "no room"))
    before, mark, start = _fingerprint(ctx.state), stmt.state_mark, stmt.checkpoint()
    terms = _preempt_terms(ctx)

    def search() -> None:
        assert solve(ctx, gang, gang.tasks, terms) is not None
        stmt.clear_reason("gang")

    ops = stmt.recorded(search)
    after, reasons, mark_after = _fingerprint(ctx.state), dict(stmt.reasons), stmt.state_mark
    assert after != before and mark_after != mark
    stmt.rollback(start)
    assert _fingerprint(ctx.state) == before and stmt.state_mark == mark
    stmt.redo(ops)
    assert _fingerprint(ctx.state) == after and stmt.reasons == reasons
    _counts_agree(ctx.state)


def test_a_recording_keeps_only_what_stands() -> None:
    ctx = _context(_cluster())
    stmt, jobs = ctx.stmt, ctx.state.job_index

    def tried_then_taken_back() -> None:
        trial = stmt.checkpoint()
        stmt.evict(jobs["whole"].tasks[0], "preempt", "tried")
        stmt.rollback(trial)
        stmt.evict(jobs["frac-a"].tasks[0], "preempt", "kept")

    ops = stmt.recorded(tried_then_taken_back)
    assert ops == [("evict", (jobs["frac-a"].tasks[0], "preempt", "kept"))]


def test_the_state_mark_names_the_changes_that_stand() -> None:
    from kai_ray.core import Reason

    ctx = _context(_cluster())
    stmt, jobs = ctx.stmt, ctx.state.job_index
    empty = stmt.state_mark
    start = stmt.checkpoint()
    stmt.place(jobs["gang"].tasks[0], 0, -1, False, "allocate")
    placed = stmt.state_mark
    stmt.set_reason("gang", Reason("no-room", "x"))
    assert stmt.state_mark == placed  # a reason is no change of state
    stmt.rollback(start)
    assert stmt.state_mark == empty
    stmt.place(jobs["gang"].tasks[0], 0, -1, False, "allocate")
    assert stmt.state_mark not in (empty, placed)  # the same change again is named anew


@pytest.mark.parametrize("pipelined", [False, True], ids=["bound", "pipelined"])
def test_fraction_opens_and_closes_a_device(pipelined: bool) -> None:
    builder = ClusterBuilder().node("n0", gpus=1).queue("q", gpu_quota=1)
    builder.job("f", "q", gpu=0.25).pending()
    if pipelined:
        builder.job("going", "q", gpu=1).releasing("n0")
    ctx = _context(builder)
    before = _fingerprint(ctx.state)
    task = ctx.state.job_index["f"].tasks[0]
    device, _ = ctx.placer.choose_device(task, 0)
    ctx.stmt.place(task, 0, device, pipelined, "allocate")
    assert ctx.state.nodes.devices[0][device].idle + ctx.state.nodes.devices[0][
        device
    ].releasing == pytest.approx(0.75)
    ctx.stmt.rollback(0)
    assert _fingerprint(ctx.state) == before
    assert np.all(ctx.state.nodes.idle[:, 0] >= 0)


def test_a_reason_set_or_cleared_after_a_checkpoint_is_undone_by_rollback() -> None:
    from kai_ray.core import Reason

    ctx = _context(_cluster())
    stmt = ctx.stmt
    room = Reason("no-room", "no room")
    stmt.set_reason("gang", room)
    checkpoint = stmt.checkpoint()
    stmt.clear_reason("gang")
    stmt.set_reason("other", Reason("queue-limit", "at its limit"))
    stmt.default_reason("gang", lambda: Reason("fair-share", "over its share"))
    assert stmt.reasons == {
        "other": Reason("queue-limit", "at its limit"),
        "gang": Reason("fair-share", "over its share"),
    }
    stmt.rollback(checkpoint)
    assert stmt.reasons == {"gang": room}
    made: list[str] = []
    stmt.default_reason("gang", lambda: made.append("made") or Reason("fair-share", "ignored"))
    assert stmt.reasons == {"gang": room} and made == []  # an earlier reason stands, nothing made


def _preempt_terms(ctx: CycleContext) -> Terms:
    """Every preemptible job's units, in victim order, as a preempt's candidates."""
    units = victim_units([j for j in ctx.state.jobs if j.info.preemptible], victim_order_key)
    return Terms("preempt", units, lambda u: True, lambda u: "r", lambda scenario: True)
