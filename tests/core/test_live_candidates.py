"""The solver's memo of which shared candidates may still be taken (actions/livecandidates.py):
it follows the statement, a rollback included, so that it changes what a search looks at
and never what it finds. Three one-GPU jobs of queue q on n0 and n1, in victim order."""

from __future__ import annotations

from kai_ray.core import SchedulerConfig
from kai_ray.core.actions.livecandidates import first_maybe_live, groups_with_takeable
from kai_ray.core.cycle import prepare_cycle
from kai_ray.core.session.candidates import SharedUnits, victim_units
from kai_ray.core.session.context import CycleContext

from .builders import ClusterBuilder


def _cycle() -> tuple[CycleContext, SharedUnits, list[int]]:
    b = ClusterBuilder().node("n0", gpus=2).node("n1", gpus=2).queue("q", gpu_quota=0)
    b.job("a", "q", gpu=1).running("n0")
    b.job("b", "q", gpu=1).running("n0")
    b.job("c", "q", gpu=1).running("n1")
    ctx = prepare_cycle(b.build(), SchedulerConfig(), 0.0)
    units = SharedUnits(victim_units(ctx.state.jobs, ctx.policy.victim_order))
    return ctx, units, list(range(len(units)))


def _evict(ctx: CycleContext, units: SharedUnits, name: str) -> None:
    unit = next(u for u in units if u.job.name == name)
    ctx.stmt.evict(unit.tasks[0], "reclaim", "test")


def test_a_line_starts_past_the_candidates_gone_and_again_after_a_rollback() -> None:
    ctx, units, line = _cycle()
    first = units[0].job.name
    assert first_maybe_live(ctx.stmt, units, line) == 0
    mark = ctx.stmt.checkpoint()
    _evict(ctx, units, first)
    assert first_maybe_live(ctx.stmt, units, line) == 1  # the first one gone
    ctx.stmt.rollback(mark)
    assert first_maybe_live(ctx.stmt, units, line) == 0  # given back: live again


def test_groups_whose_candidates_are_all_gone_are_passed_over_until_given_back() -> None:
    ctx, units, _ = _cycle()
    by_node = [[u for u in units if u.tasks[0].node == n] for n in (0, 1)]
    names = [[u.job.name for u in g] for g in by_node]
    live = lambda: [[u.job.name for u in g] for g in groups_with_takeable(ctx.stmt, units, by_node)]  # noqa: E731
    assert live() == names
    mark = ctx.stmt.checkpoint()
    for name in names[0]:
        _evict(ctx, units, name)
    assert live() == names[1:]  # n0's candidates all gone
    ctx.stmt.rollback(mark)
    assert live() == names


def test_a_plain_list_is_not_memoised() -> None:
    ctx, units, line = _cycle()
    plain = list(units)
    _evict(ctx, units, units[0].job.name)
    assert first_maybe_live(ctx.stmt, plain, line) == 0
    groups = [plain]
    assert list(groups_with_takeable(ctx.stmt, plain, groups)) == groups
