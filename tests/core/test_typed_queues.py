"""Queues per GPU type in the core (typedqueues.py, docs/gpu-types.md): fair share per
type level by level, the figures kept in step by the Statement, and the words of a
per-type limit and of a reclaim refused on a type's fair share."""

from __future__ import annotations

import pytest

from kai_ray.core import UNLIMITED, GpuTypeShare, SchedulerConfig
from kai_ray.core.cycle import prepare_cycle

from .builders import ClusterBuilder, cycle


def _typed(*shares: GpuTypeShare) -> tuple[GpuTypeShare, ...]:
    return shares


def test_fair_share_per_type_goes_down_the_tree_level_by_level() -> None:
    # 16 H100s: department d has an H100 quota of 12, e none; inside d, x has 8, y none.
    snap = (
        ClusterBuilder()
        .node("h0", gpus=8, gpu_type="H100")
        .node("h1", gpus=8, gpu_type="H100")
        .node("a0", gpus=8, gpu_type="A100")
        .queue("d", gpu_quota=16, gpu_types=_typed(GpuTypeShare("H100", 12)))
        .queue("e", gpu_quota=8)
        .queue("x", "d", gpu_quota=8, gpu_types=_typed(GpuTypeShare("H100", 8)))
        .queue("y", "d", gpu_quota=8)
        .queue("z", "e")
        .job("jx", "x", gpu=8, gpu_types=("H100",))
        .pending(2)
        .job("jy", "y", gpu=8, gpu_types=("H100",))
        .pending()
        .job("jz", "z", gpu=8, gpu_types=("H100",))
        .pending()
        .build()
    )
    ctx = prepare_cycle(snap, SchedulerConfig(), 0.0)
    typed = ctx.state.usage.typed
    assert typed is not None and typed.names == ["H100"]
    share = dict(zip(ctx.state.tree.names, typed.fair_share[:, 0].tolist(), strict=True))
    # Top level: d deserves 12 (asks 24), e 0 (asks 8); the 4 left go by weight, 2 each.
    assert share["d"] == pytest.approx(14) and share["e"] == pytest.approx(2)
    # Inside d's 14: x deserves 8 (asks 16), y 0 (asks 8); 6 left, 3 each.
    assert share["x"] == pytest.approx(11) and share["y"] == pytest.approx(3)
    assert share["z"] == pytest.approx(2)


def test_the_statement_keeps_the_type_figures_and_undoes_them() -> None:
    snap = (
        ClusterBuilder()
        .node("h0", gpus=8, gpu_type="H100")
        .node("a0", gpus=8, gpu_type="A100")
        .queue("a", gpu_quota=16, gpu_types=_typed(GpuTypeShare("H100", 8), GpuTypeShare("A100", 8)))
        .job("j", "a", gpu=4)
        .pending()
        .build()
    )
    ctx = prepare_cycle(snap, SchedulerConfig(), 0.0)
    typed, stmt = ctx.state.usage.typed, ctx.stmt
    assert typed is not None
    mark = stmt.checkpoint()
    (task,) = ctx.state.job_index["j"].tasks
    stmt.place(task, ctx.state.nodes.index["a0"], -1, False, "allocate")
    assert typed.figures(0)["A100"]["allocated"] == 4 and typed.figures(0)["H100"]["allocated"] == 0
    stmt.rollback(mark)
    assert typed.figures(0)["A100"]["allocated"] == 0


def test_a_type_limit_is_the_reason_when_it_refuses_every_accepted_type() -> None:
    snap = (
        ClusterBuilder()
        .node("h0", gpus=8, gpu_type="H100")
        .node("h1", gpus=8, gpu_type="H100")
        .node("a0", gpus=8, gpu_type="A100")
        .queue("a", gpu_quota=16, gpu_types=_typed(GpuTypeShare("H100", 8, limit=8)))
        .job("held", "a", gpu=8, gpu_types=("H100",))  # H100 only: consolidation cannot move it off
        .running("h0")
        .job("j", "a", gpu=4, gpu_types=("H100",))
        .pending()
        .build()
    )
    reason = cycle(snap).waiting["j"]
    assert reason.code == "queue-limit"
    assert reason.text.startswith("queue a is at its H100 limit of 8 (holds 8); this job accepts H100 only; ")
    assert "8 A100 GPUs are free" in reason.text


def test_reclaim_refused_on_the_type_share_says_so() -> None:
    snap = (
        ClusterBuilder()
        .node("h0", gpus=8, gpu_type="H100")
        .node("h1", gpus=8, gpu_type="H100")
        .queue("a", gpu_quota=16, gpu_types=_typed(GpuTypeShare("H100", 8)))
        .queue("b", gpu_quota=0)
        .job("a1", "a", gpu=8)
        .running("h0")
        .job("b1", "b", gpu=8)
        .running("h1")
        .job("j", "a", gpu=8, gpu_types=("H100",))
        .pending()
        .build()
    )
    result = cycle(snap, "reclaim")
    assert not result.decisions
    reason = result.waiting["j"]
    assert reason.code == "fair-share"
    assert (
        "queue a cannot reclaim: it would go over its fair share of 12 H100 GPUs (it holds 8" in reason.text
    )


@pytest.mark.parametrize(
    ("name", "parent_share", "priority", "code"),
    [
        ("a parent's limit binds preemptible work", GpuTypeShare("H100", 8, limit=8), "train", "queue-limit"),
        ("a parent's quota binds non-preemptible work", GpuTypeShare("H100", 8), "build", "queue-quota"),
        ("a parent's quota leaves preemptible work free", GpuTypeShare("H100", 8), "train", None),
    ],
)
def test_a_type_figure_of_a_queue_above_binds_the_leaf(
    name: str, parent_share: GpuTypeShare, priority: str, code: str | None
) -> None:
    # The leaf names H100 with no limit and a quota of the whole cluster: the department
    # above it decides (blocked walks the path only where some queue on it has a limit of
    # the type, or a quota of it).
    snap = (
        ClusterBuilder()
        .node("h0", gpus=8, gpu_type="H100")
        .node("h1", gpus=8, gpu_type="H100")
        .queue("d", gpu_quota=16, gpu_types=_typed(parent_share))
        .queue("x", "d", gpu_quota=16, gpu_types=_typed(GpuTypeShare("H100", UNLIMITED)))
        .job("held", "x", gpu=8, gpu_types=("H100",), priority="build")
        .running("h0")
        .job("j", "x", gpu=8, gpu_types=("H100",), priority=priority)
        .pending()
        .build()
    )
    result = cycle(snap, "allocate")
    if code is None:
        assert "j" not in result.waiting, name
        return
    reason = result.waiting["j"]
    assert reason.code == code, name
    assert reason.text.startswith("queue d "), name
