"""`kai-ray bench cycle --steady`: what one cycle costs when little changed.

A full cluster in its steady state (bench/synthetic.py `steady_cluster`): every node
held by running jobs, pending jobs waiting for room. Each step changes one thing, as a
backend reports it: a running job finishes (even steps; the cycle then places a waiting
job on the room it left, and the next snapshot has that job running, as a backend that
carried out the decision reports it) or a job is submitted (odd steps). Every step is
decided twice in the same process: by a full cycle (the state rebuilt from the
snapshot) and by the incremental one (a CycleCache kept from the step before); the
results must be equal, and the figures are their times side by side.
"""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections import defaultdict
from typing import Any

from kai_ray.bench.run import peak_rss_mb
from kai_ray.bench.synthetic import steady_cluster
from kai_ray.core import Bind, ClusterSnapshot, CycleCache, CycleResult, SchedulerConfig, TaskInfo, TaskStatus
from kai_ray.core.cycle import finish_cycle, paused_collection, prepare_cycle, run_action

__all__ = ["bench_steady"]


def bench_steady(
    nodes: int,
    gpus_per_node: int,
    running: int,
    pending: int,
    queues: int,
    repeat: int = 5,
    actions: tuple[str, ...] = ("allocate",),
) -> dict[str, Any]:
    snapshot = steady_cluster(nodes, gpus_per_node, running, pending, queues)
    config = SchedulerConfig(actions=actions)
    cache = CycleCache()
    last = _timed(snapshot, config, None, defaultdict(list))  # the cache's first (full) build
    _timed(snapshot, config, cache, defaultdict(list))
    full: dict[str, list[float]] = defaultdict(list)
    steady: dict[str, list[float]] = defaultdict(list)
    same = True
    steps = max(2, 2 * repeat)
    for step in range(steps):
        snapshot = _carried_out(snapshot, last)
        snapshot = _finish_one(snapshot) if step % 2 == 0 else _submit_one(snapshot, step, gpus_per_node)
        event = "finish" if step % 2 == 0 else "submit"
        last = _timed(snapshot, config, None, full, event)
        same = same and _timed(snapshot, config, cache, steady, event) == last
    p50_full, p50_steady = statistics.median(full["cycle"]), statistics.median(steady["cycle"])
    return {
        "benchmark": "cycle-steady",
        "actions": list(actions),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "running_jobs": running,
        "pending_jobs": pending,
        "queues": len(snapshot.queues),
        "steps": steps,
        "same_results": same,
        "full_cycle_ms_p50": round(p50_full, 2),
        "steady_cycle_ms_p50": round(p50_steady, 2),
        "steady_to_full": round(p50_steady / p50_full, 4) if p50_full > 0 else None,
        **{f"full_{k}_ms_p50": round(statistics.median(v), 2) for k, v in full.items() if k != "cycle"},
        **{f"steady_{k}_ms_p50": round(statistics.median(v), 2) for k, v in steady.items() if k != "cycle"},
        "cache_rebuilds": cache.rebuilds,
        "cache_patches": cache.patches,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def _timed(
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    cache: CycleCache | None,
    timings: dict[str, list[float]],
    event: str = "",
) -> CycleResult:
    """One cycle, timed by phase, with garbage collection paused as the other benches
    pause it; the collection it put off runs afterwards, outside the figures."""
    with paused_collection():
        start = time.perf_counter()
        ctx = prepare_cycle(snapshot, config, 0.0, cache=cache)
        prepared = time.perf_counter()
        for name in config.actions:
            run_action(ctx, name)
        acted = time.perf_counter()
        result = finish_cycle(ctx)
        if cache is not None:
            cache.restore(ctx.stmt)
        end = time.perf_counter()
    gc.collect()
    timings["cycle"].append((end - start) * 1000.0)
    timings["prepare"].append((prepared - start) * 1000.0)
    timings["actions"].append((acted - prepared) * 1000.0)
    timings["finish"].append((end - acted) * 1000.0)
    if event:
        timings[f"cycle_{event}"].append((end - start) * 1000.0)
    return result


def _carried_out(snapshot: ClusterSnapshot, result: CycleResult) -> ClusterSnapshot:
    """The snapshot after a backend bound what the cycle placed: new JobInfos for those."""
    binds: dict[str, dict[str, str]] = defaultdict(dict)
    for d in result.decisions:
        if isinstance(d, Bind):
            binds[d.job][d.task] = d.node
    if not binds:
        return snapshot
    jobs = []
    for job in snapshot.jobs:
        placed = binds.get(job.name)
        if placed:
            tasks = [
                TaskInfo(t.name, TaskStatus.RUNNING, t.request, placed[t.name]) if t.name in placed else t
                for t in job.tasks
            ]
            job = dataclasses.replace(job, tasks=tasks)
        jobs.append(job)
    return dataclasses.replace(snapshot, jobs=jobs)


def _finish_one(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The oldest running job ends."""
    jobs = list(snapshot.jobs)
    index = next(i for i, j in enumerate(jobs) if j.tasks and j.tasks[0].status is TaskStatus.RUNNING)
    del jobs[index]
    return dataclasses.replace(snapshot, jobs=jobs)


def _submit_one(snapshot: ClusterSnapshot, step: int, gpus_per_node: int) -> ClusterSnapshot:
    """A one-node job arrives in a queue (it waits: the cluster is full)."""
    template = next(j for j in reversed(snapshot.jobs) if j.tasks[0].status is TaskStatus.PENDING)
    request = template.tasks[0].request
    name = f"new-{step}"
    job = dataclasses.replace(
        template,
        name=name,
        tasks=[TaskInfo(f"{name}-0", TaskStatus.PENDING, request)],
        created_at=float(len(snapshot.jobs) + step),
    )
    return dataclasses.replace(snapshot, jobs=[*snapshot.jobs, job])
