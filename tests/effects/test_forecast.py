"""The forecast start keeps its promise (docs/semantics.md, "Time: run times, max
runtime, and when waiting work starts"; docs/simulator.md, `forecast_accuracy`): told
each job's run time exactly, the forecast taken when a job is submitted is close to when
it starts: for the jobs that waited over 10 minutes, the median of |forecast - start| /
wait is at most 0.25 (the target docs/benchmarks-history.md measures on the Philly trace). Told run
times off by up to 2x (`noisy`), it does worse.

The world: `kai-ray sim-trace`'s mix (big gangs of 32 to 64 GPUs among small jobs) on 12
nodes of 8 GPUs for a day and a half, its arrivals 1.3x as dense (so that enough jobs
wait), every job in one queue: reclaim between queues starts jobs sooner than forecast,
and the forecast leaves it out (docs/semantics.md). On the trace's three teams of equal
quota the median error with exact run times is 0.00 to 0.94 over seeds 1 to 6 (over 0.25
on three of them: 0.31, 0.94, 0.40; with allocate alone, no reclaim, 0.00, 0.16, 0.00).
About 130 jobs, run twice: exact and noisy run times.

Beside GPU types the forecast was far off (median 0.70 with exact run times) until it
placed waiting work only on nodes of the types it accepts (the fault this suite found;
tests/control/test_forecast.py has its case).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kai_ray.sim.cluster import team_queues

from .world import ALONE, EVERY, World, big_gang_world, others_id, simulate

SEED, DAYS, NODES = 1, 1.5, 12
DENSER = 1.3  # arrivals this much closer together than the generated trace's
TEAM = "team-a"
CLOSE = 0.25  # docs/benchmarks-history.md: the median relative error's target with exact run times


@pytest.mark.parametrize("others", [ALONE, EVERY], ids=others_id)
def test_forecast_with_exact_run_times_is_close_and_noisy_ones_do_worse(others: frozenset[str]) -> None:
    world = one_line_world(SEED, others)
    exact = accuracy(simulate(world))
    noisy = accuracy(simulate(dataclasses.replace(world, estimates="noisy")))
    # Every job that waited over 10 minutes is given a start (seen: 26 jobs alone, 36
    # beside every other feature).
    assert exact["jobs_waited_over_10m"] >= 20 and exact["no_forecast"] == 0, f"forecasts: {exact}"
    # Seen alone: a median error of 0.00 with exact run times (half the waiting jobs or
    # more are forecast to the second), 0.39 with noisy ones; beside every other feature
    # 0.09 and 0.41 (0.70 and 0.83 while the forecast ignored GPU types).
    assert exact["relative_error_p50"] <= CLOSE, f"median error {exact['relative_error_p50']:.2f} (exact)"
    # Noisy run times make it worse by half the target at least (seen: 0.00 -> 0.39;
    # seeds 1 to 6 alone: 0.00-0.07 with exact run times, 0.39-1.00 with noisy ones).
    assert noisy["relative_error_p50"] >= exact["relative_error_p50"] + CLOSE / 2, f"{exact} -> {noisy}"


def one_line_world(seed: int, others: frozenset[str]) -> World:
    """sim-trace's mix, denser, every job in one queue (exact run times told)."""
    world = big_gang_world(seed, DAYS, NODES, others)
    world = world.with_jobs(lambda j: dataclasses.replace(j, queue=TEAM, submit=j.submit / DENSER))
    return dataclasses.replace(world, queues=team_queues([TEAM], world.nodes), estimates="exact")


def accuracy(summary: dict[str, Any]) -> dict[str, Any]:
    figures: dict[str, Any] = summary["forecast_accuracy"]
    return figures
