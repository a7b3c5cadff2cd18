"""The cluster as the core sees it, built from the informers' objects: pure, no I/O.

Nodes become NodeInfo (allocatable; cordoned, tainted or not Ready nodes take no new
pods; what other schedulers' pods request is use outside kai-ray). Our gangs become the
core's jobs, one task per pod: a bound pod runs on its node, a terminating one releases,
an unbound one is pending. A RayJob in K8sJobMode has one more task until its submitter
pod exists: the room it will need, held with its cluster (see gangs.Gang.submitter).
"""

from __future__ import annotations

import calendar
import dataclasses
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.core import ClusterSnapshot, JobInfo, NodeInfo, QueueInfo, Request, TaskInfo, TaskStatus
from kai_ray.core.quantity import parse_quantity
from kai_ray.k8s.gangs import Gang, pod_finished, pod_request, scheduled_by_us
from kai_ray.k8s.sharing import GPU_GROUP_ANNOTATION
from kai_ray.k8s.taints import blocking_taints, profile_label, tolerates, tolerations_of

__all__ = [
    "GPU_GROUP_ANNOTATION",
    "GPU_RESOURCE",
    "SUBMITTER_TASK",
    "World",
    "build_world",
    "node_info",
]

GPU_RESOURCE = "nvidia.com/gpu"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per device, as GPU feature discovery labels it
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
SUBMITTER_TASK = "~submitter"  # the task standing for a RayJob's submitter before its pod exists
DEFAULT_GPU_MEMORY = 80 * 1024**3
_NOT_EXTENDED = {"cpu", "memory", "pods", "ephemeral-storage", GPU_RESOURCE}


@dataclass(slots=True)
class World:
    snapshot: ClusterSnapshot
    gangs: dict[str, Gang]  # job name (= gang id) -> gang
    pods: dict[tuple[str, str], dict[str, Any]]  # (job, task) -> pod; the submitter task has none
    problems: dict[str, Gang] = field(default_factory=dict)  # gangs that cannot be scheduled as written


def node_info(node: Mapping[str, Any], outside: Mapping[str, float] | None = None) -> NodeInfo:
    meta, status = node["metadata"], node.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    extended = tuple(
        sorted(
            (k, parse_quantity(v))
            for k, v in alloc.items()
            if k not in _NOT_EXTENDED and not k.startswith("hugepages-")
        )
    )
    gpu_memory = (
        float(labels[GPU_MEMORY_LABEL]) * 2**20 if labels.get(GPU_MEMORY_LABEL) else DEFAULT_GPU_MEMORY
    )
    return NodeInfo(
        name=meta["name"],
        gpus=int(parse_quantity(alloc.get(GPU_RESOURCE, 0))),
        cpu=parse_quantity(alloc.get("cpu", 0)),
        memory=parse_quantity(alloc.get("memory", 0)),
        gpu_memory=gpu_memory,
        labels=labels,
        unschedulable=not node_takes_pods(node),
        extended=extended,
        gpu_model=labels.get(GPU_PRODUCT_LABEL, ""),
        used_outside=tuple(sorted((k, v) for k, v in (outside or {}).items() if v > 0)),
    )


def node_takes_pods(node: Mapping[str, Any]) -> bool:
    """Ready and not cordoned. (Taints keep off only the pods that do not tolerate them:
    see kai_ray.k8s.taints.)"""
    if node.get("spec", {}).get("unschedulable"):
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def build_world(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    gangs: Iterable[Gang],
    queues: list[QueueInfo],
    *,
    scheduler_names: Iterable[str],
    assumed: Mapping[str, str],
    placeholders: Mapping[str, str],
    idle_holders: Iterable[Mapping[str, Any]] = (),
) -> World:
    """`assumed`: pod uid -> node for bindings sent but not seen yet in the pods' cache;
    `placeholders`: gang id -> node where its submitter's room is held; `idle_holders`:
    pods of ours that hold capacity for no task of the core (a GPU reservation whose
    sharing pods are gone), counted as use outside until they are deleted."""
    names = frozenset(scheduler_names)
    gangs = list(gangs)
    usable = [g for g in gangs if not g.problem]
    problems = {g.id: g for g in gangs if g.problem}
    idle_holders = list(idle_holders)
    counted = {p["metadata"].get("uid") for g in problems.values() for p in g.pods}
    counted |= {p["metadata"].get("uid") for p in idle_holders}
    outside = _outside_use([*pods, *idle_holders], names, counted, assumed)
    nodes = list(nodes)
    infos = [node_info(n, outside.get(n["metadata"]["name"])) for n in nodes]
    selectors = _toleration_labels(nodes, infos, usable)
    jobs: list[JobInfo] = []
    task_pods: dict[tuple[str, str], dict[str, Any]] = {}
    for gang in usable:
        job = _job(gang, assumed, placeholders)
        if gang.id in selectors:
            job.node_selector = {**job.node_selector, selectors[gang.id]: "true"}
        for pod in gang.pods:
            task_pods[(gang.id, pod["metadata"]["name"])] = dict(pod)
        jobs.append(job)
    snapshot = ClusterSnapshot(nodes=infos, queues=queues, jobs=jobs)
    return World(snapshot=snapshot, gangs={g.id: g for g in usable}, pods=task_pods, problems=problems)


