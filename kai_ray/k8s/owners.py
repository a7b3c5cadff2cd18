"""Whose a pod is: its controller ownerReference followed up through the owner objects
given (Pod -> RayCluster -> RayJob | RayService, Pod -> Job -> RayJob) to its top owner,
the way KAI Scheduler's podgrouper groups Ray. Pure functions over plain dicts as the API
server returns them as JSON: no client, no I/O.

List items from the API server carry no `kind`, so an object's kind always travels beside
it (`Known`) rather than being read from the object.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

__all__ = [
    "Known",
    "Lineage",
    "Obj",
    "OwnerKey",
    "Owners",
    "as_count",
    "could_join_a_gang",
    "describe",
    "epoch",
    "lineage_of",
    "meta",
    "name_of",
    "namespace_of",
    "pod_finished",
    "scheduled_by_us",
    "section",
    "spec_of",
]

Obj = Mapping[str, Any]
OwnerKey = tuple[str, str, str]  # (kind, namespace, name)
Owners = Mapping[OwnerKey, Obj]

# The owner kinds followed, with the API group each must come from: a CRD of another group
# that happens to be called "Job" is not a batch Job.
_GROUPS = {"RayCluster": "ray.io", "RayJob": "ray.io", "RayService": "ray.io", "Job": "batch"}
_JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")
_MAX_DEPTH = 4  # Pod -> Job/RayCluster -> RayJob/RayService is 2; the cap guards against cycles


class Known(NamedTuple):
    kind: str
    name: str
    obj: Obj | None  # None: named by a reference, not in the owners given


@dataclass(frozen=True, slots=True)
class Lineage:
    gang_id: str
    top: Known  # kind "Pod" (the pod itself) for a gang of one
    owners: tuple[Known, ...]  # the owner objects known, nearest first
    submitter: bool  # the pod of a Job that a RayJob owns
    # Every owner this lineage looked for, found or not: a change to one of them may
    # change it (the index of kai_ray.k8s.source reads it).
    looked_up: tuple[OwnerKey, ...] = ()


# ---------------------------------------------------------------- small readers


def meta(obj: Obj | None) -> Obj:
    return (obj or {}).get("metadata") or {}


def spec_of(obj: Obj | None) -> Obj:
    return (obj or {}).get("spec") or {}


def section(obj: Obj | None, name: str) -> Obj:
    return meta(obj).get(name) or {}


def namespace_of(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "default")


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name") or "")


def describe(known: Known) -> str:
    return f"{known.kind} {namespace_of(known.obj or {})}/{known.name}"


def epoch(obj: Obj | None) -> float:
    """creationTimestamp ("2026-11-23T08:00:00Z") as epoch seconds; 0 when absent."""
    value = meta(obj).get("creationTimestamp")
    if not isinstance(value, str) or not value:
        return 0.0
    return _epoch(value)


@functools.lru_cache(maxsize=4096)
def _epoch(value: str) -> float:
    try:
        moment = datetime.fromisoformat(value)  # Python 3.11 reads the trailing "Z"
    except ValueError:
        return 0.0
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def as_count(value: Any, default: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return default
    try:
        return max(0, int(value))
    except ValueError:
        return default


def scheduled_by_us(pod: Mapping[str, Any], scheduler_names: Collection[str]) -> bool:
    return spec_of(pod).get("schedulerName") in scheduler_names


def could_join_a_gang(pod: Mapping[str, Any], scheduler_names: Collection[str]) -> bool:
    """Whether the pod's owners can matter to a gang: it is ours, or it is a batch Job's
    pod (a RayJob's submitter, placed by another scheduler, still says whether the gang
    waits for its own). Any other pod only holds room on its node."""
    if scheduled_by_us(pod, scheduler_names):
        return True
    refs = meta(pod).get("ownerReferences") or ()
    labels = section(pod, "labels")
    return any(isinstance(r, dict) and r.get("kind") == "Job" for r in refs) or any(
        key in labels for key in _JOB_NAME_LABELS
    )


def pod_finished(pod: Mapping[str, Any]) -> bool:
    return ((pod.get("status") or {}).get("phase")) in ("Succeeded", "Failed")


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
    refs = [r for r in meta(obj).get("ownerReferences") or [] if isinstance(r, dict)]
    return next((r for r in refs if r.get("controller") is True), refs[0] if refs else None)


def _parent(obj: Obj) -> tuple[str, str] | None:
    ref = _controller(obj)
    return _reference(ref) if ref is not None else None


class _Looking:
    """The owners, recording every key looked for."""

    def __init__(self, owners: Owners) -> None:
        self.owners, self.keys = owners, list[OwnerKey]()

    def get(self, key: OwnerKey) -> Obj | None:
        self.keys.append(key)
        return self.owners.get(key)


def _first_owner(pod: Obj, owners: _Looking) -> tuple[str, str] | None:
    if meta(pod).get("ownerReferences"):
        return _parent(pod)
    # No ownerReference (e.g. created before its owner was set): the labels KubeRay and the
    # Job controller put on their pods still say whose it is.
    labels, namespace = section(pod, "labels"), namespace_of(pod)
    for key in _JOB_NAME_LABELS:
        job = labels.get(key)
        if job and owners.get(("Job", namespace, job)) is not None:
            return "Job", job
    cluster = labels.get("ray.io/cluster")
    return ("RayCluster", cluster) if cluster else None


def _chain(pod: Obj, owners: _Looking) -> list[Known]:
    """The pod's owners, nearest first, up to the first one not in `owners`."""
    namespace, chain = namespace_of(pod), list[Known]()
    ref = _first_owner(pod, owners)
    while ref is not None and len(chain) < _MAX_DEPTH:
        obj = owners.get((ref[0], namespace, ref[1]))
        chain.append(Known(ref[0], ref[1], obj))
        if obj is None:
            break
        ref = _parent(obj)
    return chain


def lineage_of(pod: Obj, owners: Owners) -> Lineage:
    """The pod's gang (its top owner's id) and the owners known on the way there."""
    looking = _Looking(owners)
    namespace, chain = namespace_of(pod), _chain(pod, looking)
    known = tuple(k for k in chain if k.obj is not None)
    if known:
        top = known[-1]
    elif chain and chain[0].kind in ("Job", "RayCluster"):
        top = chain[0]  # the owner is not (yet) known: its pods still go together
    else:
        top = Known("Pod", name_of(pod), pod)
    gang_id = f"{namespace}/{top.kind}/{top.name}"
    if top.kind == "RayService" and len(known) > 1:
        # A RayService may run two clusters at once (an upgrade): each is a gang of its own.
        gang_id += f"/{known[-2].name}"
    submitter = top.kind == "RayJob" and chain[0].kind == "Job"
    return Lineage(gang_id, top, known, submitter, tuple(looking.keys))
