"""The cycle's figures per GPU type (docs/gpu-types.md, "Queues per type"): each queue's
quota, limit and over-quota weight of every GPU type some queue names, and what it holds
and asks of each; kept in step by the Statement through QueueUsage. The rules that read
them, and the fair shares per type, are typedqueues.py's.

Only types that some queue lists (QueueInfo.gpu_types) and the cluster has are tracked;
a queue that does not list a type has no quota of it, no limit on it beyond its plain
gpu limit, and its plain gpu over-quota weight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from kai_ray.core.model.snapshot import UNLIMITED, QueueInfo, TaskStatus
from kai_ray.core.state.gputypes import GpuTypes
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import BoolArray, FloatArray
from kai_ray.core.state.queues import QueueTree

__all__ = ["TypedUndo", "TypedUsage"]

# What undoes one change of the per-type figures: the type's column, and per queue on the
# path its allocated and non-preemptible GPUs of that type before the change.
TypedUndo = tuple[int, list[tuple[int, float, float]]]

EPS = 1e-9
_PENDING = TaskStatus.PENDING
# A tuple finds a member by identity; a set would hash the enum (asked once per task).
# Running first: most tasks counted are.
_RUNNING = TaskStatus.RUNNING
_ACTIVE = (_RUNNING, *(s for s in TaskStatus if s.is_active and s is not _RUNNING))


class TypedUsage:
    def __init__(
        self,
        queues: Sequence[QueueInfo],
        tree: QueueTree,
        jobs: Sequence[Job],
        amount: Callable[[Task, int], FloatArray],
        types: GpuTypes,
        named: list[str],
    ) -> None:
        # `amount`: what a task on a node counts against its queue (ClusterState.queue_amount).
        self.tree, self.types, self.names, self._amount = tree, types, named, amount
        n, t = len(tree), len(named)
        self.column = np.full(len(types.names), -1, dtype=np.intp)  # type id -> column
        for c, name in enumerate(named):
            self.column[types.index[name]] = c
        self.quota, self.limit = np.zeros((n, t)), np.full((n, t), UNLIMITED)
        weight = np.repeat(tree.weight[:, :1], t, axis=1)  # over-quota weight per type
        for q, info in enumerate(queues):
            for share in info.gpu_types:
                c = named.index(share.gpu_type) if share.gpu_type in named else -1
                if c >= 0:
                    self.quota[q, c], self.limit[q, c] = share.quota, share.limit
                    if share.over_quota_weight is not None:
                        weight[q, c] = share.over_quota_weight
        # Plain numbers for the rules asked on every gang tried (numpy's scalars are slow).
        self.columns_of_types: list[int] = self.column.tolist()
        self.quota_rows: list[list[float]] = self.quota.tolist()
        self.limit_rows: list[list[float]] = self.limit.tolist()
        self.columns_of_typess: list[int] = self.column[types.ids].tolist()  # per node: its type's column
        # Per queue and column: whether the queue or one above it has a limit of the type,
        # or a quota of it: a type with neither on the path blocks nothing (blocked).
        self.limited_path = self._on_path(self.limit != UNLIMITED, tree)
        self.quota_path = self._on_path(self.quota != UNLIMITED, tree)
        allocated, nonpreemptible, requested = self._counted(n, t, jobs)
        # Plain lists: read and changed a number at a time, on every rank and placement.
        self.allocated: list[list[float]] = allocated.tolist()
        self.nonpreemptible: list[list[float]] = nonpreemptible.tolist()
        self.requested = requested  # for the fair shares (typedqueues.py sets them)
        self.weight = weight
        self.fair_share: FloatArray = np.zeros((n, t))
        # Per queue, for its rank: fair share and deserved share, each plus EPS, and what
        # a dominant share divides by (typedqueues._fair_shares).
        self.rank_rows: list[tuple[list[float], list[float], list[float]]] = []

    @staticmethod
    def _on_path(finite: BoolArray, tree: QueueTree) -> list[list[bool]]:
        """Per queue and column: `finite` of the queue or of a queue above it."""
        rows: list[list[bool]] = finite.tolist()
        for q in reversed(tree.bottom_up):  # parents first
            parent = tree.parent[q]
            if parent >= 0:
                rows[q] = [a or b for a, b in zip(rows[q], rows[parent], strict=True)]
        return rows

    # ------------------------------------------------------------ figures

    def _counted(self, n: int, t: int, jobs: Sequence[Job]) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per queue (its subtree summed) and type: GPUs allocated, of which by
        non-preemptible jobs, and requested (allocated, plus what waiting jobs ask of each
        type they accept)."""
        # Plain lists while counting: one task at a time, numpy's per-call cost dominates.
        # One pass over every job of the cluster each cycle: kept to the fewest steps per
        # job (a uniform job's GPUs read once, a waiting one's tasks not looked at).
        allocated = [[0.0] * t for _ in range(n)]
        held = [[0.0] * t for _ in range(n)]
        waiting = [[0.0] * t for _ in range(n)]
        columns = self.columns_of_typess
        gpus_of: dict[int, float] = {}  # per shared amount (one per request): its GPUs
        accepts: dict[tuple[str, ...], list[int]] = {}  # per types accepted: their columns
        for job in jobs:
            same: float | None = None
            if job.uniform:
                tasks = job.tasks
                task = tasks[0]
                amount = task.amount  # every task's, and known: the job is uniform
                same = gpus_of.get(id(amount))
                if same is None:
                    same = gpus_of[id(amount)] = float(amount[0])  # type: ignore[index]
                if same <= 0 or not job.active_count:
                    pending = same * job.pending_count  # none placed: no task to look at
                    if pending > 0:
                        self._wait(waiting[job.queue], self._asked(job), pending, accepts)
                    continue
                if len(tasks) == 1 and task.node >= 0 and task.status in _ACTIVE:
                    c = columns[task.node]  # the usual running job: one task, placed
                    if c >= 0:
                        allocated[job.queue][c] += same
                        if not job.info.preemptible:
                            held[job.queue][c] += same
                    continue
            pending = self._count_tasks(job, same, allocated[job.queue], held[job.queue])
            if pending:
                self._wait(waiting[job.queue], self._asked(job), pending, accepts)
        mine = np.array(allocated).reshape(n, t)
        requested = mine + np.array(waiting).reshape(n, t)
        # One pass up the tree for the three: each column is summed on its own.
        summed = self._up_the_tree(np.hstack((mine, np.array(held).reshape(n, t), requested)))
        return summed[:, :t], summed[:, t : 2 * t], summed[:, 2 * t :]

    def _count_tasks(self, job: Job, same: float | None, mine: list[float], theirs: list[float]) -> float:
        """A job's placed GPUs added to its queue's rows, per type; its pending GPUs."""
        columns, pending = self.columns_of_typess, 0.0
        nonpreemptible = not job.info.preemptible
        for task in job.tasks:
            gpus = same if same is not None else self._gpus(task)
            status = task.status
            if task.node >= 0 and status in _ACTIVE:
                c = columns[task.node]
                if c >= 0:
                    mine[c] += gpus
                    if nonpreemptible:
                        theirs[c] += gpus
            elif status is _PENDING:
                pending += gpus
        return pending

    def _asked(self, job: Job) -> tuple[str, ...]:
        """The types a waiting job asks for: those it accepts; while it is held to its
        first type (queues.first_type_only), that type alone, as the same job accepting
        it alone would ask (its later types wait for the cycle's last step)."""
        types = job.info.gpu_types
        first = self.types.first_present(types) if job.first_type_only else None
        return types if first is None else (self.types.names[first],)

    def _wait(
        self, row: list[float], types: tuple[str, ...], gpus: float, known: dict[tuple[str, ...], list[int]]
    ) -> None:
        """A waiting job's GPUs asked of each type it accepts (none named: every type)."""
        accepts = known.get(types)
        if accepts is None:
            named = [c for c in map(self.column_of, types) if c >= 0]
            accepts = known[types] = named or list(range(len(self.names)))
        for c in accepts:
            row[c] += gpus

    def _up_the_tree(self, leaves: FloatArray) -> FloatArray:
        tree, out = self.tree, leaves.copy()
        for q in tree.bottom_up:
            out[tree.parent[q]] += out[q]
        return out

    def _gpus(self, task: Task) -> float:
        return float(self._amount(task, task.node)[0])

    def column_of(self, gpu_type: str) -> int:
        type_id = self.types.index.get(gpu_type)
        return -1 if type_id is None else self.columns_of_types[type_id]

    # ------------------------------------------------------------ kept in step

    def add(self, queue: int, node: int, gpus: float, nonpreemptible: bool, sign: float) -> TypedUndo | None:
        """A task's GPUs placed on (or, sign -1, freed from) `node`; what `restore` takes
        to undo it (None: no figure changed). Not a closure of its own: QueueUsage's undo
        restores both (one undo per placement)."""
        c = self.columns_of_typess[node] if node >= 0 else -1
        if c < 0 or gpus == 0:
            return None
        allocated, held, amount = self.allocated, self.nonpreemptible, sign * gpus
        before = []
        for q in self.tree.ancestors[queue]:
            row, row_held = allocated[q], held[q]
            before.append((q, row[c], row_held[c]))
            row[c] += amount
            if nonpreemptible:
                row_held[c] += amount
        return c, before

    def restore(self, undo: TypedUndo) -> None:
        """The figures as they were before the add that returned `undo`."""
        c, before = undo
        allocated, held = self.allocated, self.nonpreemptible
        for q, a, h in before:
            allocated[q][c], held[q][c] = a, h

    def figures(self, queue: int) -> dict[str, dict[str, float]]:
        """Per type: quota, limit, fair share and allocation of one queue (for people)."""
        return {
            name: {
                "quota": float(self.quota[queue, c]),
                "limit": float(self.limit[queue, c]),
                "fair_share": float(self.fair_share[queue, c]),
                "allocated": float(self.allocated[queue][c]),
            }
            for c, name in enumerate(self.names)
        }
