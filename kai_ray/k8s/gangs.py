"""Kubernetes pods and their owners -> gangs, the way KAI Scheduler's podgrouper groups Ray.

Pure functions over plain dicts as the API server returns them as JSON: no client, no I/O.
The pods of one top owner (kai_ray.k8s.owners) form one gang, whose size (min_member)
comes from the owner's spec. `build_gangs` groups a whole list of pods; `gang_of` makes
one gang from its pods alone, which is what the ClusterSource patched by the watches'
deltas calls for a gang whose pods or owners changed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from kai_ray.config.priority import (
    PriorityClasses,
    ResolvedPriority,
    UnknownPriorityClassError,
    preemptible_at,
    read_preemptibility,
)
from kai_ray.control.affinity import node_affinity, read_terms
from kai_ray.control.gputypes import gang_gpu_types
from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL
from kai_ray.core.model.quantity import parse_run_time
from kai_ray.core.model.snapshot import NodeAffinity, NodeSelectorTerm, Request, TopologyConstraint
from kai_ray.k8s.owners import (
    Known,
    Lineage,
    Obj,
    Owners,
    as_count,
    describe,
    epoch,
    lineage_of,
    name_of,
    namespace_of,
    pod_finished,
    scheduled_by_us,
    section,
    spec_of,
)
from kai_ray.k8s.requests import pod_request, spec_request
from kai_ray.k8s.suspension import cannot_suspend

__all__ = [
    "Gang",
    "GangContext",
    "build_gangs",
    "gang_of",
    "pod_finished",
    "pod_request",
    "pod_role",
    "scheduled_by_us",
]


QUEUE_LABEL = "kai.scheduler/queue"
PRIORITY_LABEL = "ray.io/priority-class-name"
PRIORITY_CLASS_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
EXPECTED_RUNTIME = "kai-ray.io/expected-runtime"  # how long it is expected to run (a duration)
MAX_RUNTIME = "kai-ray.io/max-runtime"  # the most it may run: then it is stopped for good
BATCH_MIN_MEMBER = "kai.scheduler/batch-min-member"  # a batch Job's gang size, as KAI's podgrouper reads it
# Kinds a max runtime can stop for good (KubeRay makes a RayService's pods again, and a
# RayJob is stopped by suspending it, which needs spec.shutdownAfterJobFinishes).
STOPPABLE_KINDS = ("RayJob", "RayCluster", "Job", "Pod")
DEFAULT_PRIORITY_CLASS = "train"
K8S_JOB_MODE = "K8sJobMode"

# KubeRay's default submitter container (used when spec.submitterPodTemplate is not given).
_DEFAULT_SUBMITTER = Request(cpu=0.5, memory=200 * 2**20)
# A RayJob in one of these states is over: its submitter will not be created again.
_RAYJOB_DONE = frozenset({"Complete", "Failed"})
_HEAD, _WORKER, _SUBMITTER, _OTHER = 0, 1, 2, 3
_NO_LABELS: Mapping[str, str] = {}


@dataclass(slots=True)
class Gang:
    """The pods of one top owner, to be admitted together (min_member of them at least)."""

    id: str  # "<namespace>/<Kind>/<name>" of the top owner; a RayService's adds "/<raycluster>"
    namespace: str
    kind: str  # the top owner's kind: RayCluster, RayJob, RayService, Job or Pod
    name: str
    queue: str
    priority: int
    priority_class: str  # the class name used (given, even when it does not exist)
    preemptible: bool
    min_member: int  # tasks that must run together (the placeholder submitter included)
    pods: list[dict[str, Any]]  # live pods: head, worker groups by name, submitter, others
    subgroups: dict[str, list[str]]  # "head", each worker group, "submitter" -> pod names
    # Each subgroup's own minimum (KAI's PodGroup subGroups, as its podgrouper makes them
    # for a Ray cluster), summing to min_member; empty where the owner has no Ray cluster
    # spec to read them from (its min_member is then any pods).
    subgroup_min: dict[str, int]
    topology: TopologyConstraint | None
    node_selector: dict[str, str]  # the items every pod of the gang shares
    # Per pod name, what else it requires of a node: its required node affinity and the
    # nodeSelector items the others do not share (pods without any are absent).
    affinities: dict[str, NodeAffinity]
    created_at: float  # the top owner's creationTimestamp (its oldest pod's if unknown)
    submitter: Request | None = None  # room to hold for a RayJob submitter not yet created
    problem: str = ""  # non-empty: cannot be scheduled as written; names object, field, fix
    # Seconds of run time (annotations EXPECTED_RUNTIME, MAX_RUNTIME); None: not said.
    expected_runtime: float | None = None
    max_runtime: float | None = None
    # The GPU types its GPU pods accept (kai_ray.control.gputypes); whether it spans types.
    gpu_types: tuple[str, ...] = ()
    mixed_gpu_types: bool = False
    # Its namespace's labels: the tenant's, which a queue's tenantSelector reads.
    tenant_labels: Mapping[str, str] = field(default_factory=dict)


class _Found(NamedTuple):
    value: str
    where: str  # e.g. "label kai.scheduler/queue on RayJob ml/j1", for messages


# ---------------------------------------------------------------- gangs


@dataclass(slots=True)
class _Group:
    lineage: Lineage
    entries: list[tuple[tuple[int, str, float, str], dict[str, Any]]] = field(default_factory=list)
    owners: dict[tuple[str, str], Known] = field(default_factory=dict)

    def add(self, pod: Obj, lineage: Lineage) -> None:
        rank, group = _role(pod, lineage)
        self.entries.append(((rank, group, epoch(pod), name_of(pod)), dict(pod)))
        for owner in lineage.owners:
            self.owners.setdefault((owner.kind, owner.name), owner)

    @property
    def pods(self) -> list[dict[str, Any]]:
        return [pod for _, pod in sorted(self.entries, key=lambda e: e[0])]

    def owner_objects(self) -> list[Known]:
        """Known owners, top first, then the RayCluster, then the Job (for label look-ups)."""
        top = self.lineage.top
        order = {"RayCluster": 1, "Job": 2}
        rest = [o for o in self.owners.values() if (o.kind, o.name) != (top.kind, top.name)]
        first = [top] if top.obj is not None and top.kind != "Pod" else []
        return first + sorted(rest, key=lambda o: (order.get(o.kind, 3), o.name))

    def cluster(self) -> Obj | None:
        return next((o.obj for o in self.owners.values() if o.kind == "RayCluster"), None)


def _role(pod: Obj, lineage: Lineage) -> tuple[int, str]:
    if lineage.submitter:
        return _SUBMITTER, "submitter"
    labels = section(pod, "labels")
    node_type = labels.get("ray.io/node-type")
    if node_type == "head":
        return _HEAD, "head"
    if node_type == "worker":
        return _WORKER, str(labels.get("ray.io/group") or "worker")
    return _OTHER, ""


def _subgroups(group: _Group) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for (rank, name, _, pod_name), _pod in sorted(group.entries, key=lambda e: e[0]):
        if rank != _OTHER:  # a pod without a Ray role (a plain pod, a batch Job's) has no subgroup
            out.setdefault(name, []).append(pod_name)
    return out


def _cluster_subgroups(spec: Obj) -> dict[str, int]:
    """A Ray cluster's sub-gangs, as KAI's podgrouper makes them: "head" of 1, and each
    worker group (by name, as its pods' ray.io/group label has it) of its minReplicas (or
    replicas when 0 or unset) x numOfHosts. A group of none is left out (its pods, if any,
    are surplus)."""
    out = {"head": 1}
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend") is True:
            continue  # KubeRay creates no pods for a suspended group: none can join the gang
        replicas = as_count(group.get("minReplicas")) or as_count(group.get("replicas"))
        size = replicas * max(1, as_count(group.get("numOfHosts"), 1))
        if size:
            name = str(group.get("groupName") or "worker")
            out[name] = out.get(name, 0) + size
    return out


@dataclass(frozen=True, slots=True)
class GangContext:
    """What reading a gang needs beyond its pods and owners."""

    classes: PriorityClasses  # the cluster's PriorityClasses, kai-ray's defaults filled in
    default_queue: str
    submitter_elsewhere: Collection[str]  # gang ids whose submitter pod exists outside the gang
    gpu_type_label: str = GPU_PRODUCT_LABEL  # the node label naming a node's GPU type
    # Each namespace's labels (namespaces without any may be absent): its tenant labels,
    # and its default queue (NAMESPACE_QUEUE_LABEL) for work that names none.
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        priority_classes: Mapping[str, int],
        default_queue: str,
        submitter_elsewhere: Collection[str],
        gpu_type_label: str = GPU_PRODUCT_LABEL,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
    ) -> GangContext:
        classes = PriorityClasses.of_cluster(priority_classes)
        return cls(classes, default_queue, submitter_elsewhere, gpu_type_label, namespaces or {})

    def queue_of(self, namespace: str) -> str:
        """The queue of work that names none: its namespace's, else the operator's default."""
        return self.namespaces.get(namespace, {}).get(QUEUE_LABEL) or self.default_queue


def _submitter(group: _Group, ctx: GangContext, what: str) -> tuple[bool, Request | None]:
    """(the submitter counts in min_member, the Request to reserve for it if not yet created).

    KubeRay creates the submitter pod only once the cluster is ready: a gang that waited for
    it would never start, so the scheduler reserves its room beside the cluster instead.
    """
    top = group.lineage.top
    spec = spec_of(top.obj)
    if top.kind != "RayJob" or spec.get("submissionMode", K8S_JOB_MODE) != K8S_JOB_MODE:
        return False, None
    if any(key[0] == _SUBMITTER for key, _ in group.entries):
        return True, None
    done = ((top.obj or {}).get("status") or {}).get("jobDeploymentStatus") in _RAYJOB_DONE
    # A submitter that succeeded, or one another scheduler places, will not join this gang.
    if done or group.lineage.gang_id in ctx.submitter_elsewhere:
        return False, None
    template = spec.get("submitterPodTemplate")
    if not isinstance(template, Mapping):
        return True, _DEFAULT_SUBMITTER
    annotations = section(template, "annotations")
    return True, spec_request(spec_of(template), annotations, f"{what} spec.submitterPodTemplate")


def _gang_size(group: _Group, submitter: bool, live: int) -> tuple[int, dict[str, int]]:
    """(min_member, each subgroup's minimum: {} where no Ray cluster spec is known).
    A RayJob's submitter that counts is a subgroup of 1 beside its cluster's."""
    top = group.lineage.top
    spec = spec_of(top.obj)
    cluster: Obj | None = None
    if top.kind == "RayJob":
        if spec.get("clusterSelector"):
            return 1, {}  # runs on an existing cluster: only its submitter pod is its own
        inline = spec.get("rayClusterSpec")  # else the RayCluster the job made
        cluster = inline if isinstance(inline, Mapping) else _known_spec(group.cluster())
    elif top.kind == "RayService":
        cluster = _known_spec(group.cluster())
    elif top.kind == "RayCluster":
        # Without its spec the size is unknown: every pod present is part of the gang.
        cluster = _known_spec(top.obj)
        if cluster is None:
            return live, {}
    elif top.kind == "Job":
        return max(1, min(as_count(spec.get("parallelism"), 1), live)), {}
    else:
        return 1, {}
    submitter = submitter and top.kind == "RayJob"
    if cluster is None:  # a RayJob's or RayService's cluster not seen yet: its head, as before
        return 1 + int(submitter), {}
    subgroups = _cluster_subgroups(cluster)
    if submitter:
        subgroups["submitter"] = 1
    return sum(subgroups.values()), subgroups


def _batch_min_member(top: Known, what: str) -> tuple[int | None, str]:
    """A batch Job's annotation BATCH_MIN_MEMBER, as KAI's podgrouper reads it: the gang is
    that many pods, which wait until all of them exist (without it: its parallelism, or
    the pods there are). (None, problem) for a value that is not a positive integer."""
    value = section(top.obj, "annotations").get(BATCH_MIN_MEMBER) if top.kind == "Job" else None
    if value is None:
        return None, ""
    count = as_count(value)
    if str(value).strip().isdigit() and count >= 1:
        return count, ""
    return None, (
        f"{what}: annotation {BATCH_MIN_MEMBER} on {describe(top)} is {value!r}: "
        "use a whole number of pods, 1 or more, or remove the annotation"
    )


def _known_spec(obj: Obj | None) -> Obj | None:
    return spec_of(obj) if obj is not None else None


def _find(objs: Iterable[Known], part: str, key: str) -> _Found | None:
    for known in objs:
        value = section(known.obj, part).get(key)
        if isinstance(value, str) and value.strip():
            return _Found(value.strip(), f"{part[:-1]} {key} on {describe(known)}")
    return None


def _priority(
    objs: list[Known], owners: list[Known], pods: list[Known], ctx: GangContext, what: str
) -> tuple[str, ResolvedPriority, list[str]]:
    """(class name, value and preemptibility, problems): the class from the Ray label, the
    generic label, then the pod spec; preemptibility from its label, else the class's.
    Both read by config.priority's rules, as Ray's submissions are."""
    found = _find(owners, "labels", PRIORITY_LABEL) or _find([*owners, *pods], "labels", PRIORITY_CLASS_LABEL)
    if found is None:
        spec_class = next((p for p in pods if spec_of(p.obj).get("priorityClassName")), None)
        if spec_class is not None:
            name = str(spec_of(spec_class.obj)["priorityClassName"])
            found = _Found(name, f"spec.priorityClassName of {describe(spec_class)}")
    name = found.value if found else DEFAULT_PRIORITY_CLASS
    problems = []
    try:
        resolved = ctx.classes.resolve(name, numbers=False)
    except UnknownPriorityClassError as e:
        assert found is not None  # the default class is always known
        problems.append(f"{what} ({found.where}): {e}")
        resolved = ResolvedPriority(0, preemptible_at(0))
    said = _find(objs, "labels", PREEMPTIBILITY_LABEL)
    if said is not None:
        try:
            resolved = ResolvedPriority(resolved.value, read_preemptibility(said.value))
        except ValueError as e:
            problems.append(f"{what}: {said.where} {e}")
    return name, resolved, problems


def _topology(objs: list[Known], what: str) -> tuple[TopologyConstraint | None, str]:
    name = _find(objs, "annotations", TOPOLOGY)
    required = _find(objs, "annotations", TOPOLOGY_REQUIRED)
    preferred = _find(objs, "annotations", TOPOLOGY_PREFERRED)
    if name is None:
        placement = required or preferred
        if placement is None:
            return None, ""
        return None, (
            f"{what}: {placement.where} names a level but no annotation {TOPOLOGY} names the "
            f"topology: add {TOPOLOGY}: <Topology name> beside it"
        )
    constraint = TopologyConstraint(
        name.value, required.value if required else None, preferred.value if preferred else None
    )
    return constraint, ""


def _runtimes(
    objs: list[Known], top: Known, what: str
) -> tuple[tuple[float | None, float | None], list[str]]:
    """(expected run time, max runtime) from their annotations, and what is wrong with them."""
    values: list[float | None] = []
    problems = []
    for key in (EXPECTED_RUNTIME, MAX_RUNTIME):
        found = _find(objs, "annotations", key)
        seconds = None
        if found is not None:
            try:
                seconds = parse_run_time(found.value)
            except ValueError as e:
                problems.append(f"{what}: {found.where}: {e}; or remove the annotation")
        values.append(seconds)
    limit = values[1]
    if limit is not None:
        why = "" if top.kind in STOPPABLE_KINDS else f"a {top.kind} is made again by its controller"
        if top.kind == "RayJob" and top.obj is not None:
            why = cannot_suspend("RayJob", top.obj)
        if why:
            problems.append(
                f"{what}: annotation {MAX_RUNTIME} cannot be kept: {why}, so it cannot be stopped for good; "
                "remove the annotation"
            )
    return (values[0], limit), problems


def _shared_selector(pods: Sequence[Obj]) -> dict[str, str]:
    selectors = [dict(spec_of(p).get("nodeSelector") or {}) for p in pods]
    common = selectors[0] if selectors else {}
    for selector in selectors[1:]:
        common = {k: v for k, v in common.items() if selector.get(k) == v}
    return common


REQUIRED_AFFINITY = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _affinities(
    pods: Sequence[Obj], shared: Mapping[str, str], what: str
) -> tuple[dict[str, NodeAffinity], str]:
    """Each pod's own constraint beyond the shared nodeSelector, and the first problem
    ("" for none): a pod whose affinity Kubernetes' rules refuse, named with the field
    and the fix (the gang is then left out, as any gang with a problem: what it already
    holds stays bound and counted). Preferred (soft) affinity is not read."""
    out: dict[str, NodeAffinity] = {}
    for pod in pods:
        spec = spec_of(pod)
        extra = {k: str(v) for k, v in (spec.get("nodeSelector") or {}).items() if k not in shared}
        try:
            own = node_affinity(_required_terms(spec), extra)
        except ValueError as e:
            return out, f"{what}: pod {namespace_of(pod)}/{name_of(pod)}: {e}"
        if own is not None:
            out[name_of(pod)] = own
    return out, ""


def _required_terms(spec: Obj) -> tuple[NodeSelectorTerm, ...]:
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return ()
    terms = required.get("nodeSelectorTerms") if isinstance(required, Mapping) else None
    return read_terms(terms, f"{REQUIRED_AFFINITY}.nodeSelectorTerms")


def _request_problem(pods: Sequence[Obj]) -> str:
    """Why the first pod whose requests cannot be read is refused, or "" (the rest are alike)."""
    for pod in pods:
        try:
            pod_request(pod)
        except ValueError as e:
            return str(e)
    return ""


def _gang(group: _Group, ctx: GangContext) -> Gang:
    lineage, pods = group.lineage, group.pods
    top, namespace = lineage.top, namespace_of(pods[0])
    what = f"{top.kind} {namespace}/{top.name}"
    owners = group.owner_objects()
    pod_objs = [Known("Pod", name_of(p), p) for p in pods]
    problems = []
    try:
        counted, placeholder = _submitter(group, ctx, what)
    except ValueError as e:
        counted, placeholder = True, None
        problems.append(str(e))
    queue = _find([*owners, *pod_objs], "labels", QUEUE_LABEL)
    class_name, priority, priority_problems = _priority([*owners, *pod_objs], owners, pod_objs, ctx, what)
    topology, topology_problem = _topology([*owners, *pod_objs], what)
    (expected, limit), runtime_problems = _runtimes([*owners, *pod_objs], top, what)
    problems += runtime_problems
    request_problem = _request_problem(pods)
    selector = _shared_selector(pods)
    affinities, affinity_problem = _affinities(pods, selector, what)
    problems += [*priority_problems, topology_problem, affinity_problem]
    if request_problem:
        problems.append(f"{what}: {request_problem}")
    created = epoch(top.obj) if top.obj is not None else min(epoch(p) for p in pods)
    min_member, subgroup_min = _gang_size(group, counted, len(pods))
    override, override_problem = _batch_min_member(top, what)
    min_member = override or min_member
    problems.append(override_problem)
    gpu_types, mixed = gang_gpu_types(pods, ctx.gpu_type_label)
    return Gang(
        id=lineage.gang_id,
        namespace=namespace,
        kind=top.kind,
        name=top.name,
        queue=queue.value if queue else ctx.queue_of(namespace),
        priority=priority.value,
        priority_class=class_name,
        preemptible=priority.preemptible,
        min_member=min_member,
        pods=pods,
        subgroups=_subgroups(group),
        subgroup_min=subgroup_min,
        topology=topology,
        node_selector=selector,
        affinities=affinities,
        created_at=created,
        submitter=placeholder,
        problem="; ".join(p for p in problems if p),
        expected_runtime=expected,
        max_runtime=limit,
        gpu_types=gpu_types,
        mixed_gpu_types=mixed,
        tenant_labels=ctx.namespaces.get(namespace, _NO_LABELS),
    )


def build_gangs(
    pods: Iterable[Mapping[str, Any]],
    owners: Owners,
    priority_classes: Mapping[str, int],
    *,
    scheduler_names: Collection[str] = ("kai-ray", "kai-scheduler"),
    default_queue: str = "default-queue",
    gpu_type_label: str = GPU_PRODUCT_LABEL,
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> list[Gang]:
    """The gangs of the live pods that name one of `scheduler_names`, oldest first.

    `owners` is keyed by (kind, namespace, name); `priority_classes` maps the cluster's
    PriorityClass names to values (kai-ray's defaults fill in names it lacks). A gang that
    cannot be scheduled as written says why in Gang.problem; nothing here raises for it.
    """
    groups: dict[str, list[tuple[Obj, Lineage]]] = {}
    elsewhere: set[str] = set()
    for pod in pods:
        lineage = lineage_of(pod, owners)
        role = pod_role(pod, lineage, scheduler_names)
        if role == "ours":
            groups.setdefault(lineage.gang_id, []).append((pod, lineage))
        elif role == "submitter elsewhere":
            elsewhere.add(lineage.gang_id)
    ctx = GangContext.of(priority_classes, default_queue, frozenset(elsewhere), gpu_type_label, namespaces)
    gangs = [gang_of(members, ctx) for members in groups.values()]
    return sorted(gangs, key=lambda g: (g.created_at, g.id))


def pod_role(pod: Obj, lineage: Lineage, scheduler_names: Collection[str]) -> str:
    """ "ours" (a live pod of one of our gangs), "submitter elsewhere" (a RayJob's
    submitter that another scheduler places, or that succeeded: it will not join the
    gang), or "" (neither)."""
    live = not pod_finished(pod)
    if live and scheduled_by_us(pod, scheduler_names):
        return "ours"
    if lineage.submitter and (live or (pod.get("status") or {}).get("phase") == "Succeeded"):
        return "submitter elsewhere"
    return ""


def gang_of(members: Iterable[tuple[Obj, Lineage]], ctx: GangContext) -> Gang:
    """One gang from its live pods (each with its lineage; at least one)."""
    members = list(members)
    group = _Group(members[0][1])
    for pod, lineage in members:
        group.add(pod, lineage)
    return _gang(group, ctx)
