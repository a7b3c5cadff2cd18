"""`kai-ray bench forecast`: the forecast of when waiting work starts, on a full
cluster with a deep line of waiting workloads of mixed shapes (kai_ray.control.forecast)."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

from kai_ray.bench.synthetic import GI, leaf_names, nodes_of, queues_of
from kai_ray.control.forecast import forecast
from kai_ray.control.runtime import Runtimes
from kai_ray.core import ClusterSnapshot, JobInfo, Request, TaskInfo, TaskStatus

__all__ = ["bench_forecast", "forecast_cluster"]

# GPUs per task and tasks: single GPUs, parts of a node, whole nodes, multi-node gangs.
SHAPES = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2), (8, 4), (8, 8))


def forecast_cluster(
    nodes: int, gpus_per_node: int, waiting: int, queues: int, seed: int = 3
) -> ClusterSnapshot:
    """Every GPU held by running work (whole-node jobs, each expected to end within a
    day), and `waiting` workloads of SHAPES, each with an expected run time."""
    rng = random.Random(seed)
    node_list = nodes_of(nodes, gpus_per_node)
    queue_list = queues_of(queues, float(nodes * gpus_per_node))
    leaves = leaf_names(queue_list)
    whole = Request(gpu=gpus_per_node, cpu=4, memory=16 * GI)
    jobs = [
        JobInfo(
            f"run-{i}",
            rng.choice(leaves),
            [TaskInfo(f"run-{i}-0", TaskStatus.RUNNING, whole, f"node-{i}", since=-rng.uniform(0, 3600))],
            created_at=float(i),
            expected_runtime=rng.uniform(600, 86400),
        )
        for i in range(nodes)
    ]
    for i in range(waiting):
        gpus, count = rng.choice(SHAPES)
        request = Request(gpu=min(gpus, gpus_per_node), cpu=2, memory=8 * GI)
        tasks = [TaskInfo(f"wait-{i}-{k}", TaskStatus.PENDING, request) for k in range(count)]
        runtime = rng.uniform(600, 8 * 3600)
        jobs.append(
            JobInfo(
                f"wait-{i}", rng.choice(leaves), tasks, created_at=float(nodes + i), expected_runtime=runtime
            )
        )
    return ClusterSnapshot(node_list, queue_list, jobs)


def bench_forecast(nodes: int, gpus_per_node: int, waiting: int, queues: int, repeat: int) -> dict[str, Any]:
    snap = forecast_cluster(nodes, gpus_per_node, waiting, queues)
    runtimes = Runtimes()
    runtimes.set_queues(snap.queues)
    times, etas = [], {}
    for _ in range(repeat):
        started = time.perf_counter()
        etas = forecast(snap, 0.0, runtimes)
        times.append(time.perf_counter() - started)
    known = [e.at for e in etas.values() if e.at is not None]
    return {
        "bench": "forecast",
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "running": nodes,
        "waiting": waiting,
        "queues": queues,
        "forecast_s_p50": statistics.median(times),
        "forecast_s_max": max(times),
        "with_start": len(known),
        "without_start": len(etas) - len(known),
        "last_start_h": max(known, default=0.0) / 3600.0,
    }
