"""GPU types on random clusters (hypothesis): the rules of docs/gpu-types.md checked from
the decisions alone, against the snapshot they were made on.

- No GPU task is placed on a node of a type its job does not accept, and a gang that may
  not span types places its new tasks on one type (the one it holds, if it holds one).
- No eviction is made for a job that cannot use what it frees: a preempt or
  consolidation victim has a task on a type the job named in its reason accepts (a
  gang, taken whole, on any of its nodes); a reclaim victim one on a type some waiting
  job of the reclaiming queue accepts.
- A job whose queue says whenCanPreempt Preempt runs on its first type wherever,
  accepting that type alone, it would run.
- With one type in the cluster, every decision and reason is today's.
"""

from __future__ import annotations

import re
from dataclasses import replace

from hypothesis import assume, given
from hypothesis import strategies as st

from kai_ray.core import (
    PREEMPT,
    TRY_NEXT_TYPE,
    UNLIMITED,
    Bind,
    ClusterSnapshot,
    Evict,
    GpuTypeFungibility,
    GpuTypeShare,
    JobInfo,
    NodeInfo,
    Pipeline,
    QueueInfo,
    Request,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
    run_cycle,
)

from .test_invariants import SETTINGS, clusters

TYPES = ("H100", "A100", "L4")
_FOR_JOB = re.compile(r"(?:preempted by|moved to defragment for) (\S+)")
_FOR_QUEUE = re.compile(r"reclaimed by queue (\S+)")


@st.composite
def typed_clusters(draw: st.DrawFn) -> ClusterSnapshot:
    snap = draw(clusters())
    nodes = [replace(n, gpu_type=draw(st.sampled_from(TYPES))) for n in snap.nodes]
    jobs = []
    for job in snap.jobs:
        types = draw(st.sampled_from(ACCEPTED))
        jobs.append(
            replace(job, gpu_types=types, mixed_gpu_types=draw(st.booleans()) and draw(st.booleans()))
        )
    return ClusterSnapshot(nodes, snap.queues, jobs)


TYPED_QUEUES = [
    (),
    (),
    (GpuTypeShare("H100", 2.0, 4.0),),
    (GpuTypeShare("A100", 0.0, 2.0), GpuTypeShare("L4", 4.0)),
    (GpuTypeShare("H100", UNLIMITED, 6.0, 2.0),),
]
ACCEPTED = [(), (), ("H100",), ("A100",), ("A100", "H100"), ("L4", "A100")]
FUNGIBILITY = [
    None,
    GpuTypeFungibility(when_can_preempt=PREEMPT),
    GpuTypeFungibility(when_can_borrow=TRY_NEXT_TYPE),
    GpuTypeFungibility(TRY_NEXT_TYPE, PREEMPT),
]


@st.composite
def contended(draw: st.DrawFn) -> ClusterSnapshot:
    """Few GPU nodes of two or three types, nearly full of running gangs of two queues,
    and typed gangs waiting at every priority: reclaim, preempt and consolidation run."""
    nodes = [
        NodeInfo(f"n{i}", gpus=draw(st.sampled_from([2, 4])), cpu=64.0, gpu_type=draw(st.sampled_from(TYPES)))
        for i in range(draw(st.integers(2, 6)))
    ]
    free = {n.name: n.gpus for n in nodes}
    queues = [QueueInfo("root", quota=(UNLIMITED, UNLIMITED, UNLIMITED))] + [
        QueueInfo(
            q,
            "root",
            quota=(float(draw(st.integers(0, 6))), UNLIMITED, UNLIMITED),
            gpu_types=draw(st.sampled_from(TYPED_QUEUES)),
            gpu_type_fungibility=draw(st.sampled_from(FUNGIBILITY)),
        )
        for q in ("a", "b")
    ]
    jobs = []
    for j in range(draw(st.integers(2, 9))):
        gpu, count = float(draw(st.sampled_from([1, 1, 2]))), draw(st.integers(1, 3))
        running = draw(st.booleans())
        tasks = []
        for k in range(count):
            room = [n for n, left in free.items() if left >= gpu]
            node = draw(st.sampled_from(room)) if running and room else None
            if node is not None:
                free[node] -= int(gpu)
            status = TaskStatus.RUNNING if node else TaskStatus.PENDING
            tasks.append(TaskInfo(f"j{j}-{k}", status, Request(gpu=gpu, cpu=1.0), node, since=-100.0))
        priority = draw(st.sampled_from([50, 75, 100, 125]))
        jobs.append(
            JobInfo(
                f"j{j}",
                draw(st.sampled_from(["a", "b"])),
                tasks,
                priority=priority,
                preemptible=priority < 100,
                min_member=draw(st.sampled_from([1, count])),
                created_at=float(j),
                gpu_types=draw(st.sampled_from(ACCEPTED)),
                mixed_gpu_types=draw(st.integers(0, 5)) == 0,
            )
        )
    return ClusterSnapshot(nodes, queues, jobs)


