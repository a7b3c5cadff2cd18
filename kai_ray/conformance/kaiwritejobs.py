"""A scenario's jobs as KAI-Scheduler's objects (the inverse of kai_ray.control.kaijobs and
kaipods): one PodGroup per job, one Pod per task, a BindRequest for each task whose bind
KAI's binder has not carried out yet, and the reservation pod KAI's binder keeps on each
shared device. kaiwrite.py writes the rest of the snapshot and says the conventions.
"""

from __future__ import annotations

import copy
import math
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kai_ray.core.model.snapshot import JobInfo, NodeInfo, Request, TaskInfo, TaskStatus
from kai_ray.core.model.subgroups import info_shortfall
from kai_ray.scenario.schema import JobSpec, TaskCountSpec, TaskSpec

__all__ = [
    "NAMESPACE",
    "SCHEDULER",
    "Clock",
    "KaiJobs",
    "class_name",
    "gpu_group_id",
    "kubernetes_entries",
    "write_jobs",
]

Obj = dict[str, Any]
NAMESPACE = "default"
SCHEDULER = "kai-scheduler"
QUEUE_LABEL = "kai.scheduler/queue"
JOB_LABEL = "kai-ray/job"  # not KAI's: the scenario job a pod is a task of
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"
GPU_GROUP_LABEL = "runai-gpu-group"
LAST_START = "kai.scheduler/last-start-timestamp"
STALE_SINCE = "kai.scheduler/stale-podgroup-timestamp"
RESERVATION_NAMESPACE = "kai-resource-reservation"
_MIB = 1024**2
_DAY_S = 86_400
# Device ids are uuids in KAI; here derived from (node, symbol), so a state written twice
# is the same file and a symbol keeps its id across the sessions of a followed cluster.
_GROUP_IDS = uuid.uuid5(uuid.NAMESPACE_DNS, "gpu-group.kai-ray.io")


