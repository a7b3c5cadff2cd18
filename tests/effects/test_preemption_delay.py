"""A preemption delay keeps the scheduler from thrashing against the autoscaler
(docs/semantics.md, "Waiting for new nodes before evicting (preemption delay)";
SchedulerConfig.preemption_delay_s, ClusterSnapshot.can_grow): where an autoscaler adds
nodes, a gang that could start only by evicting others waits for the new nodes instead,
when the delay is at least the nodes' provisioning latency. So preemptions fall sharply,
while the gangs' wait grows by about the latency at most.

The world: three teams of equal quota on two nodes of 8 GPUs, with the simulator's
autoscaler (`--autoscale 8x8,latency=5m,idle=10m`: up to 8 more nodes of 8 GPUs, each
ready 5 minutes after a gang asks, removed after 10 idle minutes; it never needs all 8). For 6 hours the teams
take turns to burst (every 2 hours), each also sending a stream of build jobs (priority
75) that preempt its own training; jobs of 1 to 8 GPUs, some gangs of two workers; about
90 jobs. Each world runs twice: with a delay of 10 minutes (twice the latency) and
without one. Without the delay a gang evicts at once, and its victims then wait for the
nodes it could have waited for.

Beside every other feature the evictions fall less (to 0.27x, where alone they all go):
the autoscaler adds nodes of one GPU type (H100), so a gang that accepts only A100 waits
out its delay for nodes that never come, then evicts as it would have at once.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any

import pytest

from kai_ray.core import DEFAULT_GPU_TYPE
from kai_ray.sim.autoscale import parse_autoscale
from kai_ray.sim.cluster import team_queues
from kai_ray.sim.engine import Options, Simulation
from kai_ray.sim.policies import SimPolicy

from .streams import BUILD, Cluster, Kind, taking_turns, world_of
from .world import ALONE, GPU_TYPES, HOUR, TYPES, WAIT_STEP_S, World, others_id, together

PREEMPTION_DELAY = "preemption-delay"  # the feature under test: not one of world.py's others
SEED = 1
CLUSTER = Cluster(nodes=2)
LATENCY_S = 300.0
AUTOSCALE = f"8x8:{{type}},latency={LATENCY_S:g},idle=600"
DELAY_S = 2 * LATENCY_S
TEAMS = ("team-a", "team-b", "team-c")
TURN_S, TURNS = 2 * HOUR, 3
TRAINING = (Kind(2, 1, HOUR), Kind(4, 1, HOUR), Kind(8, 1, HOUR), Kind(4, 2, HOUR))
BUILDS = tuple(Kind(g, 1, HOUR / 3, BUILD) for g in (1, 2, 4))


# The most evictions left with the delay, of those without it: alone, and beside every
# other feature, where a gang that accepts only a GPU type the autoscaler does not add
# still evicts once its delay is over (module docstring).
LEFT = {ALONE: 0.1, together(PREEMPTION_DELAY): 0.4}


@pytest.mark.parametrize("others", [ALONE, together(PREEMPTION_DELAY)], ids=others_id)
def test_gangs_wait_for_new_nodes_instead_of_evicting(others: frozenset[str]) -> None:
    runs = _runs(others)
    # Seen: 12 running jobs evicted (reclaim, preempt, consolidation) without the delay,
    # none with it alone; 22 and 6 together (0.27x).
    at_once, waiting = _evictions(runs.at_once), _evictions(runs.waiting)
    assert waiting <= LEFT[others] * at_once, _story(runs)


@pytest.mark.parametrize("others", [ALONE, together(PREEMPTION_DELAY)], ids=others_id)
def test_the_wait_grows_by_the_latency_at_most(others: frozenset[str]) -> None:
    runs = _runs(others)
    # Seen: the mean wait 27 s without the delay, 57 s with it alone (p95 300 s both); 319 s
    # and 384 s together (p95 659 s and 704 s). The latency is 300 s. It grows: gangs
    # waited for nodes where they would have evicted.
    grown = {figure: _wait(runs.waiting, figure) - _wait(runs.at_once, figure) for figure in ("mean", "p95")}
    assert 0 < grown["mean"] <= LATENCY_S, f"the mean wait grew {grown['mean']:.0f}s: {_story(runs)}"
    assert grown["p95"] <= LATENCY_S, f"the p95 wait grew {grown['p95']:.0f}s: {_story(runs)}"


# ---------------------------------------------------------------- the world


@dataclass(frozen=True)
class Runs:
    at_once: dict[str, Any]  # the summary without a delay
    waiting: dict[str, Any]  # with the delay


@functools.cache
def _runs(others: frozenset[str]) -> Runs:
    """The world without a delay and with one (each test of a world reads the same two
    runs). The autoscaler adds nodes of the first GPU type where there are types."""
    world = growing_world(SEED, others)
    autoscale = AUTOSCALE.format(type=TYPES[0] if GPU_TYPES in others else DEFAULT_GPU_TYPE)
    delayed = world.with_config(preemption_delay_s=DELAY_S)
    return Runs(simulate(world, autoscale), simulate(delayed, autoscale))


def growing_world(seed: int, others: frozenset[str]) -> World:
    rng = random.Random(seed)
    rows = taking_turns(rng, TEAMS, TURNS, TURN_S, CLUSTER, (0.9, 0.2, 0.2), (TRAINING, BUILDS))
    world = world_of(rows, CLUSTER, [], others, seed)
    return World(world.jobs, world.nodes, team_queues(TEAMS, world.nodes), world.config, world.estimates)


def simulate(world: World, autoscale: str) -> dict[str, Any]:
    """world.simulate with the simulator's autoscaler (`kai-ray sim --autoscale`)."""
    wait = WAIT_STEP_S if world.config.usage_window_s > 0 else 0.0
    growth = parse_autoscale(autoscale)
    options = Options(runtime_estimates=world.estimates, wait_step_s=wait, event_log=True, autoscale=growth)
    sim = Simulation(world.jobs, world.nodes, world.queues, SimPolicy("effects", world.config), options)
    summary: dict[str, Any] = sim.run().summary
    summary["events"] = sim.metrics.events
    return summary


# ---------------------------------------------------------------- figures


def _evictions(summary: dict[str, Any]) -> int:
    """Running jobs stopped by reclaim, preempt or consolidation: what the delay spares."""
    return sum(1 for e in summary["events"] if e[1] == "preempt")


def _wait(summary: dict[str, Any], figure: str) -> float:
    return float(summary["queueing_delay_s"][figure])


def _story(runs: Runs) -> str:
    return " | ".join(
        f"{name}: {_evictions(s)} evictions, mean wait {_wait(s, 'mean'):.0f}s, "
        f"p95 {_wait(s, 'p95'):.0f}s, {s['autoscale']}"
        for name, s in (("at once", runs.at_once), ("waiting", runs.waiting))
    )
