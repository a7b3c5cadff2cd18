"""The one decision applier: a cycle's decisions checked and grouped per job, with
reasons and places in line taken from the core."""

from __future__ import annotations

import pytest

from kai_ray.control import PlanError, plan_cycle
from kai_ray.core import (
    Bind,
    CycleResult,
    Evict,
    JobInfo,
    Pipeline,
    Reason,
    Request,
    TakeBack,
    TaskInfo,
    TaskStatus,
)

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


def test_a_placement_taken_back_in_its_cycle_is_only_told() -> None:
    """A task placed and taken back as a victim in the same cycle never started: the
    plan carries nothing out for it (no bind, no eviction), and says it was taken back."""
    back = TakeBack("new", "w0", "n0", "preempt", "preempted by serve in q")
    plan = plan_cycle(result(back, Pipeline("new", "w1", "n1")), JOBS)
    assert plan.taken_back == [back]
    jp = plan.jobs["new"]
    assert jp.binds == [] and jp.evicted == [] and jp.moved == []
    assert [p.task for p in jp.pipelined] == ["w1"]
    alone = plan_cycle(result(back), JOBS)  # nothing to carry out: no plan for the job
    assert alone.jobs == {} and alone.taken_back == [back]


@pytest.mark.parametrize(
    ("decisions", "message"),
    [
        (
            (TakeBack("run", "w0", "n0", "preempt", "x"),),
            "TakeBack of task 'w0' of job 'run', which was not pending",
        ),
        ((TakeBack("new", "w0", "n0", "preempt", "x"), Bind("new", "w0", "n0")), "decided twice"),
    ],
    ids=["a running task", "a task also placed"],
)
def test_a_take_back_of_a_task_not_left_pending_is_refused(
    decisions: tuple[object, ...], message: str
) -> None:
    with pytest.raises(PlanError, match=message):
        plan_cycle(result(*decisions), JOBS)  # type: ignore[arg-type]


def test_the_core_reads_a_workloads_gang_first_and_its_surplus_last() -> None:
    """A gang placed again on a later worker (a move started it on w1, and w0 grew as its
    surplus) is listed first: the core takes an elastic job's last tasks as its surplus,
    one at a time and never protected by min runtime, so it must not take the gang so."""
    from kai_ray.control.snapshot import job_info
    from kai_ray.control.workload import Slot, State, Workload, WorkloadSpec

    spec = WorkloadSpec(queue="q", workers=3, min_workers=1, resources_per_worker={"GPU": 1})
    w = Workload("wl", spec, created_at=0.0, state=State.RUNNING, since=10.0)
    w.slots = {"w0": Slot("n0", "g/w0", surplus=True), "w1": Slot("n0", "g")}
    info = job_info(w, "name")
    assert [(t.name, t.status) for t in info.tasks] == [
        ("w1", TaskStatus.RUNNING),
        ("w0", TaskStatus.RUNNING),
        ("w2", TaskStatus.PENDING),
    ]
    w.state, w.slots = State.QUEUED, {}
    assert [t.name for t in job_info(w, "name").tasks] == ["w0", "w1", "w2"]
