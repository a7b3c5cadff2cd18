"""One pod of a KAI snapshot -> one task of the core: its request (Kubernetes' rule and
KAI's GPU-sharing annotations, kai_ray.control.podrequests), its node (bound, or named
by a BindRequest in flight), its status and since when, its device for a GPU share, the
nodes its selector and required node affinity admit, and its tolerations (which node
taints it may pass: kai_ray.control.taints, applied to the whole snapshot).

KAI's pod states, as the core has them: a pod on a node runs (bound, or started), one
being deleted from a node is Releasing (it holds its room until it is gone), one on no
node is Pending, Succeeded and Failed are terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.control.affinity import node_affinity, read_terms
from kai_ray.control.kaiobjects import (
    FIX,
    KaiSnapshotError,
    Notes,
    as_list,
    as_map,
    instant,
    key_of,
    object_name,
    section,
)
from kai_ray.control.podrequests import GPU_FRACTION, GPU_FRACTION_DEVICES, GPU_MEMORY, spec_request
from kai_ray.control.taints import EFFECTS, Toleration, tolerations_of
from kai_ray.core import NodeAffinity, NodeInfo, Request, TaskInfo, TaskStatus

__all__ = [
    "POD_GROUP_ANNOTATION",
    "SUBGROUP_LABEL",
    "Binding",
    "PodContext",
    "SkipJob",
    "checked_pod",
    "finished",
    "pod_affinity",
    "pod_node",
    "pod_selector",
    "pod_task",
    "pod_tolerations",
]

Obj = Mapping[str, Any]
POD_GROUP_ANNOTATION = "pod-group-name"  # the pod's PodGroup, set by KAI's podgrouper
SUBGROUP_LABEL = "kai.scheduler/subgroup-name"  # the pod's leaf subgroup of its PodGroup
GPU_GROUP_LABEL = "runai-gpu-group"  # the shared device a GPU-share pod was given
# Annotations read here (or, like received-resource-type, KAI's record of what was bound).
_READ_ANNOTATIONS = frozenset(
    {POD_GROUP_ANNOTATION, GPU_FRACTION, GPU_MEMORY, GPU_FRACTION_DEVICES, "received-resource-type"}
)
# KAI's own pod annotations that change placement and that kai-ray does not follow.
_KAI_ANNOTATIONS = frozenset({"mps", "gpu-fraction-container-name", "gpu-memory-limit", "gpu-sm-cores"})
_KAI_PREFIXES = ("kai.scheduler/", "runai", "run.ai/", "scheduling.run.ai/")
_PHASES = frozenset({"Pending", "Running", "Succeeded", "Failed"})
_POD_SPEC_WARNINGS = {
    "topologySpreadConstraints": "topology spread constraints are not followed",
    "resourceClaims": "dynamic resource claims (DRA) are not modelled; only the requests count",
}


class SkipJob(Exception):
    """A pod that makes its whole job unreadable as the core's: the job is left out (the
    message says why, for the warning)."""


@dataclass(frozen=True, slots=True)
class Binding:
    """A BindRequest in flight: KAI chose the node (and devices) and its binder has not
    bound the pod yet; KAI counts the room as taken."""

    node: str
    gpu_groups: tuple[str, ...] = ()
    # When KAI chose the node: the task holds its room from then (its pod has not started,
    # and min-runtime counts a gang's run from its start, so not from the pod's creation).
    since: float | None = None


@dataclass(slots=True)
class PodContext:
    nodes: Mapping[str, NodeInfo]
    bindings: Mapping[tuple[str, str], Binding]
    notes: Notes
    # node -> the symbols of its shared devices, in the order first seen -> device index
    devices: dict[str, dict[str, int]] = field(default_factory=dict)
    requests: dict[Request, Request] = field(default_factory=dict)  # one object per request


def checked_pod(raw: object, index: int) -> Obj:
    """A pod of rawObjects.pods with what every reader needs (a name, a spec with
    containers); KaiSnapshotError naming the pod and the field otherwise."""
    where = f"rawObjects.pods[{index}]"
    name = object_name(raw, where)
    pod = as_map(raw, where)
    what = f"pod {key_of(pod)[0]}/{name}"
    spec = as_map(pod.get("spec"), f"{what}: spec")
    containers = as_list(spec.get("containers"), f"{what}: spec.containers")
    if not containers:
        raise KaiSnapshotError(f"{what}: spec.containers: missing; a pod lists its containers; {FIX}")
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(as_list(spec.get(kind), f"{what}: spec.{kind}")):
            where = f"{what}: spec.{kind}[{i}]"
            if not isinstance(container, Mapping):
                raise KaiSnapshotError(f"{where}: expected an object (a container); {FIX}")
            resources = as_map(container.get("resources"), f"{where}.resources")
            for part in ("requests", "limits"):
                as_map(resources.get(part), f"{where}.resources.{part}")
    phase = as_map(pod.get("status"), f"{what}: status").get("phase")
    if phase is not None and not isinstance(phase, str):
        raise KaiSnapshotError(f"{what}: status.phase: {phase!r} is not a phase; {FIX}")
    return pod


def describe(pod: Obj) -> str:
    namespace, name = key_of(pod)
    return f"{namespace}/{name}"


def pod_node(pod: Obj, bindings: Mapping[tuple[str, str], Binding]) -> str:
    """The node the pod holds room on: its own, or its BindRequest's; "" for none."""
    node = pod["spec"].get("nodeName")
    if node:
        return str(node)
    binding = bindings.get(key_of(pod))
    return binding.node if binding is not None else ""


