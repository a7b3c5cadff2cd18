"""`kai-ray explain RayCluster/NAME` on Kubernetes: why a gang waits, read back from what
the operator wrote (its pods' PodScheduled condition, its owner's Events)."""

from __future__ import annotations

from typing import Any

from kai_ray.k8s.client import ApiError, Kube, KubeConfig

__all__ = ["KINDS", "explain_object"]

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
    return _render(
        kind, namespace, name, pods, [e for e in events if e["involvedObject"].get("name") == name]
    )


async def _pods(kube: Kube, kind: str, obj: dict[str, Any], ns: str) -> list[dict[str, Any]]:
    if kind == "Pod":
        return [obj]
    status = obj.get("status") or {}
    cluster = {
        "RayCluster": obj["metadata"]["name"],
        "RayJob": status.get("rayClusterName"),
        "RayService": (status.get("activeServiceStatus") or {}).get("rayClusterName"),
    }[kind]
    if not cluster:
        return []
    listed = await kube.get(f"/api/v1/namespaces/{ns}/pods", labelSelector=f"ray.io/cluster={cluster}")
    return list(listed["items"])


def _render(kind: str, ns: str, name: str, pods: list[dict[str, Any]], events: list[dict[str, Any]]) -> str:
    bound = [p for p in pods if p["spec"].get("nodeName")]
    lines = [f"{kind} {ns}/{name}: {len(bound)} of {len(pods)} pods bound"]
    waiting = [c for p in pods if not p["spec"].get("nodeName") for c in _scheduled(p)]
    if waiting:
        latest = max(waiting, key=lambda c: c.get("lastTransitionTime") or "")
        lines.append(f"waits: {latest.get('reason', '')}: {latest.get('message', '')}")
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
