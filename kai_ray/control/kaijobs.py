"""KAI's PodGroups and their pods -> the core's jobs, as KAI's scheduler reads them: a
pod belongs to the PodGroup its `pod-group-name` annotation names; the PodGroup gives
the gang (minMember, or its subgroups' minimums), the queue, the priority class and the
preemptibility, and a topology constraint. Pods of another scheduler, and pods KAI would
not schedule (no PodGroup), hold their room on their node as use outside the core's jobs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray.config.priority import (
    PriorityClasses,
    ResolvedPriority,
    UnknownPriorityClassError,
    preemptible_at,
    read_preemptibility,
)
from kai_ray.control.kaiobjects import (
    FIX,
    KaiSnapshotError,
    Notes,
    as_list,
    as_map,
    in_node_pool,
    instant,
    key_of,
    object_name,
    section,
)
from kai_ray.control.kaipods import (
    POD_GROUP_ANNOTATION,
    Binding,
    PodContext,
    SkipJob,
    checked_pod,
    finished,
    pod_node,
    pod_selector,
    pod_task,
)
from kai_ray.core import JobInfo, NodeInfo, Topology, TopologyConstraint
from kai_ray.core.model.subgroups import info_shortfall

__all__ = ["JobContext", "KaiJobs", "read_jobs"]

Obj = Mapping[str, Any]
QUEUE_LABEL = "kai.scheduler/queue"
# Where KAI's GPU-sharing reservation pods live (before v0.6: runai-reservation): each holds
# a whole device for the pods sharing it, whose own shares the core accounts on that device.
RESERVATION_NAMESPACES = frozenset({"kai-resource-reservation", "runai-reservation"})
STALE_SINCE = "kai.scheduler/stale-podgroup-timestamp"  # when the gang fell below its minimum
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"  # a pending pod waits again from then
LAST_START = "kai.scheduler/last-start-timestamp"  # the tasks' own start times are read instead
_GROUP_ANNOTATIONS = frozenset({STALE_SINCE, LAST_EVICTION, LAST_START})
# PodGroup spec fields read below, or that change nothing in one session.
_GROUP_FIELDS = frozenset(
    {
        "minMember",
        "minSubGroup",
        "queue",
        "priorityClassName",
        "preemptibility",
        "topologyConstraint",
        "subGroups",
        "markUnschedulable",
        "schedulingBackoff",
    }
)


@dataclass(slots=True)
class JobContext:
    nodes: Mapping[str, NodeInfo]
    classes: PriorityClasses  # the snapshot's PriorityClasses over KAI's four defaults
    default_class: str | None  # the PriorityClass with globalDefault, if any
    topologies: Mapping[str, Topology]
    scheduler_name: str
    node_pool: tuple[str, str] | None
    now: float
    notes: Notes


@dataclass(slots=True)
class KaiJobs:
    jobs: list[JobInfo]
    outside: dict[str, list[Obj]] = field(default_factory=dict)  # node -> pods holding room there
    devices: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> KAI's device symbol -> index


def read_jobs(
    raw_pods: Sequence[Any], raw_groups: Sequence[Any], raw_binds: Sequence[Any], ctx: JobContext
) -> KaiJobs:
    pods = [checked_pod(p, i) for i, p in enumerate(raw_pods)]
    bindings = _bindings(raw_binds, {key_of(p) for p in pods}, ctx.notes)
    groups = _groups(raw_groups, ctx)
    out = KaiJobs(jobs=[])
    members = _members(pods, groups, bindings, ctx, out.outside)
    pod_ctx = PodContext(ctx.nodes, bindings, ctx.notes)
    for key, group in groups.items():
        try:
            job = _job(group, members.get(key, []), ctx, pod_ctx)
        except SkipJob as e:
            ctx.notes.add(f"{e}; the pod group is left out", "pod group", f"{key[0]}/{key[1]}")
            for pod in members.get(key, []):  # its pods still hold their room
                if (node := pod_node(pod, bindings)) in ctx.nodes and not finished(pod):
                    out.outside.setdefault(node, []).append(pod)
            continue
        if job is not None:
            out.jobs.append(job)
    out.jobs.sort(key=lambda j: (j.created_at, j.name))
    out.devices = pod_ctx.devices
    return out


def _members(
    pods: Sequence[Obj],
    groups: Mapping[tuple[str, str], Obj],
    bindings: Mapping[tuple[str, str], Binding],
    ctx: JobContext,
    outside: dict[str, list[Obj]],
) -> dict[tuple[str, str], list[Obj]]:
    """Each PodGroup's pods; every other live pod on a node goes to `outside` (its room)."""
    members: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for pod in pods:
        if key_of(pod)[0] in RESERVATION_NAMESPACES:
            continue
        group = _group_of(pod, groups, ctx)
        if group is not None:
            members[group].append(pod)
        elif (node := pod_node(pod, bindings)) and not finished(pod):
            outside.setdefault(node, []).append(pod)
    return members


