"""The full build: the cycle's working state made afresh from a snapshot.

The reference every cycle's state is checked against: the cycle cache (incremental/)
patches a kept state with the same rules (accounting.py, gpushare.py, leafsums.py) in
the same order, so that every figure has the same bits as this build's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kai_ray.core.model.snapshot import SPREAD_MODES, ClusterSnapshot, JobInfo, Request, TaskInfo, TaskStatus
from kai_ray.core.state.access import held_part, refusal
from kai_ray.core.state.accounting import QueueCount, constrain, count_tasks, make_task, queue_count
from kai_ray.core.state.cluster import ClusterState, QueueUsage
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.leafsums import AmountKey, LeafSums, add_groups
from kai_ray.core.state.nodes import FloatArray, Nodes, PerRequest, RequestCache, charge_device, per_request
from kai_ray.core.state.queues import QueueTree, first_type_only, leaf_queue_problem, tree_parents

__all__ = ["build_state", "build_state_and_leaves", "extended_columns", "job_as_taken", "job_problem"]

_PENDING, _RELEASING = TaskStatus.PENDING, TaskStatus.RELEASING
_REQUESTED, _ALLOCATED = QueueCount.REQUESTED, QueueCount.ALLOCATED


def build_state(snapshot: ClusterSnapshot, tree: QueueTree, closed_queues: bool = False) -> ClusterState:
    return build_state_and_leaves(snapshot, tree, {}, closed_queues)[0]


def extended_columns(snapshot: ClusterSnapshot) -> list[str]:
    return sorted(
        {k for n in snapshot.nodes for k, _ in n.extended}
        | {k for j in snapshot.jobs for t in j.tasks for k, _ in t.request.extended}
    )


def build_state_and_leaves(
    snapshot: ClusterSnapshot, tree: QueueTree, requests: RequestCache, closed_queues: bool = False
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
        max_device_memory=max(gpu_mem) if gpu_mem else 0.0,
        closed_queues=closed_queues,
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
        self.by_identity: dict[int, PerRequest] = {}
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
            taken = job_as_taken(info, state)
            if taken is None:
                continue
            info = taken
            job = Job(info=info, queue=tree.index[info.queue], order=order)
            job.first_type_only = first_type_only(tree, job.queue, info)
            job.limits_by_type = tree.names_gpu_types
            if info.node_selector:
                job.selector = tuple(sorted(info.node_selector.items()))
            tasks = info.tasks
            if not (tasks and tasks[0].status is _PENDING and self._all_pending(job, tasks)):
                for i, t in enumerate(info.tasks):
                    job.tasks.append(self._task(job, i, t))
                count_tasks(job)
                constrain(job)
            state.jobs.append(job)
            state.job_index[job.name] = job
        self._flush()

    def _all_pending(self, job: Job, infos: Sequence[TaskInfo]) -> bool:
        """The common case, a job still waiting whole with one shared request and one
        shared affinity object (None, mostly: then the job's, as accounting.constrain
        has it): its tasks are built and counted in one go. False (nothing done) for any
        other job."""
        req, affinity = infos[0].request, infos[0].node_affinity
        pending = TaskStatus.PENDING
        for t in infos:
            if t.status is not pending or t.request is not req or t.node_affinity is not affinity:
                return False
        demand, amount, fractional = self._per_request_cached(req)
        if amount is None:
            return False  # gpu-memory slices: sized per node, charged one by one
        # Every task pending: each counts as requested (accounting.queue_count).
        job.uniform = True
        job.affinity = affinity
        job.pending_count = len(infos)
        job.tasks = [
            Task(t, job, i, demand, fractional, pending, since=t.since, amount=amount)
            for i, t in enumerate(infos)
        ]
        key = (job.queue, id(amount))
        self.pending[key] = self.pending.get(key, 0) + len(infos)
        self.amounts[id(amount)] = amount
        return True

    def _per_request_cached(self, req: Request) -> PerRequest:
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
        per = cached if cached is not None else self._per_request_cached(req)
        task = make_task(job, index, info, per, self.state.nodes)
        node = task.node
        if node >= 0:  # its node's row is charged in bulk (_flush), its device now
            releasing = task.status is _RELEASING
            self.held_rows.append(node)
            self.held_demand.append(task.demand)
            if releasing:
                self.releasing_rows.append(node)
                self.releasing_demand.append(task.demand)
            if task.fraction_request:
                fraction = task.fraction_on(self.state.nodes, node)
                task.device = charge_device(self.state.nodes, node, task.info.gpu_group, fraction, releasing)
        counted = queue_count(task.status, node >= 0)
        if counted is _ALLOCATED:
            self._allocate(task)
        elif counted is _REQUESTED:
            self._request(task)
        return task

    def _request(self, task: Task) -> None:
        q, amount = task.job.queue, task.amount
        if amount is None:
            self.leaf_requested[q] += self.state.queue_amount(task)
            self.sums.per_node[q] += 1
        else:
            key = (q, id(amount))
            self.pending[key] = self.pending.get(key, 0) + 1
            self.amounts[id(amount)] = amount

    def _allocate(self, task: Task) -> None:
        q = task.job.queue
        np_ = not task.job.info.preemptible
        if task.amount is None:
            amount = self.state.queue_amount(task, task.node)
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


def job_as_taken(info: JobInfo, state: ClusterState) -> JobInfo | None:
    """The job as the cycle takes it: whole, or, where its queue does not take it
    (state/access.py, its reason kept in state.refused), what it holds (None: nothing)."""
    rules = state.tree.access[state.tree.index[info.queue]]
    if not rules and not state.closed_queues:
        return info  # no rule on its path: the common case, one look-up
    said = refusal(info, rules, state.closed_queues)
    if said is None:
        return info
    state.refused[info.name] = said
    held = held_part(info)
    if held is None or len(held.tasks) < len(info.tasks):
        state.refused_waiting.add(info.name)
    return held


def job_problem(info: JobInfo, tree: QueueTree) -> str:
    """Why the job cannot be considered at all, or "" (it is valid)."""
    q = tree.index.get(info.queue)
    if q is None or not tree.is_leaf[q]:
        return f"job {info.name!r}: {leaf_queue_problem(info.queue, tree_parents(tree))}"
    if info.spread not in SPREAD_MODES:
        return (
            f"job {info.name!r}: spread {info.spread!r} is unknown; use 'preferred', "
            "'required' or '' (no spreading)"
        )
    return ""