def stamp(t: float) -> str:
    """A Kubernetes time (metav1.Time): whole seconds, truncated."""
    return datetime.fromtimestamp(math.floor(t), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def precise(t: float) -> str:
    """A time KAI writes in an annotation: RFC 3339 with microseconds."""
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Clock:
    """KAI's epoch clock for the scenario's: scenario time t is `now + (t - scenario_now)`.
    Nodes, queues and pod groups date from 30 days before `now`, a minute apart in their
    order, so they predate every start and sort as the scenario lists them."""

    now: float
    scenario_now: float

    def at(self, t: float) -> float:
        return self.now + (t - self.scenario_now)

    def created(self, position: float) -> str:
        return stamp(math.floor(self.now) - 30 * _DAY_S + 60 * position)


def class_name(priority: int | str) -> str:
    """The PriorityClass a job names: its own, or one made for an integer priority (KAI
    takes a pod group's priority only from a class)."""
    return priority if isinstance(priority, str) else f"priority-{priority}"


def gpu_group_id(node: str, symbol: str) -> str:
    return str(uuid.uuid5(_GROUP_IDS, f"{node}/{symbol}"))


@dataclass(slots=True)
class KaiJobs:
    pods: list[Obj] = field(default_factory=list)
    groups: list[Obj] = field(default_factory=list)
    binds: list[Obj] = field(default_factory=list)
    reservations: dict[str, Obj] = field(default_factory=dict)  # device id -> its reservation pod


@dataclass(frozen=True, slots=True)
class _Job:
    raw: Mapping[str, Any]  # the scenario's entry, for what passes through in Kubernetes' shape
    spec: JobSpec
    info: JobInfo  # as the scenario loader resolved it: priority, requests, absolute times
    created: str


def write_jobs(
    raw_jobs: Sequence[Mapping[str, Any]],
    specs: Sequence[JobSpec],
    infos: Sequence[JobInfo],
    nodes: Mapping[str, NodeInfo],
    clock: Clock,
    in_flight: Collection[str],
) -> KaiJobs:
    """Every job in the scenario's order: KAI's reader gives shared devices their indices
    in the order it meets their pods, as the scenario loader does in file order."""
    in_flight = set(in_flight)
    _check_in_flight(infos, in_flight)
    out = KaiJobs()
    for raw, spec, info in zip(raw_jobs, specs, infos, strict=True):
        job = _Job(raw, spec, info, clock.created(info.created_at))
        out.groups.append(_pod_group(job, clock))
        raw_tasks, task_specs = _expand(raw.get("tasks")), _expand_specs(spec.tasks)
        for task, task_spec, raw_task in zip(info.tasks, task_specs, raw_tasks, strict=True):
            flying = task.name in in_flight
            symbol = _symbol(task, task_spec, job)
            out.pods.append(_pod(job, task, task_spec, raw_task, symbol, flying, clock))
            if flying:
                out.binds.append(_bind_request(task, symbol, nodes, clock))
            if symbol is not None and task.node is not None and task.status.holds_capacity:
                _reserve(out.reservations, task, symbol, clock)
    return out


def _check_in_flight(infos: Sequence[JobInfo], in_flight: Collection[str]) -> None:
    running = {t.name for j in infos for t in j.tasks if t.status is TaskStatus.RUNNING}
    stray = sorted(set(in_flight) - running)
    if stray:
        raise ValueError(
            f"in_flight: {', '.join(stray)} is not a Running task of the scenario; only a running "
            "task can be KAI's bind in flight"
        )


def _expand(raw: object) -> list[Mapping[str, Any]]:
    if isinstance(raw, Mapping):  # {count: N, ...}: N identical tasks
        return [raw] * int(raw["count"])
    return list(raw) if isinstance(raw, list) else []


def _expand_specs(tasks: list[TaskSpec] | TaskCountSpec) -> list[TaskSpec]:
    return [tasks] * tasks.count if isinstance(tasks, TaskCountSpec) else tasks


def _symbol(task: TaskInfo, spec: TaskSpec, job: _Job) -> str | None:
    if spec.gpu_group is None or task.node is None:
        return None
    if not task.request.is_fractional:
        raise ValueError(
            f"job {job.spec.name!r}: task {task.name}: gpuGroup: KAI names a shared device only for a "
            "GPU share (gpu below 1, or gpuMemory); remove gpuGroup from a whole-GPU task"
        )
    return spec.gpu_group


# ---------------------------------------------------------------- PodGroup


def _pod_group(job: _Job, clock: Clock) -> Obj:
    info, spec = job.info, job.spec
    group_spec: Obj = {
        "minMember": info.gang_size,
        "queue": info.queue,
        "priorityClassName": class_name(spec.priority),
        "preemptibility": "preemptible" if info.preemptible else "non-preemptible",
    }
    if info.topology is not None:
        constraint = {"topology": info.topology.topology}
        if info.topology.required:
            constraint["requiredTopologyLevel"] = info.topology.required
        if info.topology.preferred:
            constraint["preferredTopologyLevel"] = info.topology.preferred
        group_spec["topologyConstraint"] = constraint
    if info.subgroups:
        group_spec["subGroups"] = [{"name": n, "minMember": m} for n, m in info.subgroups.items()]
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": info.name,
            "namespace": NAMESPACE,
            "uid": info.name,
            "creationTimestamp": job.created,
            "labels": {QUEUE_LABEL: info.queue},
            "annotations": _group_annotations(info, clock),
        },
        "spec": group_spec,
    }


def _group_annotations(info: JobInfo, clock: Clock) -> dict[str, str]:
    out = {}
    # KAI's min-runtime counts from the gang's start: its earliest task still on a node.
    started = [t.since for t in info.tasks if t.status.holds_capacity]
    if started:
        out[LAST_START] = precise(clock.at(min(started)))
    stale = _stale_since(info, clock)
    if stale is not None:
        out[STALE_SINCE] = precise(clock.at(stale))
    return out