def _toleration_labels(
    nodes: list[Mapping[str, Any]], infos: list[NodeInfo], gangs: list[Gang]
) -> dict[str, str]:
    """Label the nodes per set of tolerations (changing `infos` in place); gang id -> the
    label its pods' tolerations stand for. Nothing when no node has a blocking taint."""
    taints = [blocking_taints(n) for n in nodes]
    if not any(taints):
        return {}
    by_gang: dict[str, str] = {}
    labelled: dict[str, list[bool]] = {}
    for gang in gangs:
        profile = [tolerations_of(p) for p in gang.pods] or [frozenset()]
        label = profile_label(profile)
        by_gang[gang.id] = label
        if label not in labelled:
            labelled[label] = [tolerates(profile, t) for t in taints]
    for i, info in enumerate(infos):
        extra = {label: "true" for label, ok in labelled.items() if ok[i]}
        if extra:
            infos[i] = dataclasses.replace(info, labels={**info.labels, **extra})
    return by_gang


def _job(gang: Gang, assumed: Mapping[str, str], placeholders: Mapping[str, str]) -> JobInfo:
    tasks = [_task(pod, assumed) for pod in gang.pods]
    if gang.submitter is not None:
        node = placeholders.get(gang.id)
        status = TaskStatus.RUNNING if node else TaskStatus.PENDING
        tasks.append(TaskInfo(SUBMITTER_TASK, status, gang.submitter, node=node, since=gang.created_at))
    return JobInfo(
        name=gang.id,
        queue=gang.queue,
        tasks=tasks,
        priority=gang.priority,
        preemptible=gang.preemptible,
        min_member=gang.min_member,
        created_at=gang.created_at,
        topology=gang.topology,
        node_selector=dict(gang.node_selector),
    )


def _task(pod: Mapping[str, Any], assumed: Mapping[str, str]) -> TaskInfo:
    meta, spec = pod["metadata"], pod.get("spec", {})
    request = pod_request(pod)
    node = spec.get("nodeName") or assumed.get(meta.get("uid", ""))
    group = (meta.get("annotations") or {}).get(GPU_GROUP_ANNOTATION)
    gpu_group = int(group) if group is not None and request.is_fractional else None
    if not node:
        return TaskInfo(
            meta["name"], TaskStatus.PENDING, request, since=timestamp(meta.get("creationTimestamp"))
        )
    status = TaskStatus.RELEASING if meta.get("deletionTimestamp") else TaskStatus.RUNNING
    return TaskInfo(meta["name"], status, request, node=node, gpu_group=gpu_group, since=_started(pod))


def _started(pod: Mapping[str, Any]) -> float:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return timestamp(cond.get("lastTransitionTime"))
    return timestamp(pod.get("status", {}).get("startTime") or pod["metadata"].get("creationTimestamp"))


def _outside_use(
    pods: Iterable[Mapping[str, Any]],
    names: frozenset[str],
    counted: set[Any],
    assumed: Mapping[str, str],
) -> dict[str, dict[str, float]]:
    """Per node, what bound pods that are not the core's tasks hold: other schedulers'
    pods, and ours in `counted` (uids): gangs left out of the cycle for a problem (they
    still run), reservations holding a device for no sharing pod."""
    use: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName") or assumed.get(pod["metadata"].get("uid", ""))
        if not node or pod_finished(pod):
            continue
        if scheduled_by_us(pod, names) and pod["metadata"].get("uid") not in counted:
            continue
        try:
            request = pod_request(pod)
        except ValueError:
            request = pod_request({"spec": {**pod.get("spec", {})}, "metadata": {"name": "x"}})
        _add(use[node], request)
    return {k: dict(v) for k, v in use.items()}


def _add(into: dict[str, float], request: Request) -> None:
    # An outside pod's GPU share (whole devices: others' sharing is not visible here).
    for name, amount in (
        ("gpu", request.gpu),
        ("cpu", request.cpu),
        ("memory", request.memory),
        *request.extended,
    ):
        into[name] += amount


def timestamp(text: str | None) -> float:
    """An RFC 3339 timestamp of the API server (UTC, whole seconds) as epoch seconds."""
    if not text:
        return time.time()
    return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
