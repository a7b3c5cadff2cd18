"""The one decision applier: a cycle's decisions checked and grouped per job, with
reasons and places in line taken from the core."""

from __future__ import annotations

import pytest

from kai_ray.control import PlanError, plan_cycle
from kai_ray.core import Bind, CycleResult, Evict, JobInfo, Pipeline, Reason, Request, TaskInfo, TaskStatus

REQ = Request(gpu=1)


def job(name: str, *statuses: TaskStatus) -> JobInfo:
    tasks = [
        TaskInfo(f"w{i}", s, REQ, node="n0" if s is not TaskStatus.PENDING else None)
        for i, s in enumerate(statuses)
    ]
    return JobInfo(name, "q", tasks)


def result(*decisions: Bind | Pipeline | Evict, **kw: object) -> CycleResult:
    return CycleResult(list(decisions), {}, {}, **kw)  # type: ignore[arg-type]


JOBS = [
    job("run", TaskStatus.RUNNING, TaskStatus.RUNNING),
    job("new", TaskStatus.PENDING, TaskStatus.PENDING),
]


def test_decisions_are_grouped_per_job_and_a_move_is_one_decision() -> None:
    plan = plan_cycle(
        result(
            Evict("run", "w0", "n0", "consolidation", "move"),
            Bind("run", "w0", "n1"),
            Evict("run", "w1", "n0", "reclaim", "over share"),
            Bind("new", "w0", "n0"),
            Pipeline("new", "w1", "n0"),
        ),
        JOBS,
    )
    run, new = plan.jobs["run"], plan.jobs["new"]
    assert [e.task for e in run.evicted] == ["w1"] and [(e.task, m.node) for e, m in run.moved] == [
        ("w0", "n1")
    ]
    assert run.evicted_tasks == frozenset({"w0", "w1"})
    assert [b.task for b in new.binds] == ["w0"] and [p.task for p in new.pipelined] == ["w1"]


def test_waiting_reasons_and_positions_come_from_the_core() -> None:
    order = {"q": ("b", "a"), "r": ("c",)}
    waiting = {"a": Reason("no-room", "no room"), "b": Reason("queue-limit", "at its limit")}
    plan = plan_cycle(result(queue_order=order, waiting=waiting), JOBS)
    assert plan.positions == {"b": (1, 2), "a": (2, 2), "c": (1, 1)}
    assert plan.waiting == waiting and plan.jobs == {}


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Bind("x", "w0", "n0"), "unknown task 'w0' of job 'x'"),
        (Bind("run", "w0", "n1"), "which is Running and was not evicted"),
        (Evict("new", "w0", "n0", "preempt", ""), "Evict of task 'w0', which is Pending"),
        (Bind("new", "w0", "n9"), "unknown node 'n9'"),
    ],
)
def test_decisions_that_cannot_be_applied_are_refused(decision: Bind | Evict, message: str) -> None:
    with pytest.raises(PlanError, match=message):
        plan_cycle(result(decision), JOBS, nodes=["n0", "n1"])


def test_a_task_placed_twice_is_refused() -> None:
    with pytest.raises(PlanError, match="placed twice"):
        plan_cycle(result(Bind("new", "w0", "n0"), Pipeline("new", "w0", "n1")), JOBS)
