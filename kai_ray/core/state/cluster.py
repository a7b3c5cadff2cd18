"""The cycle's working state: the nodes (nodes.py), the jobs (jobs.py), and what each
queue holds, summed up the tree.

Built from a `ClusterSnapshot` (build.py, or patched by the cycle cache: incremental/)
and mutated only through a `Statement` (see statement.py), so that every change can be
rolled back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kai_ray.core.model.gpushare import device_share
from kai_ray.core.model.snapshot import Reason
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import FloatArray, Nodes
from kai_ray.core.state.queues import QueueTree
from kai_ray.core.state.typedusage import TypedUsage

__all__ = ["ClusterState", "QueueUsage", "subtree_sums"]


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
        self.typed: TypedUsage | None = None

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
        usage = self.typed
        typed = None if usage is None else usage.add(queue, node, float(amount[0]), nonpreemptible, sign)

        def undo() -> None:
            for a, row in allocated:
                self.allocated[a][:] = row
            for a, row in held:
                self.allocated_nonpreemptible[a][:] = row
            if typed is not None and usage is not None:
                usage.restore(typed)

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
    # Jobs whose queue does not take them (state/access.py) -> why: only what they hold
    # is in `jobs`. SchedulerConfig.closed_queues, which that rule reads.
    refused: dict[str, Reason] = field(default_factory=dict)
    refused_waiting: set[str] = field(default_factory=set)  # of them, those with tasks left out
    closed_queues: bool = False
    # A queue's limit and quota checks size a memory slice not placed yet on the largest
    # device (session/context.py, capacity_amount).
    max_device_memory: float = 0.0

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


def subtree_sums(tree: QueueTree, leaf: FloatArray) -> FloatArray:
    """Each queue's rows summed with its subtree's (columns independent)."""
    total = leaf.copy()
    parent = tree.parent
    for q in tree.bottom_up:
        total[parent[q]] += total[q]
    return total
