"""Synthetic clusters for the benchmarks: deterministic (seeded) and sized by the caller."""

from __future__ import annotations

import random
from dataclasses import replace

from kai_ray.core import (
    UNLIMITED,
    ClusterSnapshot,
    GpuTypeShare,
    JobInfo,
    NodeInfo,
    QueueInfo,
    Request,
    TaskInfo,
    TaskStatus,
)

__all__ = [
    "cycle_cluster",
    "eviction_cluster",
    "leaf_names",
    "nodes_of",
    "queues_of",
    "steady_cluster",
    "typed_cluster",
]

GI = 1024.0**3
ONE_GPU = Request(gpu=1, cpu=4, memory=16 * GI)


def nodes_of(count: int, gpus: int) -> list[NodeInfo]:
    return [
        NodeInfo(
            f"node-{i}",
            gpus=gpus,
            cpu=16.0 * gpus,
            memory=128 * GI * gpus,
            labels={"rack": f"rack-{i // 32}", "zone": f"zone-{i // 1024}"},
        )
        for i in range(count)
    ]


def queues_of(leaves: int, total_gpus: float, departments: int | None = None) -> list[QueueInfo]:
    """Two levels: departments, each with its teams (leaf queues)."""
    departments = departments or max(1, leaves // 10)
    per_dept = -(-leaves // departments)
    out: list[QueueInfo] = []
    leaf_quota = 0.8 * total_gpus / max(leaves, 1)
    for d in range(departments):
        teams = min(per_dept, leaves - d * per_dept)
        if teams <= 0:
            break
        out.append(QueueInfo(f"dept-{d}", quota=(leaf_quota * teams, UNLIMITED, UNLIMITED)))
        out.extend(
            QueueInfo(
                f"team-{d}-{t}",
                parent=f"dept-{d}",
                quota=(leaf_quota, UNLIMITED, UNLIMITED),
                over_quota_weight=(1.0 + t % 3, 1.0, 1.0),
            )
            for t in range(teams)
        )
    return out


def leaf_names(queues: list[QueueInfo]) -> list[str]:
    parents = {q.parent for q in queues}
    return [q.name for q in queues if q.name not in parents]


def _job(name: str, queue: str, tasks: list[TaskInfo], created: float, **kw: object) -> JobInfo:
    return JobInfo(name, queue, tasks, created_at=created, **kw)  # type: ignore[arg-type]


def cycle_cluster(
    nodes: int, gpus_per_node: int, pending: int, gang_size: int, queues: int, seed: int = 7
) -> ClusterSnapshot:
    """Pending work of `pending` tasks in jobs of which half are single-task jobs and
    half gangs of `gang_size` (one GPU per task); a third of the nodes already half used
    by running single-GPU jobs."""
    rng = random.Random(seed)
    node_list = nodes_of(nodes, gpus_per_node)
    queue_list = queues_of(queues, float(nodes * gpus_per_node))
    leaves = leaf_names(queue_list)
    jobs: list[JobInfo] = []
    for i in range(0, nodes, 3):
        for k in range(gpus_per_node // 2):
            task = TaskInfo(f"run-{i}-{k}-0", TaskStatus.RUNNING, ONE_GPU, f"node-{i}", since=-3600.0)
            jobs.append(_job(f"run-{i}-{k}", rng.choice(leaves), [task], float(len(jobs))))
    pairs = pending // (1 + max(gang_size, 1))  # one single-task job and one gang a pair
    singles = pending - pairs * max(gang_size, 1)
    for i in range(singles):
        jobs.append(_job(f"single-{i}", rng.choice(leaves), [_pending(f"single-{i}", 0)], float(len(jobs))))
    for g in range(pairs):
        name = f"gang-{g}"
        tasks = [_pending(name, k) for k in range(gang_size)]
        jobs.append(_job(name, rng.choice(leaves), tasks, float(len(jobs))))
    return ClusterSnapshot(node_list, queue_list, jobs)


def _pending(job: str, index: int, request: Request = ONE_GPU) -> TaskInfo:
    return TaskInfo(f"{job}-{index}", TaskStatus.PENDING, request)


def eviction_cluster(
    nodes: int, gpus_per_node: int, mode: str, gang_gpus: int = 64, seed: int = 11
) -> ClusterSnapshot:
    """A full cluster of running preemptible single-GPU jobs, and one pending gang of
    `gang_gpus` (whole-node tasks) that can only start by evicting: from queues over their
    fair share (mode "reclaim"), or lower-priority jobs of its own queue ("preempt")."""
    rng = random.Random(seed)
    node_list = nodes_of(nodes, gpus_per_node)
    total = float(nodes * gpus_per_node)
    queue_list = queues_of(8, total, departments=2)
    leaves = leaf_names(queue_list)
    starved = leaves[-1]
    busy = leaves[:-1] if mode == "reclaim" else [starved]
    jobs: list[JobInfo] = []
    for i in range(nodes):
        for k in range(gpus_per_node):
            name = f"run-{i}-{k}"
            task = TaskInfo(f"{name}-0", TaskStatus.RUNNING, ONE_GPU, f"node-{i}", since=-3600.0)
            jobs.append(_job(name, rng.choice(busy), [task], float(len(jobs)), priority=50))
    per_task = gpus_per_node
    big = Request(gpu=per_task, cpu=4, memory=16 * GI)
    tasks = [_pending("gang", k, big) for k in range(max(1, gang_gpus // per_task))]
    priority = 50 if mode == "reclaim" else 125
    jobs.append(_job("gang", starved, tasks, float(len(jobs)), priority=priority, preemptible=priority < 100))
    return ClusterSnapshot(node_list, queue_list, jobs)


def steady_cluster(
    nodes: int, gpus_per_node: int, running: int, pending: int, queues: int, seed: int = 5
) -> ClusterSnapshot:
    """A full cluster in its steady state: `running` jobs hold every node (whole-node
    tasks; the jobs beyond one per node take two nodes each; not preemptible, so no
    action may take them), and `pending` jobs wait for room (one or two whole-node
    tasks). Nothing fits until something finishes."""
    rng = random.Random(seed)
    node_list = nodes_of(nodes, gpus_per_node)
    queue_list = queues_of(queues, float(nodes * gpus_per_node))
    leaves = leaf_names(queue_list)
    whole = Request(gpu=gpus_per_node, cpu=4, memory=16 * GI)
    doubles = max(0, min(running, nodes - running))  # jobs of two nodes, to fill them all
    jobs: list[JobInfo] = []
    node = 0
    for i in range(running):
        width = 2 if i < doubles else 1
        tasks = [
            TaskInfo(f"run-{i}-{k}", TaskStatus.RUNNING, whole, f"node-{node + k}", since=-3600.0)
            for k in range(width)
        ]
        node += width
        queue, created = rng.choice(leaves), float(len(jobs))
        jobs.append(_job(f"run-{i}", queue, tasks, created, priority=100, preemptible=False))
    for i in range(pending):
        name = f"wait-{i}"
        tasks = [_pending(name, k, whole) for k in range(1 + i % 2)]
        jobs.append(_job(name, rng.choice(leaves), tasks, float(len(jobs))))
    return ClusterSnapshot(node_list, queue_list, jobs)


GPU_TYPE_NAMES = ("H100", "A100", "L4", "H200", "B200", "L40S")


def typed_cluster(snapshot: ClusterSnapshot, count: int) -> ClusterSnapshot:
    """The same cluster with `count` GPU types (docs/gpu-types.md): nodes take the types
    in turn; each queue names every type, its gpu quota split evenly between them (a
    limit of its whole quota on the first); waiting jobs accept, in turn, one type, two
    in order, or any. Running jobs accept any (they run where they run)."""
    names = [GPU_TYPE_NAMES[i] if i < len(GPU_TYPE_NAMES) else f"gpu-{i}" for i in range(count)]
    nodes = [replace(n, gpu_type=names[i % count]) for i, n in enumerate(snapshot.nodes)]
    queues = [replace(q, gpu_types=_shares(q, names)) for q in snapshot.queues]
    jobs = []
    for k, job in enumerate(snapshot.jobs):
        waiting = all(t.status is TaskStatus.PENDING for t in job.tasks)
        accepts = [(names[k % count],), (names[k % count], names[(k + 1) % count]), ()][k % 3]
        jobs.append(replace(job, gpu_types=accepts if waiting else ()))
    return ClusterSnapshot(nodes, queues, jobs, snapshot.usage, snapshot.can_grow)


def _shares(queue: QueueInfo, names: list[str]) -> tuple[GpuTypeShare, ...]:
    quota = queue.quota[0]
    each = UNLIMITED if quota == UNLIMITED else quota / len(names)
    first_limit = UNLIMITED if quota == UNLIMITED else quota
    return tuple(GpuTypeShare(t, each, first_limit if i == 0 else UNLIMITED) for i, t in enumerate(names))
