"""`kai-ray bench k8s --world-nodes N --world-pods M`: the operator's steady step in a big
world, beside a full rebuild of it, in the same run.

The world: N nodes of 8 GPUs and 128 cores; M pods in RayClusters of 8 (a head and 7
workers), every cluster bound and running but 100, which wait for room. GPU clusters'
workers ask for a GPU each, as many clusters as fill every GPU; the other clusters'
pods for a core each. The 100 waiting are GPU clusters.
It lives in the operator's informers (the operator is kai_ray.k8s.operator's, as
`kai-ray operator` runs it), filled as a first list fills them, with an in-memory
stand-in for the API server's answers (kai_ray.testing.memoryapi): the bench measures
the operator's step, not the server.

A steady step: one change arrives through the watches (a new 8-pod cluster, or a running
GPU cluster deleted, whose room the next waiting one takes), then the operator's whole
step: observe (the source patched), the cycle (incremental), the plan, binding and
reporting, the recorded lifecycle. The rebuild: the world built again from every object
(build_gangs + build_world) and a full cycle on it: what the operator did each cycle
before its world was patched.
"""

from __future__ import annotations

import asyncio
import resource
import statistics
import time
import uuid
from typing import Any, cast

from kai_ray.core import SchedulerConfig, run_cycle
from kai_ray.k8s.client import Kube
from kai_ray.k8s.install import default_queues
from kai_ray.k8s.operator import Operator, OperatorOptions
from kai_ray.k8s.source import KubeSource
from kai_ray.k8s.watches import Watches
from kai_ray.testing.memoryapi import MemoryApi

__all__ = ["run_world_bench"]

NS = "bench"
STAMP = "2026-11-25T00:00:00Z"
WAITING = 100  # clusters left waiting for room


def run_world_bench(nodes: int = 5000, pods: int = 100_000, steps: int = 20) -> dict[str, Any]:
    return asyncio.run(_bench(nodes, pods, steps))


