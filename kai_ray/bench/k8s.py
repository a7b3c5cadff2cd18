"""`kai-ray bench k8s`: the operator's binding speed on a real API server.

On one fresh kube-apiserver with 500 nodes of 8 GPUs: first the server's own ceiling,
1,600 pending pods bound by a bare client (no scheduling, 32 requests in flight on kept-
alive connections); then 200 RayClusters of 8 pods each (a head and 7 one-GPU workers,
made as KubeRay makes them) scheduled by the operator from its first list to the last
binding; then, with the operator running, one 64-pod gang from the moment its last pod
exists to the moment all 64 are bound; then the ceiling again. The ratio of the
operator's rate to the better of the two ceilings is the figure that carries across
machines.
"""

from __future__ import annotations

import asyncio
import resource
import time
from typing import Any

from kai_ray.k8s.client import Kube, gather_limited, load_kubeconfig, run_async
from kai_ray.k8s.install import install_crds, install_default_queues
from kai_ray.k8s.operator import Operator, OperatorOptions
from kai_ray.testing.apiserver import ApiServer
from kai_ray.testing.fakes import CRD_STAND_INS, make_node

__all__ = ["run_k8s_bench"]

NS = "default"


def run_k8s_bench(
    nodes: int = 500, clusters: int = 200, pods_per_cluster: int = 8, gang: int = 64
) -> dict[str, Any]:
    with ApiServer() as api:
        return run_async(_bench(api, nodes, clusters, pods_per_cluster, gang))


async def _bench(api: ApiServer, nodes: int, clusters: int, per: int, gang: int) -> dict[str, Any]:
    async with Kube(load_kubeconfig(api.kubeconfig)) as kube:
        await install_crds(kube)
        await _ray_crd(kube)
        await install_default_queues(kube)
        await gather_limited([make_node(kube, f"node-{i:04d}", gpus=8) for i in range(nodes)], 32)
        raw_before = await _raw_binds(kube, clusters * per, nodes, "raw")
        await _make_clusters(kube, clusters, per, "rc")
        operator = Operator(kube, OperatorOptions(dashboard=None))
        total = clusters * per
        started = time.perf_counter()
        await operator.start()
        listed = time.perf_counter() - started
        listed_at = time.perf_counter()
        while operator.stats.bound < total:
            await operator.cycle()
        scheduled = time.perf_counter() - listed_at
        with_list = time.perf_counter() - started
        runner = asyncio.create_task(operator.run())
        gang_ms = await _gang(kube, operator, gang, runner)
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        raw_after = await _raw_binds(kube, clusters * per, nodes, "raw-after")
        # The server's ceiling varies by a quarter from one measure to the next on a
        # shared 2-core machine: the better of two, taken before and after the operator's
        # burst, is the ceiling the ratio is taken against.
        raw = max(raw_before, raw_after)
        rate = total / scheduled
        return {
            "nodes": nodes,
            "pods": total,
            "raw_binds_per_s": round(raw, 1),
            "raw_binds_per_s_before_after": [round(raw_before, 1), round(raw_after, 1)],
            "pods_bound_per_s": round(rate, 1),
            "ratio_to_raw": round(rate / raw, 3),
            # the same burst counted from the operator's start (its first list included)
            "pods_bound_per_s_from_start": round(total / with_list, 1),
            "first_list_s": round(listed, 3),
            "cycles": operator.stats.cycles,
            f"gang{gang}_bound_ms": round(gang_ms, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }


async def _ray_crd(kube: Kube) -> None:
    import yaml

    path = CRD_STAND_INS / "kuberay.yaml"
    for crd in yaml.safe_load_all(path.read_text()):
        await kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    await asyncio.sleep(0.5)


def _pod(
    name: str, scheduler: str, gpus: int, labels: dict[str, str], owner: dict[str, Any] | None
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "128Mi"}}
    if gpus:
        resources["requests"]["nvidia.com/gpu"] = str(gpus)
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": labels,
            "ownerReferences": [owner] if owner else [],
        },
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "ray", "image": "rayproject/ray", "resources": resources}],
        },
    }


async def _raw_binds(kube: Kube, count: int, nodes: int, prefix: str) -> float:
    """Binds per second with no scheduling at all: the ceiling of this server and client."""
    await gather_limited(
        [
            kube.create(
                f"/api/v1/namespaces/{NS}/pods", _pod(f"{prefix}-{i}", "raw-bench", 0, {"bench": "raw"}, None)
            )
            for i in range(count)
        ],
        32,
    )
    started = time.perf_counter()
    results = await gather_limited(
        [kube.bind(NS, f"{prefix}-{i}", f"node-{i % nodes:04d}") for i in range(count)], 32
    )
    elapsed = time.perf_counter() - started
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"{len(failed)} raw binds failed: {failed[0]}")
    return count / elapsed


async def _make_clusters(kube: Kube, clusters: int, per: int, prefix: str) -> list[str]:
    names = [f"{prefix}-{i:03d}" for i in range(clusters)]
    made = await gather_limited(
        [
            kube.create(
                f"/apis/ray.io/v1/namespaces/{NS}/rayclusters",
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "metadata": {"name": name, "namespace": NS},
                    "spec": {
                        "headGroupSpec": {},
                        "workerGroupSpecs": [
                            {"groupName": "gpu", "replicas": per - 1, "minReplicas": per - 1}
                        ],
                    },
                },
            )
            for name in names
        ],
        32,
    )
    pods = []
    for rc in made:
        if isinstance(rc, BaseException):
            raise rc
        name = rc["metadata"]["name"]
        owner = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": name,
            "uid": rc["metadata"]["uid"],
            "controller": True,
        }
        for j in range(per):
            head = j == 0
            labels = {
                "ray.io/cluster": name,
                "ray.io/node-type": "head" if head else "worker",
                "ray.io/group": "headgroup" if head else "gpu",
            }
            pods.append(_pod(f"{name}-{j}", "kai-scheduler", 0 if head else 1, labels, owner))
    await gather_limited([kube.create(f"/api/v1/namespaces/{NS}/pods", p) for p in pods], 32)
    return names


async def _gang(kube: Kube, operator: Operator, size: int, runner: asyncio.Task[None]) -> float:
    """Milliseconds from the last pod of a `size`-pod gang existing to all of it bound."""
    before = operator.stats.bound
    await _make_clusters(kube, 1, size, "gang")
    created = time.perf_counter()
    while operator.stats.bound < before + size:
        if runner.done():  # the operator stopped: say why rather than wait forever
            runner.result()
            raise RuntimeError("the operator stopped before the gang was bound")
        await asyncio.sleep(0.002)
    return (time.perf_counter() - created) * 1000
