"""The cluster as the core sees it, from the informers' objects: pure, no I/O.

Nodes become NodeInfo (allocatable; cordoned, tainted or not Ready nodes take no new
pods; what other schedulers' pods request is use outside kai-ray). Our gangs become the
core's jobs, one task per pod: a bound pod runs on its node, a terminating one releases,
an unbound one is pending. A RayJob in K8sJobMode has one more task until its submitter
pod exists: the room it will need, held with its cluster (see gangs.Gang.submitter).

The functions here describe one node, one gang, one node's outside use: the ClusterSource
(kai_ray.k8s.source) calls them for what changed. `build_world` calls them for
everything: the full rebuild, the reference the patched world is checked against.
"""

from __future__ import annotations

import calendar
import dataclasses
import functools
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL, GPU_RESOURCE, node_info, outside_use
from kai_ray.core import ClusterSnapshot, JobInfo, NodeAffinity, NodeInfo, QueueInfo, TaskInfo, TaskStatus
from kai_ray.k8s.gangs import Gang, pod_finished, scheduled_by_us
from kai_ray.k8s.requests import pod_request
from kai_ray.k8s.sharing import GPU_GROUP_ANNOTATION
from kai_ray.k8s.taints import Profile, Taint, blocking_taints, profile_label, tolerates, tolerations_of

__all__ = [
    "GPU_GROUP_ANNOTATION",
    "GPU_RESOURCE",
    "SUBMITTER_TASK",
    "World",
    "build_world",
    "gang_job",
    "gang_profile",
    "node_info",
    "outside_node",
    "outside_use",
    "tolerated_labels",
]

SUBMITTER_TASK = "~submitter"  # the task standing for a RayJob's submitter before its pod exists


@dataclass(slots=True)
class World:
    snapshot: ClusterSnapshot
    gangs: dict[str, Gang]  # job name (= gang id) -> gang
    pods: dict[tuple[str, str], dict[str, Any]]  # (job, task) -> pod; the submitter task has none
    problems: dict[str, Gang] = field(default_factory=dict)  # gangs that cannot be scheduled as written


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
    gpu_type_label: str = GPU_PRODUCT_LABEL,
) -> World:
    """`assumed`: pod uid -> node for bindings sent but not seen yet in the pods' cache;
    `placeholders`: gang id -> node where its submitter's room is held; `idle_holders`:
    pods of ours that hold capacity for no task of the core (a GPU reservation whose
    sharing pods are gone), counted as use outside until they are deleted;
    `gpu_type_label`: the node label naming a node's GPU type."""
    names = frozenset(scheduler_names)
    gangs = list(gangs)
    usable = [g for g in gangs if not g.problem]
    problems = {g.id: g for g in gangs if g.problem}
    idle_holders = list(idle_holders)
    counted = {p["metadata"].get("uid") for g in problems.values() for p in g.pods}
    counted |= {p["metadata"].get("uid") for p in idle_holders}
    on_node: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for pod in [*pods, *idle_holders]:
        where = outside_node(pod, names, counted, assumed)
        if where is not None:
            on_node[where].append(pod)
    nodes = list(nodes)
    taints = [blocking_taints(n) for n in nodes]
    profiles = dict(gang_profile(g) for g in usable) if any(taints) else {}
    infos = [
        tolerated_labels(
            node_info(n, outside_use(on_node.get(n["metadata"]["name"], ())), gpu_type_label), t, profiles
        )
        for n, t in zip(nodes, taints, strict=True)
    ]
    jobs: list[JobInfo] = []
    task_pods: dict[tuple[str, str], dict[str, Any]] = {}
    for gang in usable:
        jobs.append(gang_job(gang, assumed, placeholders, tolerating=bool(profiles)))
        for pod in gang.pods:
            task_pods[(gang.id, pod["metadata"]["name"])] = dict(pod)
    snapshot = ClusterSnapshot(nodes=infos, queues=queues, jobs=jobs)
    return World(snapshot=snapshot, gangs={g.id: g for g in usable}, pods=task_pods, problems=problems)


def gang_profile(gang: Gang) -> tuple[str, Profile]:
    """The label standing for the gang's pods' tolerations, and those tolerations."""
    profile = tuple(tolerations_of(p) for p in gang.pods) or (frozenset(),)
    return profile_label(profile), profile


