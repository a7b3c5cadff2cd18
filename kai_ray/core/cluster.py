"""The cycle's working state: node capacity as numpy arrays, GPU devices, queue usage, jobs.

Built from a `ClusterSnapshot` (build.py, or patched by the cycle cache: incremental/)
and mutated only through a `Statement` (see statement.py), so that every change can be
rolled back.

Node capacity columns: 0 = whole GPU devices, 1 = cpu cores, 2 = memory bytes, then the
extended resources. Fractional GPU work lives on `Device`s (a device hosting fractions
counts as one used whole device at node level).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kai_ray.core.gpushare import device_share, fixed_share, shares_device, whole_devices
from kai_ray.core.model import JobInfo, NodeAffinity, NodeInfo, Request, TaskInfo, TaskStatus
from kai_ray.core.queues import QueueTree
from kai_ray.core.subgroups import WHOLE, pick, shortfall, surplus, tally

if TYPE_CHECKING:
    from kai_ray.core.typedqueues import TypedQueues

__all__ = [
    "ClusterState",
    "Device",
    "Job",
    "Nodes",
    "PerRequest",
    "QueueUsage",
    "RequestCache",
    "Task",
    "charge_device",
    "cluster_total",
    "node_demand",
    "per_request",
    "subtree_sums",
]

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
        # Idle before any task of ours: what a node's row is rebuilt from (incremental/).
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
        # Per GPU type, where queues name types (typedqueues.py; set per cycle): kept in
        # step with the rows here as tasks are placed and evicted.
        self.typed: TypedQueues | None = None

    def add_undoable(
        self, queue: int, amount: FloatArray, nonpreemptible: bool, sign: float = 1.0, node: int = -1
    ) -> Callable[[], None]:
        """add, and how to take it back to the very same figures: the rows as they were
        (adding the opposite need not give the same bits back, and a trial the reference
        never made must leave no trace). `node`: where the task is, for the per-type figures."""
        ancestors = self.tree.ancestors[queue]
        allocated = [(a, self.allocated[a][:]) for a in ancestors]
        held = [(a, self.allocated_nonpreemptible[a][:]) for a in ancestors] if nonpreemptible else []
        self.add(queue, amount, nonpreemptible, sign)
        typed = (
            None
            if self.typed is None
            else self.typed.add(queue, node, float(amount[0]), nonpreemptible, sign)
        )

        def undo() -> None:
            for a, row in allocated:
                self.allocated[a][:] = row
            for a, row in held:
                self.allocated_nonpreemptible[a][:] = row
            if typed is not None:
                typed()

        return undo

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
    # Placed this cycle, then taken as a victim (Statement.evict): it never started, so
    # no eviction is carried out (a TakeBack decision), and placed again it is only placed.
    taken_back: bool = False
    # Placed this cycle on room a reservation held (the gang's own, or lent to backfill or
    # to work of a higher priority): the cycle's evicting actions leave it where it is,
    # since taking it would give held room to work the reservation refused
    # (reservations.py, "kept from the cycle's evictions").
    on_reservation: bool = False
    amount: FloatArray | None = None  # queue amount, when it does not depend on the node

    @property
    def request(self) -> Request:
        return self.info.request

    @property
    def takeable(self) -> bool:
        """May be taken as a victim: running, or placed this cycle (KAI's victims are its
        active allocated tasks: a session's new placements, and the running tasks it
        moved, included), unless on a reservation's room (on_reservation)."""
        status = self.status
        if status is TaskStatus.RUNNING:
            return self.node >= 0
        placed = status is TaskStatus.BINDING or status is TaskStatus.PIPELINED
        return placed and bool(self.placed_by) and not self.on_reservation

    def fraction_on(self, nodes: Nodes, node: int) -> float:
        """Its share of one device on that node (gpushare.py)."""
        return device_share(self.info.request, float(nodes.device_memory[node]))


