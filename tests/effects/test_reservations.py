"""Reservations with backfill keep their promise (docs/semantics.md, "Reservations and
backfill"): on `kai-ray sim-trace`'s mix (big gangs of 32-64 GPUs among a stream of small
jobs), a gang that waited 30 minutes holds the room it is expected to start on, which
cuts the big gangs' p95 wait to at most 0.4x for at most 3 points of GPU utilisation.

Beside every other feature (GPU types, time-based fair share, elastic jobs, fractions)
the cut is smaller: time-based fair share reorders the queues as their usage moves, and
a gang's queue that used much is reclaimed from soon after its gang starts. There the
promise is at most 0.6x, still for at most 3 points.

The worlds are 16 nodes of 8 GPUs over 3 days (about 300 jobs). Seeds 0 and 2 were chosen
because they tell the fault of 672581a apart (reclaim taking the reserved gang as it
started on its reservation: 0.53x on seed 0, 4.6 points lost on seed 2) from the rule
that keeps placements on held room from the cycle's evictions.
"""

from __future__ import annotations

import pytest

from .world import ALONE, RESERVATIONS, RESERVE_AFTER_S, big_gang_world, big_p95_wait, simulate, together
from .world import utilisation as util

DAYS, NODES = 3.0, 16


def _with_and_without(seed: int, others: frozenset[str]) -> tuple[float, float]:
    """The big gangs' p95 wait with reservations over without, and the utilisation lost."""
    world = big_gang_world(seed, DAYS, NODES, others)
    without = simulate(world)
    with_them = simulate(world.with_config(reserve_after_s=RESERVE_AFTER_S))
    return big_p95_wait(with_them) / big_p95_wait(without), util(without) - util(with_them)


@pytest.mark.parametrize("seed", [0, 2])
def test_reservations_cut_the_big_gangs_p95_wait_alone(seed: int) -> None:
    # Seen: 0.34x (+2.8 points of utilisation) on seed 0, 0.29x (0.0) on seed 2.
    ratio, lost = _with_and_without(seed, ALONE)
    assert ratio <= 0.4, f"big gangs' p95 wait {ratio:.2f}x with reservations"
    assert lost <= 0.03, f"{lost * 100:.1f} points of utilisation lost"


def test_reservations_cut_the_big_gangs_p95_wait_beside_every_other_feature() -> None:
    # Seen: 0.47x (0.0 points) on seed 2.
    ratio, lost = _with_and_without(2, together(RESERVATIONS))
    assert ratio <= 0.6, f"big gangs' p95 wait {ratio:.2f}x with reservations"
    assert lost <= 0.03, f"{lost * 100:.1f} points of utilisation lost"