def _stale_since(info: JobInfo, clock: Clock) -> float | None:
    """When the gang fell below its minimum, as the scenario runner counts it (the
    staleSince given, else the latest start of a task that is not active, else now)."""
    if info.stale_since is not None:
        return info.stale_since
    if not any(t.status.is_active for t in info.tasks) or not info_shortfall(info):
        return None
    inactive = [t.since for t in info.tasks if not t.status.is_active]
    return max(inactive) if inactive else clock.scenario_now


# ---------------------------------------------------------------- Pod


def _pod(
    job: _Job,
    task: TaskInfo,
    own: TaskSpec,
    raw_task: Mapping[str, Any],
    symbol: str | None,
    flying: bool,
    clock: Clock,
) -> Obj:
    # A bind in flight: KAI chose the node, its binder has not set spec.nodeName yet.
    node = task.node if not flying else None
    meta: Obj = {
        "name": task.name,
        "namespace": NAMESPACE,
        "uid": task.name,
        "creationTimestamp": job.created,
    }
    if task.status is TaskStatus.RELEASING:  # deleted now, with Kubernetes' default grace
        meta["deletionTimestamp"] = stamp(clock.now + 30)
        meta["deletionGracePeriodSeconds"] = 30
    meta["labels"] = _pod_labels(job, task, symbol if node else None)
    meta["annotations"] = _pod_annotations(job, task.request, bool(node))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": _pod_spec(job, task, own, raw_task, node),
        "status": _pod_status(task, node, clock),
    }


def _pod_labels(job: _Job, task: TaskInfo, symbol: str | None) -> dict[str, str]:
    labels = {QUEUE_LABEL: job.info.queue, JOB_LABEL: job.info.name}
    if task.subgroup:
        labels[SUBGROUP_LABEL] = task.subgroup
    if symbol is not None and task.node is not None:
        labels[GPU_GROUP_LABEL] = gpu_group_id(task.node, symbol)
    return labels


def _pod_annotations(job: _Job, request: Request, bound: bool) -> dict[str, str]:
    out = {"pod-group-name": job.info.name}
    if request.gpu_memory > 0:
        out["gpu-memory"] = str(_mib(request.gpu_memory, f"job {job.info.name!r}: gpuMemory"))
    elif request.is_fractional:
        out["gpu-fraction"] = str(request.gpu)
    if bound:  # KAI's binder records what it bound
        out["received-resource-type"] = "Fraction" if request.is_fractional else "Regular"
    return out


def _mib(amount: float, where: str) -> int:
    mib = float(amount) / _MIB
    if not mib.is_integer():
        raise ValueError(f"{where}: {amount:g} bytes is not whole MiB, the unit KAI counts GPU memory in")
    return int(mib)


def _pod_spec(job: _Job, task: TaskInfo, own: TaskSpec, raw_task: Mapping[str, Any], node: str | None) -> Obj:
    spec: Obj = {
        "schedulerName": SCHEDULER,
        "priorityClassName": class_name(job.spec.priority),
        "containers": [{"name": "main", "image": "scenario", "resources": _resources(task.request)}],
    }
    # A task's own nodeSelector, nodeAffinity or tolerations replace its job's, as a pod
    # has one of each.
    selector = job.spec.node_selector if own.node_selector is None else own.node_selector
    if selector:
        spec["nodeSelector"] = dict(selector)
    terms = raw_task.get("nodeAffinity")
    terms = job.raw.get("nodeAffinity") if terms is None else terms
    if terms is not None:
        required = {"nodeSelectorTerms": copy.deepcopy(terms)}
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    tolerations = raw_task.get("tolerations")
    tolerations = job.raw.get("tolerations") if tolerations is None else tolerations
    if tolerations:
        spec["tolerations"] = kubernetes_entries(tolerations)
    if node is not None:
        spec["nodeName"] = node
    return spec


def kubernetes_entries(entries: Sequence[Mapping[str, Any]]) -> list[Obj]:
    """Taints or tolerations as written, their values as text (YAML reads `value: 1` as a
    number, Kubernetes only takes strings)."""
    return [{k: _text(v) for k, v in entry.items()} for entry in entries]


def _text(value: object) -> object:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float) else value


