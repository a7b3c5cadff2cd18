"""Translation between Ray's view and the core's: nodes in, bundles out.

Ray resource names map to the core's: `GPU` -> gpu, `CPU` -> cpu, `memory` -> memory;
any other custom resource is an extended resource. Ray's bookkeeping resources (node:*,
placement-group shadows, object store) are not schedulable and are dropped. (A worker's
request is built by kai_ray.control.snapshot: kai-ray's resource names are Ray's.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from kai_ray.control.snapshot import ACCELERATOR_PREFIX
from kai_ray.core import DEFAULT_GPU_TYPE, NodeInfo, Request

__all__ = [
    "NODE_ID_LABEL",
    "RAY_NAMES",
    "autoscaler_request",
    "bundle_for",
    "gpu_type",
    "node_info",
    "short_node_ids",
]

NODE_ID_LABEL = "ray.io/node-id"
GPU_MEMORY_LABEL = "kai-ray/gpu-memory"  # bytes per device, where NVML is not available
GPU_MODEL_LABEL = "ray.io/accelerator-type"
_DEFAULT_GPU_MEMORY = 80 * 1024**3
_CORE_NAMES = {"GPU", "CPU", "memory", "gpu_memory"}

_CORE_COLUMN = {"GPU": "gpu", "CPU": "cpu", "memory": "memory"}  # Ray's names -> the core's
RAY_NAMES = {core: ray for ray, core in _CORE_COLUMN.items()}  # the core's names -> Ray's


def _schedulable(name: str) -> bool:
    return not (
        name.startswith("node:")
        or name.startswith(ACCELERATOR_PREFIX)
        or "_group_" in name
        or name.startswith("bundle_group")
        or name == "object_store_memory"
    )


def gpu_type(labels: Mapping[str, str], resources: Mapping[str, float]) -> str:
    """The node's GPU type, as Ray names accelerator types: its `ray.io/accelerator-type`
    label, else its `accelerator_type:<T>` resource (what Ray's GPU detection and
    `--resources` set), else the default type."""
    label = labels.get(GPU_MODEL_LABEL)
    if label:
        return str(label)
    # A node has one accelerator type; sorted, in case one is ever given two by hand.
    named = sorted(
        k[len(ACCELERATOR_PREFIX) :]
        for k, v in resources.items()
        if k.startswith(ACCELERATOR_PREFIX) and v > 0
    )
    return next((t for t in named if t), DEFAULT_GPU_TYPE)


def node_info(
    node: Mapping[str, Any],
    gpu_devices: Mapping[str, Any] | None = None,
    foreign: Mapping[str, float] | None = None,
) -> NodeInfo:
    """A `ray.nodes()` entry as the core's NodeInfo (name = Ray node id in hex).

    `gpu_devices` is what NVML discovery reported for the node ({"model", "memory"} of its
    first device); without it the node's labels or an 80 GiB default stand in. `foreign`
    is what work outside kai-ray holds there: the core counts it as used outside the
    scheduler (whole GPUs: a partly used device is not offered)."""
    res: dict[str, float] = dict(node.get("Resources", {}))
    outside = []
    for name, used in sorted((foreign or {}).items()):
        if name in res and used > 0:
            core_name = _CORE_COLUMN.get(name, name)
            outside.append((core_name, float(math.ceil(used - 1e-9)) if name == "GPU" else used))
    if "GPU" in res:
        res["GPU"] = float(int(res["GPU"] + 1e-9))
    labels = dict(node.get("Labels") or {})
    labels.setdefault(NODE_ID_LABEL, node["NodeID"])
    gpu_memory = float(labels.get(GPU_MEMORY_LABEL, 0) or 0) or _DEFAULT_GPU_MEMORY
    model = labels.get(GPU_MODEL_LABEL, "")
    if gpu_devices:
        gpu_memory = float(gpu_devices.get("memory") or gpu_memory)
        model = str(gpu_devices.get("model") or model)
    extended = tuple(
        sorted((k, float(v)) for k, v in res.items() if k not in _CORE_NAMES and _schedulable(k))
    )
    return NodeInfo(
        name=node["NodeID"],
        gpus=int(res.get("GPU", 0)),
        cpu=float(res.get("CPU", 0.0)),
        memory=float(res.get("memory", 0.0)),
        gpu_memory=gpu_memory,
        labels=labels,
        unschedulable=bool(node.get("kai_unschedulable", False)),
        extended=extended,
        gpu_model=model,
        gpu_type=gpu_type(labels, res),
        used_outside=tuple(outside),
    )


def bundle_for(request: Request, node: NodeInfo) -> dict[str, float]:
    """The Ray bundle for one worker on the node the core chose. A GPU-memory request
    becomes the fraction of that node's device it amounts to."""
    bundle: dict[str, float] = {k: v for k, v in request.extended if v > 0}
    gpu = request.gpu_fraction(node.gpu_memory) if request.gpu_memory > 0 else request.gpu
    for name, amount in (("CPU", request.cpu), ("GPU", gpu), ("memory", request.memory)):
        if amount > 0:
            bundle[name] = round(amount, 4)
    # Ray refuses an empty bundle; a token of CPU keeps a resource-free worker placeable.
    return bundle or {"CPU": 0.001}


def autoscaler_request(bundles: list[dict[str, float]]) -> list[dict[str, float]]:
    """kai-ray's bundles in the names Ray's autoscaler knows: a slice of GPU memory asks
    for a node with a GPU (its size on a node not yet started is unknown)."""
    out = []
    for bundle in bundles:
        ray_bundle = {k: v for k, v in bundle.items() if k != "gpu_memory"}
        if bundle.get("gpu_memory", 0) > 0:
            ray_bundle["GPU"] = max(ray_bundle.get("GPU", 0.0), 1.0)
        out.append(ray_bundle or {"CPU": 0.001})
    return out


# Ray's node ids are 56 hex digits; people read the first 12, as `ray status` shows them.
_RAY_NODE_ID = re.compile(r"\b[0-9a-f]{56}\b")


def short_node_ids(view: dict[str, Any]) -> dict[str, Any]:
    """A workload's view with node ids in its reason and history shortened to 12 digits."""

    def short(text: str) -> str:
        return _RAY_NODE_ID.sub(lambda m: m.group(0)[:12], text)

    view["reason"] = short(view["reason"])
    view["history"] = [[at, old, new, short(why)] for at, old, new, why in view["history"]]
    return view
