"""Allocate's line (session/allocateline.py) keys the jobs in it, to settle the rest of
the line once every job left is sure to fail, only from the first failed search on: a
line that all fits keys none, and a line that runs dry settles as it always did (the
look-alikes behind a failed gang get its reason without a step of their own)."""

from __future__ import annotations

from kai_ray.core import SchedulerConfig
from kai_ray.core.actions import allocate as allocate_module
from kai_ray.core.cycle import finish_cycle, prepare_cycle
from kai_ray.core.model.snapshot import ClusterSnapshot
from kai_ray.core.session.allocateline import AllocateLine
from kai_ray.core.session.context import CycleContext

from .builders import ClusterBuilder


def _allocate(snap: ClusterSnapshot) -> tuple[CycleContext, list[AllocateLine], list[str]]:
    """Allocate on the snapshot, with the line it used and the jobs that took a step."""
    ctx = prepare_cycle(snap, SchedulerConfig(actions=("allocate",)), 0.0)
    lines: list[AllocateLine] = []
    stepped: list[str] = []
    original_init, original_step = AllocateLine.__init__, allocate_module.allocate_step

    def init(self: AllocateLine, *args: object, **kwargs: object) -> None:
        original_init(self, *args, **kwargs)  # type: ignore[arg-type]
        lines.append(self)

    def step(ctx: CycleContext, job: object, *args: object, **kwargs: object) -> bool:
        stepped.append(job.name)  # type: ignore[attr-defined]
        return original_step(ctx, job, *args, **kwargs)  # type: ignore[arg-type]

    AllocateLine.__init__ = init  # type: ignore[method-assign]
    allocate_module.allocate_step = step  # type: ignore[assignment]
    try:
        allocate_module.allocate(ctx)
    finally:
        AllocateLine.__init__ = original_init  # type: ignore[method-assign]
        allocate_module.allocate_step = original_step
    return ctx, lines, stepped


def test_a_line_that_all_fits_keys_no_job() -> None:
    b = ClusterBuilder().node("n0", gpus=8)
    for i in range(4):
        b.job(f"j{i}", "default", gpu=2).pending()
    ctx, (line,), stepped = _allocate(b.build())
    assert sorted(stepped) == ["j0", "j1", "j2", "j3"]
    assert line.sure is None  # no search failed: no job was keyed
    assert not finish_cycle(ctx).waiting


def test_after_the_first_failure_the_look_alikes_left_settle_without_a_step() -> None:
    b = ClusterBuilder().node("n0", gpus=8)
    b.job("fits", "default", gpu=8).pending()
    for i in range(5):
        b.job(f"big{i}", "default", gpu=8).pending()
    ctx, (line,), stepped = _allocate(b.build())
    assert line.sure is not None
    assert stepped[0] == "fits" and len(stepped) == 2  # one look-alike failed; the rest settled
    waiting = finish_cycle(ctx).waiting
    assert sorted(waiting) == [f"big{i}" for i in range(5)]
    said = {reason for reason in waiting.values()}
    assert len(said) == 1 and next(iter(said)).code == "no-room"  # the failed one's words, for all


def test_jobs_that_differ_from_the_failed_one_still_take_their_step() -> None:
    b = ClusterBuilder().node("n0", gpus=8)
    b.job("fits", "default", gpu=6).pending()
    b.job("big", "default", gpu=4).pending()
    b.job("small", "default", gpu=2).pending()  # another key: not sure to fail, and it fits
    b.job("big-again", "default", gpu=4).pending()
    ctx, _, stepped = _allocate(b.build())
    assert "small" in stepped
    assert sorted(finish_cycle(ctx).waiting) == ["big", "big-again"]