def _bindings(raw: Sequence[Any], pods: set[tuple[str, str]], notes: Notes) -> dict[tuple[str, str], Binding]:
    """BindRequests in flight by their pod: KAI's choice, not yet carried out by its binder."""
    out: dict[tuple[str, str], Binding] = {}
    for i, obj in enumerate(raw):
        where = f"rawObjects.bindRequests[{i}]"
        name = object_name(obj, where)
        spec = as_map(as_map(obj, where).get("spec"), f"bind request {name}: spec")
        namespace = key_of(obj)[0]
        pod, node = spec.get("podName"), spec.get("selectedNode")
        if not pod or not node:
            raise KaiSnapshotError(
                f"bind request {namespace}/{name}: spec.podName and spec.selectedNode: missing; {FIX}"
            )
        phase = as_map(obj.get("status"), f"bind request {name}: status").get("phase")
        if phase == "Failed":
            notes.add("failed: its pod is taken as pending", "bind request", f"{namespace}/{name}")
            continue
        if (namespace, str(pod)) not in pods:
            notes.add(
                f"its pod {pod!r} is not in the snapshot; not read", "bind request", f"{namespace}/{name}"
            )
            continue
        groups = tuple(
            str(g)
            for g in as_list(spec.get("selectedGPUGroups"), f"bind request {name}: spec.selectedGPUGroups")
        )
        meta = as_map(obj.get("metadata"), f"bind request {name}: metadata")
        made = instant(
            meta.get("creationTimestamp"), f"bind request {namespace}/{name}: metadata.creationTimestamp"
        )
        out[(namespace, str(pod))] = Binding(str(node), groups, made)
    return out


def _groups(raw: Sequence[Any], ctx: JobContext) -> dict[tuple[str, str], Obj]:
    """The PodGroups KAI schedules here (those of its node pool, when partitioned)."""
    out: dict[tuple[str, str], Obj] = {}
    for i, obj in enumerate(raw):
        object_name(obj, f"rawObjects.podGroups[{i}]")
        key = key_of(obj)
        if key in out:
            raise KaiSnapshotError(f"pod group {key[0]}/{key[1]}: listed twice; {FIX}")
        if in_node_pool(section(obj, "labels", f"pod group {key[1]}"), ctx.node_pool):
            out[key] = obj
    return out


def _group_of(pod: Obj, groups: Mapping[tuple[str, str], Obj], ctx: JobContext) -> tuple[str, str] | None:
    """The PodGroup a pod of KAI's belongs to; None (with a warning why) for any other pod."""
    if pod["spec"].get("schedulerName") != ctx.scheduler_name:
        return None  # another scheduler's: its room is taken, nothing more
    namespace, name = key_of(pod)
    group = section(pod, "annotations", f"pod {name}").get(POD_GROUP_ANNOTATION)
    if not group:
        ctx.notes.add(
            f"no annotation {POD_GROUP_ANNOTATION}: KAI schedules a pod only through its PodGroup "
            "(its podgrouper adds it); left out, its room counted as taken",
            "pod",
            f"{namespace}/{name}",
        )
        return None
    if (namespace, str(group)) not in groups:
        where = "outside the node pool" if ctx.node_pool else "not in the snapshot"
        ctx.notes.add(f"its PodGroup {group!r} is {where}; left out", "pod", f"{namespace}/{name}")
        return None
    return namespace, str(group)


