"""Streams of jobs for the worlds of the time-share, min-runtime and preemption-delay
promises: each team's jobs arrive at random (Poisson) over a window, sized to ask for a
given load of the cluster, with run times log-normal around each kind's median. Seeded:
the same seed makes the same jobs."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray.core import QueueInfo
from kai_ray.sim.cluster import parse_cluster
from kai_ray.sim.generate import draw_gpu_types

from .world import GPU_TYPES, TYPES, World, job_of_row, with_others

SIGMA = 0.5  # of the log of run times
MIN_RUN_S, MAX_RUN_S = 300.0, 8 * 3600.0
TRAIN, BUILD = 50, 75  # priorities (docs/simulator.md): both preemptible, build before train


@dataclass(frozen=True, slots=True)
class Kind:
    """A kind of job: its workers' GPUs each, how many workers, its median run time."""

    gpus: float
    workers: int
    median_s: float
    priority: int = TRAIN

    @property
    def mean_gpu_s(self) -> float:
        # A log-normal's mean is its median times e^(sigma^2 / 2).
        return self.gpus * self.workers * self.median_s * math.exp(SIGMA**2 / 2)


@dataclass(frozen=True, slots=True)
class Cluster:
    nodes: int
    gpus_per_node: int = 8

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def spec(self, typed: bool) -> str:
        return f"{self.nodes}x{self.gpus_per_node}" + (":" + ",".join(TYPES) if typed else "")


def arrivals(
    rng: random.Random,
    team: str,
    window: tuple[float, float],
    load: float,
    cluster: Cluster,
    kinds: Sequence[Kind],
) -> list[dict[str, Any]]:
    """One team's jobs over [start, end), asking for `load` times the cluster's GPUs."""
    mean = sum(k.mean_gpu_s for k in kinds) / len(kinds)
    rate = load * cluster.gpus / mean  # jobs per second
    rows: list[dict[str, Any]] = []
    t, end = window
    while (t := t + rng.expovariate(rate)) < end:
        kind = rng.choice(kinds)
        run = min(max(rng.lognormvariate(math.log(kind.median_s), SIGMA), MIN_RUN_S), MAX_RUN_S)
        rows.append(
            {"submit_time": round(t, 1), "duration": round(run, 1), "gpus": kind.gpus, "queue": team}
            | {"gang_size": kind.workers, "priority": kind.priority, "name": f"{team}-{int(t)}-{len(rows)}"}
        )
    return rows


def taking_turns(
    rng: random.Random,
    teams: Sequence[str],
    turns: int,
    turn_s: float,
    cluster: Cluster,
    loads: tuple[float, float, float],
    kinds: tuple[Sequence[Kind], Sequence[Kind]],
) -> list[dict[str, Any]]:
    """Teams bursting in turn: in each window of `turn_s`, one team asks for `loads[0]` of
    the cluster in `kinds[0]` (training), the others for `loads[1]`; every team asks for
    `loads[2]` more in `kinds[1]` (builds) all along."""
    rows: list[dict[str, Any]] = []
    busy, quiet, builds = loads
    for turn in range(turns):
        window = (turn * turn_s, (turn + 1) * turn_s)
        for team in teams:
            bursting = team == teams[turn % len(teams)]
            rows += arrivals(rng, team, window, busy if bursting else quiet, cluster, kinds[0])
            rows += arrivals(rng, team, window, builds, cluster, kinds[1])
    return rows


def world_of(
    rows: list[dict[str, Any]],
    cluster: Cluster,
    queues: Sequence[QueueInfo],
    others: frozenset[str],
    seed: int,
) -> World:
    """The jobs in submission order on the cluster (typed, with types drawn for the jobs,
    when GPU types are among the others), with the other features on."""
    rows = sorted(rows, key=lambda r: (float(r["submit_time"]), str(r["name"])))
    typed = GPU_TYPES in others
    if typed:
        draw_gpu_types(rows, TYPES, seed)
    world = World([job_of_row(r) for r in rows], parse_cluster(cluster.spec(typed)), list(queues))
    return with_others(world, others, seed)
