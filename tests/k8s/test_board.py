"""The operator's in-memory gang history (operators/board.py GangHistory)."""

from __future__ import annotations

from kai_ray.core import CycleResult, Evict, JobInfo, Reason, Request, TaskInfo, TaskStatus
from kai_ray.k8s.board import GangHistory

REQ = Request(gpu=4, cpu=1)


def gang(status: TaskStatus) -> JobInfo:
    node = None if status is TaskStatus.PENDING else "n0"
    return JobInfo("RayCluster/train", "a", [TaskInfo("w-0", status, REQ, node=node)], created_at=1.0)


def result(waiting: bool = False) -> CycleResult:
    reasons = {"RayCluster/train": Reason("no-room", "no free room")} if waiting else {}
    return CycleResult([], {k: r.text for k, r in reasons.items()}, {}, waiting=reasons)


EVICTED = {"RayCluster/train": Evict("RayCluster/train", "w-0", "n0", "preempt", "preempted by serve in a")}


def test_a_gang_whose_pods_are_all_gone_for_a_while_keeps_its_preemptions() -> None:
    history = GangHistory(keep_absent_s=60.0)
    history.observe([gang(TaskStatus.RUNNING)], result(), {}, now=10.0)
    history.observe([gang(TaskStatus.RUNNING)], result(), EVICTED, now=11.0)
    # Every pod deleted, none made again yet: the gang is not in the world for a while.
    history.observe([], result(), {}, now=12.0)
    history.observe([], result(), {}, now=40.0)
    history.observe([gang(TaskStatus.PENDING)], result(waiting=True), {}, now=41.0)
    seen = history.seen["RayCluster/train"]
    assert seen.state == "Queued" and seen.preemptions == 1
    assert [(to, why) for _, _, to, why in seen.history] == [
        ("Running", "bound: all its gang's pods"),
        ("Preempting", "preempt: preempted by serve in a"),
        ("Queued", "no free room"),
    ]


def test_a_gang_gone_longer_than_it_is_kept_is_forgotten() -> None:
    history = GangHistory(keep_absent_s=60.0)
    history.observe([gang(TaskStatus.RUNNING)], result(), {}, now=10.0)
    assert history.observe([], result(), {}, now=50.0) is False  # absent, still kept
    assert history.observe([], result(), {}, now=71.0) is True
    assert history.seen == {}
