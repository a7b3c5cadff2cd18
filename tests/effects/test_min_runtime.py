"""A minimum runtime bounds the preemptions per hour (docs/semantics.md, "Taking capacity
back"; QueueInfo.preempt_min_runtime / reclaim_min_runtime): with a minimum runtime M, no
running job is preempted or reclaimed before it has run M, so a churny world's
preemptions per hour fall against M unset.

The world: two teams of equal quota (together the cluster) on two nodes of 8 GPUs, for
6 hours. The teams take turns to burst every 2 hours (training jobs of 2 to 4 GPUs,
about an hour each, at 0.9 of the cluster for the team bursting, 0.3 for the other), so
each reclaims from the other in turn; and each sends a stream of build jobs (priority
75, about 20 minutes) that preempt its own training. About 100 jobs, each world run
with M = 30 minutes on both queues and without.

A consolidation move (a job stopped and started again elsewhere to defragment; the
simulator counts it a preemption, `by=consolidation`) is not held back by a minimum
runtime, as in KAI, where the minruntime plugin filters reclaim and preempt victims
only: these are left out of both figures.

Beside every other feature, an elastic job could be stopped within M. The core takes an
elastic job's last task as its surplus, which M does not protect, while the controller
held the job's gang on that very task (the job had been moved by consolidation and
started again on its second task); the controller then stopped the whole job for what
the core took as surplus. The controller now lists a workload's gang first
(control/snapshot.py). One case is left, a fault still (the expected failure below): a
reclaimed elastic job is stopped and started again within one instant, as reclaim's play
places its gang again on its other worker. The together test asserts the bound for every
job that is not elastic, and the fall.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from dataclasses import dataclass
from typing import Any

import pytest

from kai_ray.core import QueueInfo
from kai_ray.sim.cluster import NODE_CPU, NODE_MEMORY

from .streams import BUILD, Cluster, Kind, taking_turns, world_of
from .world import ALONE, HOUR, World, others_id, simulate, together

MIN_RUNTIME = "min-runtime"  # the feature under test: not one of world.py's others
SEED = 1
CLUSTER = Cluster(nodes=2)
M = 1800.0  # the minimum runtime, both kinds
TEAMS = ("team-a", "team-b")
TURN_S, TURNS = 2 * HOUR, 3
TRAINING = (Kind(2, 1, HOUR), Kind(4, 1, HOUR), Kind(2, 2, HOUR))
BUILDS = tuple(Kind(g, 1, HOUR / 3, BUILD) for g in (1, 2, 4))
BOUNDED = ("reclaim", "preempt")  # the actions a minimum runtime holds back


@pytest.mark.parametrize("others", [ALONE, together(MIN_RUNTIME)], ids=others_id)
def test_no_job_is_taken_before_its_min_runtime(others: frozenset[str]) -> None:
    runs = _runs(others)
    # Seen: without M, 34 of 35 reclaims and preemptions alone (50 of 60 together) came
    # within 30 minutes of the job's start: M has work to do here.
    assert len(_within(runs.without, M)) >= 10
    early = _within(runs.bounded, M)
    if others:
        early = [e for e in early if e[1] not in runs.elastic]  # the fault (module docstring)
    assert not early, f"taken before their min runtime: {early[:5]}"


@pytest.mark.parametrize("others", [ALONE, together(MIN_RUNTIME)], ids=others_id)
def test_the_preemptions_per_hour_fall(others: frozenset[str]) -> None:
    runs = _runs(others)
    without, bounded = runs.without, runs.bounded
    # Seen: 2.4 preemptions an hour (reclaim and preempt) without M, 1.4 with M alone
    # (0.57x); 4.1 and 2.0 together (0.47x).
    ratio = _per_hour(bounded) / _per_hour(without)
    assert ratio <= 0.7, f"{_per_hour(without):.1f} -> {_per_hour(bounded):.1f} preemptions an hour"


@pytest.mark.xfail(strict=True, reason="a fault: a victim gang placed again on its other worker (docstring)")
def test_an_elastic_gang_is_not_taken_within_its_min_runtime() -> None:
    runs = _runs(together(MIN_RUNTIME))
    # Seen: team-a-699-1 (2 workers, 1 its gang) stopped whole by preempt at 3781.7 after
    # 27 minutes of its run: the core took its task w1 as surplus, the controller's gang
    # (fixed: the controller lists a workload's gang first, control/snapshot.py). Still
    # seen: team-a-17432-5, reclaimed after its min runtime at 22589.2, is stopped and
    # started again three times more at that instant: reclaim's play places the victim's
    # gang again on its other worker (w1 where w0 ran), which is no task coming back where
    # it ran, so w0 is evicted and w1 bound; the next step, on the same instant, does the
    # same with the two swapped, each a stop and a start.
    early = [e for e in _within(runs.bounded, M) if e[1] in runs.elastic]
    assert not early, f"elastic gangs taken before their min runtime: {early[:5]}"


# ---------------------------------------------------------------- the world


@dataclass(frozen=True)
class Runs:
    without: dict[str, Any]  # the summary without a minimum runtime
    bounded: dict[str, Any]  # with M on every queue
    elastic: frozenset[str]  # the elastic jobs


@functools.cache
def _runs(others: frozenset[str]) -> Runs:
    """The churny world without a minimum runtime and with M on every queue (each test
    of a world reads the same two runs)."""
    world = churny_world(SEED, others)
    elastic = frozenset(j.id for j in world.jobs if j.min_workers)
    return Runs(simulate(world), simulate(with_min_runtime(world, M)), elastic)


def churny_world(seed: int, others: frozenset[str]) -> World:
    rng = random.Random(seed)
    rows = taking_turns(rng, TEAMS, TURNS, TURN_S, CLUSTER, (0.9, 0.3, 0.3), (TRAINING, BUILDS))
    half = CLUSTER.nodes / len(TEAMS)
    quota = (half * CLUSTER.gpus_per_node, half * NODE_CPU, half * NODE_MEMORY)
    return world_of(rows, CLUSTER, [QueueInfo(name=t, quota=quota) for t in TEAMS], others, seed)


def with_min_runtime(world: World, seconds: float) -> World:
    protect = functools.partial(dataclasses.replace, preempt_min_runtime=seconds, reclaim_min_runtime=seconds)
    return dataclasses.replace(world, queues=[protect(q) for q in world.queues])


# ---------------------------------------------------------------- figures


def _taken(summary: dict[str, Any]) -> list[tuple[float, str, float]]:
    """(time, job, how long it had run) of every reclaim and preemption (not the moves of
    consolidation), from the event log: each preempt event against the job's last start."""
    started: dict[str, float] = {}
    out = []
    for t, what, job, _team, _gpus, detail in summary["events"]:
        if what == "start":
            started[job] = t
        elif what == "preempt" and detail.split("by=")[-1] in BOUNDED:
            out.append((t, job, t - started[job]))
    return out


def _within(summary: dict[str, Any], seconds: float) -> list[tuple[float, str, float]]:
    return [e for e in _taken(summary) if e[2] < seconds]


def _per_hour(summary: dict[str, Any]) -> float:
    return len(_taken(summary)) / (float(summary["makespan_s"]) / HOUR)
