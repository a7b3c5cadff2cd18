"""Which tasks count, and where: one statement for the full build (build.py) and the
cycle cache (incremental/), so that both count the same tasks.

A task of the snapshot, by its status (model.TaskStatus says what each status holds):

- Binding is taken as Running: an earlier cycle placed it (`make_task`).
- On its node (`make_task` sets the node a task holds), Running, Pipelined and
  Releasing tasks hold what they ask for: a Releasing one until it is gone, counted as
  releasing there too. A task whose node left the cluster holds nothing.
- Toward its leaf queue (`queue_count`): a Pending task counts as requested; a task
  that holds a node counts as allocated (and requested; and non-preemptible where its
  job is), except a Releasing one: releasing tasks do not count. Finished tasks count
  nowhere.
- Toward its gang, the active tasks count (Binding, Pipelined, Running: `count_tasks`),
  wherever they run; the Statement keeps the counts as the cycle places and evicts.

How a queue's figures are summed from these counts, in one order for both: leafsums.py.
"""

from __future__ import annotations

import enum

from kai_ray.core.model.snapshot import TaskInfo, TaskStatus
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import Nodes, PerRequest

__all__ = ["QueueCount", "constrain", "count_tasks", "make_task", "queue_count"]

# Tuples, not sets: a tuple finds a member by identity, a set hashes it (in Python, for
# an Enum), and these are asked once or twice per task of the full build.
_HOLDS_NODE = tuple(s for s in TaskStatus if s.holds_capacity)
_ACTIVE = tuple(s for s in TaskStatus if s.is_active)
_PENDING, _BINDING, _RUNNING = TaskStatus.PENDING, TaskStatus.BINDING, TaskStatus.RUNNING


class QueueCount(enum.Enum):
    """What a task counts toward its leaf queue's figures."""

    NOTHING = 0
    REQUESTED = 1  # requested only (pending)
    ALLOCATED = 2  # allocated and requested (non-preemptible too, where its job is)


def make_task(job: Job, index: int, info: TaskInfo, per: PerRequest, nodes: Nodes) -> Task:
    """A snapshot task as the working state has it, nothing charged yet: Binding taken
    as Running, and the node it holds (-1: none, or one the cluster no longer has).
    `per`: its request's facts (cluster.per_request)."""
    demand, amount, shared = per
    status = info.status
    if status is _BINDING:
        status = _RUNNING
    node = -1 if info.node is None or status not in _HOLDS_NODE else nodes.index.get(info.node, -1)
    return Task(info, job, index, demand, shared, status, node, -1, info.since, amount=amount)


def queue_count(status: TaskStatus, on_node: bool) -> QueueCount:
    """What a task with this (working) status counts toward its queue; `on_node`: it
    holds a node the cluster has."""
    if status is _PENDING:
        return QueueCount.REQUESTED
    if on_node and status in _ACTIVE:  # releasing tasks do not count
        return QueueCount.ALLOCATED
    return QueueCount.NOTHING


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


def constrain(job: Job) -> None:
    """The required node affinity of a job's tasks, as the working state keys it: on the
    job when all its tasks share one (the common case, placed like a node selector: per
    job), else `per_task` (each task's own counts). A build that already found every
    task holding the very same affinity object sets `job.affinity` to it: the same rule."""
    tasks = job.info.tasks
    first = tasks[0].node_affinity if tasks else None
    for t in tasks:  # a plain loop: the cheapest way through the usual all-None job
        other = t.node_affinity
        if other is not first and other != first:
            job.per_task = True
            return
    job.affinity = first
