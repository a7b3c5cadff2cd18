"""`kai-ray explain RayCluster/NAME` on Kubernetes: why a gang waits, read back from what
the operator wrote (its pods' PodScheduled condition, its owner's Events).

A gang its queue's access rule refuses (QueueTenant, PriorityCeiling) is explained with
the rule named, as on Ray: the queue whose rule it is (a parent's, when inherited), the
field, what it allows and the fix (kai_ray.control.accessview). The operator writes the
core's words; the rule is found again here from the Queue objects, the namespace's
labels and the gang as the operator reads it (kai_ray.k8s.gangs), so that explain asks
the API server for them only when a gang waits for that reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kai_ray.config.queues import KAI_API_VERSION, KAI_RAY_KUBE_API_VERSION
from kai_ray.control.accessview import refused_by, rule_lines
from kai_ray.k8s.client import ApiError, Kube, KubeConfig
from kai_ray.k8s.gangs import build_gangs
from kai_ray.k8s.owners import name_of
from kai_ray.k8s.queues import read_queues
from kai_ray.k8s.watches import QUEUE_APIS

__all__ = ["ACCESS_REASONS", "KINDS", "AccessContext", "access_rule", "explain_object"]

# The PodScheduled reasons the operator writes for the access rule's codes (report.py).
ACCESS_REASONS = {"QueueTenant": "queue-tenant", "PriorityCeiling": "priority-ceiling"}
_QUEUE_VERSIONS = dict(zip(QUEUE_APIS, (KAI_RAY_KUBE_API_VERSION, KAI_API_VERSION), strict=True))

KINDS = {
    "raycluster": ("RayCluster", "/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}"),
    "rayjob": ("RayJob", "/apis/ray.io/v1/namespaces/{ns}/rayjobs/{name}"),
    "rayservice": ("RayService", "/apis/ray.io/v1/namespaces/{ns}/rayservices/{name}"),
    "pod": ("Pod", "/api/v1/namespaces/{ns}/pods/{name}"),
}


async def explain_object(config: KubeConfig, ref: str, namespace: str) -> str:
    """`ref` is KIND/NAME (kind case-insensitive). Raises LookupError naming what is missing."""
    kind_text, _, name = ref.partition("/")
    if kind_text.lower() not in KINDS or not name:
        raise LookupError(f"{ref!r}: write KIND/NAME with KIND one of RayCluster, RayJob, RayService, Pod")
    kind, path = KINDS[kind_text.lower()]
    async with Kube(config) as kube:
        try:
            obj = await kube.get(path.format(ns=namespace, name=name))
        except ApiError as exc:
            if exc.status == 404:
                raise LookupError(f"{kind} {namespace}/{name} does not exist (namespace: -n)") from None
            raise
        pods = await _pods(kube, kind, obj, namespace)
        events = (await kube.get(f"/api/v1/namespaces/{namespace}/events"))["items"]
        latest = _latest_waiting(pods)
        rule = None
        if latest is not None and latest.get("reason") in ACCESS_REASONS:
            context = await _access_context(kube, kind, obj, namespace)
            rule = access_rule(namespace, pods, context, ACCESS_REASONS[latest["reason"]])
    mine = [e for e in events if e["involvedObject"].get("name") == name]
    return _render(kind, namespace, name, pods, mine, rule)


@dataclass(slots=True)
class AccessContext:
    """What finding the access rule of a gang reads: its owners (kind, object), its
    namespace's labels, the cluster's PriorityClasses (name -> value) and the Queue
    objects (each with its apiVersion)."""

    owners: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    classes: dict[str, int] = field(default_factory=dict)
    queues: list[dict[str, Any]] = field(default_factory=list)


async def _access_context(kube: Kube, kind: str, obj: dict[str, Any], ns: str) -> AccessContext:
    context = AccessContext()
    if kind != "Pod":
        context.owners.append((kind, obj))
    cluster = _cluster_name(kind, obj)
    if kind in ("RayJob", "RayService") and cluster:
        # The queue label may be on the RayJob: the pods reach it through their cluster.
        found = await _get_or_none(kube, KINDS["raycluster"][1].format(ns=ns, name=cluster))
        if found is not None:
            context.owners.append(("RayCluster", found))
    namespace = await _get_or_none(kube, f"/api/v1/namespaces/{ns}")
    context.labels = dict(((namespace or {}).get("metadata") or {}).get("labels") or {})
    listed = await kube.get("/apis/scheduling.k8s.io/v1/priorityclasses")
    context.classes = {o["metadata"]["name"]: int(o.get("value", 0)) for o in listed["items"]}
    for path, version in _QUEUE_VERSIONS.items():
        queues = await _get_or_none(kube, path)  # either CRD may be absent
        for q in (queues or {}).get("items") or []:
            context.queues.append({**q, "apiVersion": q.get("apiVersion") or version})
    return context


async def _get_or_none(kube: Kube, path: str) -> dict[str, Any] | None:
    try:
        return await kube.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


def access_rule(
    namespace: str, pods: list[dict[str, Any]], context: AccessContext, code: str
) -> dict[str, Any] | None:
    """The access rule that stops the gang of `pods` (accessview.refused_by), its queue
    and priority read as the operator reads them; None when it cannot be told (a gang
    whose queue is the operator's default, which is not on the API server)."""
    owners = {(kind, namespace, name_of(o)): o for kind, o in context.owners}
    labels: Mapping[str, Mapping[str, str]] = {namespace: context.labels}
    gangs = build_gangs(pods, owners, context.classes, default_queue="", namespaces=labels)
    if not gangs or not gangs[0].queue:
        return None
    gang, queues = gangs[0], read_queues(context.queues, context.classes).queues
    # The operator's closedQueues is not on the API server: a tenant refusal that no rule
    # on the path explains is the closed default's.
    for closed in (False, True):
        found = refused_by(
            gang.queue, queues, closed, priority=gang.priority, tenant=namespace, labels=context.labels
        )
        if found is not None or code != "queue-tenant":
            return found
    return None


async def _pods(kube: Kube, kind: str, obj: dict[str, Any], ns: str) -> list[dict[str, Any]]:
    if kind == "Pod":
        return [obj]
    cluster = _cluster_name(kind, obj)
    if not cluster:
        return []
    listed = await kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"ray.io/cluster={cluster}")
    return list(listed["items"])