# ---------------------------------------------------------------- one PodGroup


def _job(group: Obj, pods: Sequence[Obj], ctx: JobContext, pod_ctx: PodContext) -> JobInfo | None:
    namespace, name = key_of(group)
    what = f"pod group {namespace}/{name}"
    spec = as_map(group.get("spec"), f"{what}: spec")
    _check_group_fields(group, spec, what, ctx.notes)
    if not pods:
        ctx.notes.add("no pods: nothing to schedule", "pod group", f"{namespace}/{name}")
        return None
    subgroups = _subgroups(spec, what, ctx.notes)
    annotations = section(group, "annotations", what)
    evicted = instant(annotations.get(LAST_EVICTION), f"{what}: annotation {LAST_EVICTION}") or 0.0
    shared = _shared_selector(pods)
    tasks = [
        t for t in (pod_task(p, bool(subgroups), evicted, shared, pod_ctx) for p in pods) if t is not None
    ]
    if not tasks:
        return None
    priority = _priority(spec, pods, what, ctx)
    created = instant(
        as_map(group.get("metadata"), what).get("creationTimestamp"), f"{what}: metadata.creationTimestamp"
    )
    job = JobInfo(
        name=f"{namespace}/{name}",
        queue=_queue(group, spec, what, ctx.notes),
        tasks=tasks,
        priority=priority.value,
        preemptible=priority.preemptible,
        min_member=_min_member(spec, subgroups, what, ctx.notes),
        created_at=created if created is not None else min(t.since for t in tasks),
        topology=_topology(spec, what, ctx),
        node_selector=shared,
        subgroups=subgroups,
    )
    job.stale_since = _stale_since(job, annotations, what, ctx.now)
    return job


def _check_group_fields(group: Obj, spec: Obj, what: str, notes: Notes) -> None:
    for key in spec:
        if key not in _GROUP_FIELDS:
            notes.add(
                f"spec.{key} is not a PodGroup field kai-ray reads", "pod group", what[len("pod group ") :]
            )
    for key in section(group, "annotations", what):
        if key.startswith("kai.scheduler/") and key not in _GROUP_ANNOTATIONS:
            notes.add(f"annotation {key} is not read", "pod group", what[len("pod group ") :])


def _queue(group: Obj, spec: Obj, what: str, notes: Notes) -> str:
    queue = spec.get("queue") or section(group, "labels", what).get(QUEUE_LABEL)
    if not queue:
        notes.add(
            f"no queue (spec.queue, or the label {QUEUE_LABEL}): KAI does not schedule it; it "
            "waits as invalid",
            "pod group",
            what[len("pod group ") :],
        )
        return ""
    return str(queue)


def _priority(spec: Obj, pods: Sequence[Obj], what: str, ctx: JobContext) -> ResolvedPriority:
    """The PodGroup's class (else its pods', else the cluster's global default; with none,
    priority 0, as Kubernetes and KAI have it), and its preemptibility when it says one."""
    name = spec.get("priorityClassName") or next(
        (p["spec"].get("priorityClassName") for p in pods if p["spec"].get("priorityClassName")), None
    )
    name = name or ctx.default_class
    resolved = ResolvedPriority(0, preemptible_at(0))
    if name:
        try:
            resolved = ctx.classes.resolve(str(name), numbers=False)
        except UnknownPriorityClassError as e:
            ctx.notes.add(
                f"spec.priorityClassName: {e}; taken as priority 0", "pod group", what[len("pod group ") :]
            )
    said = spec.get("preemptibility")
    if said:
        try:
            return ResolvedPriority(resolved.value, read_preemptibility(str(said)))
        except ValueError as e:
            raise KaiSnapshotError(f"{what}: spec.preemptibility {e}; {FIX}") from None
    return resolved


