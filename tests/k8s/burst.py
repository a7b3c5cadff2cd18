"""A burst of gangs in flight: 100 RayClusters' pods, made as KubeRay makes them, on
nodes with room for 24 of them; and what must hold of the bindings whatever happens."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from kai_ray.k8s.client import gather_limited
from tests.k8s.env import NS, K8sEnv, bound, cluster_spec, group

GANGS, PODS_PER_GANG, NODES, GPUS = 100, 4, 12, 8  # room for 24 of the 100 gangs


def make_gangs(k8s: K8sEnv, gangs: int = GANGS) -> None:
    """`gangs` RayClusters' pods, made as KubeRay makes them, before the operator starts."""

    async def make() -> None:
        clusters = await gather_limited(
            [
                k8s.kube.create(
                    f"/apis/ray.io/v1/namespaces/{NS}/rayclusters",
                    {
                        "apiVersion": "ray.io/v1",
                        "kind": "RayCluster",
                        "metadata": {"name": f"g{i:03d}", "namespace": NS},
                        "spec": cluster_spec(group("w", replicas=PODS_PER_GANG - 1)),
                    },
                )
                for i in range(gangs)
            ],
            16,
        )
        pods = [
            gang_pod(rc["metadata"]["name"], rc["metadata"]["uid"], j)
            for rc in clusters
            for j in range(PODS_PER_GANG)
        ]
        results = await gather_limited(
            [k8s.kube.create(f"/api/v1/namespaces/{NS}/pods", p) for p in pods], 32
        )
        assert not [r for r in results if isinstance(r, BaseException)]

    k8s.run(make(), timeout=300)


def gang_pod(cluster: str, uid: str, j: int) -> dict[str, Any]:
    """Pod j of a RayCluster's gang (0: the head), one GPU each, made as KubeRay makes them."""
    owner = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster, "uid": uid, "controller": True}
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/group": "headgroup" if j == 0 else "w",
        "ray.io/node-type": "head" if j == 0 else "worker",
    }
    gpu = {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{cluster}-{j}", "namespace": NS, "labels": labels, "ownerReferences": [owner]},
        "spec": {
            "schedulerName": "kai-scheduler",
            "containers": [{"name": "ray", "image": "ray", "resources": gpu}],
        },
    }


def by_gang(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    gangs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in pods:
        gangs[p["metadata"]["labels"]["ray.io/cluster"]].append(p)
    return gangs


def partial(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(g for g, ps in by_gang(pods).items() if 0 < len(bound(ps)) < len(ps))


def gpus_per_node(pods: list[dict[str, Any]]) -> Counter[str]:
    return Counter(p["spec"]["nodeName"] for p in bound(pods))
