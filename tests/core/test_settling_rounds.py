"""A state settles: over random contended states (queues over and under their share,
pending gangs that need reclaim or preemption, elastic jobs, GPU fractions), played for
12 rounds as the scenario runner plays them (decisions applied, bindings started,
evictions gone, pipelined work placed again), rounds 11 and 12 leave every task where
it was. A queue that reclaims room and gives it back the next cycle, forever, fails it.

What bounds the rounds a state needs: each round either places a gang, evicts for one
(and the victim's queue cannot take the room straight back: the solver's simulation
would have seen it, docs/semantics.md), or changes nothing; a pipelined gang needs a
second round to start. The most rounds any of these states needs is measured by
`test_how_many_rounds_states_need` and stays well under 10.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from kai_ray.core.model.snapshot import TaskStatus
from kai_ray.scenario import parse_scenario, run_scenario

STATES = 300
ROUNDS = 12
PRIORITIES = ["train", "build-preemptible", "build", "inference"]


def contended_state(seed: int) -> dict[str, Any]:
    """A small cluster, full or nearly, with two departments of queues whose quotas and
    weights put some over and some under their share, and a line of gangs."""
    rnd = random.Random(seed)
    nodes = {
        f"n{i}": {"gpus": rnd.choice([2, 4, 4, 8]), "cpu": 64, "memory": "256Gi"}
        for i in range(rnd.randint(1, 5))
    }
    queues: list[dict[str, Any]] = []
    leaves: list[str] = []
    for d in range(rnd.randint(1, 2)):
        queues.append({"name": f"d{d}", "resources": {"gpu": _gpu(rnd, -1)}})
        for q in range(rnd.randint(1, 3)):
            leaves.append(f"d{d}-q{q}")
            queues.append({
                "name": leaves[-1], "parent": f"d{d}", "priority": rnd.choice([100, 100, 120]),
                "resources": {"gpu": _gpu(rnd, rnd.choice([-1, -1, -1, 4, 6]))},
            })  # fmt: skip
    free = {name: n["gpus"] for name, n in nodes.items()}
    jobs: list[dict[str, Any]] = []
    for r in range(rnd.randint(2, 8)):
        gpu = rnd.choice([1, 1, 2, 0.5])
        count = rnd.randint(1, 3)
        tasks = []
        for _ in range(count):
            spots = [n for n, left in free.items() if left >= gpu]
            if not spots:
                break
            node = rnd.choice(spots)
            free[node] -= gpu
            tasks.append({"state": "Running", "node": node, "since": -rnd.randint(100, 5000)})
        if tasks:
            job = {
                "name": f"r{r}",
                "queue": rnd.choice(leaves),
                "priority": rnd.choice(PRIORITIES[:3]),
                "gpu": gpu,
            }
            if len(tasks) > 1 and rnd.random() < 0.4:
                job["minMember"] = rnd.randint(1, len(tasks) - 1)  # elastic
            jobs.append({**job, "tasks": tasks})
    for p in range(rnd.randint(1, 6)):
        count = rnd.randint(1, 4)
        job = {"name": f"p{p}", "queue": rnd.choice(leaves), "priority": rnd.choice(PRIORITIES),
               "gpu": rnd.choice([1, 1, 2, 4, 0.25]), "tasks": [{"state": "Pending"}] * count}  # fmt: skip
        if count > 1 and rnd.random() < 0.3:
            job["minMember"] = rnd.randint(1, count - 1)
        jobs.append(job)
    return {"name": f"settling-{seed}", "nodes": nodes, "queues": queues, "jobs": jobs}


def _gpu(rnd: random.Random, limit: int) -> dict[str, float]:
    return {"quota": rnd.choice([0, 1, 2, 4]), "overQuotaWeight": rnd.choice([0, 1, 2, 3]), "limit": limit}


def placements(raw: dict[str, Any], rounds: int) -> dict[str, tuple[str | None, ...]]:
    """Where each task is after `rounds` rounds (a task on its way out, or waiting: none)."""
    result = run_scenario(parse_scenario({**raw, "rounds": rounds}), keep_traceback=True)
    assert result.error is None, result.error
    held = (TaskStatus.RUNNING, TaskStatus.BINDING, TaskStatus.PIPELINED)
    return {job.name: tuple(t.node if t.status in held else None for t in job.tasks) for job in result.jobs}


@pytest.mark.parametrize("chunk", range(10))
def test_random_contended_states_settle(chunk: int) -> None:
    for seed in range(chunk, STATES, 10):
        raw = contended_state(seed)
        eleven, twelve = placements(raw, ROUNDS - 1), placements(raw, ROUNDS)
        moved = {job: (eleven[job], twelve[job]) for job in eleven if eleven[job] != twelve[job]}
        assert not moved, f"seed {seed} does not settle by round {ROUNDS}: {moved}"


def test_how_many_rounds_states_need() -> None:
    """The first round after which nothing moves, over a sample of the states: small."""
    needed = []
    for seed in range(0, STATES, 15):
        raw = contended_state(seed)
        seen = [placements(raw, r) for r in range(1, ROUNDS + 1)]
        settled = next(r for r in range(1, ROUNDS) if seen[r - 1] == seen[r])
        needed.append(settled)
    assert max(needed) < 10, needed