def _cluster_name(kind: str, obj: dict[str, Any]) -> str | None:
    status = obj.get("status") or {}
    return {
        "RayCluster": obj["metadata"]["name"],
        "RayJob": status.get("rayClusterName"),
        "RayService": (status.get("activeServiceStatus") or {}).get("rayClusterName"),
    }.get(kind)


def _latest_waiting(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest PodScheduled=False condition of its unbound pods (None: none waits)."""
    waiting = [c for p in pods if not p["spec"].get("nodeName") for c in _scheduled(p)]
    return max(waiting, key=lambda c: c.get("lastTransitionTime") or "") if waiting else None


def _render(
    kind: str,
    ns: str,
    name: str,
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    rule: dict[str, Any] | None = None,
) -> str:
    bound = [p for p in pods if p["spec"].get("nodeName")]
    lines = [f"{kind} {ns}/{name}: {len(bound)} of {len(pods)} pods bound"]
    latest = _latest_waiting(pods)
    if latest is not None:
        lines.append(f"waits: {latest.get('reason', '')}: {latest.get('message', '')}")
        if rule is not None:
            lines += rule_lines(rule)
    elif pods:
        lines.append("placed: every pod is bound")
    else:
        lines.append("no pods yet")
    for e in sorted(events, key=lambda e: e.get("lastTimestamp") or "")[-5:]:
        when, kind, why = e.get("lastTimestamp", ""), e.get("type", ""), e.get("reason", "")
        lines.append(f"  {when} {kind} {why}: {e.get('message', '')}")
    return "\n".join(lines)


def _scheduled(pod: dict[str, Any]) -> list[dict[str, Any]]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return [c for c in conditions if c.get("type") == "PodScheduled" and c.get("status") == "False"]
