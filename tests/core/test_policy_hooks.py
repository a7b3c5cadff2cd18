"""Every rule of the Policy is a hook the actions consult, never a copy inside them: one
named case per hook, decided once with the default policy and once with the hook
replaced."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

from kai_ray.core import SchedulerConfig, run_cycle
from kai_ray.core.rules.policy import DEFAULT_POLICY

from .builders import ClusterBuilder, outcome


@dataclass
class Case:
    name: str
    hook: dict[str, Any]  # Policy field -> replacement
    cluster: ClusterBuilder
    actions: tuple[str, ...]
    default: dict[str, set[str]]  # decisions with the default policy
    replaced: dict[str, set[str]]  # decisions with the hook replaced
    # A preemption delay, where the cluster can grow, and the time of the cycle.
    preemption_delay: float = 0.0
    now: float = 0.0


def _never(*_: object) -> bool:
    return False


def _preemptible_pair() -> ClusterBuilder:
    return (
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("q", gpu_quota=1)
        .job("victim", "q")
        .running("n0")
        .job("urgent", "q", priority="inference")
        .pending()
    )


def _reclaimable() -> ClusterBuilder:
    return (
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("root", gpu_quota=2)
        .queue("a", "root", gpu_quota=1)
        .queue("b", "root", gpu_quota=1)
        .job("a1", "a")
        .running("n0")
        .job("a2", "a")
        .running("n0")
        .job("b1", "b")
        .pending()
    )


def _two_giving() -> ClusterBuilder:
    """Queues a and c hold two GPUs each against a share of one; b waits for one."""
    builder = ClusterBuilder().node("n0", gpus=4).queue("root", gpu_quota=4)
    for q in ("a", "b", "c"):
        builder.queue(q, "root", gpu_quota=1)
    for job, q in (("a1", "a"), ("a2", "a"), ("c1", "c"), ("c2", "c")):
        builder.job(job, q).running("n0")
    return builder.job("b1", "b").pending()


RECLAIMED = {"a2": {"evict@n0"}, "b1": {"pipeline@n0"}}
PREEMPTED = {"victim": {"evict@n0"}, "urgent": {"pipeline@n0"}}

CASES = [
    Case(
        "job order",
        {"job_order": lambda job: (job.info.created_at,)},
        ClusterBuilder()
        .node("n0", gpus=1)
        .queue("q", gpu_quota=1)
        .job("first", "q", priority="train")
        .pending()
        .job("urgent", "q", priority="inference")
        .pending(),
        ("allocate",),
        {"urgent": {"bind@n0"}},
        {"first": {"bind@n0"}},
    ),
    Case("who may be a victim", {"may_be_victim": _never}, _preemptible_pair(), ("preempt",), PREEMPTED, {}),
    Case(
        "whom a job may preempt",
        {"may_preempt": lambda preemptor, victim: victim.queue == preemptor.queue},
        # The same priority: the default never preempts. Replaced, the elastic job's
        # surplus task goes: with it gone the job is at its gang, behind the pending one
        # in line, so it does not take its room back.
        ClusterBuilder()
        .node("n0", gpus=2)
        .queue("q", gpu_quota=2)
        .job("victim", "q", priority="inference", preemptible=True, min_member=1)
        .running("n0")
        .running("n0")
        .job("urgent", "q", priority="inference")
        .pending(),
        ("preempt",),
        {},
        PREEMPTED,
    ),
    Case(
        "min runtime protection",
        {"min_runtime_protects": lambda unit, min_runtime, now: True},
        _preemptible_pair(),
        ("preempt",),
        PREEMPTED,
        {},
    ),
    Case(
        "whom a job may reclaim from",
        {"may_reclaim_from": _never},
        _reclaimable(),
        ("reclaim",),
        RECLAIMED,
        {},
    ),
    Case("whether a queue may reclaim", {"may_reclaim": _never}, _reclaimable(), ("reclaim",), RECLAIMED, {}),
    Case(
        "which candidates reclaim looks at",
        {"reclaim_may_take_from": _never},
        _reclaimable(),
        ("reclaim",),
        RECLAIMED,
        {},
    ),
    Case(
        "the order queues give victims in",
        # a and c are alike over their shares; by default c (ranked last) gives first.
        {"victim_queue_rank": lambda state, rows, q, victim: (-q,)},
        _two_giving(),
        ("reclaim",),
        {"c2": {"evict@n0"}, "b1": {"pipeline@n0"}},
        {"a2": {"evict@n0"}, "b1": {"pipeline@n0"}},
    ),
    Case(
        "which victim reclaim may take",
        {"reclaim_allows": _never},
        _reclaimable(),
        ("reclaim",),
        RECLAIMED,
        {},
    ),
    Case(
        "how long a job still waits for nodes before it may evict",
        {"preemption_delay_left": lambda job, delay, now: 1.0},
        _preemptible_pair(),
        ("preempt",),
        PREEMPTED,  # pending since 0, a delay of 60 s, at 100 s: over
        {},
        preemption_delay=60.0,
        now=100.0,
    ),
    Case(
        "the reclaimer's path after reclaim",
        {"reclaim_keeps_bounds": _never},
        _reclaimable(),
        ("reclaim",),
        RECLAIMED,
        {},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_policy_hook_changes_the_decision_without_touching_the_actions(case: Case) -> None:
    snap = case.cluster.build()
    snap.can_grow = case.preemption_delay > 0
    config = SchedulerConfig(actions=case.actions, preemption_delay_s=case.preemption_delay)
    assert outcome(run_cycle(snap, config, case.now)) == case.default
    policy = replace(DEFAULT_POLICY, **case.hook)
    assert outcome(run_cycle(snap, config, case.now, policy)) == case.replaced


def test_every_hook_has_a_case() -> None:
    assert {name for c in CASES for name in c.hook} == {f for f in DEFAULT_POLICY.__dataclass_fields__} - {
        "queue_rank",  # queue order: tests/core/test_fairshare.py and the scenarios
        "victim_order",  # victim order: the preempt and reclaim scenarios
    }
