"""Workloads as the core sees them: the one place that turns the workload table into the
core's jobs, tasks and requests, and says what they hold.

A worker's resources are written with kai-ray's names, which are Ray's: `GPU`, `CPU`,
`memory`, `gpu_memory` (bytes of one device, for a memory-sized GPU fraction) and any
other (extended) resource; quantities such as "16Gi" are parsed here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from kai_ray.control.workload import HOLDING, SlotState, State, Workload, WorkloadSpec
from kai_ray.core import JobInfo, NodeInfo, Request, TaskInfo, TaskStatus, TopologyConstraint, device_share
from kai_ray.core.model.quantity import parse_quantity

__all__ = [
    "ACCELERATOR_PREFIX",
    "NODE_TOPOLOGY",
    "JobInfos",
    "Lazily",
    "held_by_workloads",
    "job_info",
    "kept",
    "parse_resources",
    "request_for",
    "resource_gpu_types",
    "same_nodes",
    "spec_gpu_types",
]

# Ray's resource naming a node's accelerator type (`accelerator_type:A100`): a Ray task
# with accelerator_type="A100" asks for 0.001 of it.
ACCELERATOR_PREFIX = "accelerator_type:"
NODE_TOPOLOGY = "kai-ray-node"  # a one-level topology over the node's own label: STRICT_PACK
_Info = TypeVar("_Info", NodeInfo, JobInfo)
_CORE_NAMES = {"GPU", "CPU", "memory", "gpu_memory"}
_SPREAD = {"SPREAD": "preferred", "STRICT_SPREAD": "required"}
_SLOT_STATUS = {
    State.ADMITTING: TaskStatus.BINDING,
    State.RUNNING: TaskStatus.RUNNING,
    State.PREEMPTING: TaskStatus.RELEASING,
}


def parse_resources(resources: Mapping[str, Any]) -> dict[str, float]:
    """Resources with quantities allowed (`memory: 4Gi`), as floats. Raises ValueError
    naming the resource when a value is not a non-negative quantity."""
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
    # An accelerator type asked for Ray's way is not a resource to the core: it is the
    # workload's GPU type (spec_gpu_types), and its bundles are pinned to nodes of it.
    extended = tuple(
        sorted(
            (k, float(v))
            for k, v in resources.items()
            if k not in _CORE_NAMES and not k.startswith(ACCELERATOR_PREFIX)
        )
    )
    return Request(
        gpu=float(resources.get("GPU", 0.0)),
        gpu_memory=float(resources.get("gpu_memory", 0.0)),
        cpu=float(resources.get("CPU", 0.0)),
        memory=float(resources.get("memory", 0.0)),
        extended=extended,
    )


def resource_gpu_types(resources: Mapping[str, Any]) -> list[str]:
    """The accelerator types asked for Ray's way ({"accelerator_type:A100": 0.001})."""
    return [
        k[len(ACCELERATOR_PREFIX) :]
        for k in resources
        if k.startswith(ACCELERATOR_PREFIX) and k != ACCELERATOR_PREFIX
    ]


def spec_gpu_types(spec: WorkloadSpec) -> tuple[str, ...]:
    """The GPU types the workload accepts: its accelerator_type option, else the type its
    resources name Ray's way; empty: any."""
    return tuple(spec.accelerator_type) or tuple(resource_gpu_types(spec.resources_per_worker))


def _gang_first(w: Workload) -> list[str]:
    """The workload's task names in the order the core is to read them: the gang's
    workers, then its elastic surplus, then those not placed. The core takes an elastic
    job's last tasks as its surplus (one at a time, never protected by min runtime); a
    gang placed again on other workers (a move) must not read as surplus, or the core
    would take it back one worker at a time and the whole workload would stop."""
    names = w.task_names()
    if w.state is State.QUEUED or not w.slots:
        return names

    def rank(name: str) -> int:
        slot = w.slots.get(name)
        return 2 if slot is None else int(slot.surplus)

    return sorted(names, key=rank)  # stable: worker order within each