def _asks_gpu(job: JobInfo) -> bool:
    return any(t.request.gpu > 0 or t.request.gpu_memory > 0 for t in job.tasks)


def _waits(job: JobInfo) -> bool:
    return any(t.status is TaskStatus.PENDING for t in job.tasks)


def _accepts(job: JobInfo, node: NodeInfo) -> bool:
    return node.gpus == 0 or not job.gpu_types or node.gpu_type in job.gpu_types


@SETTINGS
@given(st.one_of(typed_clusters(), contended()))
def test_no_task_is_placed_on_a_type_its_job_does_not_accept(snap: ClusterSnapshot) -> None:
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    nodes = {n.name: n for n in snap.nodes}
    job_of = {t.name: job for job in snap.jobs for t in job.tasks}
    placed: dict[str, set[str]] = {}
    for d in result.decisions:
        if isinstance(d, Bind | Pipeline):
            job, node = job_of[d.task], nodes[d.node]
            assert _accepts(job, node), (d, job.gpu_types, node.gpu_type)
            task = next(t for t in job.tasks if t.name == d.task)
            if node.gpus and (task.request.gpu > 0 or task.request.gpu_memory > 0):
                placed.setdefault(job.name, set()).add(node.gpu_type)
    evicted = {d.task for d in result.decisions if isinstance(d, Evict)}
    for job in snap.jobs:
        if job.mixed_gpu_types or job.name not in placed:
            continue
        assert len(placed[job.name]) == 1, (job.name, placed[job.name])
        held = {
            nodes[t.node].gpu_type
            for t in job.tasks
            if t.node in nodes
            and nodes[t.node].gpus
            and t.name not in evicted
            and t.request.gpu > 0
            and _accepts(job, nodes[t.node])  # a task on a type it does not accept binds nothing
        }
        if len(held) == 1:  # a gang on one type grows on it
            assert placed[job.name] == held, (job.name, held, placed[job.name])


@SETTINGS
@given(st.one_of(typed_clusters(), contended()))
def test_no_eviction_for_a_job_that_cannot_use_the_freed_type(snap: ClusterSnapshot) -> None:
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    nodes = {n.name: n for n in snap.nodes}
    jobs = {job.name: job for job in snap.jobs}
    job_of = {t.name: job for job in snap.jobs for t in job.tasks}
    victims: dict[tuple[str, str], list[NodeInfo]] = {}
    for d in result.decisions:
        if isinstance(d, Evict) and d.action != "stalegangeviction":
            victims.setdefault((job_of[d.task].name, d.reason), []).append(nodes[d.node])
    for (name, reason), where in victims.items():
        # A gang is taken whole: a search that took it for room on one of its nodes may
        # place part of it back where it ran (no eviction there) and move the rest.
        victim = jobs[name]
        running = [t for t in victim.tasks if t.status is TaskStatus.RUNNING and t.node in nodes]
        if len(running) <= victim.gang_size:
            where = where + [nodes[t.node] for t in running]
        if m := _FOR_JOB.search(reason):
            takers = [jobs[m.group(1)]]
        else:
            m = _FOR_QUEUE.search(reason)
            assert m, reason
            # The reason names the queue alone: any of its waiting jobs may be the one.
            # One that asks no GPU may use what any node frees (its cpu and memory).
            takers = [j for j in snap.jobs if j.queue == m.group(1) and _waits(j)]
            if any(not _asks_gpu(j) for j in takers):
                continue
        assert any(_accepts(job, node) for job in takers for node in where), (
            reason,
            [n.gpu_type for n in where],
        )


