"""Test doubles for what a kind-of-real cluster has besides the API server: a kubelet
that runs bound pods and finishes deleted ones, and a stand-in for KubeRay's controller
that makes the pods of RayClusters, RayJobs and RayServices the way KubeRay does with
`batchScheduler.name: kai-scheduler`. Used by the operator's tests and `kai-ray bench
k8s`; never by the operator itself.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import logging
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.informer import Informer
from kai_ray.k8s.sharing import DEVICE_ANNOTATION, RESERVATION_LABEL
from kai_ray.testing.liveray import LiveRay

__all__ = ["CRD_STAND_INS", "FakeKubelet", "KubeRayStandIn", "make_node"]

# A schemaless CRD of KAI's Queue (issue 23 brings its own).
CRD_STAND_INS = Path(__file__).with_name("fakecrds")

log = logging.getLogger(__name__)
QUEUE_LABEL = "kai.scheduler/queue"
PRIORITY_LABEL = "ray.io/priority-class-name"
_RAY = "/apis/ray.io/v1"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def make_node(
    kube: Kube,
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "64",
    memory: str = "512Gi",
    labels: Mapping[str, str] | None = None,
    ready: bool = True,
) -> None:
    """A Node with its status set as a kubelet would report it."""
    alloc = {"cpu": cpu, "memory": memory, "pods": "250", "nvidia.com/gpu": str(gpus)}
    await kube.create(
        "/api/v1/nodes",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        },
    )
    # The server taints a new node not-ready; the node lifecycle controller (not run
    # here) lifts it once the kubelet reports Ready.
    if ready:
        await kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
    await kube.patch(
        f"/api/v1/nodes/{name}/status",
        {
            "status": {
                "capacity": alloc,
                "allocatable": alloc,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True" if ready else "False",
                        "reason": "KubeletReady",
                        "lastHeartbeatTime": _now(),
                        "lastTransitionTime": _now(),
                    }
                ],
            }
        },
    )


class FakeKubelet:
    """Bound pods go Running; deleted (terminating) pods finish at once. With `ray` (a
    liveray.LiveRay), a RayCluster's pods run real Ray, each at an address of its own."""

    def __init__(self, kube: Kube, period: float = 0.05, ray: LiveRay | None = None) -> None:
        self.kube, self.period, self.ray = kube, period, ray
        self.pods = Informer(kube, "/api/v1/pods", changed=asyncio.Event())
        self._done: set[str] = set()

    async def run(self) -> None:
        watch = asyncio.create_task(self.pods.run())
        try:
            await self.pods.synced.wait()
            while True:
                await self._step()
                await asyncio.sleep(self.period)
        finally:
            watch.cancel()

    async def _step(self) -> None:
        calls = []
        for pod in list(self.pods.items.values()):
            meta = pod["metadata"]
            key = (
                f"{meta.get('uid')}/{meta.get('deletionTimestamp', '')}/{pod.get('status', {}).get('phase')}"
            )
            if key in self._done:
                continue
            if meta.get("deletionTimestamp"):
                self._done.add(key)
                calls.append(self._finish(meta))
            elif pod["spec"].get("nodeName") and pod.get("status", {}).get("phase", "Pending") == "Pending":
                self._done.add(key)
                calls.append(self._run(pod))
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, ApiError) and outcome.status not in (404, 409):
                log.warning("fake kubelet: %s", outcome)

    async def _run(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        address = None
        if self.ray is not None:
            address = await asyncio.to_thread(self.ray.start, pod)
        reservation = (meta.get("labels") or {}).get(RESERVATION_LABEL)
        if reservation:  # what its container does once the device plugin gave it a GPU
            await self.kube.patch(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"metadata": {"annotations": {DEVICE_ANNOTATION: f"GPU-fake-{reservation}"}}},
            )
        await self.kube.patch(
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
            {
                "status": {
                    "phase": "Running",
                    "startTime": _now(),
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _now()}],
                    **({"podIP": address, "podIPs": [{"ip": address}]} if address else {}),
                },
            },
            merge=False,
        )

    async def _finish(self, meta: dict[str, Any]) -> None:
        if self.ray is not None:
            await asyncio.to_thread(self.ray.stop, meta["uid"])
        await self.kube.delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", grace=0)


