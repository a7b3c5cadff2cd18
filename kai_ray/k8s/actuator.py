"""The Kubernetes backend's Actuator: a cycle's plan carried out on the API server.

Evictions first (they free what the bindings use): a Ray gang taken whole is stopped by
suspending its RayJob or RayCluster, and elastic surplus workers go through KubeRay's
scale-down, so that KubeRay does not make the pods again (kai_ray.k8s.suspension); any
other pod through the Eviction API; an Event on each pod says why. Then bindings (a
suspended gang the cycle admits is resumed instead), sent concurrently on kept-alive
connections (kai_ray.k8s.client), a shared GPU's device held by a reservation pod
before the first pod that shares it. A binding being sent, and one whose answer was lost,
is assumed by the ClusterSource until the pods' watch says, so that the next cycle
neither places the pod twice nor gives its room to another. Then
what people and autoscalers read: pod conditions, Events on the gangs' owners and the
Queues' status (kai_ray.k8s.report), and GPU sharing's ConfigMaps and reservations.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from kai_ray.control.forecast import Eta
from kai_ray.control.planner import JobPlan, Plan
from kai_ray.core import CycleResult, Evict
from kai_ray.k8s.client import ApiError, Kube, gather_limited
from kai_ray.k8s.devices import DeviceSharing
from kai_ray.k8s.gangs import Gang
from kai_ray.k8s.report import Reporter
from kai_ray.k8s.sharing import GPU_GROUP_ANNOTATION
from kai_ray.k8s.source import KubeSource
from kai_ray.k8s.suspension import (
    cannot_suspend,
    resume_patch,
    scale_down,
    stop_patch,
    suspend_patch,
    suspended_by_us,
)
from kai_ray.k8s.watches import owner_path
from kai_ray.k8s.world import SUBMITTER_TASK

STOP_RETRY_S = 120.0  # a gang stopped at max runtime and still there is stopped again after this

__all__ = ["ActuatorStats", "KubeActuator"]

log = logging.getLogger(__name__)
UNCERTAIN_WAIT_S = 2.0  # after a binding's answer was lost, before its pod is asked


@dataclass(slots=True)
class ActuatorStats:
    bound: int = 0
    evicted: int = 0
    suspended: int = 0  # owners suspended (their pods count in evicted)
    resumed: int = 0
    stopped: int = 0  # gangs stopped at their max runtime


class KubeActuator:
    def __init__(
        self, kube: Kube, source: KubeSource, sharing: DeviceSharing | None = None, in_flight: int = 32
    ) -> None:
        self.kube, self.source, self.sharing, self.in_flight = kube, source, sharing, in_flight
        self.reporter = Reporter(kube, in_flight)
        self.stats = ActuatorStats()
        self._stopping: dict[str, float] = {}  # gang id -> when it was stopped (not gone yet)
        # Bindings sent whose answer was lost: pod uid -> (namespace, name, when sent).
        self._uncertain: dict[str, tuple[str, str, float]] = {}
        # The forecast of when waiting gangs start (ObservedLifecycle's), for their messages.
        self.etas: Callable[[float, Collection[str]], Mapping[str, Eta]] | None = None

    async def apply(self, plan: Plan, result: CycleResult, now: float) -> None:
        await self._settle_uncertain(now)
        await self._stop_overrunning(now)
        evictions = [(job, e) for job, jp in plan.jobs.items() for e in _evictions(jp)]
        binds = [(job, b.task, b.node, b.gpu_group) for job, jp in plan.jobs.items() for b in jp.binds]
        await self._evict(evictions)
        binds += [(job, task, node, None) for job, task, node in self.source.take_direct()]
        await self._bind(binds, now)
        etas = self.etas(now, result.waiting.keys()) if self.etas is not None else {}
        await self.reporter.report(self.source, result, plan, etas)
        if self.sharing is not None:
            await self.sharing.reconcile(self.source)

    # ------------------------------------------------------------ binding

    async def _bind(self, binds: list[tuple[str, str, str, int | None]], now: float) -> None:
        calls = []
        resumed: set[str] = set()
        for job, task, node, gpu_group in binds:
            if (suspended := self.source.suspended_owner(job)) is not None:
                if job not in resumed:  # admitted whole: KubeRay makes its pods, placed as usual
                    resumed.add(job)
                    calls.append(self._resume(suspended))
                continue
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
        # Assumed before it is sent: a binding whose answer is lost (the connection cut,
        # the server restarting) may have been made, and the room must not be given
        # twice meanwhile; the watch, or ASSUME_TTL, settles it.
        self.source.assume(uid, node, now)
        try:
            await self.kube.bind(ns, name, node, uid)
        except ApiError as exc:
            if exc.status == 409:
                # Bound already (by an earlier life of this operator), or a conflict of a
                # write the server retried against an etcd that restarted: the pod says.
                log.debug("binding %s/%s: %s; asking the pod", ns, name, exc)
                self._uncertain[uid] = (ns, name, now)
                return
            if exc.status < 500:  # refused: not bound
                self.source.unassume(uid)
            else:
                self._uncertain[uid] = (ns, name, now)
            raise
        except aiohttp.ClientConnectorError:  # never reached the server: not bound
            self.source.unassume(uid)
            raise
        except Exception:  # the answer is lost: bound or not, the pod itself says
            self._uncertain[uid] = (ns, name, now)
            raise
        self.stats.bound += 1

    async def _settle_uncertain(self, now: float) -> None:
        """Bindings whose answer was lost, asked of their pods once the server answers
        again (UNCERTAIN_WAIT_S after, so that one still queued in a server is done): not
        bound, the room is free again at once rather than after ASSUME_TTL."""
        due = [(uid, at) for uid, at in self._uncertain.items() if now - at[2] >= UNCERTAIN_WAIT_S]
        if not due:
            return

        async def settle(uid: str, ns: str, name: str) -> None:
            try:
                pod = await self.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
            except ApiError as exc:
                if exc.status != 404:
                    raise
                pod = None
            del self._uncertain[uid]
            if pod is None or pod["metadata"].get("uid") != uid or not pod["spec"].get("nodeName"):
                self.source.unassume(uid)

        calls = [settle(uid, ns, name) for uid, (ns, name, _) in due]
        for outcome in await gather_limited(calls, self.in_flight):
            if isinstance(outcome, BaseException):
                log.debug("asking a pod whether its binding was made: %s", outcome)

    # ------------------------------------------------------------ max runtime

    async def _stop_overrunning(self, now: float) -> None:
        """Gangs past their max runtime are stopped for good: the owner suspended (and
        marked not to resume), a batch Job suspended, bare pods evicted. Their pods get
        Kubernetes' notice (SIGTERM) and their termination grace period."""
        for gid, at in list(self._stopping.items()):
            if now - at > STOP_RETRY_S:
                del self._stopping[gid]  # not gone yet: tried again
        todo = [(g, why) for g, why in self.source.overrunning(now) if g.id not in self._stopping]
        calls = [self._stop(gang, why, now) for gang, why in todo]
        for outcome in await gather_limited(calls, self.in_flight):
            if isinstance(outcome, BaseException):
                log.warning("stopping at max runtime failed: %s", outcome)

    async def _stop(self, gang: Gang, why: str, now: float) -> None:
        self._stopping[gang.id] = now
        at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        patch = stop_patch(gang.kind, why, at)
        if patch is not None:
            await self.kube.patch(owner_path(gang.kind, gang.namespace, gang.name), patch)
        else:
            for pod in gang.pods:
                if pod.get("spec", {}).get("nodeName"):
                    await self.kube.evict(pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.stats.stopped += 1
        await self.reporter.event(gang, "Warning", "Stopped", why)

    # ------------------------------------------------------------ evicting

    async def _resume(self, gang: Gang) -> None:
        await self.kube.patch(owner_path(gang.kind, gang.namespace, gang.name), resume_patch())
        self.stats.resumed += 1
        await self.reporter.event(gang, "Normal", "Resumed", "admitted again by kai-ray: resumed")

    async def _evict(self, evictions: list[tuple[str, Evict]]) -> None:
        by_job: dict[str, list[tuple[dict[str, Any], Evict]]] = {}
        for job, e in evictions:
            if e.task == SUBMITTER_TASK:
                self.source.release_room(job)
                continue
            pod = self.source.pod(job, e.task)
            if pod is not None:
                by_job.setdefault(job, []).append((pod, e))
        calls = []
        for job, taken in by_job.items():
            calls += self._take_back(job, taken)
        for outcome in await gather_limited(calls, self.in_flight):
            if isinstance(outcome, BaseException):
                log.warning("eviction failed: %s", outcome)

    def _take_back(self, job: str, taken: list[tuple[dict[str, Any], Evict]]) -> list[Any]:
        """The calls that stop `taken` (a job's pods), the way its owner expects."""
        gang = self.source.gangs.get(job)
        moved = any(e.action == "consolidation" for _, e in taken)  # a move wants the pod made again
        if gang is not None and not moved:
            owner = self.source.owners.get((gang.kind, gang.namespace, gang.name))
            if suspended_by_us(owner):
                # Suspended already: KubeRay is taking these pods away. Scaling its groups
                # down or evicting now would only shrink what resumes.
                return []
            if _whole(gang, taken) and not cannot_suspend(gang.kind, owner):
                return [self._suspend(gang, taken)]
            cluster = _cluster_of(self.source, taken)
            if cluster is not None and (patch := scale_down(cluster, [p for p, _ in taken])) is not None:
                return [self._scale_down(cluster, patch, job, taken)]
        return [self._evict_pod(pod, job, e) for pod, e in taken]

    async def _suspend(self, gang: Gang, taken: list[tuple[dict[str, Any], Evict]]) -> None:
        why = f"{taken[0][1].action}: {taken[0][1].reason}"  # e.g. "preempt: for ml/RayCluster/x"
        at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await self.kube.patch(owner_path(gang.kind, gang.namespace, gang.name), suspend_patch(why, at))
        self.stats.suspended += 1
        await self.reporter.event(gang, "Warning", "Suspended", f"suspended by kai-ray: {why}")
        await self._taken(gang.id, taken)

    async def _scale_down(
        self,
        cluster: Mapping[str, Any],
        patch: dict[str, Any],
        job: str,
        taken: list[tuple[dict[str, Any], Evict]],
    ) -> None:
        meta = cluster["metadata"]
        await self.kube.patch(owner_path("RayCluster", meta["namespace"], meta["name"]), patch)
        await self._taken(job, taken)

    async def _taken(self, job: str, taken: list[tuple[dict[str, Any], Evict]]) -> None:
        """Pods their owner's controller takes away: counted and told as evicted."""
        self.stats.evicted += len(taken)
        for pod, e in taken:
            await self.reporter.evicted(pod, job, e)

    async def _evict_pod(self, pod: dict[str, Any], job: str, e: Evict) -> None:
        meta = pod["metadata"]
        if await self.kube.evict(meta["namespace"], meta["name"]):
            self.stats.evicted += 1
            await self.reporter.evicted(pod, job, e)


def _whole(gang: Gang, taken: list[tuple[dict[str, Any], Evict]]) -> bool:
    """Whether nothing of the gang stays: every pod it has on a node is taken."""
    names = {pod["metadata"]["name"] for pod, _ in taken}
    placed = [p for p in gang.pods if p.get("spec", {}).get("nodeName")]
    return all(p["metadata"]["name"] in names for p in placed)


def _cluster_of(source: KubeSource, taken: list[tuple[dict[str, Any], Evict]]) -> Mapping[str, Any] | None:
    """The one RayCluster whose workers these are, if it is known."""
    clusters = {
        (p["metadata"]["namespace"], (p["metadata"].get("labels") or {}).get("ray.io/cluster"))
        for p, _ in taken
    }
    if len(clusters) != 1:
        return None
    ns, name = next(iter(clusters))
    return source.owners.get(("RayCluster", ns, name)) if name else None


def _evictions(plan: JobPlan) -> list[Evict]:
    # A task the core moves (consolidation) is evicted here: a pod cannot change nodes,
    # its controller (KubeRay) makes a new one, which queues and is placed again.
    return [*plan.evicted, *(e for e, _ in plan.moved)]