def _subgroups(spec: Obj, what: str, notes: Notes) -> dict[str, int]:
    """Leaf subgroups -> their minMember. KAI's subgroups may nest (parent, minSubGroup);
    kai-ray's are one level: the leaves are read, the nesting is warned about."""
    raw = [
        as_map(s, f"{what}: spec.subGroups[{i}]")
        for i, s in enumerate(as_list(spec.get("subGroups"), f"{what}: spec.subGroups"))
    ]
    parents = {str(s["parent"]).lower() for s in raw if s.get("parent")}
    short = what[len("pod group ") :]
    if parents or spec.get("minSubGroup") is not None:
        notes.add(
            "nested subgroups (parent, minSubGroup): only the leaf subgroups' minimums are followed",
            "pod group",
            short,
        )
    out: dict[str, int] = {}
    for i, sub in enumerate(raw):
        name = sub.get("name")
        if not isinstance(name, str) or not name:
            raise KaiSnapshotError(f"{what}: spec.subGroups[{i}].name: missing; {FIX}")
        if name.lower() in parents:
            continue
        least = sub.get("minMember")
        if isinstance(least, bool) or not isinstance(least, int) or least < 0:
            raise KaiSnapshotError(
                f"{what}: spec.subGroups[{i}].minMember: {least!r} is not a count of 0 or more; {FIX}"
            )
        if sub.get("topologyConstraint"):
            notes.add(f"subgroup {name!r}: its own topologyConstraint is not followed", "pod group", short)
        out[name] = least
    return out


def _min_member(spec: Obj, subgroups: Mapping[str, int], what: str, notes: Notes) -> int:
    given = spec.get("minMember")
    short = what[len("pod group ") :]
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 0):
        raise KaiSnapshotError(f"{what}: spec.minMember: {given!r} is not a count of 0 or more; {FIX}")
    if subgroups:
        total = sum(subgroups.values())
        if given is not None and given != total:
            notes.add(
                f"spec.minMember {given} is not its subgroups' sum ({total}); the subgroups are followed",
                "pod group",
                short,
            )
        return total
    if given is None:
        notes.add("spec.minMember is not given: taken as 1", "pod group", short)
        return 1
    return int(given)


def _topology(spec: Obj, what: str, ctx: JobContext) -> TopologyConstraint | None:
    raw = as_map(spec.get("topologyConstraint"), f"{what}: spec.topologyConstraint")
    name = raw.get("topology")
    required, preferred = raw.get("requiredTopologyLevel") or None, raw.get("preferredTopologyLevel") or None
    short = what[len("pod group ") :]
    if not name:
        if required or preferred:
            ctx.notes.add(
                "spec.topologyConstraint names levels but no topology; not followed", "pod group", short
            )
        return None
    topology = ctx.topologies.get(str(name))
    if topology is None:
        # KAI's topology plugin refuses such a job ("Requested topology ... does not
        # exist"): it waits (read_kai_snapshot lists the name with no levels).
        ctx.notes.add(
            f"topology {name!r} is not among the snapshot's topologies; the job waits, as in KAI",
            "pod group",
            short,
        )
    # Levels kept as named: one the topology does not list (hostname too) makes the job
    # wait, as KAI's topology plugin refuses it (Placer.refused_topology says why).
    return TopologyConstraint(str(name), required, preferred)


def _shared_selector(pods: Sequence[Obj]) -> dict[str, str]:
    """The nodeSelector items every pod of the group shares: the job's; the rest is each task's."""
    selectors = [pod_selector(p) for p in pods]
    common = selectors[0] if selectors else {}
    for selector in selectors[1:]:
        common = {k: v for k, v in common.items() if selector.get(k) == v}
    return common


def _stale_since(job: JobInfo, annotations: Obj, what: str, now: float) -> float | None:
    """KAI's record of when the gang fell below its minimum; for a gang below it without
    one, now: KAI records the time in the session that finds it (so it is not evicted yet)."""
    recorded = instant(annotations.get(STALE_SINCE), f"{what}: annotation {STALE_SINCE}")
    if recorded is not None:
        return recorded
    active = any(t.status.is_active for t in job.tasks)
    return now if active and info_shortfall(job) else None