@SETTINGS
@given(clusters(), st.sampled_from(TYPES), st.booleans())
def test_one_type_decides_as_no_types(snap: ClusterSnapshot, only: str, name_it: bool) -> None:
    before = run_cycle(snap, SchedulerConfig(), 0.0)
    typed = ClusterSnapshot(
        [replace(n, gpu_type=only) for n in snap.nodes],
        snap.queues,
        [replace(j, gpu_types=(only,) if name_it else ()) for j in snap.jobs],
    )
    after = run_cycle(typed, SchedulerConfig(), 0.0)
    assert after.decisions == before.decisions
    assert after.pending_reasons == before.pending_reasons


@SETTINGS
@given(contended())
def test_no_queue_goes_over_its_limit_of_a_type(snap: ClusterSnapshot) -> None:
    """Counted from the decisions: what each queue holds of each type it limits, after
    the cycle, is within the limit, or no more than it held before."""
    result = run_cycle(snap, SchedulerConfig(), 0.0)
    nodes = {n.name: n for n in snap.nodes}
    gone = {d.task for d in result.decisions if isinstance(d, Evict)}
    placed = {d.task: d.node for d in result.decisions if isinstance(d, Bind | Pipeline)}
    for queue in snap.queues:
        for share in queue.gpu_types:
            if share.limit == UNLIMITED:
                continue
            before = after = 0.0
            for job in (j for j in snap.jobs if j.queue == queue.name):
                for t in job.tasks:
                    if t.status is TaskStatus.RUNNING and nodes[t.node].gpu_type == share.gpu_type:
                        before += t.request.gpu
                        after += 0.0 if t.name in gone else t.request.gpu
                    if t.name in placed and nodes[placed[t.name]].gpu_type == share.gpu_type:
                        after += t.request.gpu
            assert after <= max(share.limit, before) + 1e-9, (queue.name, share, before, after)


@st.composite
def one_waiting_held_job(draw: st.DrawFn) -> tuple[ClusterSnapshot, JobInfo, str]:
    """A contended cluster whose one waiting job names two types, the first of which the
    cluster has, in queues that say whenCanPreempt Preempt; and that first type."""
    snap = draw(contended())
    running = [j for j in snap.jobs if all(t.status is TaskStatus.RUNNING for t in j.tasks)]
    waiting = [j for j in snap.jobs if all(t.status is TaskStatus.PENDING for t in j.tasks)]
    assume(waiting)
    types = draw(st.sampled_from(TWO_TYPES))
    job = replace(draw(st.sampled_from(waiting)), gpu_types=types, mixed_gpu_types=False)
    present = {n.gpu_type for n in snap.nodes}
    first = next((t for t in types if t in present), None)
    assume(first is not None)
    held = GpuTypeFungibility(when_can_preempt=PREEMPT)
    queues = [replace(q, gpu_type_fungibility=held) for q in snap.queues]
    return ClusterSnapshot(snap.nodes, queues, [*running, job]), job, first


TWO_TYPES = [("A100", "H100"), ("H100", "A100"), ("L4", "A100")]


@SETTINGS
@given(one_waiting_held_job())
def test_held_to_its_first_type_takes_a_later_one_only_when_the_first_cannot_hold_it(
    drawn: tuple[ClusterSnapshot, JobInfo, str],
) -> None:
    """whenCanPreempt Preempt, against the same job accepting its first type alone: where
    that job would run (evictions included), it runs on its first type."""
    snap, job, first = drawn
    nodes = {n.name: n for n in snap.nodes}
    mine = {t.name for t in job.tasks}

    def placed_on(jobs: list[JobInfo]) -> set[str]:
        result = run_cycle(ClusterSnapshot(snap.nodes, snap.queues, jobs), SchedulerConfig(), 0.0)
        placed = [d for d in result.decisions if isinstance(d, Bind | Pipeline) and d.task in mine]
        return {nodes[d.node].gpu_type for d in placed}

    held = placed_on(snap.jobs)
    alone = placed_on([*snap.jobs[:-1], replace(job, gpu_types=(first,))])
    # Every task asks for GPUs (contended): each lands on a type its job accepts. Not the
    # converse: once its later types are open, a type no queue names among them has its
    # reclaim judged by the plain totals (rule 12), which may then take the first type.
    if alone:
        assert first in held, (job.gpu_types, held, alone)
