"""Per-job spreading, one named case each: how many of a job's tasks end up on each node.

Preferred spreading (Ray's SPREAD) is as even as the free room allows: each next task
goes to a node holding the fewest of the job's tasks among those with room."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from kai_ray.core import Bind, ClusterSnapshot, CycleResult, Evict, Pipeline, TaskStatus

from .builders import ClusterBuilder, cycle


@dataclass
class Case:
    name: str
    cluster: ClusterBuilder
    actions: tuple[str, ...]
    spread: dict[str, int]  # node -> the job's tasks there afterwards (running ones too)
    job: str = "g"
    evicted: set[str] = field(default_factory=set)  # jobs with an eviction


def _nodes(*gpus: int) -> ClusterBuilder:
    builder = ClusterBuilder()
    for i, count in enumerate(gpus):
        builder.node(f"n{i}", gpus=count)
    return builder.queue("q", gpu_quota=sum(gpus))


def _full_pair() -> ClusterBuilder:
    """Two nodes of 2 GPUs, each full with two single-GPU training jobs."""
    return (
        _nodes(2, 2)
        .job("t0", "q")
        .running("n0")
        .job("t1", "q")
        .running("n0")
        .job("t2", "q")
        .running("n1")
        .job("t3", "q")
        .running("n1")
    )


CASES = [
    Case(
        "4 tasks on 2 empty nodes: 2 + 2 (binpack alone would stack them)",
        _nodes(4, 4).job("g", "q", spread="preferred").pending(4),
        ("allocate",),
        {"n0": 2, "n1": 2},
    ),
    Case(
        "5 tasks on 3 nodes: 2 + 2 + 1",
        _nodes(4, 4, 4).job("g", "q", spread="preferred").pending(5),
        ("allocate",),
        {"n0": 2, "n1": 2, "n2": 1},
    ),
    Case(
        "uneven room: a node with room for 3 and one with room for 1 take 3 + 1",
        _nodes(3, 1).job("g", "q", spread="preferred").pending(4),
        ("allocate",),
        {"n0": 3, "n1": 1},
    ),
    Case(
        "room left by other work counts: 1 free GPU and 4 free GPUs take 1 + 3",
        _nodes(4, 4).job("other", "q", gpu=3).running("n0").job("g", "q", spread="preferred").pending(4),
        ("allocate",),
        {"n0": 1, "n1": 3},
    ),
    Case(
        "elastic growth evens out what already runs",
        _nodes(4, 4, 4).job("g", "q", min_member=1, spread="preferred").running("n0", count=2).pending(4),
        ("allocate",),
        {"n0": 2, "n1": 2, "n2": 2},
    ),
    Case(
        # As KAI's solver: victims come in victim order (the youngest, t3 then t2, both
        # on n1), and a preferred spread only orders the nodes among the room they free.
        "a preferred spread does not change which victims preempt takes",
        _full_pair().job("g", "q", priority="inference", spread="preferred").pending(2),
        ("preempt",),
        {"n1": 2},
        evicted={"t2", "t3"},
    ),
    Case(
        "without spreading the same search frees one node for both (the control case)",
        _full_pair().job("g", "q", priority="inference").pending(2),
        ("preempt",),
        {"n1": 2},
        evicted={"t2", "t3"},
    ),
]


def _spread(snap: ClusterSnapshot, result: CycleResult, job: str) -> dict[str, int]:
    evicted = {d.task for d in result.decisions if isinstance(d, Evict)}
    placed = [d.node for d in result.decisions if isinstance(d, Bind | Pipeline) and d.job == job]
    (info,) = [j for j in snap.jobs if j.name == job]
    staying = [
        t.node for t in info.tasks if t.status is TaskStatus.RUNNING and t.name not in evicted and t.node
    ]
    return dict(Counter(placed + staying))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_spread(case: Case) -> None:
    snap = case.cluster.build()
    result = cycle(snap, *case.actions)
    assert _spread(snap, result, case.job) == case.spread
    assert {d.job for d in result.decisions if isinstance(d, Evict)} == case.evicted
