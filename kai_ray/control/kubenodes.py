"""Kubernetes Node objects as the core's NodeInfo, and what other pods hold on a node: pure
reading of the API server's JSON (no client, no I/O). The Kubernetes backend
(kai_ray.k8s.world) and the reader of KAI's own snapshots (kai_ray.control.kaisnapshot)
share these rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kai_ray.control.podrequests import GPU_RESOURCE, pod_request
from kai_ray.core import DEFAULT_GPU_TYPE, NodeInfo
from kai_ray.core.model.quantity import parse_quantity

__all__ = [
    "DEFAULT_GPU_MEMORY",
    "GPU_MEMORY_LABEL",
    "GPU_PRODUCT_LABEL",
    "GPU_RESOURCE",
    "node_info",
    "node_takes_pods",
    "outside_use",
]

GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per device, as GPU feature discovery labels it
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
DEFAULT_GPU_MEMORY = 80 * 1024**3
_NOT_EXTENDED = {"cpu", "memory", "pods", "ephemeral-storage", GPU_RESOURCE}


def node_info(
    node: Mapping[str, Any],
    outside: Mapping[str, float] | None = None,
    gpu_type_label: str | None = GPU_PRODUCT_LABEL,
) -> NodeInfo:
    """`gpu_type_label`: the label whose value is the node's GPU type (GPU feature
    discovery's product name unless the operator is told another); a node without it
    has the default type, as every node has with None (KAI's snapshots: KAI has no
    types, and they are read to decide as KAI does)."""
    meta, status = node["metadata"], node.get("status", {})
    alloc = status.get("allocatable") or status.get("capacity") or {}
    labels = dict(meta.get("labels") or {})
    extended = tuple(
        sorted(
            (k, parse_quantity(v))
            for k, v in alloc.items()
            if k not in _NOT_EXTENDED and not k.startswith("hugepages-")
        )
    )
    gpu_memory = (
        float(labels[GPU_MEMORY_LABEL]) * 2**20 if labels.get(GPU_MEMORY_LABEL) else DEFAULT_GPU_MEMORY
    )
    return NodeInfo(
        name=meta["name"],
        gpus=int(parse_quantity(alloc.get(GPU_RESOURCE, 0))),
        cpu=parse_quantity(alloc.get("cpu", 0)),
        memory=parse_quantity(alloc.get("memory", 0)),
        gpu_memory=gpu_memory,
        labels=labels,
        unschedulable=not node_takes_pods(node),
        extended=extended,
        gpu_model=labels.get(GPU_PRODUCT_LABEL, ""),
        gpu_type=(labels.get(gpu_type_label) if gpu_type_label else None) or DEFAULT_GPU_TYPE,
        used_outside=tuple(sorted((k, v) for k, v in (outside or {}).items() if v > 0)),
    )


def node_takes_pods(node: Mapping[str, Any]) -> bool:
    """Ready and not cordoned. (Taints keep off only the pods that do not tolerate them:
    see kai_ray.control.taints.)"""
    if node.get("spec", {}).get("unschedulable"):
        return False
    conditions = node.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def outside_use(pods: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """What these pods (of one node) hold, summed in one order (by namespace and name), so
    that the patched world and the full rebuild add the same floats in the same order."""
    into: dict[str, float] = defaultdict(float)
    for pod in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"])):
        try:
            request = pod_request(pod)
        except ValueError:
            request = pod_request({"spec": {**pod.get("spec", {})}, "metadata": {"name": "x"}})
        # An outside pod's GPU share (whole devices: others' sharing is not visible here).
        for name, amount in (
            ("gpu", request.gpu),
            ("cpu", request.cpu),
            ("memory", request.memory),
            *request.extended,
        ):
            into[name] += amount
    return dict(into)
