"""The lifecycle read back from a backend that holds it (control/observed.py): the
Kubernetes operator's, where each workload's state is read off its pods each cycle."""

from __future__ import annotations

from kai_ray.control.events import Preempted, WorkloadChanged
from kai_ray.control.observed import Facts, ObservedLifecycle
from kai_ray.control.planner import plan_cycle
from kai_ray.core import ClusterSnapshot, CycleResult, Evict, JobInfo, Reason, Request, TaskInfo, TaskStatus

REQ = Request(gpu=4, cpu=1)
NAME = "ml/RayCluster/train"


def gang(status: TaskStatus) -> JobInfo:
    node = None if status is TaskStatus.PENDING else "n0"
    return JobInfo(NAME, "a", [TaskInfo("w-0", status, REQ, node=node)], created_at=1.0)


def world(*jobs: JobInfo) -> ClusterSnapshot:
    return ClusterSnapshot(nodes=[], queues=[], jobs=list(jobs))


def result(waiting: bool = False, evict: bool = False) -> CycleResult:
    reasons = {NAME: Reason("no-room", "no free room")} if waiting else {}
    decisions = [Evict(NAME, "w-0", "n0", "preempt", "preempted by serve in a")] if evict else []
    return CycleResult(decisions, {k: r.text for k, r in reasons.items()}, {}, waiting=reasons)


def record(life: ObservedLifecycle, snapshot: ClusterSnapshot, res: CycleResult, now: float) -> list[object]:
    return list(life.record(snapshot, res, plan_cycle(res, snapshot.jobs), now))


def facts(name: str) -> Facts:
    return Facts("RayCluster/train", "RayCluster", "train")


def test_a_gang_whose_pods_are_all_gone_for_a_while_keeps_its_preemptions() -> None:
    life = ObservedLifecycle(facts, keep_absent_s=60.0)
    record(life, world(gang(TaskStatus.RUNNING)), result(), now=10.0)
    events = record(life, world(gang(TaskStatus.RUNNING)), result(evict=True), now=11.0)
    assert Preempted(NAME, "a", "preempt: preempted by serve in a") in events
    # Every pod deleted, none made again yet: the gang is not in the world for a while.
    record(life, world(), result(), now=12.0)
    record(life, world(), result(), now=40.0)
    record(life, world(gang(TaskStatus.PENDING)), result(waiting=True), now=41.0)
    (view,) = life.views(41.0)
    assert view.state == "Queued" and view.preemptions == 1 and view.reason_code == "no-room"
    assert view.name == "RayCluster/train" and view.kind == "RayCluster"
    assert [(to, why) for _, _, to, why in view.history] == [
        ("Running", "bound: all its gang's pods"),
        ("Preempting", "preempt: preempted by serve in a"),
        ("Queued", "no free room"),
    ]


def test_a_gang_gone_longer_than_it_is_kept_is_forgotten() -> None:
    life = ObservedLifecycle(facts, keep_absent_s=60.0)
    record(life, world(gang(TaskStatus.RUNNING)), result(), now=10.0)
    assert record(life, world(), result(), now=50.0) == []  # absent, still kept
    (gone,) = record(life, world(), result(), now=71.0)
    assert isinstance(gone, WorkloadChanged) and gone.old == "Running" and gone.new == ""
    assert life.seen == {}


def test_an_unchanged_job_is_not_looked_at_again() -> None:
    """Steady cycles cost what changed: the same JobInfo object is skipped, so a state
    read off it cannot change (a new object is what a changed gang brings)."""
    life = ObservedLifecycle(facts)
    job = gang(TaskStatus.RUNNING)
    record(life, world(job), result(), now=1.0)
    job.tasks[0].status = TaskStatus.PENDING  # the same object: not read again
    assert record(life, world(job), result(), now=2.0) == []
    fresh = gang(TaskStatus.PENDING)
    (changed,) = record(life, world(fresh), result(waiting=True), now=3.0)
    assert isinstance(changed, WorkloadChanged) and changed.new == "Queued"
