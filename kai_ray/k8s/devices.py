"""The operator's side of GPU sharing (see kai_ray.k8s.sharing): reservation pods
made before a sharing pod is bound, ConfigMaps written once the reservation's device is
known, and reservations deleted when their device has no sharing pod left. Level-
triggered like the rest: every cycle compares what the pods say with what should be."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kai_ray.k8s.client import ApiError, Kube
from kai_ray.k8s.requests import pod_request
from kai_ray.k8s.sharing import (
    RESERVATION_NS,
    config_map,
    device_of,
    is_reservation,
    reservation_name,
    reservation_pod,
    share_id,
    wanted_reservations,
)
from kai_ray.k8s.world import GPU_GROUP_ANNOTATION

__all__ = ["DeviceSharing", "SharingOptions"]

log = logging.getLogger(__name__)
FRESH_S = 10.0  # a reservation younger than this is kept: its pod's binding may not be seen yet


class SharingWorld(Protocol):
    """What GPU sharing reads of the backend's world (kai_ray.k8s.source.KubeSource)."""

    def sharing_pods(self) -> list[Mapping[str, Any]]:
        """Reservation pods and pods that were given a device to share."""

    def device_memory(self) -> Mapping[str, float]:
        """Node -> bytes of memory of one of its GPUs."""


@dataclass(frozen=True, slots=True)
class SharingOptions:
    image: str  # the reservation pods' image (kai-ray's)
    scheduler: str = "kai-ray"


class DeviceSharing:
    def __init__(self, kube: Kube, options: SharingOptions) -> None:
        self.kube, self.options = kube, options
        self._made: dict[str, float] = {}  # reservation name -> when this operator made it
        self._configured: set[str] = set()  # share ids whose ConfigMap exists

    async def ensure_namespace(self) -> None:
        """The reservations' namespace (the Helm chart makes it; a bare operator may not)."""
        if await self.kube.exists(f"/api/v1/namespaces/{RESERVATION_NS}"):
            return
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RESERVATION_NS}}
        try:
            await self.kube.create("/api/v1/namespaces", body)
        except ApiError as exc:
            if exc.status != 409:
                raise

    async def reserve(self, node: str, device: int) -> None:
        """The device held for sharing before the first sharing pod is bound to it."""
        body = reservation_pod(node, device, self.options.image, self.options.scheduler)
        try:
            await self.kube.create(f"/api/v1/namespaces/{RESERVATION_NS}/pods", body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._made.setdefault(body["metadata"]["name"], time.monotonic())

    async def reconcile(self, world: SharingWorld) -> None:
        pods = world.sharing_pods()
        reservations = {p["metadata"]["name"]: p for p in pods if is_reservation(p)}
        sharing = [p for p in pods if not is_reservation(p) and share_id(p)]
        memory = world.device_memory()
        for pod in sharing:
            await self._configure(pod, reservations, memory)
        wanted = {reservation_name(n, d) for n, d in wanted_reservations(sharing, GPU_GROUP_ANNOTATION)}
        for name in sorted(set(reservations) - wanted):
            if time.monotonic() - self._made.get(name, 0.0) < FRESH_S:
                continue
            await self.kube.delete(f"/api/v1/namespaces/{RESERVATION_NS}/pods/{name}")
            self._made.pop(name, None)

    async def _configure(
        self, pod: Mapping[str, Any], reservations: Mapping[str, Any], memory: Mapping[str, float]
    ) -> None:
        share = share_id(pod)
        group = (pod["metadata"].get("annotations") or {}).get(GPU_GROUP_ANNOTATION)
        node = pod.get("spec", {}).get("nodeName")
        if share in self._configured or group is None or not node:
            return
        device = device_of(reservations.get(reservation_name(node, int(group)), {}))
        if not device:
            return  # the reservation has not said which device it got yet
        portion = pod_request(pod).gpu_fraction(memory.get(node, 0.0))
        try:
            await self.kube.create(
                f"/api/v1/namespaces/{pod['metadata']['namespace']}/configmaps",
                config_map(pod, device, portion),
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
        self._configured.add(share)
