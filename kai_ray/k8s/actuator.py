"""The Kubernetes backend's Actuator: a cycle's plan carried out on the API server.

Evictions first (they free what the bindings use), through the Eviction API with an
Event on each pod saying why; then bindings, sent concurrently on kept-alive
connections (kai_ray.k8s.client), a shared GPU's device held by a reservation pod
before the first pod that shares it. A binding sent but not yet seen in the pods' watch
is assumed by the ClusterSource, so the next cycle does not place the pod twice. Then
what people and autoscalers read: pod conditions, Events on the gangs' owners and the
Queues' status (kai_ray.k8s.report), and GPU sharing's ConfigMaps and reservations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kai_ray.control.planner import JobPlan, Plan
from kai_ray.core import CycleResult, Evict
from kai_ray.k8s.client import ApiError, Kube, gather_limited
from kai_ray.k8s.devices import DeviceSharing
from kai_ray.k8s.report import Reporter
from kai_ray.k8s.sharing import GPU_GROUP_ANNOTATION
from kai_ray.k8s.source import KubeSource
from kai_ray.k8s.world import SUBMITTER_TASK

__all__ = ["ActuatorStats", "KubeActuator"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ActuatorStats:
    bound: int = 0
    evicted: int = 0


class KubeActuator:
    def __init__(
        self, kube: Kube, source: KubeSource, sharing: DeviceSharing | None = None, in_flight: int = 32
    ) -> None:
        self.kube, self.source, self.sharing, self.in_flight = kube, source, sharing, in_flight
        self.reporter = Reporter(kube, in_flight)
        self.stats = ActuatorStats()

    async def apply(self, plan: Plan, result: CycleResult, now: float) -> None:
        evictions = [(job, e) for job, jp in plan.jobs.items() for e in _evictions(jp)]
        binds = [(job, b.task, b.node, b.gpu_group) for job, jp in plan.jobs.items() for b in jp.binds]
        await self._evict(evictions)
        binds += [(job, task, node, None) for job, task, node in self.source.take_direct()]
        await self._bind(binds, now)
        await self.reporter.report(self.source, result, plan)
        if self.sharing is not None:
            await self.sharing.reconcile(self.source)

    # ------------------------------------------------------------ binding

    async def _bind(self, binds: list[tuple[str, str, str, int | None]], now: float) -> None:
        calls = []
        for job, task, node, gpu_group in binds:
            if task == SUBMITTER_TASK:
                self.source.hold_room(job, node)  # the submitter pod goes there when it comes
                continue
            pod = self.source.pod(job, task)
            if pod is not None:
                calls.append(self._bind_pod(pod, node, gpu_group, now))
        for outcome in await gather_limited(calls, self.in_flight):
            if isinstance(outcome, BaseException):
                log.warning("binding failed: %s", outcome)

    async def _bind_pod(self, pod: dict[str, Any], node: str, gpu_group: int | None, now: float) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        if gpu_group is not None and self.sharing is not None:
            await self.sharing.reserve(node, gpu_group)  # the whole device held, before any share
        if gpu_group is not None:  # the device goes with the pod, for the next cycle and a restart
            await self.kube.patch(
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"metadata": {"annotations": {GPU_GROUP_ANNOTATION: str(gpu_group)}}},
            )
        try:
            await self.kube.bind(ns, name, node, uid)
        except ApiError as exc:
            if exc.status == 409:  # bound already (by an earlier life of this operator)
                return
            raise
        self.source.assume(uid, node, now)
        self.stats.bound += 1

    # ------------------------------------------------------------ evicting

    async def _evict(self, evictions: list[tuple[str, Evict]]) -> None:
        calls = []
        for job, e in evictions:
            if e.task == SUBMITTER_TASK:
                self.source.release_room(job)
                continue
            pod = self.source.pod(job, e.task)
            if pod is not None:
                calls.append(self._evict_pod(pod, job, e))
        for outcome in await gather_limited(calls, self.in_flight):
            if isinstance(outcome, BaseException):
                log.warning("eviction failed: %s", outcome)

    async def _evict_pod(self, pod: dict[str, Any], job: str, e: Evict) -> None:
        meta = pod["metadata"]
        if await self.kube.evict(meta["namespace"], meta["name"]):
            self.stats.evicted += 1
            await self.reporter.evicted(pod, job, e)


def _evictions(plan: JobPlan) -> list[Evict]:
    # A task the core moves (consolidation) is evicted here: a pod cannot change nodes,
    # its controller (KubeRay) makes a new one, which queues and is placed again.
    return [*plan.evicted, *(e for e, _ in plan.moved)]
