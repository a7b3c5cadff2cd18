"""Queue objects on the API server -> the core's queue tree, one bad Queue at a time.

Two kinds are read: kai-ray's own CRD (`queues.kai-ray.io`, version v2: the spec of KAI's
`scheduling.run.ai/v2` Queue in KAI's units, so KAI's YAML carries over by changing the
apiVersion only) and KAI's Queue itself when KAI's CRD is installed. A Queue that cannot
be used (a bad field, an unknown parent, a cycle, a limit below its quota) is left out
with the reason, which the operator puts in its status condition and an Event; every
other queue keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kai_ray.config.errors import ConfigError
from kai_ray.config.priority import PriorityClasses
from kai_ray.config.queues import KAI_API_VERSION, KAI_RAY_KUBE_API_VERSION, parse_queue_object
from kai_ray.core import QueueInfo
from kai_ray.core.state.access import admits, allows, ceiling, paths_of
from kai_ray.core.state.queues import QueueTreeError, build_queue_tree

__all__ = ["KAI_RAY_QUEUE_API", "QueueSet", "access_status", "read_queues"]

KAI_RAY_QUEUE_API = "kai-ray.io/v2"


@dataclass(slots=True)
class QueueSet:
    queues: list[QueueInfo]
    problems: dict[str, str] = field(default_factory=dict)  # queue name -> why it is left out
    source: dict[str, dict[str, Any]] = field(default_factory=dict)  # queue name -> its object


def read_queues(objects: Iterable[Mapping[str, Any]], classes: Mapping[str, int] | None = None) -> QueueSet:
    """Every Queue object that can be used, oldest first, and why the others cannot.
    `classes`: the cluster's PriorityClasses (name -> value), which an access rule may name."""
    known = PriorityClasses.of_cluster(classes or {})
    ordered = sorted(
        objects, key=lambda o: (o["metadata"].get("creationTimestamp", ""), o["metadata"]["name"])
    )
    result = QueueSet(queues=[])
    for obj in ordered:
        name = obj["metadata"]["name"]
        result.source[name] = dict(obj)
        if name in {q.name for q in result.queues}:
            result.problems[name] = (
                f"queue {name!r}: a queue of that name exists in both {KAI_RAY_QUEUE_API} and "
                f"{KAI_API_VERSION}; delete one of them"
            )
            continue
        try:
            result.queues.append(parse_queue_object(_as_kai_document(obj), classes=known))
        except ConfigError as exc:
            result.problems[name] = str(exc)
    _drop_bad_tree(result)
    return result


def _as_kai_document(obj: Mapping[str, Any]) -> dict[str, Any]:
    # Ours is KAI's v2 in shape and units: read both as KAI's, keeping only what a
    # Queue document has (the server adds status and metadata a file would not hold).
    ours = obj.get("apiVersion") == KAI_RAY_KUBE_API_VERSION  # KAI's, with kai-ray's run-time keys
    return {
        "apiVersion": KAI_RAY_KUBE_API_VERSION if ours else KAI_API_VERSION,
        "kind": "Queue",
        "metadata": {"name": obj["metadata"]["name"]},
        "spec": dict(obj.get("spec") or {}),
    }


def _drop_bad_tree(result: QueueSet) -> None:
    """Leave out the queues the tree cannot hold (an unknown parent, a cycle), one at a
    time, then any left without their parent."""
    while result.queues:
        try:
            build_queue_tree(result.queues)
            return
        except QueueTreeError as exc:
            result.problems.setdefault(exc.queue, str(exc))
            result.queues = [q for q in result.queues if q.name != exc.queue]


def queue_status_body(
    name: str,
    status: Any,
    waiting: int,
    problem: str,
    units: Mapping[str, float],
    access: Mapping[str, Any] | None = None,
    refused: int = 0,
) -> dict[str, Any]:
    """The Queue's status: what it holds and asks for, its fair share, how many
    workloads wait, and a condition saying whether the queue is in use; where its path
    sets an access rule, the rule resolved (access_status) and how many workloads it
    refuses (waiting, or running since before the rule)."""

    def triple(values: tuple[float, float, float]) -> dict[str, Any]:
        return {r: _kai_value(r, v, units) for r, v in zip(("gpu", "cpu", "memory"), values, strict=True)}

    body: dict[str, Any] = {"waitingWorkloads": waiting}
    if access is not None:
        body.update(access=dict(access), refusedWorkloads=refused)
    if status is not None:
        body.update(
            allocated=triple(status.allocated),
            requested=triple(status.requested),
            fairShare=triple(status.fair_share),
            deserved=triple(status.deserved),
        )
    body["conditions"] = [
        {
            "type": "Ready",
            "status": "False" if problem else "True",
            "reason": "InvalidQueue" if problem else "Valid",
            "message": problem or "the queue is in the tree and takes workloads",
        }
    ]
    return body


def _kai_value(resource: str, value: float, units: Mapping[str, float]) -> float:
    return round(value / units.get(resource, 1.0), 3)


def access_status(
    queues: Sequence[QueueInfo],
    closed: bool,
    namespaces: Iterable[str],
    labels: Mapping[str, Mapping[str, str]],
    classes: Mapping[str, int],
) -> dict[str, dict[str, Any]]:
    """Per queue whose path sets an access rule (or all, when closed), the rule resolved
    against the cluster as it is, for its status: the namespaces it admits now and the
    priority classes it allows. The admission policy reads these (docs/tenants.md): CEL
    cannot walk the queue tree nor match selectors over every namespace, so the operator
    writes what the core's rule (core/state/access.py) says of each."""
    known = PriorityClasses.of_cluster(classes)
    names = sorted(namespaces)
    out: dict[str, dict[str, Any]] = {}
    paths = paths_of(queues)
    for q in queues:
        rules = paths[q.name]
        if not rules and not closed:
            continue
        body: dict[str, Any] = {}
        if closed or any(a.sets_tenants for _, a in rules):
            body["tenants"] = [ns for ns in names if admits(rules, closed, ns, labels.get(ns, {}))]
        if any(a.sets_priorities for _, a in rules):
            body["priorityClasses"] = [c for c in known.names if allows(rules, known[c].value)]
            top = ceiling(rules)
            if top is not None:
                body["maxPriority"] = top
        out[q.name] = body
    return out