def job_info(w: Workload, node_label: str) -> JobInfo:
    """A live (non-terminal) workload as the core's JobInfo: one task per worker.
    `node_label`: the label every node carries with its own name (STRICT_PACK packs
    within one value of it)."""
    request = request_for(w.spec.resources_per_worker)
    tasks: list[TaskInfo] = []
    for name in _gang_first(w):
        slot = w.slots.get(name)
        if slot is None or w.state is State.QUEUED:
            tasks.append(TaskInfo(name, TaskStatus.PENDING, request, since=w.since))
            continue
        status = _SLOT_STATUS[w.state]
        if slot.state is SlotState.RELEASING:
            status = TaskStatus.RELEASING
        tasks.append(TaskInfo(name, status, request, node=slot.node, since=w.since))
    topology = None
    if w.spec.strategy == "STRICT_PACK":
        topology = TopologyConstraint(topology=NODE_TOPOLOGY, required=node_label)
    # PACK is the scheduler's binpack (or its configured spread); SPREAD and STRICT_SPREAD
    # mean what Ray means by them: a node per worker when possible, or always.
    return JobInfo(
        name=w.id,
        queue=w.spec.queue,
        tasks=tasks,
        priority=w.spec.priority,
        preemptible=w.spec.preemptible,
        min_member=w.spec.gang,
        created_at=w.created_at,
        topology=topology,
        spread=_SPREAD.get(w.spec.strategy, ""),
        expected_runtime=w.spec.expected_runtime,
        max_runtime=w.spec.max_runtime,
        ran=w.ran,
        gpu_types=spec_gpu_types(w.spec),
        mixed_gpu_types=w.spec.mixed_accelerator_types,
        tenant=w.spec.tenant,
        tenant_labels=w.spec.tenant_labels,
    )


class JobInfos:
    """Each live workload's JobInfo, made again only when the workload changed: the
    controller calls `changed(wid)` on every change (and a workload's state, `since` and
    attempt are checked as well). Handing the core the same object for an unchanged
    workload is what lets an incremental cycle (core.CycleCache) skip it, and saves
    making thousands of TaskInfos every cycle."""

    def __init__(self, node_label: str) -> None:
        self.node_label = node_label
        self._infos: dict[str, tuple[tuple[object, ...], JobInfo]] = {}

    def changed(self, wid: str) -> None:
        self._infos.pop(wid, None)

    def request(self, w: Workload) -> Request:
        """The workload's request per worker (its spec's resources never change once it
        is submitted), kept as long as its JobInfo is."""
        cached = self._infos.get(w.id)
        if cached is not None and cached[1].tasks:
            return cached[1].tasks[0].request
        return request_for(w.spec.resources_per_worker)

    def get(self, w: Workload) -> JobInfo:
        mark = (w.state, w.since, w.attempt)
        cached = self._infos.get(w.id)
        if cached is not None and cached[0] == mark:
            return cached[1]
        info = job_info(w, self.node_label)
        self._infos[w.id] = (mark, info)
        return info


def same_nodes(old: Mapping[str, NodeInfo], new: Iterable[NodeInfo]) -> dict[str, NodeInfo]:
    """The new nodes by name, keeping the old object for a node that did not change (the
    incremental cycle compares nodes by identity before their fields)."""
    return {n.name: kept(old, n.name, n) for n in new}


def kept(last: Mapping[str, _Info], name: str, new: _Info) -> _Info:
    """The object last seen under `name` when it equals the new one, else the new one:
    an unchanged node or job keeps its identity, which the cycle cache reads."""
    before = last.get(name)
    return before if before is not None and (before is new or before == new) else new


class Lazily(Mapping[str, Mapping[str, float]]):
    """A mapping made on first read: the controller hands a ClusterSource what its
    workloads hold this way, so a source that never looks (the in-memory one, a
    simulator's) does not pay for a pass over every workload each step."""

    def __init__(self, make: Callable[[], Mapping[str, Mapping[str, float]]]) -> None:
        self._make = make
        self._value: Mapping[str, Mapping[str, float]] | None = None

    def _made(self) -> Mapping[str, Mapping[str, float]]:
        if self._value is None:
            self._value = self._make()
        return self._value

    def __getitem__(self, key: str) -> Mapping[str, float]:
        return self._made()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._made())

    def __len__(self) -> int:
        return len(self._made())


def held_by_workloads(
    workloads: Iterable[Workload],
    nodes: Mapping[str, NodeInfo],
    request_of: Callable[[Workload], Request] | None = None,
) -> dict[str, dict[str, float]]:
    """Per node, what the admitted workloads hold there, in the core's resource names
    (gpu, cpu, memory, extended). A reservation counts from the moment it is recorded,
    ready or not, so that an estimate of outside use errs towards less capacity, never
    towards double booking. `request_of`: a workload's request per worker, when the
    caller keeps them (JobInfos.request), else read from its spec."""
    held: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for w in workloads:
        if w.state not in HOLDING or not w.slots:
            continue
        request = request_of(w) if request_of is not None else request_for(w.spec.resources_per_worker)
        for s in w.slots.values():
            node = nodes.get(s.node)
            # On a node it does not know, no device sizes a memory slice: its gpu figure.
            gpu = device_share(request, node.gpu_memory) if node is not None else request.gpu
            amounts = (("gpu", gpu), ("cpu", request.cpu), ("memory", request.memory), *request.extended)
            for name, amount in amounts:
                if amount > 0:
                    held[s.node][name] += amount
    return {k: dict(v) for k, v in held.items()}
