"""Queues per GPU type (docs/gpu-types.md, "Queues per type"): each queue's quota, limit,
over-quota weight, allocation and fair share of every GPU type some queue names.

Only types that some queue lists (QueueInfo.gpu_types) and the cluster has are tracked;
a queue that does not list a type has no quota of it, no limit on it beyond its plain
gpu limit, and its plain gpu over-quota weight. Fair share is DRF with each type a
resource of its own, level by level down the tree (fairshare.py, once per type). Built
once per cycle (`typed_queues`), and kept in step by the Statement through QueueUsage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from kai_ray.core.cluster import ClusterState, FloatArray, Job, Task
from kai_ray.core.fairshare import compute_fair_shares
from kai_ray.core.gputypes import GpuTypes
from kai_ray.core.model import UNLIMITED, QueueInfo, Reason, TaskStatus
from kai_ray.core.words import number

__all__ = ["TypedQueues", "typed_queues"]

EPS = 1e-9
_PENDING = TaskStatus.PENDING
# A tuple finds a member by identity; a set would hash the enum (asked once per task).
# Running first: most tasks counted are.
_RUNNING = TaskStatus.RUNNING
_ACTIVE = (_RUNNING, *(s for s in TaskStatus if s.is_active and s is not _RUNNING))


def typed_queues(
    queues: Sequence[QueueInfo], state: ClusterState, types: GpuTypes, k_value: float
) -> TypedQueues | None:
    """The cycle's per-type figures, or None where no queue names a type the cluster has
    (then every rule reads the plain gpu figures alone, as before)."""
    named = [s.gpu_type for q in queues for s in q.gpu_types if s.gpu_type in types.index]
    if not named:
        return None
    return TypedQueues(queues, state, types, list(dict.fromkeys(named)), k_value)


class TypedQueues:
    def __init__(
        self, queues: Sequence[QueueInfo], state: ClusterState, types: GpuTypes, named: list[str], k: float
    ) -> None:
        self.state, self.types, self.names = state, types, named
        tree = state.tree
        n, t = len(tree), len(named)
        self.column = np.full(len(types.names), -1, dtype=np.intp)  # type id -> column
        for c, name in enumerate(named):
            self.column[types.index[name]] = c
        self.quota, self.limit = np.zeros((n, t)), np.full((n, t), UNLIMITED)
        weight = np.repeat(tree.weight[:, :1], t, axis=1)
        for q, info in enumerate(queues):
            for share in info.gpu_types:
                c = named.index(share.gpu_type) if share.gpu_type in named else -1
                if c >= 0:
                    self.quota[q, c], self.limit[q, c] = share.quota, share.limit
                    if share.over_quota_weight is not None:
                        weight[q, c] = share.over_quota_weight
        # Plain numbers for the rules asked on every gang tried (numpy's scalars are slow).
        self._column: list[int] = self.column.tolist()
        self._quota: list[list[float]] = self.quota.tolist()
        self._limit: list[list[float]] = self.limit.tolist()
        self._columns: list[int] = self.column[types.ids].tolist()  # per node: its type's column
        allocated, nonpreemptible, requested = self._counted(n, t)
        # Plain lists: read and changed a number at a time, on every rank and placement.
        self.allocated: list[list[float]] = allocated.tolist()
        self.nonpreemptible: list[list[float]] = nonpreemptible.tolist()
        self.fair_share = self._fair_shares(weight, requested, k)

    # ------------------------------------------------------------ figures

    def _counted(self, n: int, t: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """Per queue (its subtree summed) and type: GPUs allocated, of which by
        non-preemptible jobs, and requested (allocated, plus what waiting jobs ask of each
        type they accept)."""
        # Plain lists while counting: one task at a time, numpy's per-call cost dominates.
        # One pass over every job of the cluster each cycle: kept to the fewest steps per
        # job (a uniform job's GPUs read once, a waiting one's tasks not looked at).
        allocated = [[0.0] * t for _ in range(n)]
        held = [[0.0] * t for _ in range(n)]
        waiting = [[0.0] * t for _ in range(n)]
        columns = self._columns
        gpus_of: dict[int, float] = {}  # per shared amount (one per request): its GPUs
        accepts: dict[tuple[str, ...], list[int]] = {}  # per types accepted: their columns
        for job in self.state.jobs:
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
                        self._wait(waiting[job.queue], job.info.gpu_types, pending, accepts)
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
                self._wait(waiting[job.queue], job.info.gpu_types, pending, accepts)
        mine = np.array(allocated).reshape(n, t)
        requested = mine + np.array(waiting).reshape(n, t)
        # One pass up the tree for the three: each column is summed on its own.
        summed = self._up_the_tree(np.hstack((mine, np.array(held).reshape(n, t), requested)))
        return summed[:, :t], summed[:, t : 2 * t], summed[:, 2 * t :]

    def _count_tasks(self, job: Job, same: float | None, mine: list[float], theirs: list[float]) -> float:
        """A job's placed GPUs added to its queue's rows, per type; its pending GPUs."""
        columns, pending = self._columns, 0.0
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
        tree, out = self.state.tree, leaves.copy()
        for q in tree.bottom_up:
            out[tree.parent[q]] += out[q]
        return out

    def _fair_shares(self, weight: FloatArray, requested: FloatArray, k: float) -> FloatArray:
        """Each type's fair share, level by level; its deserved share and what a dominant
        share divides by are kept too (rows). compute_fair_shares splits each of its three
        resources on its own (element by element, sums per column), so three types go
        through one call as its three columns: the very figures of one call per type."""
        tree, nodes, t = self.state.tree, self.state.nodes, len(self.names)
        capacity = np.array(
            [
                float(nodes.capacity[(self.types.ids == self.types.index[name]) & nodes.schedulable, 0].sum())
                for name in self.names
            ]
        )
        out, deserved, allocatable = (
            np.zeros_like(requested),
            np.zeros_like(requested),
            np.zeros_like(requested),
        )
        for first in range(0, t, 3):
            cols = slice(first, min(first + 3, t))
            per_type = replace(
                tree,
                quota=_three(self.quota[:, cols]),
                limit=_three(self.limit[:, cols], UNLIMITED),
                weight=_three(weight[:, cols]),
                derived={},
            )
            total = _three(capacity[None, cols])[0]
            shares = compute_fair_shares(per_type, total, _three(requested[:, cols]), None, k)
            width = cols.stop - first
            out[:, cols], deserved[:, cols] = shares.fair_share[:, :width], shares.deserved[:, :width]
            allocatable[:, cols] = shares.allocatable[:, :width]
        fallback = np.where(capacity > EPS, capacity, 1e-300)
        base = np.where(allocatable > EPS, allocatable, fallback[None, :])
        # Per queue, for its rank: fair share, deserved share, what a dominant share divides by.
        self.share_rows: list[tuple[list[float], list[float], list[float]]] = list(
            zip(out.tolist(), deserved.tolist(), base.tolist(), strict=True)
        )
        return out

    def rank_column(self, job: Job, first: int | None = None) -> float:
        """The type column its GPUs count on when its queue is ranked for it: the type its
        gang holds, else the type it is held to (`first`, Placer.first_type: ranked as
        the same job accepting that type alone, named by a queue or not), else the first
        named type it accepts; -1: any (policy ranks it)."""
        held = self.types.held_by(job) if job.active_count else None
        if held is not None:
            return float(self._column[held])
        if first is not None:
            return float(self._column[first])
        for name in job.info.gpu_types:
            c = self.column_of(name)
            if c >= 0:
                return float(c)
        return -1.0

    def _gpus(self, task: Task) -> float:
        return float(self.state.queue_amount(task, task.node)[0])

    def column_of(self, gpu_type: str) -> int:
        type_id = self.types.index.get(gpu_type)
        return -1 if type_id is None else self._column[type_id]

    # ------------------------------------------------------------ kept in step

    def add(
        self, queue: int, node: int, gpus: float, nonpreemptible: bool, sign: float
    ) -> Callable[[], None]:
        """A task's GPUs placed on (or, sign -1, freed from) `node`; how to undo it."""
        c = self._columns[node] if node >= 0 else -1
        if c < 0 or gpus == 0:
            return _nothing
        path = self.state.tree.ancestors[queue]
        allocated, held, amount = self.allocated, self.nonpreemptible, sign * gpus
        before = [(q, allocated[q][c], held[q][c]) for q in path]
        for q in path:
            allocated[q][c] += amount
            if nonpreemptible:
                held[q][c] += amount

        def undo() -> None:
            for q, a, h in before:
                allocated[q][c], held[q][c] = a, h

        return undo

    # ------------------------------------------------------------ the rules

    def blocked(self, job: Job, type_id: int, gpus: float) -> Reason | None:
        """Why `gpus` more of this type would take the job's queue, or one above it, over
        its limit of the type ("queue-limit"), or, for a non-preemptible job, over its
        quota of it ("queue-quota", as capacity.py says it without types); None when they
        may. Reads the job's queue and preemptibility: both in allocate's search key
        (failedsearches._free_room)."""
        c = self._column[type_id]
        if c < 0:
            return None
        name, tree = self.names[c], self.state.tree
        for q in tree.ancestors[job.queue]:
            held, limit = self.allocated[q][c], self._limit[q][c]
            if limit != UNLIMITED and held + gpus > limit + EPS:
                return Reason(
                    "queue-limit",
                    f"queue {tree.names[q]} is at its {name} limit of {number(limit)} (holds {number(held)})",
                )
            quota = self._quota[q][c]
            if (
                not job.info.preemptible
                and quota != UNLIMITED
                and self.nonpreemptible[q][c] + gpus > quota + EPS
            ):
                return Reason(
                    "queue-quota",
                    f"queue {tree.names[q]} would go over its {name} quota of {number(quota)} with "
                    f"non-preemptible work (holds {number(self.nonpreemptible[q][c])})",
                )
        return None

    def borrows(self, queue: int, type_id: int, gpus: float) -> bool:
        """Whether `gpus` more of the type take the queue over its own quota of it (a type
        it does not name: a quota of none), as whenCanBorrow reads it."""
        c = self._column[type_id]
        if c < 0:
            return True
        quota = self._quota[queue][c]
        return quota != UNLIMITED and self.allocated[queue][c] + gpus > quota + EPS

    def over_share(self, queue: int, type_id: int, more: float = 0.0) -> bool:
        """Whether the queue holds (with `more`) over its fair share of the type."""
        c = int(self.column[type_id])
        return c >= 0 and self.allocated[queue][c] + more > self.fair_share[queue, c] + EPS

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


def _three(columns: FloatArray, rest: float = 0.0) -> FloatArray:
    """Up to three columns as compute_fair_shares' three, the rest filled with `rest`."""
    out = np.full((len(columns), 3), rest)
    out[:, : columns.shape[1]] = columns
    return out


def _nothing() -> None:
    pass