def _pod_status(pod: Obj) -> Obj:
    return as_map(pod.get("status"), f"pod {describe(pod)}: status")  # absent or null: {}


def finished(pod: Obj) -> bool:
    return _pod_status(pod).get("phase") in ("Succeeded", "Failed")


def pod_task(
    pod: Obj, subgrouped: bool, pending_since: float, shared: Mapping[str, str], ctx: PodContext
) -> TaskInfo | None:
    """The pod as a task of its job; None for a pod that is gone (deleted before it had a
    node). `subgrouped`: its job has subgroups (the pod names its own). `pending_since`:
    when a pending task began to wait at the earliest (its job's last eviction). `shared`:
    the node selector its job holds for every task."""
    what = describe(pod)
    _check_pod_fields(pod, what, ctx.notes)
    request = _request(pod, ctx)
    node = pod_node(pod, ctx.bindings)
    status = _status(pod, node, what, ctx.notes)
    if status is None:
        return None
    if node and node not in ctx.nodes:
        raise SkipJob(f"pod {what} is on node {node!r}, which is not in the snapshot's nodes")
    meta = pod["metadata"]
    created = instant(meta.get("creationTimestamp"), f"pod {what}: metadata.creationTimestamp")
    since = _started(pod, what) if status is not TaskStatus.PENDING else max(created or 0.0, pending_since)
    binding = ctx.bindings.get(key_of(pod))
    if since is None and binding is not None:
        since = binding.since
    return TaskInfo(
        name=str(meta["name"]),
        status=status,
        request=request,
        node=node or None,
        gpu_group=_device(pod, node, request, ctx) if node else None,
        since=since if since is not None else (created or 0.0),
        subgroup=_subgroup(pod, subgrouped, what, ctx.notes),
        node_affinity=pod_affinity(pod, shared),
    )


def _request(pod: Obj, ctx: PodContext) -> Request:
    what = f"pod {describe(pod)}"
    try:
        # Not pod_request: its cache is keyed by uid, unique in one cluster but not across
        # snapshots read in one process (a tool's uids are often the pods' names).
        request = spec_request(pod["spec"], section(pod, "annotations", what), what)
    except ValueError as e:  # names the pod, the container and the resource
        raise KaiSnapshotError(f"{e}; {FIX}") from None
    # Equal requests share one object: the core builds a job whose tasks share one at once.
    return ctx.requests.setdefault(request, request)


def _status(pod: Obj, node: str, what: str, notes: Notes) -> TaskStatus | None:
    phase = _pod_status(pod).get("phase")
    if phase in ("Succeeded", "Failed"):
        return TaskStatus(phase)
    if phase not in _PHASES:
        notes.add(
            f"phase {phase!r} is not one KAI schedules by; taken by its node (on one: running)", "pod", what
        )
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    if node:
        return TaskStatus.RELEASING if deleting else TaskStatus.RUNNING
    if deleting:
        notes.add("being deleted on no node: gone, left out", "pod", what)
        return None
    return TaskStatus.PENDING


def _started(pod: Obj, what: str) -> float | None:
    """When the pod began to hold its node: scheduled, else started (Kubernetes' fields, as
    kai_ray.k8s.world reads them)."""
    status = _pod_status(pod)
    for i, cond in enumerate(as_list(status.get("conditions"), f"pod {what}: status.conditions")):
        cond = as_map(cond, f"pod {what}: status.conditions[{i}]")
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return instant(cond.get("lastTransitionTime"), f"pod {what}: status.conditions[{i}]")
    return instant(status.get("startTime"), f"pod {what}: status.startTime")