async def _bench(nodes: int, pods: int, steps: int) -> dict[str, Any]:
    api = MemoryApi()
    operator = Operator(cast(Kube, api), OperatorOptions(dashboard=None))
    watches, source, config = operator.watches, operator.source, operator.options.config
    api.watches = watches
    world = _World(watches, nodes)
    world.fill(pods // 8)
    started = time.perf_counter()
    await operator.cycle()
    first = time.perf_counter() - started
    rebuilds = [_rebuild(source, config) for _ in range(3)]
    steady = []
    for i in range(steps):
        if i % 2:
            world.delete_one_running()
        else:
            world.add_waiting()
        began = time.perf_counter()
        await operator.cycle()
        steady.append(time.perf_counter() - began)
    snapshot = source.observe(time.time())
    rebuild = statistics.median(r[0] + r[1] for r in rebuilds)
    step = statistics.median(steady)
    return {
        "nodes": len(snapshot.nodes),
        "pods": len(watches.pods.items),
        "gangs": len(snapshot.jobs),
        "waiting_gangs": sum(1 for j in snapshot.jobs if any(t.node is None for t in j.tasks)),
        "first_step_s": round(first, 3),
        "rebuild_world_ms": round(statistics.median(r[0] for r in rebuilds) * 1000, 1),
        "full_cycle_ms": round(statistics.median(r[1] for r in rebuilds) * 1000, 1),
        "rebuild_ms": round(rebuild * 1000, 1),
        "steady_step_ms": round(step * 1000, 2),
        "steady_step_max_ms": round(max(steady) * 1000, 2),
        "steady_to_rebuild": round(step / rebuild, 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _rebuild(source: KubeSource, config: SchedulerConfig) -> tuple[float, float]:
    began = time.perf_counter()
    world = source.rebuild()
    built = time.perf_counter()
    run_cycle(world.snapshot, config, time.time(), pause_gc=True)
    return built - began, time.perf_counter() - built


class _World:
    """The objects, made as KubeRay and the API server would make them."""

    def __init__(self, watches: Watches, nodes: int) -> None:
        self.watches, self.nodes = watches, nodes
        self.clusters = 0
        self.running_gpu: list[str] = []  # GPU clusters bound, oldest first
        for i in range(nodes):
            node = _node(f"node-{i:05d}")
            watches.nodes.items[("", node["metadata"]["name"])] = node
        for queue in default_queues():
            watches.queues[0].items[("", queue["metadata"]["name"])] = queue

    def fill(self, clusters: int) -> None:
        """GPU clusters bound until the GPUs are full, CPU clusters bound beside them,
        then WAITING GPU clusters; then the informers' first list, as the server's."""
        gpu_clusters = min(clusters - WAITING, self.nodes * 8 // 7)
        gpu_slot = cpu_slot = 0
        for c in range(clusters - WAITING):
            gpu = c < gpu_clusters
            nodes: list[str | None] = []
            for j in range(8):
                if gpu and j > 0:  # GPU workers fill the nodes' GPUs one node after another
                    nodes.append(f"node-{gpu_slot // 8:05d}")
                    gpu_slot += 1
                else:
                    nodes.append(f"node-{cpu_slot % self.nodes:05d}")
                    cpu_slot += 1
            self._cluster(gpu, nodes, announce=False)
        for _ in range(WAITING):
            self._cluster(True, [None] * 8, announce=False)
        for informer in (
            self.watches.nodes,
            self.watches.pods,
            self.watches.owners["RayCluster"],
            *self.watches.queues,
        ):
            if informer.on_relist is not None:
                informer.on_relist()

    def _cluster(self, gpu: bool, nodes: list[str | None], announce: bool) -> None:
        name = f"rc-{self.clusters:06d}"
        self.clusters += 1
        owner = {
            "metadata": {"name": name, "namespace": NS, "uid": str(uuid.uuid4()), "creationTimestamp": STAMP}
        }
        owner["spec"] = {
            "headGroupSpec": {},
            "workerGroupSpecs": [{"groupName": "w", "replicas": 7, "minReplicas": 7}],
        }
        self.watches.owners["RayCluster"].items[(NS, name)] = owner
        for j, node in enumerate(nodes):
            pod = _pod(name, owner, j, gpu and j > 0, node)
            self.watches.pods.items[(NS, pod["metadata"]["name"])] = pod
            if announce and self.watches.pods.on_change is not None:
                self.watches.pods.on_change("ADDED", pod)
        if announce and self.watches.owners["RayCluster"].on_change is not None:
            self.watches.owners["RayCluster"].on_change("ADDED", owner)
        if gpu and nodes[0] is not None:
            self.running_gpu.append(name)

    def add_waiting(self) -> None:
        self._cluster(True, [None] * 8, announce=True)

    def delete_one_running(self) -> None:
        name = self.running_gpu.pop(0)
        for j in range(8):
            pod = self.watches.pods.items.pop((NS, f"{name}-{j}"), None)
            if pod is not None and self.watches.pods.on_change is not None:
                self.watches.pods.on_change("DELETED", pod)


def _node(name: str) -> dict[str, Any]:
    alloc = {"cpu": "128", "memory": "1Ti", "pods": "250", "nvidia.com/gpu": "8"}
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "creationTimestamp": STAMP},
        "spec": {},
        "status": {
            "capacity": alloc,
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(cluster: str, owner: dict[str, Any], j: int, gpu: bool, node: str | None) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": "1", "memory": "1Gi"}
    if gpu:
        requests["nvidia.com/gpu"] = "1"
    head = j == 0
    pod: dict[str, Any] = {
        "metadata": {
            "name": f"{cluster}-{j}",
            "namespace": NS,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": STAMP,
            "labels": {
                "ray.io/cluster": cluster,
                "ray.io/node-type": "head" if head else "worker",
                "ray.io/group": "headgroup" if head else "w",
            },
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": cluster,
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "ray", "resources": {"requests": requests, "limits": dict(requests)}}],
        },
        "status": {"phase": "Pending"},
    }
    if node is not None:
        pod["spec"]["nodeName"] = node
        pod["status"] = {
            "phase": "Running",
            "startTime": STAMP,
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": STAMP}],
        }
    return pod
