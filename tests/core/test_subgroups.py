"""Sub-gangs (JobInfo.subgroups): the rule itself, and what a waiting or stale gang with
subgroups is told. Which tasks start, which go as victims and which gangs are stale:
the scenarios under tests/scenarios/subgroups."""

from __future__ import annotations

from kai_ray.control.observed import observed_state
from kai_ray.control.workload import State
from kai_ray.core import (
    ClusterSnapshot,
    CycleCache,
    Evict,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    gang_never_fits,
    run_cycle,
)
from kai_ray.core.model.subgroups import WHOLE, info_shortfall, shortfall, surplus

HEAD, ONE, TWO = Request(cpu=1), Request(gpu=1, cpu=1), Request(gpu=2, cpu=1)
QUEUES = [QueueInfo("q", quota=(-1, -1, -1))]
RAY = {"head": 1, "a": 1, "b": 2}


def task(
    name: str, subgroup: str, request: Request, status: str = "Pending", node: str | None = None
) -> TaskInfo:
    return TaskInfo(name, TaskStatus(status), request, node=node, since=-300.0, subgroup=subgroup)


def ray_cluster(*workers: TaskInfo, name: str = "ray", head: str = "Pending") -> JobInfo:
    """A head (its own subgroup, min 1) and worker groups a (min 1) and b (min 2)."""
    first = task(f"{name}-h", "head", HEAD, head, "n0" if head != "Pending" else None)
    return JobInfo(name, "q", [first, *workers], subgroups=dict(RAY))


def snapshot(*jobs: JobInfo, gpus: int = 4) -> ClusterSnapshot:
    return ClusterSnapshot([NodeInfo("n0", gpus=gpus)], QUEUES, list(jobs))


def test_a_set_is_enough_only_with_every_subgroups_minimum() -> None:
    job = ray_cluster()
    assert shortfall(job, 5, lambda: {"head": 1, "a": 4}) == {"b": 2}  # a's surplus counts for nothing
    assert shortfall(job, 4, lambda: {"head": 1, "a": 1, "b": 2}) == {}
    assert surplus(job, 6, lambda: {"head": 1, "a": 3, "b": 2}) == {"a": 2}
    plain = JobInfo("p", "q", [task("p-0", "", ONE)] * 3, min_member=2)
    assert shortfall(plain, 1, dict) == {WHOLE: 1} and surplus(plain, 3, dict) == {WHOLE: 1}


def test_a_waiting_gang_names_the_subgroup_that_does_not_fit() -> None:
    job = ray_cluster(task("a0", "a", ONE), task("a1", "a", ONE), task("b0", "b", TWO), task("b1", "b", TWO))
    result = run_cycle(snapshot(job), SchedulerConfig(actions=("allocate",)), 0.0)
    assert not result.decisions
    reason = result.waiting["ray"]
    assert reason.code == "no-room"
    assert reason.text.startswith("subgroup b does not fit beside the rest of its gang"), reason.text


def test_the_missing_subgroup_of_a_running_cluster_is_named() -> None:
    workers = [task("a0", "a", ONE, "Running", "n0"), task("b0", "b", TWO), task("b1", "b", TWO)]
    result = run_cycle(
        snapshot(ray_cluster(*workers, head="Running")), SchedulerConfig(actions=("allocate",)), 0.0
    )
    assert result.waiting["ray"].text.startswith("subgroup b: "), result.waiting["ray"].text


def test_look_alikes_split_otherwise_are_told_their_own_subgroup() -> None:
    """Two gangs of the same three tasks, split into subgroups another way: a failed
    search is not taken for the other's (its key holds the split), so each reason names
    the subgroup of its own that does not fit."""
    first = JobInfo("first", "q", [task("f0", "x", ONE), task("f1", "y", ONE), task("f2", "y", ONE)])
    first.subgroups = {"x": 1, "y": 2}
    second = JobInfo("second", "q", [task("s0", "y", ONE), task("s1", "x", ONE), task("s2", "x", ONE)])
    second.subgroups = {"y": 1, "x": 2}
    result = run_cycle(snapshot(first, second, gpus=2), SchedulerConfig(actions=("allocate",)), 0.0)
    assert result.waiting["first"].text.startswith("subgroup y "), result.waiting["first"].text
    assert result.waiting["second"].text.startswith("subgroup x "), result.waiting["second"].text


def test_a_subgroup_too_few_tasks_are_left_for_is_named() -> None:
    workers = [task("a0", "a", ONE), task("b0", "b", ONE), task("b1", "b", ONE, "Failed")]
    result = run_cycle(snapshot(ray_cluster(*workers)), SchedulerConfig(), 0.0)
    reason = result.waiting["ray"]
    assert reason.code == "gang-incomplete"
    assert "subgroup b needs 2 tasks but only 1 exists" in reason.text, reason.text
    assert not result.decisions  # no action starts it part-way, consolidation included


def test_a_stale_subgroup_is_named_in_the_eviction() -> None:
    workers = [
        task("a0", "a", ONE, "Running", "n0"),
        task("b0", "b", ONE, "Running", "n0"),
        task("b1", "b", ONE),
    ]
    result = run_cycle(
        snapshot(ray_cluster(*workers, head="Running")), SchedulerConfig(actions=("stalegangeviction",)), 0.0
    )
    evicted = [d for d in result.decisions if isinstance(d, Evict)]
    assert {d.task for d in evicted} == {"ray-h", "a0", "b0"}
    assert "subgroup b has 1 of its 2 tasks" in evicted[0].reason, evicted[0].reason


def test_a_gang_that_can_never_fit_counts_each_subgroups_minimum() -> None:
    nodes = [NodeInfo("n0", gpus=2)]
    many_a = ray_cluster(*(task(f"a{k}", "a", ONE) for k in range(5)), task("b0", "b", Request(cpu=1)))
    many_a.subgroups = {"head": 1, "a": 1, "b": 1}
    assert gang_never_fits(nodes, many_a) is None  # a's four surplus tasks are not part of the gang
    big_b = ray_cluster(task("a0", "a", ONE), task("b0", "b", TWO), task("b1", "b", TWO))
    assert gang_never_fits(nodes, big_b)


def test_a_workload_runs_only_with_every_subgroups_minimum() -> None:
    workers = [
        task("a0", "a", ONE, "Running", "n0"),
        task("a1", "a", ONE, "Running", "n0"),
        task("b0", "b", ONE),
    ]
    job = ray_cluster(*workers, head="Running")
    assert info_shortfall(job) == {"b": 2}
    assert observed_state(job) is State.ADMITTING  # 3 bound of a gang of 4, but b has none


def test_the_cycle_cache_decides_subgroups_as_the_full_rebuild() -> None:
    cache = CycleCache()
    jobs = [
        ray_cluster(task("a0", "a", ONE), task("b0", "b", ONE), task("b1", "b", ONE), name="first"),
        ray_cluster(task("x0", "a", ONE), task("y0", "b", TWO), task("y1", "b", TWO), name="second"),
    ]
    for _ in range(2):
        snap = snapshot(*jobs, gpus=8)
        assert run_cycle(snap, SchedulerConfig(), 0.0, cache=cache) == run_cycle(snap, SchedulerConfig(), 0.0)
    assert cache.patches == 1
