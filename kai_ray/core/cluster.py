"""The cycle's working state: node capacity as numpy arrays, GPU devices, queue usage, jobs.

Built once per cycle from a `ClusterSnapshot` and mutated only through a `Statement`
(see statement.py), so that every change can be rolled back.

Node capacity columns: 0 = whole GPU devices, 1 = cpu cores, 2 = memory bytes, then the
extended resources. Fractional GPU work lives on `Device`s (a device hosting fractions
counts as one used whole device at node level).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kai_ray.core.model import (
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    Request,
    TaskInfo,
    TaskStatus,
)
from kai_ray.core.queues import QueueTree

__all__ = ["ClusterState", "Device", "Job", "Nodes", "QueueUsage", "Task", "build_state"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
EPS = 1e-9


@dataclass(slots=True)
class Device:
    """One GPU shared by fractional tasks: the part of it free now and being released."""

    idle: float = 1.0
    releasing: float = 0.0


class Nodes:
    """Per-node capacity, vectorised: rows are nodes, columns resources."""

    def __init__(self, infos: Sequence[NodeInfo], extended: Sequence[str]) -> None:
        self.infos = list(infos)
        self.names = [n.name for n in infos]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.columns = ("gpu", "cpu", "memory", *extended)
        n, r = len(infos), len(self.columns)
        self.capacity = np.zeros((n, r))
        for i, node in enumerate(infos):
            ext = dict(node.extended)
            self.capacity[i] = [node.gpus, node.cpu, node.memory, *(ext.get(e, 0.0) for e in extended)]
        self.idle = self.capacity.copy()
        self.releasing = np.zeros((n, r))
        self.schedulable: BoolArray = np.array([not x.unschedulable for x in infos], dtype=bool)
        self.device_memory = np.array([x.gpu_memory for x in infos], dtype=np.float64)
        self.gpus = np.array([x.gpus for x in infos], dtype=np.int64)
        self.devices: list[dict[int, Device]] = [{} for _ in infos]
        # Best fractional room per node (shared devices only), kept in step with `devices`.
        self.frac_idle = np.zeros(n)
        self.frac_future = np.zeros(n)

    def __len__(self) -> int:
        return len(self.names)

    def refresh_fractions(self, node: int) -> None:
        devs = self.devices[node].values()
        self.frac_idle[node] = max((d.idle for d in devs), default=0.0)
        self.frac_future[node] = max((d.idle + d.releasing for d in devs), default=0.0)

    def new_device_index(self, node: int) -> int:
        used = self.devices[node]
        return next(i for i in range(len(used) + 1) if i not in used)


class QueueUsage:
    """What each queue holds, summed up the tree (a queue's figures include its subtree)."""

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        q = len(tree)
        self.allocated = np.zeros((q, 3))
        self.allocated_nonpreemptible = np.zeros((q, 3))
        self.requested = np.zeros((q, 3))

    def add(self, queue: int, amount: FloatArray, nonpreemptible: bool, sign: float = 1.0) -> None:
        for a in self.tree.ancestors[queue]:
            self.allocated[a] += sign * amount
            if nonpreemptible:
                self.allocated_nonpreemptible[a] += sign * amount

    def add_request(self, queue: int, amount: FloatArray) -> None:
        for a in self.tree.ancestors[queue]:
            self.requested[a] += amount


@dataclass(slots=True, eq=False)
class Task:
    info: TaskInfo
    job: Job
    index: int  # position in its job
    demand: FloatArray  # node-level columns; gpu column = whole devices only
    fraction_request: bool  # shares a device (gpu fraction or gpu memory)
    status: TaskStatus
    node: int = -1
    device: int = -1
    since: float = 0.0
    # Set when a running task is evicted this cycle: where it is releasing from, and why.
    evicted_from: tuple[int, int] | None = None
    evict_reason: tuple[str, str] | None = None  # (action, reason)
    placed_by: str = ""  # the action that placed it this cycle

    @property
    def request(self) -> Request:
        return self.info.request

    def fraction_on(self, nodes: Nodes, node: int) -> float:
        return self.info.request.gpu_fraction(float(nodes.device_memory[node]))


@dataclass(slots=True, eq=False)
class Job:
    info: JobInfo
    queue: int
    order: int  # position in the snapshot, the last tie-break
    tasks: list[Task] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def gang(self) -> int:
        return self.info.gang_size

    def active(self) -> int:
        return sum(1 for t in self.tasks if t.status.is_active)

    def pending(self) -> list[Task]:
        return [t for t in self.tasks if t.status is TaskStatus.PENDING]

    def running(self) -> list[Task]:
        return [t for t in self.tasks if t.status is TaskStatus.RUNNING]


@dataclass(slots=True)
class ClusterState:
    nodes: Nodes
    tree: QueueTree
    usage: QueueUsage
    jobs: list[Job]
    job_index: dict[str, Job]
    invalid: dict[str, str]  # job -> why it cannot be considered
    min_device_memory: float  # to size gpu-memory requests before they are placed

    def queue_amount(self, task: Task, node: int = -1) -> FloatArray:
        """What the task counts against its queue: [gpu (fractions as such), cpu, memory]."""
        req = task.info.request
        if req.gpu_memory > 0:
            mem = self.nodes.device_memory[node] if node >= 0 else self.min_device_memory
            gpu = req.gpu_fraction(float(mem))
        else:
            gpu = req.gpu
        return np.array([gpu, req.cpu, req.memory])


def build_state(snapshot: ClusterSnapshot, tree: QueueTree) -> ClusterState:
    extended = sorted(
        {k for n in snapshot.nodes for k, _ in n.extended}
        | {k for j in snapshot.jobs for t in j.tasks for k, _ in t.request.extended}
    )
    nodes = Nodes(snapshot.nodes, extended)
    gpu_mem = [n.gpu_memory for n in snapshot.nodes if n.gpus > 0]
    state = ClusterState(
        nodes=nodes,
        tree=tree,
        usage=QueueUsage(tree),
        jobs=[],
        job_index={},
        invalid={},
        min_device_memory=min(gpu_mem) if gpu_mem else 0.0,
    )
    demand_cache: dict[Request, FloatArray] = {}
    for order, info in enumerate(snapshot.jobs):
        reason = _job_problem(info, tree)
        if reason:
            state.invalid[info.name] = reason
            continue
        job = Job(info=info, queue=tree.index[info.queue], order=order)
        for i, t in enumerate(info.tasks):
            demand = demand_cache.get(t.request)
            if demand is None:
                demand = demand_cache[t.request] = _demand(t.request, nodes.columns)
            status = TaskStatus.RUNNING if t.status is TaskStatus.BINDING else t.status
            task = Task(t, job, i, demand, t.request.is_fractional, status, since=t.since)
            job.tasks.append(task)
            _account_input_task(state, task)
        state.jobs.append(job)
        state.job_index[job.name] = job
    return state


def _demand(req: Request, columns: Sequence[str]) -> FloatArray:
    whole = 0.0 if req.is_fractional else req.gpu
    ext = dict(req.extended)
    return np.array([whole, req.cpu, req.memory, *(ext.get(c, 0.0) for c in columns[3:])])


def _job_problem(info: JobInfo, tree: QueueTree) -> str:
    q = tree.index.get(info.queue)
    if q is None:
        return (
            f"job {info.name!r}: queue {info.queue!r} does not exist; "
            "create the queue or submit to an existing one"
        )
    if not tree.is_leaf[q]:
        return (
            f"job {info.name!r}: queue {info.queue!r} has child queues and cannot hold jobs; "
            "submit to one of its leaf queues"
        )
    return ""


def _account_input_task(state: ClusterState, task: Task) -> None:
    """Charge a task as given in the snapshot to its node, device and queue."""
    status, info = task.status, task.info
    usage, job = state.usage, task.job
    if status is TaskStatus.PENDING:
        usage.add_request(job.queue, state.queue_amount(task))
        return
    if not status.holds_capacity or info.node is None:
        return
    node = state.nodes.index.get(info.node)
    if node is None:
        return  # a node that left the cluster: its tasks hold nothing here
    task.node = node
    nodes = state.nodes
    releasing = status is TaskStatus.RELEASING
    nodes.idle[node] -= task.demand
    if releasing:
        nodes.releasing[node] += task.demand
    if task.fraction_request:
        task.device = _charge_device(nodes, node, info.gpu_group, task.fraction_on(nodes, node), releasing)
    amount = state.queue_amount(task, node)
    if not releasing:
        usage.add(job.queue, amount, not job.info.preemptible)
        usage.add_request(job.queue, amount)


def _charge_device(nodes: Nodes, node: int, group: int | None, fraction: float, releasing: bool) -> int:
    devices = nodes.devices[node]
    if group is None:
        fitting = [i for i, d in sorted(devices.items()) if d.idle + EPS >= fraction]
        group = fitting[0] if fitting else nodes.new_device_index(node)
    device = devices.get(group)
    if device is None:
        device = devices[group] = Device()
        nodes.idle[node, 0] -= 1
    device.idle -= fraction
    if releasing:
        device.releasing += fraction
    nodes.refresh_fractions(node)
    return group
