"""Translation between Ray's view and the core's: nodes in, requests in, bundles out.

Ray resource names map to the core's: `GPU` -> gpu, `CPU` -> cpu, `memory` -> memory,
`gpu_memory` (ours, bytes of one device) -> gpu_memory; any other custom resource goes to
`Request.extended`. Ray's bookkeeping resources (node:*, placement-group shadows,
object store) are not schedulable and are dropped.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from kai_ray.core import JobInfo, NodeInfo, Request, TaskInfo, TaskStatus, TopologyConstraint
from kai_ray.core.quantity import parse_quantity
from kai_ray.ray.workload import State, Workload

__all__ = [
    "NODE_ID_LABEL",
    "NODE_TOPOLOGY",
    "bundle_for",
    "job_info",
    "largest_fit",
    "node_info",
    "parse_resources",
    "request_for",
]

NODE_ID_LABEL = "ray.io/node-id"
NODE_TOPOLOGY = "kai-ray-node"  # a one-level topology over node ids, for STRICT_PACK
GPU_MEMORY_LABEL = "kai-ray/gpu-memory"  # bytes per device, where NVML is not available
GPU_MODEL_LABEL = "ray.io/accelerator-type"
_DEFAULT_GPU_MEMORY = 80 * 1024**3
_CORE_NAMES = {"GPU", "CPU", "memory", "gpu_memory"}

_SPREAD = {"SPREAD": "preferred", "STRICT_SPREAD": "required"}
_CORE_COLUMN = {"GPU": "gpu", "CPU": "cpu", "memory": "memory"}  # Ray's names -> the core's


def _schedulable(name: str) -> bool:
    return not (
        name.startswith("node:")
        or name.startswith("accelerator_type:")
        or "_group_" in name
        or name.startswith("bundle_group")
        or name == "object_store_memory"
    )


def parse_resources(resources: Mapping[str, Any]) -> dict[str, float]:
    """Ray-style resources with quantities allowed (`memory: 4Gi`), as floats. Raises
    ValueError naming the resource when a value is not a non-negative quantity."""
    out: dict[str, float] = {}
    for name, value in resources.items():
        try:
            amount = parse_quantity(value)
        except ValueError as exc:
            raise ValueError(f"resources_per_worker[{name!r}]: {exc}") from None
        if amount < 0:
            raise ValueError(f"resources_per_worker[{name!r}] = {value!r}: must be >= 0")
        if name == "GPU" and amount > 1 and amount != int(amount):
            raise ValueError(f"resources_per_worker['GPU'] = {value!r}: above 1 a GPU count must be whole")
        out[name] = amount
    return out


def request_for(resources: Mapping[str, float]) -> Request:
    extended = tuple(sorted((k, float(v)) for k, v in resources.items() if k not in _CORE_NAMES))
    return Request(
        gpu=float(resources.get("GPU", 0.0)),
        gpu_memory=float(resources.get("gpu_memory", 0.0)),
        cpu=float(resources.get("CPU", 0.0)),
        memory=float(resources.get("memory", 0.0)),
        extended=extended,
    )


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


_SLOT_STATUS = {
    State.ADMITTING: TaskStatus.BINDING,
    State.RUNNING: TaskStatus.RUNNING,
    State.PREEMPTING: TaskStatus.RELEASING,
}


def job_info(w: Workload) -> JobInfo:
    """A live (non-terminal) workload as the core's JobInfo: one task per worker."""
    request = request_for(w.spec.resources_per_worker)
    tasks: list[TaskInfo] = []
    for name in w.task_names():
        slot = w.slots.get(name)
        if slot is None or w.state is State.QUEUED:
            tasks.append(TaskInfo(name, TaskStatus.PENDING, request, since=w.since))
            continue
        status = _SLOT_STATUS[w.state]
        if slot.releasing_at is not None:
            status = TaskStatus.RELEASING
        tasks.append(TaskInfo(name, status, request, node=slot.node, since=w.since))
    topology = None
    if w.spec.strategy == "STRICT_PACK":
        topology = TopologyConstraint(topology=NODE_TOPOLOGY, required=NODE_ID_LABEL)
    # PACK is the scheduler's binpack (or its configured spread); SPREAD and STRICT_SPREAD
    # mean what Ray means by them: a node per worker when possible, or always.
    spread = _SPREAD.get(w.spec.strategy, "")
    return JobInfo(
        name=w.id,
        queue=w.spec.queue,
        tasks=tasks,
        priority=w.spec.priority,
        preemptible=w.spec.preemptible,
        min_member=w.spec.gang,
        created_at=w.created_at,
        topology=topology,
        spread=spread,
    )


def largest_fit(request: Request, nodes: Iterable[NodeInfo]) -> str | None:
    """None when some node could hold one worker when empty; else why none can."""
    nodes = [n for n in nodes if not n.unschedulable]
    if not nodes:
        return "the cluster has no schedulable nodes"
    for n in nodes:
        gpu = request.gpu_fraction(n.gpu_memory) if request.gpu_memory else request.gpu
        ext = dict(n.extended)
        if (
            gpu <= n.gpus
            and request.cpu <= n.cpu
            and request.memory <= n.memory
            and all(ext.get(k, 0.0) >= v for k, v in request.extended)
        ):
            return None
    return (
        f"one worker asks for {_describe(request)} but the largest node has "
        f"GPU {max(n.gpus for n in nodes)}, CPU {max(n.cpu for n in nodes):g}; "
        "lower resources_per_worker or add a bigger node"
    )


def _describe(r: Request) -> str:
    parts = [f"GPU {r.gpu:g}"] if r.gpu else []
    if r.gpu_memory:
        parts.append(f"gpu_memory {r.gpu_memory:g}B")
    parts.append(f"CPU {r.cpu:g}")
    if r.memory:
        parts.append(f"memory {r.memory:g}B")
    parts += [f"{k} {v:g}" for k, v in r.extended]
    return ", ".join(parts)
