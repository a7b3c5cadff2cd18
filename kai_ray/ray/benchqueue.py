"""`kai-ray bench ray`'s measures of deep queues, on the bench's local cluster:

queued   N workloads waiting behind a full cluster, through `.remote()`, `.submit()` and
         `.map()` in turn: the Ray worker processes and resident memory they add, and
         submissions per second (single calls with their p50/p95 latency, and batches).
backlog  N short one-GPU workloads through kai-ray against the same tasks through Ray
         alone, in the same run: the time until all finished, and the ratio.

Processes and memory are read from the process tree of this driver (the local cluster's
GCS, raylets and Ray's workers are its descendants), so other programs on the machine do
not count. Resident memory is summed over that tree, the driver included.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["bench_backlog", "bench_queued", "local_cluster", "ray_processes"]

SETTLE_S = 3.0  # after queueing: time for any process that would start to show up


def ray_processes() -> dict[str, float]:
    """Ray's worker processes under this driver, and the resident memory (MB) of the
    whole tree, the driver included."""
    import psutil

    me = psutil.Process()
    workers, rss = 0, me.memory_info().rss
    for p in me.children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
            rss += p.memory_info().rss
        except psutil.Error:  # ended while we looked
            continue
        if cmd.startswith("ray::") or "default_worker.py" in cmd:
            workers += 1
    return {"ray_worker_processes": workers, "resident_mb": round(rss / 2**20, 1)}


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(p95, 3)}


def _added(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {
        "ray_worker_processes_added": after["ray_worker_processes"] - before["ray_worker_processes"],
        "resident_mb_added": round(after["resident_mb"] - before["resident_mb"], 1),
    }


@contextlib.contextmanager
def local_cluster(queues: list[dict[str, Any]]) -> Iterator[Any]:
    """A fresh local cluster (head with 2 CPUs, two nodes of 8 CPUs and 4 fake GPUs) with
    a scheduler on it, shut down afterwards."""
    import logging

    import ray
    from ray.cluster_utils import Cluster

    import kai_ray

    # Measures cancel thousands of workloads whose refs nobody gets: Ray would print
    # each one's error when the ref goes.
    os.environ.setdefault("RAY_IGNORE_UNHANDLED_ERRORS", "1")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    for _ in range(2):
        cluster.add_node(num_cpus=8, num_gpus=4)
    try:
        ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False)
        cluster.wait_for_nodes()
        yield kai_ray.init(queues=queues)
    finally:
        with contextlib.suppress(Exception):
            kai_ray.shutdown_scheduler()
        ray.shutdown()
        cluster.shutdown()


WAYS = ("remote", "submit", "submit_many", "map")


def bench_queued(queues: list[dict[str, Any]], n: int) -> dict[str, Any]:
    """N workloads behind a full cluster, each way of submitting on a cluster of its own
    (memory freed by one way would hide what the next one takes); and, as the floor of
    the ObjectRef ways, what Ray itself holds for N calls in flight to an async actor."""
    out: dict[str, Any] = {}
    for way in WAYS:
        with local_cluster(queues) as sched:
            out[way] = _queued_one_way(sched, n, way)
    with local_cluster(queues):
        out["ray_calls_in_flight"] = _calls_in_flight(n)
    with local_cluster(queues):
        out["ray_alone_tasks_waiting"] = _ray_tasks_waiting(n)
    return out


def _ray_tasks_waiting(n: int) -> dict[str, Any]:
    """N one-GPU tasks of Ray alone waiting behind tasks that hold every GPU: what plain
    Ray's own queue costs, the baseline a queue of kai-ray's is compared with."""
    import ray

    gpus_per_node = [node["Resources"].get("GPU", 0) for node in ray.nodes() if node["Alive"]]
    hold = _hold_class()
    holders = [hold.options(num_gpus=g).remote() for g in gpus_per_node if g]
    ray.get([h.ready.remote() for h in holders])
    waiting = ray.remote(num_gpus=1, num_cpus=0)(_noop)
    time.sleep(SETTLE_S)
    before = ray_processes()
    t0 = time.perf_counter()
    refs = [waiting.remote(i) for i in range(n)]
    elapsed = time.perf_counter() - t0
    time.sleep(SETTLE_S)
    after = ray_processes()
    for ref in refs:
        ray.cancel(ref)
    for h in holders:
        ray.kill(h)
    return {
        "tasks": n,
        "submissions_per_s": round(n / elapsed, 1),
        **_added(before, after),
        "kb_per_task": round((after["resident_mb"] - before["resident_mb"]) * 1024 / n, 1),
    }


def _hold_class() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class Hold:
        def ready(self) -> bool:
            return True

    return Hold


def _calls_in_flight(n: int) -> dict[str, Any]:
    """N calls to a bare async actor (no kai-ray), each waiting: what Ray holds for them."""
    import asyncio

    import ray

    @ray.remote(num_cpus=0, max_concurrency=n + 10)
    class Waiter:
        def __init__(self) -> None:
            self.go: asyncio.Event | None = None

        @ray.method(enable_task_events=False)  # as the dispatcher's calls
        async def wait(self) -> None:
            self.go = self.go or asyncio.Event()
            await self.go.wait()

        async def ping(self) -> None:
            return None

    waiter = Waiter.remote()  # type: ignore[attr-defined]
    ray.get(waiter.ping.remote())  # its process is up before the baseline
    time.sleep(SETTLE_S)
    before = ray_processes()
    refs = [waiter.wait.remote() for _ in range(n)]
    time.sleep(SETTLE_S)
    after = ray_processes()
    del refs
    ray.kill(waiter)
    return {
        "calls": n,
        **_added(before, after),
        "kb_per_call": round((after["resident_mb"] - before["resident_mb"]) * 1024 / n, 1),
    }


def _queued_one_way(sched: Any, n: int, way: str) -> dict[str, Any]:
    """Fill the cluster with one workload holding every GPU (its body and this driver's
    dispatcher are then up), then queue n more: what they added, and how fast."""
    import ray

    import kai_ray

    gpus = sum(node["Resources"].get("GPU", 0) for node in ray.nodes() if node["Alive"])

    def hold() -> None:
        time.sleep(3600)

    blocker = kai_ray.workload(queue="bench", workers=int(gpus), num_gpus=1, num_cpus=0)(hold).submit()
    blocker.wait_admitted(60)
    waiting = kai_ray.workload(queue="bench", num_gpus=1, num_cpus=0)(_noop)
    kept: list[Any] = []  # the refs and handles stay alive while measured
    latencies: list[float] = []
    time.sleep(SETTLE_S)
    before = ray_processes()
    t0 = time.perf_counter()
    if way in ("remote", "submit"):
        call = waiting.remote if way == "remote" else waiting.submit
        for i in range(n):
            t = time.perf_counter()
            kept.append(call(i))
            latencies.append((time.perf_counter() - t) * 1e3)
    else:
        kept.extend(waiting.map(range(n)) if way == "map" else waiting.submit_many(range(n)))
    elapsed = time.perf_counter() - t0
    time.sleep(SETTLE_S)
    queued = [w["id"] for w in sched.list(include_finished=False) if w["state"] == "Queued"]
    after = ray_processes()
    result: dict[str, Any] = {
        "workloads": n,
        "queued_at_scheduler": len(queued),
        "submissions_per_s": round(n / elapsed, 1),
        **_added(before, after),
        "kb_per_workload": round((after["resident_mb"] - before["resident_mb"]) * 1024 / n, 1),
        "before": before,
        "after": after,
    }
    if latencies:
        result["single_submission"] = _ms(latencies)
    sched.cancel_many(queued)
    blocker.cancel()
    return result


def _noop(i: int) -> int:
    return i


def bench_backlog(sched: Any, n: int, seconds: float = 0.2) -> dict[str, Any]:
    """N one-GPU workloads of `seconds` each through kai-ray, and the same N tasks through
    Ray alone, one after the other on the same cluster."""
    import ray

    import kai_ray

    def work(i: int) -> int:
        time.sleep(seconds)
        return i

    alone_task = ray.remote(num_gpus=1)(work)
    through_kai = kai_ray.workload(queue="bench", num_gpus=1, num_cpus=1)(work)

    with _busy() as alone_busy:
        t0 = time.perf_counter()
        assert ray.get([alone_task.remote(i) for i in range(n)]) == list(range(n))
        alone = time.perf_counter() - t0
    time.sleep(SETTLE_S)
    with _busy() as kai_busy:
        t0 = time.perf_counter()
        assert ray.get(through_kai.map(range(n))) == list(range(n))
        kai = time.perf_counter() - t0
    return {
        "workloads": n,
        "seconds_each": seconds,
        "gpus": sum(node["Resources"].get("GPU", 0) for node in ray.nodes() if node["Alive"]),
        "ray_alone_s": round(alone, 2),
        "kai_ray_s": round(kai, 2),
        "ratio_to_ray_alone": round(kai / alone, 3),
        "target_ratio": 1.1,
        # The machine's CPUs busy while each ran (1.0: all of them): what bounds the time
        # when each task starts a process of its own.
        "ray_alone_cpu_busy": alone_busy["fraction"],
        "kai_ray_cpu_busy": kai_busy["fraction"],
    }


@contextlib.contextmanager
def _busy() -> Iterator[dict[str, float]]:
    """The fraction of the machine's CPU time spent busy inside the block."""
    import psutil

    out: dict[str, float] = {}
    before = psutil.cpu_times()
    yield out
    after = psutil.cpu_times()
    total = sum(after) - sum(before)
    idle = (after.idle + getattr(after, "iowait", 0.0)) - (before.idle + getattr(before, "iowait", 0.0))
    out["fraction"] = round(1 - idle / total, 3) if total > 0 else 0.0
