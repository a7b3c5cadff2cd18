"""Test doubles for what a kind-of-real cluster has besides the API server and KubeRay's
operator: nodes as a kubelet reports them, and a kubelet that runs bound pods (with
live Ray for a RayCluster's, given a liveray.LiveRay) and finishes deleted ones. Used by
the operator's tests, `kai-ray demo --kubernetes` and `kai-ray bench k8s`; never by the
operator itself.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.informer import Informer
from kai_ray.k8s.sharing import DEVICE_ANNOTATION, RESERVATION_LABEL
from kai_ray.testing.liveray import LiveRay

__all__ = ["CRD_STAND_INS", "FakeKubelet", "make_node"]

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
                calls.append(self._run(pod, key))
        for outcome in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(outcome, ApiError) and outcome.status not in (404, 409):
                log.warning("fake kubelet: %s", outcome)
            elif isinstance(outcome, Exception) and not isinstance(outcome, ApiError):
                log.error("fake kubelet: %r", outcome)  # said: a pod left Pending is explained

    async def _run(self, pod: dict[str, Any], key: str) -> None:
        meta = pod["metadata"]
        address = None
        if self.ray is not None:
            try:
                address = await asyncio.to_thread(self.ray.start, pod)
            except Exception:
                self._done.discard(key)  # tried again, as a kubelet starts a container again
                await asyncio.sleep(1)
                raise
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
