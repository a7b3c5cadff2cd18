"""Kubernetes pods and their owners -> gangs, the way KAI Scheduler's podgrouper groups Ray.

Pure functions over plain dicts as the API server returns them as JSON: no client, no I/O.
A pod's controller ownerReference is followed up through the owner objects given
(Pod -> RayCluster -> RayJob | RayService, Pod -> Job -> RayJob) to its top owner; the
pods of one top owner form one gang, whose size (min_member) comes from the owner's spec.

List items from the API server carry no `kind`, so an object's kind always travels beside
it (`_Known`) rather than being read from the object.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

from kai_ray.config.priority import DEFAULT_PRIORITY_CLASSES, NON_PREEMPTIBLE_FROM, preemptible_at
from kai_ray.core.model import Request, TopologyConstraint
from kai_ray.k8s.requests import GPU_FRACTION, GPU_FRACTION_DEVICES, GPU_MEMORY, spec_request

__all__ = ["Gang", "build_gangs", "pod_finished", "pod_request", "scheduled_by_us"]

Obj = Mapping[str, Any]

QUEUE_LABEL = "kai.scheduler/queue"
PRIORITY_LABEL = "ray.io/priority-class-name"
PRIORITY_CLASS_LABEL = "priorityClassName"
PREEMPTIBILITY_LABEL = "kai.scheduler/preemptibility"
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
DEFAULT_PRIORITY_CLASS = "train"
K8S_JOB_MODE = "K8sJobMode"

# The owner kinds followed, with the API group each must come from: a CRD of another group
# that happens to be called "Job" is not a batch Job.
_GROUPS = {"RayCluster": "ray.io", "RayJob": "ray.io", "RayService": "ray.io", "Job": "batch"}
_JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
_MAX_DEPTH = 4  # Pod -> Job/RayCluster -> RayJob/RayService is 2; the cap guards against cycles
# KubeRay's default submitter container (used when spec.submitterPodTemplate is not given).
_DEFAULT_SUBMITTER = Request(cpu=0.5, memory=200 * 2**20)
# A RayJob in one of these states is over: its submitter will not be created again.
_RAYJOB_DONE = frozenset({"Complete", "Failed"})
_HEAD, _WORKER, _SUBMITTER, _OTHER = 0, 1, 2, 3


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
    topology: TopologyConstraint | None
    node_selector: dict[str, str]  # the items every pod of the gang shares
    created_at: float  # the top owner's creationTimestamp (its oldest pod's if unknown)
    submitter: Request | None = None  # room to hold for a RayJob submitter not yet created
    problem: str = ""  # non-empty: cannot be scheduled as written; names object, field, fix


class _Known(NamedTuple):
    kind: str
    name: str
    obj: Obj | None  # None: named by a reference, not in the owners given


class _Found(NamedTuple):
    value: str
    where: str  # e.g. "label kai.scheduler/queue on RayJob ml/j1", for messages


# ---------------------------------------------------------------- small readers


def _meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def _spec(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def _section(obj: Obj | None, section: str) -> Obj:
    return _meta(obj).get(section) or {}


def _namespace(obj: Obj) -> str:
    return str(_meta(obj).get("namespace") or "default")


def _name(obj: Obj) -> str:
    return str(_meta(obj).get("name") or "")


def _describe(known: _Known) -> str:
    return f"{known.kind} {_namespace(known.obj or {})}/{known.name}"


def _epoch(obj: Obj | None) -> float:
    """creationTimestamp ("2026-11-23T08:00:00Z") as epoch seconds; 0 when absent."""
    value = _meta(obj).get("creationTimestamp")
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        moment = datetime.fromisoformat(value)  # Python 3.11 reads the trailing "Z"
    except ValueError:
        return 0.0
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def _int(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return default
    try:
        return max(0, int(value))
    except ValueError:
        return default


def scheduled_by_us(pod: Mapping[str, Any], scheduler_names: Collection[str]) -> bool:
    return _spec(pod).get("schedulerName") in scheduler_names


def pod_finished(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


# A pod's resources cannot change once it exists, so its request is read once per pod
# (and per value of the annotations that make it a GPU share), not once per cycle.
_REQUESTS: dict[tuple[str, str, str, str], Request] = {}
_REQUESTS_MAX = 200_000


def pod_request(pod: Mapping[str, Any]) -> Request:
    """What the pod asks for; ValueError (naming the pod) for requests that cannot be read."""
    annotations = _section(pod, "annotations")
    uid = str(_meta(pod).get("uid") or "")
    key = (
        uid,
        str(annotations.get(GPU_FRACTION)),
        str(annotations.get(GPU_MEMORY)),
        str(annotations.get(GPU_FRACTION_DEVICES)),
    )
    if uid and key in _REQUESTS:
        return _REQUESTS[key]
    request = spec_request(_spec(pod), annotations, f"pod {_namespace(pod)}/{_name(pod)}")
    if uid:
        if len(_REQUESTS) >= _REQUESTS_MAX:
            _REQUESTS.clear()
        _REQUESTS[key] = request
    return request


# ---------------------------------------------------------------- owners


def _reference(ref: Obj) -> tuple[str, str] | None:
    """(kind, name) of an owner reference to a kind this module follows, else None."""
    kind, name, api = ref.get("kind"), ref.get("name"), str(ref.get("apiVersion") or "")
    if kind not in _GROUPS or not isinstance(name, str):
        return None
    if api and api.rpartition("/")[0] != _GROUPS[kind]:
        return None
    return kind, name


def _controller(obj: Obj) -> Obj | None:
    refs = [r for r in _meta(obj).get("ownerReferences") or [] if isinstance(r, Mapping)]
    return next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)


def _parent(obj: Obj) -> tuple[str, str] | None:
    ref = _controller(obj)
    return _reference(ref) if ref is not None else None


def _first_owner(pod: Obj, owners: Mapping[tuple[str, str, str], Obj]) -> tuple[str, str] | None:
    if _meta(pod).get("ownerReferences"):
        return _parent(pod)
    # No ownerReference (e.g. created before its owner was set): the labels KubeRay and the
    # Job controller put on their pods still say whose it is.
    labels, namespace = _section(pod, "labels"), _namespace(pod)
    for key in _JOB_NAME_LABELS:
        job = labels.get(key)
        if job and ("Job", namespace, job) in owners:
            return "Job", job
    cluster = labels.get("ray.io/cluster")
    return ("RayCluster", cluster) if cluster else None


def _chain(pod: Obj, owners: Mapping[tuple[str, str, str], Obj]) -> list[_Known]:
    """The pod's owners, nearest first, up to the first one not in `owners`."""
    namespace, chain = _namespace(pod), list[_Known]()
    ref = _first_owner(pod, owners)
    while ref is not None and len(chain) < _MAX_DEPTH:
        obj = owners.get((ref[0], namespace, ref[1]))
        chain.append(_Known(ref[0], ref[1], obj))
        if obj is None:
            break
        ref = _parent(obj)
    return chain


