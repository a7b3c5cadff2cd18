"""The cycle's jobs: each workload (`Job`) with its tasks (`Task`), where they are and
what they take, and what the actions that evict take together (`Unit`). Built from a
`ClusterSnapshot` (build.py, or patched by the cycle cache: incremental/) and changed
only through a `Statement` (statement.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kai_ray.core.model.affinity import NodeAffinity
from kai_ray.core.model.gpushare import device_share
from kai_ray.core.model.snapshot import JobInfo, Request, TaskInfo, TaskStatus
from kai_ray.core.model.subgroups import WHOLE, pick, shortfall, surplus, tally
from kai_ray.core.state.nodes import FloatArray, Nodes

__all__ = ["Job", "Task", "Unit"]

# Running at the snapshot (a bind in flight is taken as running: accounting.make_task).
_RAN = frozenset({TaskStatus.RUNNING, TaskStatus.BINDING})


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
        """When its earliest task running at the snapshot started (0 when none ran): the
        gang's start, as KAI's min runtime reads it off its podgroup, kept while the
        cycle moves or evicts its tasks (a job consolidation just moved is not new)."""
        return min((t.since for t in self.tasks if t.info.status in _RAN), default=0.0)

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


_UNIT_RUNNING, _UNIT_BINDING, _UNIT_PIPELINED = TaskStatus.RUNNING, TaskStatus.BINDING, TaskStatus.PIPELINED


@dataclass(frozen=True, slots=True, eq=False)
class Unit:
    """What is evicted together: one surplus task of an elastic job, or a whole gang."""

    job: Job
    tasks: tuple[Task, ...]
    surplus: bool

    def live(self) -> bool:
        """Every task may be taken (Task.takeable, inlined: asked of many units per search)."""
        for t in self.tasks:
            s = t.status
            if s is not _UNIT_RUNNING and not (
                (s is _UNIT_BINDING or s is _UNIT_PIPELINED) and t.placed_by and not t.on_reservation
            ):
                return False
        return True
