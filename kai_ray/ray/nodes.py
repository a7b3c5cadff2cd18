"""The cluster as the core sees it: Ray's nodes, with what work outside kai-ray holds.

No Ray import: the engine passes in what `ray.nodes()` and Ray's per-node available
resources said, and the workloads it admitted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kai_ray.core import NodeInfo
from kai_ray.ray.translate import NODE_ID_LABEL, bundle_for, node_info, request_for
from kai_ray.ray.workload import HOLDING, Workload

__all__ = ["cluster_nodes", "held_by_workloads", "node_usage"]


def cluster_nodes(
    raw: list[dict[str, Any]],
    available: Mapping[str, Mapping[str, float]],
    gpu_devices: Mapping[str, Mapping[str, Any]],
    workloads: Iterable[Workload],
) -> dict[str, NodeInfo]:
    """Node id -> NodeInfo. Bundles of our own workloads are sized on the nodes as Ray
    reports them. Work outside kai-ray is passed on as such: it comes and goes, so it
    makes a job wait (and says so), while a submission is refused only when no node is
    big enough."""
    plain = {n["NodeID"]: node_info(n, gpu_devices.get(n["NodeID"])) for n in raw}
    ours = held_by_workloads(workloads, plain)
    out = {}
    for n in raw:
        nid = n["NodeID"]
        out[nid] = node_info(n, gpu_devices.get(nid), _foreign(n, available.get(nid), ours.get(nid, {})))
    return out


def held_by_workloads(
    workloads: Iterable[Workload], nodes: Mapping[str, NodeInfo]
) -> dict[str, dict[str, float]]:
    """Per node, the resources kai-ray's admitted workloads hold there. Our groups count
    from the moment they are recorded, ready or not, so that an estimate of outside use
    errs towards less capacity, never towards double booking."""
    ours: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for w in workloads:
        if w.state not in HOLDING or not w.slots:
            continue
        request = request_for(w.spec.resources_per_worker)
        for s in w.slots.values():
            node = nodes.get(s.node)
            for name, amount in (bundle_for(request, node) if node else {}).items():
                ours[s.node][name] += amount
    return {k: dict(v) for k, v in ours.items()}


def _foreign(
    node: Mapping[str, Any], free: Mapping[str, float] | None, ours: Mapping[str, float]
) -> dict[str, float]:
    """What Ray has handed out on the node beyond kai-ray's own groups: other users' and
    schedulers' work, which the core must not offer again (unknown: nothing)."""
    if free is None:
        return {}
    total = node.get("Resources", {})
    used = {k: total[k] - free.get(k, 0.0) - ours.get(k, 0.0) for k in ("CPU", "GPU", "memory") if k in total}
    return {k: v for k, v in used.items() if v > 1e-6}


def node_usage(node: NodeInfo, held: Mapping[str, float]) -> dict[str, Any]:
    """A node for people: its size, what kai-ray's workloads hold there, what work
    outside kai-ray holds, and what is free (GPUs and CPUs)."""
    outside = dict(node.used_outside)
    out: dict[str, Any] = {
        "id": node.name,
        "gpu_model": node.gpu_model,
        "gpu_memory": node.gpu_memory,
        "memory": node.memory,
        "labels": {k: v for k, v in node.labels.items() if k != NODE_ID_LABEL},
        "unschedulable": node.unschedulable,
    }
    for ray_name, core_name, total in (("GPU", "gpu", float(node.gpus)), ("CPU", "cpu", node.cpu)):
        used, other = held.get(ray_name, 0.0), outside.get(core_name, 0.0)
        out[f"{core_name}s" if core_name == "gpu" else core_name] = total
        out[f"{core_name}_used"] = round(used, 4)
        out[f"{core_name}_outside"] = round(other, 4)
        out[f"{core_name}_free"] = round(max(0.0, total - used - other), 4)
    return out
