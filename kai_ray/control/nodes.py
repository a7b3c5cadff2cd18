"""Nodes for people: what each holds, for `kai-ray status` and the dashboard."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kai_ray.core import NodeInfo

__all__ = ["node_usage"]


def node_usage(
    node: NodeInfo, held: Mapping[str, float], hidden_labels: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A node's size, what the scheduler's workloads hold there (`held`, core resource
    names), what work outside the scheduler holds, and what is free (GPUs and CPUs)."""
    outside = dict(node.used_outside)
    out: dict[str, Any] = {
        "id": node.name,
        "gpu_model": node.gpu_model,
        "gpu_memory": node.gpu_memory,
        "memory": node.memory,
        "labels": {k: v for k, v in node.labels.items() if k not in hidden_labels},
        "unschedulable": node.unschedulable,
        "gpus": float(node.gpus),
        "cpu": node.cpu,
    }
    for name, total in (("gpu", float(node.gpus)), ("cpu", node.cpu)):
        used, other = held.get(name, 0.0), outside.get(name, 0.0)
        out[f"{name}_used"] = round(used, 4)
        out[f"{name}_outside"] = round(other, 4)
        out[f"{name}_free"] = round(max(0.0, total - used - other), 4)
    return out