def _subgroup(pod: Obj, subgrouped: bool, what: str, notes: Notes) -> str:
    label = section(pod, "labels", f"pod {what}").get(SUBGROUP_LABEL)
    if subgrouped and not label:
        notes.add(
            f"no label {SUBGROUP_LABEL} while its pod group has subgroups: counted as surplus, "
            "never as part of a subgroup's minimum",
            "pod",
            what,
        )
    return str(label or "")


def _device(pod: Obj, node: str, request: Request, ctx: PodContext) -> int | None:
    """The device index (on its node) of a GPU-share pod, from KAI's device symbol: the
    pod's runai-gpu-group label, or its BindRequest's selected group."""
    if not request.is_fractional:
        return None
    binding = ctx.bindings.get(key_of(pod))
    label = section(pod, "labels", f"pod {describe(pod)}").get(GPU_GROUP_LABEL)
    symbol = label or (binding.gpu_groups[0] if binding is not None and binding.gpu_groups else None)
    if not symbol:
        return None
    symbols = ctx.devices.setdefault(node, {})
    if symbol not in symbols:
        if len(symbols) >= ctx.nodes[node].gpus:
            raise SkipJob(
                f"pod {describe(pod)} shares device {symbol!r} of node {node!r}, which has no device "
                "left to be it"
            )
        symbols[str(symbol)] = len(symbols)
    return symbols[str(symbol)]


def _check_pod_fields(pod: Obj, what: str, notes: Notes) -> None:
    """Warnings for what the pod says that changes placement and is not read."""
    for key in section(pod, "annotations", f"pod {what}"):
        if key not in _READ_ANNOTATIONS and (key in _KAI_ANNOTATIONS or key.startswith(_KAI_PREFIXES)):
            notes.add(f"annotation {key} is not read", "pod", what)
    spec = pod["spec"]
    for key, words in _POD_SPEC_WARNINGS.items():
        if spec.get(key):
            notes.add(f"spec.{key}: {words}", "pod", what)
    affinity = as_map(spec.get("affinity"), f"pod {what}: spec.affinity")
    for kind in ("podAffinity", "podAntiAffinity"):
        if affinity.get(kind):
            notes.add(f"spec.affinity.{kind} is not followed", "pod", what)
    node_aff = as_map(affinity.get("nodeAffinity"), f"pod {what}: spec.affinity.nodeAffinity")
    if node_aff.get("preferredDuringSchedulingIgnoredDuringExecution"):
        notes.add("preferred node affinity is not followed (the required one is)", "pod", what)


_REQUIRED = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
_OPERATORS = ("", "Equal", "Exists")  # "": Equal, as Kubernetes reads it


def pod_tolerations(pod: Obj) -> frozenset[Toleration]:
    """spec.tolerations (tolerationSeconds, NoExecute's eviction delay, is not modelled);
    KaiSnapshotError naming the pod and the entry when one is not a toleration."""
    where = f"pod {describe(pod)}: spec.tolerations"
    for i, raw in enumerate(as_list(as_map(pod.get("spec"), where).get("tolerations"), where)):
        entry = as_map(raw, f"{where}[{i}]")
        key, operator, value, effect = (entry.get(k) or "" for k in ("key", "operator", "value", "effect"))
        texts = all(isinstance(v, str) for v in (key, value))
        if not texts or operator not in _OPERATORS or (effect and effect not in EFFECTS):
            raise KaiSnapshotError(
                f"{where}[{i}]: {dict(entry)!r} is not a toleration (key, operator Equal or Exists, value, "
                f"effect empty or one of {', '.join(EFFECTS)}); {FIX}"
            )
    return tolerations_of(pod)


def pod_selector(pod: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_map(pod["spec"].get("nodeSelector"), "spec.nodeSelector").items()}


def pod_affinity(pod: Obj, shared: Mapping[str, str]) -> NodeAffinity | None:
    """The pod's own node constraint beyond the selector its job shares (None: none)."""
    extra = {k: v for k, v in pod_selector(pod).items() if k not in shared}
    affinity = as_map(pod["spec"].get("affinity"), "spec.affinity")
    required = as_map(affinity.get("nodeAffinity"), "nodeAffinity").get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required is None:
        return node_affinity((), extra)
    try:
        terms = read_terms(
            as_map(required, _REQUIRED).get("nodeSelectorTerms"), f"{_REQUIRED}.nodeSelectorTerms"
        )
    except ValueError as e:
        raise KaiSnapshotError(f"pod {describe(pod)}: {e}; {FIX}") from None
    return node_affinity(terms, extra)