@dataclass(frozen=True, slots=True)
class _Lineage:
    gang_id: str
    top: _Known  # kind "Pod" (the pod itself) for a gang of one
    owners: tuple[_Known, ...]  # the owner objects known, nearest first
    submitter: bool  # the pod of a Job that a RayJob owns


def _lineage(pod: Obj, owners: Mapping[tuple[str, str, str], Obj]) -> _Lineage:
    namespace, chain = _namespace(pod), _chain(pod, owners)
    known = tuple(k for k in chain if k.obj is not None)
    if known:
        top = known[-1]
    elif chain and chain[0].kind in ("Job", "RayCluster"):
        top = chain[0]  # the owner is not (yet) known: its pods still go together
    else:
        top = _Known("Pod", _name(pod), pod)
    gang_id = f"{namespace}/{top.kind}/{top.name}"
    if top.kind == "RayService" and len(known) > 1:
        # A RayService may run two clusters at once (an upgrade): each is a gang of its own.
        gang_id += f"/{known[-2].name}"
    submitter = top.kind == "RayJob" and chain[0].kind == "Job"
    return _Lineage(gang_id, top, known, submitter)


# ---------------------------------------------------------------- gangs


@dataclass(slots=True)
class _Group:
    lineage: _Lineage
    entries: list[tuple[tuple[int, str, float, str], dict[str, Any]]] = field(default_factory=list)
    owners: dict[tuple[str, str], _Known] = field(default_factory=dict)

    def add(self, pod: Obj, lineage: _Lineage) -> None:
        rank, group = _role(pod, lineage)
        self.entries.append(((rank, group, _epoch(pod), _name(pod)), dict(pod)))
        for owner in lineage.owners:
            self.owners.setdefault((owner.kind, owner.name), owner)

    @property
    def pods(self) -> list[dict[str, Any]]:
        return [pod for _, pod in sorted(self.entries, key=lambda e: e[0])]

    def owner_objects(self) -> list[_Known]:
        """Known owners, top first, then the RayCluster, then the Job (for label look-ups)."""
        top = self.lineage.top
        order = {"RayCluster": 1, "Job": 2}
        rest = [o for o in self.owners.values() if (o.kind, o.name) != (top.kind, top.name)]
        first = [top] if top.obj is not None and top.kind != "Pod" else []
        return first + sorted(rest, key=lambda o: (order.get(o.kind, 3), o.name))

    def cluster(self) -> Obj | None:
        return next((o.obj for o in self.owners.values() if o.kind == "RayCluster"), None)


