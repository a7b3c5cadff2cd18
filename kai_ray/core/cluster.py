"""The cycle's working state: node capacity as numpy arrays, GPU devices, queue usage, jobs.

Built once per cycle from a `ClusterSnapshot` and mutated only through a `Statement`
(see statement.py), so that every change can be rolled back.

Node capacity columns: 0 = whole GPU devices, 1 = cpu cores, 2 = memory bytes, then the
extended resources. Fractional GPU work lives on `Device`s (a device hosting fractions
counts as one used whole device at node level).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kai_ray.core.leafsums import AmountKey, LeafSums, add_groups
from kai_ray.core.model import (
    SPREAD_MODES,
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    Request,
    TaskInfo,
    TaskStatus,
)
from kai_ray.core.queues import QueueTree

__all__ = [
    "ClusterState",
    "Device",
    "Job",
    "Nodes",
    "QueueUsage",
    "RequestCache",
    "Task",
    "build_state",
    "build_state_and_leaves",
    "charge_device",
    "cluster_total",
    "count_tasks",
    "extended_columns",
    "job_problem",
    "node_demand",
    "per_request",
    "subtree_sums",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
EPS = 1e-9
_ACTIVE = frozenset({TaskStatus.BINDING, TaskStatus.PIPELINED, TaskStatus.RUNNING})
_PENDING = TaskStatus.PENDING
_HOLDING_INPUT = frozenset({TaskStatus.RUNNING, TaskStatus.RELEASING, TaskStatus.PIPELINED})


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
        self.capacity = np.zeros((n, r), dtype=np.float64)
        for i, node in enumerate(infos):
            ext = dict(node.extended)
            self.capacity[i] = [node.gpus, node.cpu, node.memory, *(ext.get(e, 0.0) for e in extended)]
        self.idle = self.capacity.copy()
        column = {name: c for c, name in enumerate(self.columns)}
        for i, node in enumerate(infos):
            for name, amount in node.used_outside:
                c = column.get(name)
                if c is not None:
                    self.idle[i, c] = max(0.0, self.idle[i, c] - amount)
        # What work outside the scheduler holds, per node (for reasons only).
        self.outside = self.capacity - self.idle
        # Idle before any task of ours: what a node's row is rebuilt from (incremental.py).
        self.base_idle = self.idle.copy()
        self.releasing = np.zeros((n, r))
        self.schedulable: BoolArray = np.array([not x.unschedulable for x in infos], dtype=bool)
        self.device_memory = np.array([x.gpu_memory for x in infos], dtype=np.float64)
        self.gpus = np.array([x.gpus for x in infos], dtype=np.int64)
        self.devices: list[dict[int, Device]] = [{} for _ in infos]
        # Best fractional room per node (shared devices only, released parts included),
        # kept in step with `devices`.
        self.frac_future = np.zeros(n)
        # Indexes over idle capacity (see nodeindex.py) to keep in step on every change.
        self.watchers: list[Callable[[int], None]] = []

    def changed(self, node: int) -> None:
        for watch in self.watchers:
            watch(node)

    def __len__(self) -> int:
        return len(self.names)

    def refresh_fractions(self, node: int) -> None:
        devs = self.devices[node].values()
        self.frac_future[node] = max((d.idle + d.releasing for d in devs), default=0.0)

    def new_device_index(self, node: int) -> int:
        used = self.devices[node]
        return next(i for i in range(len(used) + 1) if i not in used)


class QueueUsage:
    """What each queue holds, summed up the tree (a queue's figures include its subtree).
    Rows are plain float lists: they change once per placement, and numpy's per-call cost
    on three numbers is larger than the arithmetic."""

    def __init__(self, tree: QueueTree) -> None:
        self.tree = tree
        q = len(tree)
        self.allocated: list[list[float]] = [[0.0, 0.0, 0.0] for _ in range(q)]
        self.allocated_nonpreemptible: list[list[float]] = [[0.0, 0.0, 0.0] for _ in range(q)]
        self.requested = np.zeros((q, 3))

    def add(self, queue: int, amount: FloatArray, nonpreemptible: bool, sign: float = 1.0) -> None:
        g, c, m = amount.tolist()
        if sign < 0:
            g, c, m = -g, -c, -m
        for a in self.tree.ancestors[queue]:
            row = self.allocated[a]
            row[0] += g
            row[1] += c
            row[2] += m
            if nonpreemptible:
                row = self.allocated_nonpreemptible[a]
                row[0] += g
                row[1] += c
                row[2] += m

    def set_leaves(self, allocated: FloatArray, nonpreemptible: FloatArray, requested: FloatArray) -> None:
        """Every queue's figures from the leaf queues' own."""
        sums = subtree_sums(self.tree, np.hstack((allocated, nonpreemptible, requested)))
        self.allocated = sums[:, 0:3].tolist()
        self.allocated_nonpreemptible = sums[:, 3:6].tolist()
        self.requested[:] = sums[:, 6:9]

    def allocated_row(self, queue: int) -> FloatArray:
        return np.array(self.allocated[queue])


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
    amount: FloatArray | None = None  # queue amount, when it does not depend on the node

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
    active_count: int = 0  # tasks counting toward the gang; kept by the Statement
    selector: tuple[tuple[str, str], ...] = ()  # node selector, sorted: a cache key
    # Every task shares one demand and one queue amount (not sized per node): any n of
    # its tasks ask for n times the first one's.
    uniform: bool = False
    pending_count: int = 0  # tasks Pending; kept by the Statement
    # Search keys (failures.search_key) by (action, tasks) while no task is active: fixed
    # then for a uniform job, so a job kept between cycles (incremental.py) keys once.
    keys: dict[tuple[str, int], tuple[object, ...]] | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def gang(self) -> int:
        return self.info.gang_size

    def active(self) -> int:
        return self.active_count

    def pending(self) -> list[Task]:
        n = self.pending_count
        if n == len(self.tasks) or n == 0:  # a job waiting whole, or not waiting at all
            return self.tasks[:] if n else []
        return [t for t in self.tasks if t.status is TaskStatus.PENDING]

    def running(self) -> list[Task]:
        return [t for t in self.tasks if t.status is TaskStatus.RUNNING]

    def running_since(self) -> float:
        """When its earliest running task started (0 when none runs)."""
        return min((t.since for t in self.tasks if t.status is TaskStatus.RUNNING), default=0.0)

    def missing(self) -> list[Task]:
        """The pending tasks its gang still misses (fewer when fewer are pending)."""
        return self.pending()[: max(0, self.gang - self.active_count)]


@dataclass(slots=True)
class ClusterState:
    nodes: Nodes
    tree: QueueTree
    usage: QueueUsage
    jobs: list[Job]
    job_index: dict[str, Job]
    invalid: dict[str, str]  # job -> why it cannot be considered
    min_device_memory: float  # to size gpu-memory requests before they are placed
    # The jobs that may hold pending tasks, in `jobs` order; None: any of them may. A
    # cycle never makes a task pending (an evicted one is Releasing), so a list made
    # before the cycle holds through it (kept by incremental.py, to skip the others).
    waiting: list[Job] | None = None

    def maybe_pending(self) -> list[Job]:
        return self.jobs if self.waiting is None else self.waiting

    def queue_amount(self, task: Task, node: int = -1) -> FloatArray:
        """What the task counts against its queue: [gpu (fractions as such), cpu, memory].
        Fixed per request, except a gpu-memory slice, whose share depends on the device."""
        if task.amount is not None:
            return task.amount
        req = task.info.request
        mem = self.nodes.device_memory[node] if node >= 0 else self.min_device_memory
        return np.array([req.gpu_fraction(float(mem)), req.cpu, req.memory], dtype=np.float64)


RequestCache = dict[Request, tuple[FloatArray, FloatArray | None]]


def build_state(snapshot: ClusterSnapshot, tree: QueueTree) -> ClusterState:
    return build_state_and_leaves(snapshot, tree, {})[0]


def extended_columns(snapshot: ClusterSnapshot) -> list[str]:
    return sorted(
        {k for n in snapshot.nodes for k, _ in n.extended}
        | {k for j in snapshot.jobs for t in j.tasks for k, _ in t.request.extended}
    )


def build_state_and_leaves(
    snapshot: ClusterSnapshot, tree: QueueTree, requests: RequestCache
) -> tuple[ClusterState, list[FloatArray], LeafSums]:
    """The state, each leaf queue's own [allocated, non-preemptible, requested] before
    the subtree sums, and the same as counts (leafsums.py). `requests`: demand and
    amount per request, filled and reused."""
    nodes = Nodes(snapshot.nodes, extended_columns(snapshot))
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
    builder = _Builder(state, requests)
    builder.add_jobs(snapshot.jobs)
    state.waiting = [j for j in state.jobs if j.pending_count]
    return state, [builder.leaf_allocated, builder.leaf_nonpreemptible, builder.leaf_requested], builder.sums


class _Builder:
    """Turns the snapshot's jobs into working state, charging nodes and queues in bulk
    (per-task numpy calls would dominate a cycle at ten thousand nodes)."""

    def __init__(self, state: ClusterState, requests: RequestCache) -> None:
        self.state = state
        self.requests = requests
        self.by_identity: dict[int, tuple[FloatArray, FloatArray | None]] = {}
        self.keep_alive: list[Request] = []  # ids stay valid while the builder runs
        self.pending: dict[tuple[int, int], int] = {}  # (queue, id(amount)) -> tasks
        self.held: dict[tuple[int, int, bool], int] = {}  # (queue, id(amount), non-preemptible)
        self.amounts: dict[int, FloatArray] = {}
        q, r = len(state.tree), len(state.nodes.columns)
        self.leaf_allocated = np.zeros((q, 3))
        self.leaf_nonpreemptible = np.zeros((q, 3))
        self.leaf_requested = np.zeros((q, 3))
        self.sums = LeafSums(q)  # the same figures as counts, for a cycle cache to keep
        self.held_rows: list[int] = []
        self.held_demand: list[FloatArray] = []
        self.releasing_rows: list[int] = []
        self.releasing_demand: list[FloatArray] = []
        self.columns = r

    def add_jobs(self, infos: Sequence[JobInfo]) -> None:
        state, tree = self.state, self.state.tree
        for order, info in enumerate(infos):
            reason = job_problem(info, tree)
            if reason:
                state.invalid[info.name] = reason
                continue
            job = Job(info=info, queue=tree.index[info.queue], order=order)
            if info.node_selector:
                job.selector = tuple(sorted(info.node_selector.items()))
            tasks = info.tasks
            if not (tasks and tasks[0].status is _PENDING and self._all_pending(job, tasks)):
                for i, t in enumerate(info.tasks):
                    job.tasks.append(self._task(job, i, t))
                count_tasks(job)
            state.jobs.append(job)
            state.job_index[job.name] = job
        self._flush()

    def _all_pending(self, job: Job, infos: Sequence[TaskInfo]) -> bool:
        """The common case, a job still waiting whole with one shared request: its tasks
        are built and counted in one go. False (nothing done) for any other job."""
        req = infos[0].request
        pending = TaskStatus.PENDING
        for t in infos:
            if t.status is not pending or t.request is not req:
                return False
        demand, amount = self._per_request_cached(req)
        if amount is None:
            return False  # gpu-memory slices: sized per node, charged one by one
        fractional = req.gpu_memory > 0 or 0 < req.gpu < 1
        job.uniform = True
        job.pending_count = len(infos)
        job.tasks = [
            Task(t, job, i, demand, fractional, pending, since=t.since, amount=amount)
            for i, t in enumerate(infos)
        ]
        key = (job.queue, id(amount))
        self.pending[key] = self.pending.get(key, 0) + len(infos)
        self.amounts[id(amount)] = amount
        return True

    def _per_request_cached(self, req: Request) -> tuple[FloatArray, FloatArray | None]:
        # Requests are usually shared objects: look up by identity before hashing fields.
        cached = self.by_identity.get(id(req))
        if cached is None:
            cached = self.requests.get(req)
            if cached is None:
                cached = self.requests[req] = per_request(req, self.state.nodes.columns)
            self.by_identity[id(req)] = cached
            self.keep_alive.append(req)
        return cached

    def _task(self, job: Job, index: int, info: TaskInfo) -> Task:
        req = info.request
        cached = self.by_identity.get(id(req))
        demand, amount = cached if cached is not None else self._per_request_cached(req)
        status = info.status
        if status is TaskStatus.BINDING:
            status = TaskStatus.RUNNING
        task = Task(
            info,
            job,
            index,
            demand,
            req.gpu_memory > 0 or 0 < req.gpu < 1,
            status,
            since=info.since,
            amount=amount,
        )
        if status is TaskStatus.PENDING:
            if amount is None:
                self.leaf_requested[job.queue] += self.state.queue_amount(task)
                self.sums.per_node[job.queue] += 1
            else:
                key = (job.queue, id(amount))
                self.pending[key] = self.pending.get(key, 0) + 1
                self.amounts[id(amount)] = amount
        elif status in _HOLDING_INPUT and info.node is not None:
            self._charge(task, info.node)
        return task

    def _charge(self, task: Task, node_name: str) -> None:
        nodes = self.state.nodes
        node = nodes.index.get(node_name)
        if node is None:
            return  # a node that left the cluster: its tasks hold nothing here
        task.node = node
        releasing = task.status is TaskStatus.RELEASING
        self.held_rows.append(node)
        self.held_demand.append(task.demand)
        if releasing:
            self.releasing_rows.append(node)
            self.releasing_demand.append(task.demand)
        if task.fraction_request:
            fraction = task.fraction_on(nodes, node)
            task.device = charge_device(nodes, node, task.info.gpu_group, fraction, releasing)
        if not releasing:
            q = task.job.queue
            np_ = not task.job.info.preemptible
            if task.amount is None:
                amount = self.state.queue_amount(task, node)
                self.leaf_allocated[q] += amount
                self.sums.per_node[q] += 1
                self.leaf_requested[q] += amount
                if np_:
                    self.leaf_nonpreemptible[q] += amount
            else:
                key = (q, id(task.amount), np_)
                self.held[key] = self.held.get(key, 0) + 1
                self.amounts[id(task.amount)] = task.amount

    def _flush(self) -> None:
        nodes, usage = self.state.nodes, self.state.usage
        # Per queue, its groups by the amount's values (leafsums.py: one order for all).
        values = {aid: tuple(amount.tolist()) for aid, amount in self.amounts.items()}
        pending: dict[int, dict[AmountKey, int]] = {}
        held: dict[int, dict[tuple[AmountKey, bool], int]] = {}
        for (queue, amount_id), count in self.pending.items():
            group = pending.setdefault(queue, {})
            group[values[amount_id]] = group.get(values[amount_id], 0) + count
        for (queue, amount_id, nonpreemptible), count in self.held.items():
            held_group = held.setdefault(queue, {})
            key = (values[amount_id], nonpreemptible)
            held_group[key] = held_group.get(key, 0) + count
        for queue in pending.keys() | held.keys():
            rows = self.leaf_allocated[queue], self.leaf_nonpreemptible[queue], self.leaf_requested[queue]
            add_groups(pending.get(queue, {}), held.get(queue, {}), *rows)
        self.sums.counted_from(pending, held)
        if self.held_rows:
            np.subtract.at(nodes.idle, np.array(self.held_rows), np.array(self.held_demand))
        if self.releasing_rows:
            np.add.at(nodes.releasing, np.array(self.releasing_rows), np.array(self.releasing_demand))
        usage.set_leaves(self.leaf_allocated, self.leaf_nonpreemptible, self.leaf_requested)


def cluster_total(nodes: Nodes) -> FloatArray:
    """The capacity fair share splits: every node's gpu, cpu and memory, column by column."""
    cap = nodes.capacity
    return np.array([cap[:, 0].sum(), cap[:, 1].sum(), cap[:, 2].sum()]) if len(cap) else np.zeros(3)


def subtree_sums(tree: QueueTree, leaf: FloatArray) -> FloatArray:
    """Each queue's rows summed with its subtree's (columns independent)."""
    total = leaf.copy()
    parent = tree.parent
    for q in tree.bottom_up:
        total[parent[q]] += total[q]
    return total


def node_demand(req: Request, columns: Sequence[str]) -> FloatArray:
    """What one task takes of a node, in the nodes' columns: whole GPUs only (a fraction
    lives on a shared device), cpu, memory, then the extended resources."""
    whole = 0.0 if req.is_fractional else req.gpu
    ext = dict(req.extended)
    return np.array([whole, req.cpu, req.memory, *(ext.get(c, 0.0) for c in columns[3:])], dtype=np.float64)


def per_request(req: Request, columns: Sequence[str]) -> tuple[FloatArray, FloatArray | None]:
    demand = node_demand(req, columns)
    amount = None if req.gpu_memory > 0 else np.array([req.gpu, req.cpu, req.memory], dtype=np.float64)
    return demand, amount


def job_problem(info: JobInfo, tree: QueueTree) -> str:
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
    if info.spread not in SPREAD_MODES:
        return (
            f"job {info.name!r}: spread {info.spread!r} is unknown; use 'preferred', "
            "'required' or '' (no spreading)"
        )
    return ""


def charge_device(nodes: Nodes, node: int, group: int | None, fraction: float, releasing: bool) -> int:
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


def count_tasks(job: Job) -> None:
    """A job's counters from its tasks (kept by the Statement afterwards): active and
    pending tasks, and whether all its tasks share one demand and amount."""
    job.active_count = sum(1 for t in job.tasks if t.status in _ACTIVE)
    job.pending_count = sum(1 for t in job.tasks if t.status is _PENDING)
    first = job.tasks[0] if job.tasks else None
    job.uniform = (
        first is not None
        and first.amount is not None
        and all(t.demand is first.demand and t.amount is first.amount for t in job.tasks)
    )
