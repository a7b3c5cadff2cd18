"""The feature-effect suite's small worlds: seeded traces on small simulated clusters, run
through the simulator (the real controller and core on a virtual clock), with any set of
the *other* features turned on beside the one under test.

A promise that is a figure (a wait cut, a share held) is asserted on two runs of the same
world that differ in the feature under test alone: `alone` with nothing else on, and
`together` with every other feature on (GPU types, reservations, time-based fair share,
elastic workloads, fractional GPUs). Topology is not among them: a Ray workload (the
simulator's) names no topology (docs/simulator.md, "Feature effects").

Everything is seeded and the simulator is deterministic: these are tests, not benchmarks.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray.core import NodeInfo, QueueInfo, SchedulerConfig
from kai_ray.sim.cluster import parse_cluster, team_queues
from kai_ray.sim.engine import Options, Simulation
from kai_ray.sim.generate import big_gang_rows, draw_gpu_types
from kai_ray.sim.policies import SimPolicy
from kai_ray.sim.trace import SimJob

GPU_TYPES = "gpu-types"
RESERVATIONS = "reservations"
TIME_SHARE = "time-share"
ELASTIC = "elastic"
FRACTIONS = "fractions"
EVERY = frozenset({GPU_TYPES, RESERVATIONS, TIME_SHARE, ELASTIC, FRACTIONS})
ALONE: frozenset[str] = frozenset()

TYPES = ("H100", "A100")
HOUR = 3600.0
RESERVE_AFTER_S = 1800.0
# Time-based fair share as the simulator's `timeshare` policy has it, on the scale of
# these short traces: a 1-day window, a 6-hour half-life.
USAGE_WINDOW_S, USAGE_HALF_LIFE_S = 86400.0, 6 * HOUR
WAIT_STEP_S = 600.0  # a step at least every 10 minutes while something waits


def together(without: str) -> frozenset[str]:
    """Every other feature on, beside the one under test."""
    return EVERY - {without}


def others_id(others: frozenset[str]) -> str:
    return "alone" if not others else "together"


@dataclass(frozen=True)
class World:
    """What one run is made of: the jobs, the nodes, the queues, the scheduler's options."""

    jobs: Sequence[SimJob]
    nodes: Sequence[NodeInfo]
    queues: Sequence[QueueInfo]
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    estimates: str = "exact"  # run times told to the scheduler (reservations need them)

    def with_config(self, **changes: Any) -> World:
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **changes))

    def with_jobs(self, change: Callable[[SimJob], SimJob]) -> World:
        return dataclasses.replace(self, jobs=[change(j) for j in self.jobs])


def simulate(world: World) -> dict[str, Any]:
    """The simulator's summary of one run (docs/simulator.md, summary.json)."""
    policy = SimPolicy("effects", world.config)
    wait = WAIT_STEP_S if world.config.usage_window_s > 0 else 0.0
    options = Options(runtime_estimates=world.estimates, wait_step_s=wait, event_log=True)
    sim = Simulation(world.jobs, world.nodes, world.queues, policy, options)
    summary: dict[str, Any] = sim.run().summary
    summary["events"] = sim.metrics.events
    return summary


# ---------------------------------------------------------------- worlds


def big_gang_world(seed: int, days: float, nodes: int, others: frozenset[str]) -> World:
    """`kai-ray sim-trace`'s mix (big gangs of 32-64 GPUs among small jobs, three teams of
    equal quota), sized for `nodes` nodes of 8 GPUs, with the other features on."""
    rows = big_gang_rows(seed, days, nodes * 8)
    if GPU_TYPES in others:
        draw_gpu_types(rows, TYPES, seed)
    jobs = [job_of_row(row) for row in rows]
    cluster = parse_cluster(f"{nodes}x8" + (":" + ",".join(TYPES) if GPU_TYPES in others else ""))
    world = World(jobs, cluster, team_queues(sorted({j.queue for j in jobs}), cluster))
    return with_others(world, others, seed)


def job_of_row(row: dict[str, object]) -> SimJob:
    """A job of a generated trace's row (`kai_ray.sim.generate`: the generic CSV's columns)."""
    types = str(row.get("gpu_types") or "")
    return SimJob(
        id=str(row["name"]),
        submit=float(str(row["submit_time"])),
        duration=float(str(row["duration"])),
        queue=str(row["queue"]),
        workers=int(str(row["gang_size"])),
        gpus=float(str(row["gpus"])),
        priority=int(str(row.get("priority", 50))),
        gpu_types=tuple(types.split("|")) if types else (),
    )


def with_others(world: World, others: frozenset[str], seed: int) -> World:
    """The world with the other features on (GPU types are the trace's and the nodes',
    set by the world's maker). Each draw has a generator of its own, seeded: turning one
    feature on changes nothing the others drew."""
    if ELASTIC in others:
        rng = random.Random(f"{seed}/elastic")
        world = world.with_jobs(lambda j: _elastic(j, rng))
    if FRACTIONS in others:
        rng = random.Random(f"{seed}/fractions")
        world = world.with_jobs(lambda j: _fraction(j, rng))
    if RESERVATIONS in others:
        world = world.with_config(reserve_after_s=RESERVE_AFTER_S)
    if TIME_SHARE in others:
        world = world.with_config(usage_window_s=USAGE_WINDOW_S, usage_half_life_s=USAGE_HALF_LIFE_S)
    return world


def _elastic(job: SimJob, rng: random.Random) -> SimJob:
    """Half the jobs of several workers that are no big gang start with half of them."""
    if job.workers < 2 or job.total_gpus >= 32 or rng.random() < 0.5:
        return job
    return dataclasses.replace(job, min_workers=max(1, job.workers // 2))


def _fraction(job: SimJob, rng: random.Random) -> SimJob:
    """A quarter of the one-GPU, one-worker jobs ask for half a GPU."""
    if job.workers != 1 or job.gpus != 1 or rng.random() >= 0.25:
        return job
    return dataclasses.replace(job, gpus=0.5)


# ---------------------------------------------------------------- figures


def big_p95_wait(summary: dict[str, Any]) -> float:
    value = summary["queueing_delay_by_size_s"]["big_gangs"]["p95"]
    return math.nan if value is None else float(value)


def utilisation(summary: dict[str, Any]) -> float:
    return float(summary["gpu_utilisation"])


def preemptions(summary: dict[str, Any]) -> int:
    return int(summary["preemptions"])


def event_rows(summary: dict[str, Any], kind: str) -> list[tuple[float, str, str, float, str]]:
    """(time, job, team, gpus, detail) of every event of one kind (start, preempt, ...)."""
    events = summary["events"]
    return [(t, job, team, gpus, detail) for t, what, job, team, gpus, detail in events if what == kind]