def _role(pod: Obj, lineage: _Lineage) -> tuple[int, str]:
    if lineage.submitter:
        return _SUBMITTER, "submitter"
    labels = _section(pod, "labels")
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


def _cluster_size(spec: Obj) -> int:
    """1 (head) + each worker group's minReplicas (or replicas when 0 or unset) x numOfHosts."""
    total = 1
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend") is True:
            continue  # KubeRay creates no pods for a suspended group: none can join the gang
        replicas = _int(group.get("minReplicas")) or _int(group.get("replicas"))
        total += replicas * max(1, _int(group.get("numOfHosts"), 1))
    return total


@dataclass(frozen=True, slots=True)
class _Context:
    classes: Mapping[str, int]
    default_queue: str
    submitter_elsewhere: frozenset[str]  # gang ids whose submitter pod exists outside the gang


def _submitter(group: _Group, ctx: _Context, what: str) -> tuple[bool, Request | None]:
    """(the submitter counts in min_member, the Request to reserve for it if not yet created).

    KubeRay creates the submitter pod only once the cluster is ready: a gang that waited for
    it would never start, so the scheduler reserves its room beside the cluster instead.
    """
    top = group.lineage.top
    spec = _spec(top.obj)
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
    annotations = _section(template, "annotations")
    return True, spec_request(_spec(template), annotations, f"{what} spec.submitterPodTemplate")


def _min_member(group: _Group, submitter: bool, live: int) -> int:
    top = group.lineage.top
    spec = _spec(top.obj)
    if top.kind == "RayJob":
        if spec.get("clusterSelector"):
            return 1  # runs on an existing cluster: only its submitter pod is its own
        cluster = spec.get("rayClusterSpec")
        if not isinstance(cluster, Mapping):  # none inline: the RayCluster the job made
            cluster = _spec(group.cluster())
        return _cluster_size(cluster) + int(submitter)
    if top.kind == "RayService":
        return _cluster_size(_spec(group.cluster()))
    if top.kind == "RayCluster":
        # Without its spec the size is unknown: every pod present is part of the gang.
        return _cluster_size(spec) if top.obj is not None else live
    if top.kind == "Job":
        return max(1, min(_int(spec.get("parallelism"), 1), live))
    return 1


def _find(objs: Iterable[_Known], section: str, key: str) -> _Found | None:
    for known in objs:
        value = _section(known.obj, section).get(key)
        if isinstance(value, str) and value.strip():
            return _Found(value.strip(), f"{section[:-1]} {key} on {_describe(known)}")
    return None


def _priority(owners: list[_Known], pods: list[_Known], ctx: _Context, what: str) -> tuple[str, int, str]:
    """(class name, value, problem): the Ray label, the generic label, then the pod spec."""
    found = _find(owners, "labels", PRIORITY_LABEL) or _find([*owners, *pods], "labels", PRIORITY_CLASS_LABEL)
    if found is None:
        spec_class = next((p for p in pods if _spec(p.obj).get("priorityClassName")), None)
        if spec_class is not None:
            name = str(_spec(spec_class.obj)["priorityClassName"])
            found = _Found(name, f"spec.priorityClassName of {_describe(spec_class)}")
    name = found.value if found else DEFAULT_PRIORITY_CLASS
    if name in ctx.classes:
        return name, ctx.classes[name], ""
    assert found is not None  # the default class is always known
    known = [*DEFAULT_PRIORITY_CLASSES, *sorted(set(ctx.classes) - set(DEFAULT_PRIORITY_CLASSES))]
    problem = (
        f"{what}: priority class {name!r} does not exist ({found.where}): "
        f"create the PriorityClass or use one of {', '.join(known)}"
    )
    return name, 0, problem