def tolerated_labels(info: NodeInfo, taints: tuple[Taint, ...], profiles: Mapping[str, Profile]) -> NodeInfo:
    """The node with the label of each tolerations profile that tolerates all its taints
    (see kai_ray.k8s.taints); as it is when no profile is given (no node is tainted)."""
    extra = {label: "true" for label, profile in profiles.items() if tolerates(profile, taints)}
    return dataclasses.replace(info, labels={**info.labels, **extra}) if extra else info


def gang_job(
    gang: Gang, assumed: Mapping[str, str], placeholders: Mapping[str, str], *, tolerating: bool
) -> JobInfo:
    """The gang as the core's job. `tolerating`: some node is tainted, so the job's node
    selector names its tolerations profile."""
    # Each pod in its subgroup (head, its worker group, submitter), read where the gang
    # has subgroups: a pod of none (no Ray role) is surplus there.
    role = {pod: name for name, pods in gang.subgroups.items() for pod in pods} if gang.subgroup_min else {}
    tasks = [_task(pod, assumed, role.get(pod["metadata"]["name"], ""), gang.affinities) for pod in gang.pods]
    if gang.submitter is not None:
        node = placeholders.get(gang.id)
        status = TaskStatus.RUNNING if node else TaskStatus.PENDING
        sub = "submitter" if gang.subgroup_min else ""
        tasks.append(
            TaskInfo(SUBMITTER_TASK, status, gang.submitter, node=node, since=gang.created_at, subgroup=sub)
        )
    selector = dict(gang.node_selector)
    if tolerating:
        selector[gang_profile(gang)[0]] = "true"
    return JobInfo(
        name=gang.id,
        queue=gang.queue,
        tasks=tasks,
        priority=gang.priority,
        preemptible=gang.preemptible,
        min_member=gang.min_member,
        created_at=gang.created_at,
        topology=gang.topology,
        node_selector=selector,
        subgroups=gang.subgroup_min,
        expected_runtime=gang.expected_runtime,
        max_runtime=gang.max_runtime,
        gpu_types=gang.gpu_types,
        mixed_gpu_types=gang.mixed_gpu_types,
        tenant=gang.namespace,  # on Kubernetes a tenant is a namespace (docs/tenants.md)
        tenant_labels=gang.tenant_labels,
    )


def _task(
    pod: Mapping[str, Any], assumed: Mapping[str, str], subgroup: str, affinities: Mapping[str, NodeAffinity]
) -> TaskInfo:
    meta, spec = pod["metadata"], pod.get("spec", {})
    request = pod_request(pod)
    node = spec.get("nodeName") or assumed.get(meta.get("uid", ""))
    group = (meta.get("annotations") or {}).get(GPU_GROUP_ANNOTATION)
    gpu_group = int(group) if group is not None and request.is_fractional else None
    own = affinities.get(meta["name"])
    if not node:
        since = timestamp(meta.get("creationTimestamp"))
        return TaskInfo(
            meta["name"], TaskStatus.PENDING, request, since=since, subgroup=subgroup, node_affinity=own
        )
    status = TaskStatus.RELEASING if meta.get("deletionTimestamp") else TaskStatus.RUNNING
    return TaskInfo(
        meta["name"],
        status,
        request,
        node=node,
        gpu_group=gpu_group,
        since=_started(pod),
        subgroup=subgroup,
        node_affinity=own,
    )


def _started(pod: Mapping[str, Any]) -> float:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return timestamp(cond.get("lastTransitionTime"))
    return timestamp(pod.get("status", {}).get("startTime") or pod["metadata"].get("creationTimestamp"))


def outside_node(
    pod: Mapping[str, Any], names: Collection[str], counted: Collection[Any], assumed: Mapping[str, str]
) -> str | None:
    """The node where the pod holds capacity that is not one of the core's tasks (another
    scheduler's pod; one of ours in `counted`, uids: a gang left out of the cycle for a
    problem, which still runs, or a reservation holding a device for no sharing pod), or
    None."""
    node = pod.get("spec", {}).get("nodeName") or assumed.get(pod["metadata"].get("uid", ""))
    if not node or pod_finished(pod):
        return None
    if scheduled_by_us(pod, names) and pod["metadata"].get("uid") not in counted:
        return None
    return str(node)


def timestamp(text: str | None) -> float:
    """An RFC 3339 timestamp of the API server (UTC, whole seconds) as epoch seconds."""
    if not text:
        return time.time()
    return _seconds(text[:19])


@functools.lru_cache(maxsize=4096)
def _seconds(text: str) -> float:
    # Pods made together share their second: a burst of them parses a handful of times.
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%S")))