@dataclass(slots=True, eq=False)
class Job:
    info: JobInfo
    queue: int
    order: int  # position in the snapshot, the last tie-break
    tasks: list[Task] = field(default_factory=list)
    active_count: int = 0  # tasks counting toward the gang; kept by the Statement
    selector: tuple[tuple[str, str], ...] = ()  # node selector, sorted: a cache key
    # Required node affinity (accounting.constrain): `affinity` when every task has the
    # same one (it narrows the job's base mask, as the selector does); else `per_task`,
    # and each task narrows the mask by its own (Placer.task_mask).
    affinity: NodeAffinity | None = None
    per_task: bool = False
    # Every task shares one demand and one queue amount (not sized per node): any n of
    # its tasks ask for n times the first one's.
    uniform: bool = False
    pending_count: int = 0  # tasks Pending; kept by the Statement
    # It tries its first GPU type alone until the actions are done (queues.first_type_only).
    first_type_only: bool = False
    # Its queue's per-type limits and quotas may refuse its gang a type (QueueTree.names_gpu_types).
    limits_by_type: bool = False
    # Search keys (failedsearches.search_key) by (action, tasks) while no task is active:
    # fixed then for a uniform job, so a job kept between cycles (incremental/) keys once.
    keys: dict[tuple[str, int], tuple[object, ...]] | None = None

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def gang(self) -> int:
        """How many tasks its gang holds at least (with subgroups: every minimum's sum)."""
        return self.info.gang_size

    def active(self) -> int:
        return self.active_count

    # The gang's rule is subgroups.shortfall; these read it off the working state. A job
    # without subgroups answers from its counters alone (no pass over its tasks).

    def short(self) -> dict[str, int]:
        """What its active tasks lack of its gang, per subgroup; {} once whole."""
        return shortfall(self.info, self.active_count, self.active_by_subgroup)

    def is_whole(self) -> bool:
        if not self.info.subgroups:
            return self.active_count >= self.info.gang_size
        return not self.short()

    def active_by_subgroup(self) -> dict[str, int]:
        return tally(t.info.subgroup for t in self.tasks if t.status.is_active)

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
        """The pending tasks its gang still misses, each subgroup's first ones (fewer
        when fewer are pending)."""
        if not self.info.subgroups:
            return self.pending()[: max(0, self.gang - self.active_count)]
        return pick(self.info, self.short(), self.pending(), _subgroup)

    def next_step(self) -> list[Task]:
        """The tasks of the job's next step (KAI's tasks to allocate): its missing gang, or,
        once the gang is whole, one more pending task of an elastic job."""
        return self.pending()[:1] if self.is_whole() else self.missing()

    def missing_count(self) -> int:
        """len(missing())."""
        if not self.info.subgroups:
            return min(self.pending_count, max(0, self.gang - self.active_count))
        return len(self.missing())

    def incomplete(self) -> bool:
        """Too few of its tasks are left (some failed or finished) for its gang: a
        subgroup lacks more than it has pending. It can never start whole."""
        if not self.info.subgroups:
            return self.gang - self.active_count > self.pending_count
        have = tally(t.info.subgroup for t in self.tasks if t.status is TaskStatus.PENDING)
        return any(n > have.get(name, 0) for name, n in self.short().items())

    def surplus_of(self, running: Sequence[Task]) -> list[Task]:
        """Of its `running` tasks, those that may be taken one at a time, the rest of
        the gang still whole: as many as each subgroup's active tasks go beyond its
        minimum, its last ones; none while the gang is short (it then goes whole).
        Last task first."""
        if not self.is_whole():
            return []
        extra = surplus(self.info, self.active_count, self.active_by_subgroup)
        if not extra:
            return []
        last_first = sorted(running, key=_last_first)
        if not self.info.subgroups:
            return last_first[: extra[WHOLE]]
        return pick(self.info, extra, last_first, _subgroup)


def _subgroup(task: Task) -> str:
    return task.info.subgroup


def _last_first(task: Task) -> int:
    return -task.index


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
    # before the cycle holds through it (kept by incremental/, to skip the others).
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
        return np.array([device_share(req, float(mem)), req.cpu, req.memory], dtype=np.float64)


# A request's node demand, its queue amount (None: sized per node) and whether it shares
# a device: computed once per distinct request (per_request).
PerRequest = tuple[FloatArray, FloatArray | None, bool]
RequestCache = dict[Request, PerRequest]


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
    ext = dict(req.extended)
    return np.array(
        [whole_devices(req), req.cpu, req.memory, *(ext.get(c, 0.0) for c in columns[3:])], dtype=np.float64
    )


def per_request(req: Request, columns: Sequence[str]) -> PerRequest:
    """A request's node demand; its queue amount unless that depends on the node (a
    gpu-memory slice: ClusterState.queue_amount sizes it there); whether it shares a
    device."""
    share = fixed_share(req)
    amount = None if share is None else np.array([share, req.cpu, req.memory], dtype=np.float64)
    return node_demand(req, columns), amount, shares_device(req)


def charge_device(nodes: Nodes, node: int, group: int | None, fraction: float, releasing: bool) -> int:
    """Take a task's share of a device on the node (its own `group`, else the first that
    fits, else a fresh one, which takes one whole device of the node); the device index."""
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