def _preemptible(objs: list[_Known], priority: int, what: str) -> tuple[bool, str]:
    found = _find(objs, "labels", PREEMPTIBILITY_LABEL)
    if found is not None and found.value in ("preemptible", "non-preemptible"):
        return found.value == "preemptible", ""
    if found is None:
        return preemptible_at(priority), ""
    problem = (
        f"{what}: {found.where} is {found.value!r}: use 'preemptible' or 'non-preemptible', "
        f"or remove it (then a priority below {NON_PREEMPTIBLE_FROM} is preemptible)"
    )
    return preemptible_at(priority), problem


def _topology(objs: list[_Known], what: str) -> tuple[TopologyConstraint | None, str]:
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


def _shared_selector(pods: Sequence[Obj]) -> dict[str, str]:
    selectors = [dict(_spec(p).get("nodeSelector") or {}) for p in pods]
    common = selectors[0] if selectors else {}
    for selector in selectors[1:]:
        common = {k: v for k, v in common.items() if selector.get(k) == v}
    return common


def _request_problem(pods: Sequence[Obj]) -> str:
    """Why the first pod whose requests cannot be read is refused, or "" (the rest are alike)."""
    for pod in pods:
        try:
            pod_request(pod)
        except ValueError as e:
            return str(e)
    return ""


def _gang(group: _Group, ctx: _Context) -> Gang:
    lineage, pods = group.lineage, group.pods
    top, namespace = lineage.top, _namespace(pods[0])
    what = f"{top.kind} {namespace}/{top.name}"
    owners = group.owner_objects()
    pod_objs = [_Known("Pod", _name(p), p) for p in pods]
    problems = []
    try:
        counted, placeholder = _submitter(group, ctx, what)
    except ValueError as e:
        counted, placeholder = True, None
        problems.append(str(e))
    queue = _find([*owners, *pod_objs], "labels", QUEUE_LABEL)
    class_name, priority, problem = _priority(owners, pod_objs, ctx, what)
    preemptible, preempt_problem = _preemptible([*owners, *pod_objs], priority, what)
    topology, topology_problem = _topology([*owners, *pod_objs], what)
    request_problem = _request_problem(pods)
    problems += [problem, preempt_problem, topology_problem]
    if request_problem:
        problems.append(f"{what}: {request_problem}")
    created = _epoch(top.obj) if top.obj is not None else min(_epoch(p) for p in pods)
    return Gang(
        id=lineage.gang_id,
        namespace=namespace,
        kind=top.kind,
        name=top.name,
        queue=queue.value if queue else ctx.default_queue,
        priority=priority,
        priority_class=class_name,
        preemptible=preemptible,
        min_member=_min_member(group, counted, len(pods)),
        pods=pods,
        subgroups=_subgroups(group),
        topology=topology,
        node_selector=_shared_selector(pods),
        created_at=created,
        submitter=placeholder,
        problem="; ".join(p for p in problems if p),
    )


def build_gangs(
    pods: Iterable[Mapping[str, Any]],
    owners: Mapping[tuple[str, str, str], Mapping[str, Any]],
    priority_classes: Mapping[str, int],
    *,
    scheduler_names: Collection[str] = ("kai-ray", "kai-scheduler"),
    default_queue: str = "default-queue",
) -> list[Gang]:
    """The gangs of the live pods that name one of `scheduler_names`, oldest first.

    `owners` is keyed by (kind, namespace, name); `priority_classes` maps the cluster's
    PriorityClass names to values (kai-ray's defaults fill in names it lacks). A gang that
    cannot be scheduled as written says why in Gang.problem; nothing here raises for it.
    """
    groups: dict[str, _Group] = {}
    elsewhere: set[str] = set()
    for pod in pods:
        lineage = _lineage(pod, owners)
        live = not pod_finished(pod)
        if live and scheduled_by_us(pod, scheduler_names):
            groups.setdefault(lineage.gang_id, _Group(lineage)).add(pod, lineage)
        elif lineage.submitter and (live or (pod.get("status") or {}).get("phase") == "Succeeded"):
            elsewhere.add(lineage.gang_id)
    classes = {name: spec.value for name, spec in DEFAULT_PRIORITY_CLASSES.items()}
    classes.update(priority_classes)
    ctx = _Context(classes, default_queue, frozenset(elsewhere))
    gangs = [_gang(group, ctx) for group in groups.values()]
    return sorted(gangs, key=lambda g: (g.created_at, g.id))
