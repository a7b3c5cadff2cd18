"""Preemption the way KubeRay expects: a RayJob or RayCluster gang is stopped by
suspending its owner (`spec.suspend`), not by deleting its pods, and resumed when the
scheduler admits it again; elastic surplus workers are taken back through KubeRay's
scale-down (`scaleStrategy.workersToDelete` and the group's `replicas`).

Deleting a Ray pod makes KubeRay create it again at once: the gang fights its own
eviction, and a RayJob can be left "RUNNING" with no pods (KAI PR #1401). A suspended
owner has no pods, yet it still waits in its queue: while suspended by kai-ray it stands
in the world as the pods KubeRay would make on resume ("waiting pods", built here from
its templates and marked VIRTUAL), so the core ranks and places it like any other gang.
When the core binds them, the owner is resumed and KubeRay makes the real pods, which
are placed as usual. Owners that cannot be suspended (a RayService, a RayJob on an
existing cluster or one that keeps its cluster after the job) keep pod eviction.

Pure functions over plain dicts; the actuator sends what they return.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from kai_ray.k8s.owners import Obj, as_count, meta, section, spec_of

__all__ = [
    "STOPPED",
    "SUSPENDABLE_KINDS",
    "SUSPENDED_AT",
    "SUSPENDED_BY",
    "VIRTUAL",
    "cannot_suspend",
    "is_virtual",
    "resume_patch",
    "scale_down",
    "stop_patch",
    "suspend_patch",
    "suspended_by_us",
    "virtual_pods",
    "virtual_scheduler",
]

SUSPENDED_BY = "kai-ray.io/suspended-by"  # on an owner kai-ray suspended: why (kept for people)
# When: the waiting pods' creation, so what counts from a pod's creation (the preemption
# delay) counts from the suspension, as it would from KubeRay's new pods after an eviction.
SUSPENDED_AT = "kai-ray.io/suspended-at"
VIRTUAL = "kai-ray.io/waiting-while-suspended"  # on the pods standing for a suspended owner
# On an owner kai-ray stopped for good (it ran past its max runtime): why. It is not
# resumed, nor does it wait; to run it again, remove this and set spec.suspend: false.
STOPPED = "kai-ray.io/stopped"
SUSPENDABLE_KINDS = ("RayCluster", "RayJob")
_API = "ray.io/v1"


def cannot_suspend(kind: str, obj: Obj | None) -> str:
    """Why the owner cannot be suspended (its pods are evicted instead), or ""."""
    if kind not in SUSPENDABLE_KINDS or obj is None:
        return f"a {kind} has no spec.suspend"
    spec = spec_of(obj)
    if kind == "RayJob":
        # KubeRay refuses both (its RayJob validation): suspending would fail every time.
        if spec.get("clusterSelector"):
            return "a RayJob on an existing cluster (spec.clusterSelector) cannot be suspended"
        if spec.get("shutdownAfterJobFinishes") is not True:
            return "a RayJob without spec.shutdownAfterJobFinishes: true cannot be suspended"
    return ""


def suspended_by_us(obj: Obj | None) -> bool:
    return spec_of(obj).get("suspend") is True and SUSPENDED_BY in section(obj, "annotations")


def suspend_patch(why: str, at: str) -> dict[str, Any]:
    """`at`: an RFC 3339 time, as creationTimestamp is written."""
    annotations = {SUSPENDED_BY: why[:500], SUSPENDED_AT: at}
    return {"metadata": {"annotations": annotations}, "spec": {"suspend": True}}


def stop_patch(kind: str, why: str, at: str) -> dict[str, Any] | None:
    """A merge patch that stops the owner for good (suspended, not to be resumed), or
    None for a kind that cannot be suspended (its pods are evicted instead)."""
    if kind in SUSPENDABLE_KINDS:
        patch = suspend_patch(why, at)
        patch["metadata"]["annotations"][STOPPED] = why[:500]
        return patch
    if kind == "Job":  # a batch Job's own suspend: its controller deletes the pods
        return {"metadata": {"annotations": {STOPPED: why[:500]}}, "spec": {"suspend": True}}
    return None


def resume_patch() -> dict[str, Any]:
    return {"metadata": {"annotations": {SUSPENDED_BY: None, SUSPENDED_AT: None}}, "spec": {"suspend": False}}


def is_virtual(pod: Obj) -> bool:
    return VIRTUAL in section(pod, "annotations")


def virtual_scheduler(names: Collection[str]) -> str:
    """The scheduler name the waiting pods carry: one of ours, the same every time."""
    return min(names)


# ---------------------------------------------------------------- waiting pods


def virtual_pods(kind: str, obj: Obj, scheduler: str) -> list[dict[str, Any]]:
    """The pods KubeRay will make when `obj` (suspended by kai-ray) resumes: a head and
    each worker group's replicas (within its min and max) x numOfHosts; none otherwise."""
    if kind not in SUSPENDABLE_KINDS or not suspended_by_us(obj) or not _kuberay_suspended(kind, obj):
        return []
    if STOPPED in section(obj, "annotations"):
        return []  # stopped for good: it does not wait
    spec = spec_of(obj)
    cluster = spec if kind == "RayCluster" else spec.get("rayClusterSpec")
    if not isinstance(cluster, Mapping):
        return []
    owner = meta(obj)
    make = _Maker(kind, owner, scheduler)
    pods = [make.pod("head", "head", _part(cluster.get("headGroupSpec"), "template"), 0)]
    for group in cluster.get("workerGroupSpecs") or []:
        if not isinstance(group, Mapping) or group.get("suspend") is True:
            continue
        name = str(group.get("groupName") or "worker")
        template = _part(group, "template")
        for i in range(_replicas(group) * max(1, as_count(group.get("numOfHosts"), 1))):
            pods.append(make.pod(name, "worker", template, i))
    return pods