def _resources(request: Request) -> Obj:
    """A container's resources; a GPU share asks for no nvidia.com/gpu (its annotation does)."""
    requests: dict[str, str] = {}
    if request.cpu > 0:
        milli = float(request.cpu) * 1000
        requests["cpu"] = f"{int(milli)}m" if milli.is_integer() else repr(request.cpu)
    if request.memory > 0:
        requests["memory"] = (
            str(int(request.memory)) if float(request.memory).is_integer() else repr(request.memory)
        )
    out: Obj = {"requests": requests}
    if request.gpu >= 1:
        requests["nvidia.com/gpu"] = str(int(request.gpu))
        out["limits"] = {"nvidia.com/gpu": str(int(request.gpu))}
    return out


def _pod_status(task: TaskInfo, node: str | None, clock: Clock) -> Obj:
    if task.status in (TaskStatus.SUCCEEDED, TaskStatus.FAILED):
        return {"phase": task.status.value}
    if node is None:  # pending, or bound in flight: the pod has not started
        return {"phase": "Pending"}
    return {"phase": "Running", "startTime": stamp(clock.at(task.since))}


# ---------------------------------------------------------------- BindRequest, reservation


def _bind_request(task: TaskInfo, symbol: str | None, nodes: Mapping[str, NodeInfo], clock: Clock) -> Obj:
    """As KAI's scheduler writes one (its cache's createBindRequest): named after the pod,
    owned by it, labelled with the node; still Pending, its binder not done."""
    assert task.node is not None  # a running task: the loader checked it has a node
    request = task.request
    spec: Obj = {"podName": task.name, "selectedNode": task.node}
    if symbol is not None:
        spec["selectedGPUGroups"] = [gpu_group_id(task.node, symbol)]
    spec["receivedResourceType"] = "Fraction" if request.is_fractional else "Regular"
    spec["receivedGPU"] = _received_gpu(request, nodes[task.node])
    return {
        "apiVersion": "scheduling.run.ai/v1alpha2",
        "kind": "BindRequest",
        "metadata": {
            "name": task.name,
            "namespace": NAMESPACE,
            "uid": f"bind-{task.name}",
            "creationTimestamp": stamp(clock.at(task.since)),
            "labels": {"selected-node": task.node},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": task.name, "uid": task.name}],
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def _received_gpu(request: Request, node: NodeInfo) -> Obj:
    # Go's omitempty drops a count of 0; the portion is KAI's "%.2f" of one device.
    if request.is_fractional:
        share = request.gpu if request.gpu > 0 else request.gpu_memory / node.gpu_memory
        return {"count": 1, "portion": f"{share:.2f}"}
    whole = int(request.gpu)
    return {"count": whole, "portion": "0.00"} if whole else {"portion": "0.00"}


def _reserve(out: dict[str, Obj], task: TaskInfo, symbol: str, clock: Clock) -> None:
    """The pod KAI's binder keeps on a shared device (a whole GPU, in its own namespace,
    labelled with the device's id), from the first share placed there."""
    assert task.node is not None
    group = gpu_group_id(task.node, symbol)
    if group in out:
        return
    one_gpu = {"nvidia.com/gpu": "1"}
    out[group] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"gpu-reservation-{task.node}-{group[:5]}",
            "namespace": RESERVATION_NAMESPACE,
            "uid": f"reservation-{group}",
            "creationTimestamp": stamp(clock.at(task.since)),
            "labels": {"app": RESERVATION_NAMESPACE, GPU_GROUP_LABEL: group},
        },
        "spec": {
            "schedulerName": "default-scheduler",  # the API server's default: KAI's binder names none
            "serviceAccountName": RESERVATION_NAMESPACE,
            "containers": [
                {
                    "name": "resource-reservation",
                    "image": "kai-resource-reservation",
                    "resources": {"requests": dict(one_gpu), "limits": dict(one_gpu)},
                }
            ],
            "nodeName": task.node,
        },
        "status": {"phase": "Running", "startTime": stamp(clock.at(task.since))},
    }
