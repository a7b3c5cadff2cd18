"""Rules where kai-ray follows KAI's code (elastic job order, limits checked with the
victims gone, reclaim victims re-ranked after each one), one named case each: how many
tasks of each job are placed, and which jobs lose tasks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pytest

from kai_ray.core import Bind, CycleResult, Evict, Pipeline

from .builders import ClusterBuilder, cycle


@dataclass
class Case:
    name: str
    cluster: ClusterBuilder
    actions: tuple[str, ...]
    placed: dict[str, int]  # job -> tasks bound or pipelined (jobs not named: none)
    evicted: dict[str, int] = field(default_factory=dict)  # job -> tasks evicted
    reasons: dict[str, str] = field(default_factory=dict)  # job -> reason code


def _counts(result: CycleResult, kinds: tuple[type, ...]) -> dict[str, int]:
    return dict(Counter(d.job for d in result.decisions if isinstance(d, kinds)))


def _elastic_pair(gpus: int) -> ClusterBuilder:
    return (
        ClusterBuilder()
        .node("n0", gpus=gpus)
        .queue("q", gpu_quota=gpus)
        .job("a", "q", min_member=1)
        .pending(4)
        .job("b", "q", min_member=1)
        .pending(4)
    )


CASES = [
    Case(
        "elastic jobs of one queue share free GPUs: gangs, then one surplus task each",
        _elastic_pair(gpus=4),
        ("allocate",),
        {"a": 2, "b": 2},
    ),
    Case(
        "a job at its minimum goes before an older one above it",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("q", gpu_quota=4)
        .job("above", "q", min_member=1)
        .running("n0", count=2)
        .pending(2)
        .job("at", "q", min_member=1)
        .running("n0")
        .pending(2),
        ("allocate",),
        {"at": 1},
    ),
    Case(
        "both above their minimum: the older job goes first (surplus tasks are not counted)",
        _elastic_pair(gpus=6),
        ("allocate",),
        {"a": 4, "b": 2},
    ),
    Case(
        "a job short of its gang still goes before any surplus",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("q", gpu_quota=4)
        .job("elastic", "q", min_member=1)
        .running("n0")
        .pending(3)
        .job("gang", "q")
        .pending(3),
        ("allocate",),
        {"gang": 3},
    ),
]


def _at_limit(gpus: int, **queue: object) -> ClusterBuilder:
    """Queue q may hold 2 GPUs and holds 2 (train jobs); a build job of q waits."""
    return (
        ClusterBuilder()
        .node("n0", gpus=gpus)
        .queue("q", gpu_quota=2, gpu_limit=2, **queue)
        .job("train-old", "q")
        .running("n0")
        .job("train-new", "q")
        .running("n0")
        .job("build", "q", priority="build")
        .pending()
    )


CASES += [
    Case(
        "a queue at its limit preempts inside itself: the limit is checked with the victim gone",
        _at_limit(gpus=2),
        ("allocate", "preempt"),
        {"build": 1},
        {"train-new": 1},
    ),
    Case(
        "with free room a queue at its limit still sheds its newest victim, and binds at once",
        _at_limit(gpus=4),
        ("allocate", "preempt"),
        {"build": 1},
        {"train-new": 1},
    ),
    Case(
        "victims within their min runtime keep the queue at its limit: the job says so",
        _at_limit(gpus=4, preempt_min_runtime=7200.0),
        ("allocate", "preempt"),
        {},
        reasons={"build": "min-runtime"},
    ),
    Case(
        "a non-preemptible job over its quota still waits: victims never count against it",
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=1)
        .job("train", "q", gpu=2)
        .running("n0")
        .job("build", "q", gpu=2, priority="build")
        .pending(),
        ("allocate", "preempt"),
        {},
        reasons={"build": "queue-quota"},
    ),
    Case(
        "reclaim too: a victim under the same department brings it back within its limit",
        ClusterBuilder()
        .node("n0", gpus=4)
        .queue("dept", gpu_quota=2, gpu_limit=2)
        .queue("a1", "dept", gpu_quota=1)
        .queue("a2", "dept", gpu_quota=1)
        .job("a2-old", "a2")
        .running("n0")
        .job("a2-new", "a2")
        .running("n0")
        .job("j", "a1")
        .pending(),
        ("allocate", "reclaim"),
        {"j": 1},
        {"a2-new": 1},
    ),
]


def _two_over(a_node: str, b_node: str, c_gpu: int, c_tasks: int) -> ClusterBuilder:
    """qa and qb each hold 3 one-GPU jobs against a fair share of 2; qc (share 2) wants
    2 GPUs: `c_tasks` tasks of `c_gpu` each."""
    builder = (
        ClusterBuilder()
        .node("n0", gpus=6 if a_node == b_node else 3)
        .queue("qa", gpu_quota=1)
        .queue("qb", gpu_quota=1)
        .queue("qc", gpu_quota=2)
    )
    if a_node != b_node:
        builder.node(b_node, gpus=3)
    for k in range(3):
        builder.job(f"a-{k}", "qa").running(a_node)
    for k in range(3):
        builder.job(f"b-{k}", "qb").running(b_node)
    return builder.job("c", "qc", gpu=c_gpu).pending(c_tasks)


CASES += [
    Case(
        "reclaim victims are re-ranked after each: on one node, the second comes from the "
        "queue now further over its share",
        _two_over("n0", "n0", c_gpu=2, c_tasks=1),
        ("reclaim",),
        {"c": 1},
        {"a-2": 1, "b-2": 1},
    ),
    Case(
        "re-ranked across nodes too: each task of the gang frees the node whose victim "
        "comes first as the queues stand then",
        _two_over("n0", "n1", c_gpu=1, c_tasks=2),
        ("reclaim",),
        {"c": 2},
        {"a-2": 1, "b-2": 1},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_kai_rule(case: Case) -> None:
    result = cycle(case.cluster.build(), *case.actions)
    assert _counts(result, (Bind, Pipeline)) == case.placed
    assert _counts(result, (Evict,)) == case.evicted
    for job, code in case.reasons.items():
        assert result.waiting[job].code == code, result.waiting[job]