class KubeRayStandIn:
    """Makes and keeps the pods of Ray objects as KubeRay does: a head and the worker
    groups' replicas x numOfHosts, each pod labelled ray.io/cluster, ray.io/node-type and
    ray.io/group, owned by its RayCluster, with the scheduler name and the owner's queue
    label; a RayJob gets a RayCluster of its own and, in K8sJobMode once the head runs, a
    submitter Job and its pod; a RayService a RayCluster. Deleted (evicted) pods are made
    again, as KubeRay does."""

    def __init__(self, kube: Kube, scheduler_name: str = "kai-scheduler", period: float = 0.05) -> None:
        self.kube, self.scheduler_name, self.period = kube, scheduler_name, period
        changed = asyncio.Event()
        self.clusters = Informer(kube, f"{_RAY}/rayclusters", changed=changed)
        self.jobs = Informer(kube, f"{_RAY}/rayjobs", changed=changed)
        self.services = Informer(kube, f"{_RAY}/rayservices", changed=changed)
        self.k8s_jobs = Informer(kube, "/apis/batch/v1/jobs", changed=changed)
        self.pods = Informer(kube, "/api/v1/pods", changed=changed)
        self.created = 0  # pods made, evicted ones made again included
        self._pending: set[str] = set()  # names being created (not in the cache yet)

    def informers(self) -> list[Informer]:
        return [self.clusters, self.jobs, self.services, self.k8s_jobs, self.pods]

    async def run(self) -> None:
        tasks = [asyncio.create_task(i.run()) for i in self.informers()]
        try:
            await asyncio.gather(*(i.synced.wait() for i in self.informers()))
            while True:
                try:
                    await self.reconcile()
                except Exception:
                    log.exception("KubeRay stand-in: reconcile failed")
                await asyncio.sleep(self.period)
        finally:
            for t in tasks:
                t.cancel()

    async def reconcile(self) -> None:
        calls: list[Any] = []
        for job in list(self.jobs.items.values()):
            calls.append(self._rayjob(job))
        for svc in list(self.services.items.values()):
            calls.append(self._owned_cluster(svc, "RayService", svc["spec"].get("rayClusterConfig", {})))
        for cluster in list(self.clusters.items.values()):
            calls += self._cluster_pods(cluster)
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, ApiError) and outcome.status not in (404, 409):
                log.warning("KubeRay stand-in: %s", outcome)

    # ------------------------------------------------------------ RayJob / RayService

    async def _rayjob(self, job: dict[str, Any]) -> None:
        if job["spec"].get("clusterSelector"):
            return await self._submitter(job, None)
        cluster = await self._owned_cluster(job, "RayJob", job["spec"].get("rayClusterSpec", {}))
        if cluster is not None and job["spec"].get("submissionMode", "K8sJobMode") == "K8sJobMode":
            await self._submitter(job, cluster)
        return None

    async def _owned_cluster(
        self, owner: dict[str, Any], kind: str, spec: dict[str, Any]
    ) -> dict[str, Any] | None:
        meta = owner["metadata"]
        for c in self.clusters.items.values():
            if any(r.get("uid") == meta["uid"] for r in c["metadata"].get("ownerReferences", [])):
                return c
        name = f"{meta['name']}-raycluster"
        if name in self._pending:
            return None
        self._pending.add(name)
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in (QUEUE_LABEL, PRIORITY_LABEL)}
        body = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "ownerReferences": [_owner_ref(owner, kind)],
            },
            "spec": copy.deepcopy(spec),
        }
        created = await self.kube.create(f"{_RAY}/namespaces/{meta['namespace']}/rayclusters", body)
        field = "rayClusterName" if kind == "RayJob" else "activeServiceStatus"
        value: Any = name if kind == "RayJob" else {"rayClusterName": name}
        plural = "rayjobs" if kind == "RayJob" else "rayservices"
        await self.kube.patch(
            f"{_RAY}/namespaces/{meta['namespace']}/{plural}/{meta['name']}/status",
            {"status": {field: value}},
        )
        return created

    async def _submitter(self, job: dict[str, Any], cluster: dict[str, Any] | None) -> None:
        meta = job["metadata"]
        if cluster is not None and not self._head_running(cluster):
            return
        existing = [
            j
            for j in self.k8s_jobs.items.values()
            if any(r.get("uid") == meta["uid"] for r in j["metadata"].get("ownerReferences", []))
        ]
        if existing or f"job/{meta['name']}" in self._pending:
            return
        self._pending.add(f"job/{meta['name']}")
        template = job["spec"].get("submitterPodTemplate") or {
            "spec": {
                "containers": [
                    {
                        "name": "ray-job-submitter",
                        "image": "rayproject/ray",
                        "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}},
                    }
                ]
            }
        }
        k8s_job = await self.kube.create(
            f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {
                    "name": meta["name"],
                    "namespace": meta["namespace"],
                    "ownerReferences": [_owner_ref(job, "RayJob")],
                },
                "spec": {
                    "template": {"spec": {**template["spec"], "restartPolicy": "Never"}},
                    "backoffLimit": 0,
                },
            },
        )
        # No Job controller runs here: make its pod as it would.
        await self._create_pod(
            k8s_job,
            "Job",
            f"{meta['name']}-",
            template,
            {"job-name": meta["name"], "batch.kubernetes.io/job-name": meta["name"]},
            queue=(meta.get("labels") or {}).get(QUEUE_LABEL),
        )

    def _head_running(self, cluster: dict[str, Any]) -> bool:
        name = cluster["metadata"]["name"]
        return any(
            p["metadata"].get("labels", {}).get("ray.io/cluster") == name
            and p["metadata"].get("labels", {}).get("ray.io/node-type") == "head"
            and p.get("status", {}).get("phase") == "Running"
            for p in self.pods.items.values()
        )

    # ------------------------------------------------------------ RayCluster pods

    def _cluster_pods(self, cluster: dict[str, Any]) -> list[Any]:
        meta, spec = cluster["metadata"], cluster["spec"]
        name = meta["name"]
        live: dict[str, list[dict[str, Any]]] = {}
        for p in self.pods.items.values():
            labels = p["metadata"].get("labels") or {}
            if labels.get("ray.io/cluster") == name and not p["metadata"].get("deletionTimestamp"):
                live.setdefault(labels.get("ray.io/group", ""), []).append(p)
        wanted = {"headgroup": (1, "head", spec.get("headGroupSpec", {}))}
        for group in spec.get("workerGroupSpecs") or []:
            count = int(group.get("replicas", 1)) * int(group.get("numOfHosts", 1) or 1)
            wanted[group["groupName"]] = (count, "worker", group)
        calls: list[Any] = []
        for group, (count, node_type, gspec) in wanted.items():
            have = len(live.get(group, []))
            pending = sum(1 for n in self._pending if n.startswith(f"pod/{name}/{group}/"))
            for _ in range(max(0, count - have - pending)):
                calls.append(self._cluster_pod(cluster, group, node_type, gspec))
            for extra in sorted(live.get(group, []), key=lambda p: p["metadata"]["creationTimestamp"])[
                count:
            ]:
                calls.append(
                    self.kube.delete(
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{extra['metadata']['name']}"
                    )
                )
        return calls

    async def _cluster_pod(
        self, cluster: dict[str, Any], group: str, node_type: str, gspec: dict[str, Any]
    ) -> None:
        meta = cluster["metadata"]
        token = f"pod/{meta['name']}/{group}/{secrets.token_hex(3)}"
        self._pending.add(token)
        try:
            prefix = f"{meta['name']}-head-" if node_type == "head" else f"{meta['name']}-{group}-worker-"
            labels = {
                "ray.io/cluster": meta["name"],
                "ray.io/node-type": node_type,
                "ray.io/group": group,
                "app.kubernetes.io/created-by": "kuberay-operator",
            }
            queue = (meta.get("labels") or {}).get(QUEUE_LABEL)
            await self._create_pod(
                cluster, "RayCluster", prefix, gspec.get("template", {}), labels, queue=queue
            )
        finally:
            self._pending.discard(token)

    async def _create_pod(
        self,
        owner: dict[str, Any],
        kind: str,
        prefix: str,
        template: dict[str, Any],
        labels: dict[str, str],
        *,
        queue: str | None,
    ) -> None:
        meta = owner["metadata"]
        tmeta = template.get("metadata") or {}
        pod_labels = {**(tmeta.get("labels") or {}), **labels}
        if queue:
            pod_labels[QUEUE_LABEL] = queue
        pod_spec = copy.deepcopy(template.get("spec")) or {
            "containers": [{"name": "ray", "image": "rayproject/ray"}]
        }
        pod_spec["schedulerName"] = self.scheduler_name
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": prefix,
                "namespace": meta["namespace"],
                "labels": pod_labels,
                "annotations": dict(tmeta.get("annotations") or {}),
                "ownerReferences": [_owner_ref(owner, kind)],
            },
            "spec": pod_spec,
        }
        await self.kube.create(f"/api/v1/namespaces/{meta['namespace']}/pods", pod)
        self.created += 1


def _owner_ref(owner: dict[str, Any], kind: str) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner.get("apiVersion", "ray.io/v1"),
        "kind": kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