def _kuberay_suspended(kind: str, obj: Obj) -> bool:
    """Whether KubeRay says it is done suspending (its pods are gone). Until then the gang
    is its real pods, on their way out: a gang of both would count them twice."""
    status = obj.get("status") or {}
    if kind == "RayJob":
        return status.get("jobDeploymentStatus") == "Suspended"
    conditions = status.get("conditions") or []
    said = any(c.get("type") == "RayClusterSuspended" and c.get("status") == "True" for c in conditions)
    return said or status.get("state") == "suspended"


def _replicas(group: Obj) -> int:
    low = as_count(group.get("minReplicas"))
    high = as_count(group.get("maxReplicas"), 2**31)
    wanted = as_count(group.get("replicas"), low)
    return max(low, min(high, wanted))


def _part(obj: Any, part: str) -> Obj:
    found = obj.get(part) if isinstance(obj, Mapping) else None
    return found if isinstance(found, Mapping) else {}


class _Maker:
    def __init__(self, kind: str, owner: Obj, scheduler: str) -> None:
        self.kind, self.owner, self.scheduler = kind, owner, scheduler

    def pod(self, group: str, node_type: str, template: Any, i: int) -> dict[str, Any]:
        ns, name = self.owner.get("namespace", "default"), self.owner["name"]
        tmeta, tspec = _part(template, "metadata"), _part(template, "spec")
        labels = {**(tmeta.get("labels") or {}), "ray.io/node-type": node_type, "ray.io/group": group}
        made = (self.owner.get("annotations") or {}).get(SUSPENDED_AT) or self.owner.get("creationTimestamp")
        if self.kind == "RayCluster":
            labels["ray.io/cluster"] = name
        return {
            "metadata": {
                "name": f"{name}-{group}-{i}-waiting",
                "namespace": ns,
                "uid": f"virtual:{ns}/{self.kind}/{name}/{group}/{i}",
                "creationTimestamp": made,
                "labels": labels,
                "annotations": {**(tmeta.get("annotations") or {}), VIRTUAL: "true"},
                "ownerReferences": [
                    {
                        "apiVersion": _API,
                        "kind": self.kind,
                        "name": name,
                        "uid": self.owner.get("uid", ""),
                        "controller": True,
                    }
                ],
            },
            "spec": {**copy.deepcopy(dict(tspec)), "schedulerName": self.scheduler},
            "status": {"phase": "Pending"},
        }


# ---------------------------------------------------------------- scale-down


def scale_down(cluster: Obj, pods: Collection[Obj]) -> dict[str, Any] | None:
    """A merge patch taking `pods` (workers of `cluster`) back through KubeRay's
    scale-down: each group's replicas lowered by its pods taken, those pods named in its
    workersToDelete. The resourceVersion makes it fail (409) rather than undo a change
    made since it was read. None when a pod is not a one-host worker of a group here."""
    groups = [dict(g) for g in spec_of(cluster).get("workerGroupSpecs") or [] if isinstance(g, Mapping)]
    by_name = {str(g.get("groupName")): g for g in groups}
    for pod in pods:
        labels = section(pod, "labels")
        group = by_name.get(str(labels.get("ray.io/group")))
        if labels.get("ray.io/node-type") != "worker" or group is None:
            return None
        if as_count(group.get("numOfHosts"), 1) > 1:
            return None  # a multi-host replica goes whole: KubeRay has no per-host scale-down
        strategy = dict(group.get("scaleStrategy") or {})
        names = list(strategy.get("workersToDelete") or [])
        names.append(meta(pod)["name"])
        strategy["workersToDelete"] = names
        group["scaleStrategy"] = strategy
        group["replicas"] = max(0, as_count(group.get("replicas"), 0) - 1)
    return {
        "metadata": {"resourceVersion": meta(cluster).get("resourceVersion")},
        "spec": {"workerGroupSpecs": groups},
    }
