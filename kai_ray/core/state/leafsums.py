"""A leaf queue's own figures (allocated, non-preemptible, requested) from its tasks.

Which tasks count, and as what: accounting.py. Most tasks count the same amount against
their queue wherever they run (one per request), so a queue's figures are sums of amount
x number of tasks, per amount. Both the full build (build.py) and the cycle cache
(incremental/) add those products in one canonical order, `add_groups`: then a figure
has the same bits however it was come to, and the cache can keep the counts per queue
(`LeafSums`), so that a job coming or going costs its tasks, not its queue's thousand.
Tasks whose amount depends on the node (gpu-memory slices) are summed one by one, in job
order, before the groups; in a queue with such tasks, those are summed from its jobs
again when it changes.

It lives beside the full build, not in incremental/: the full build sums with it too,
and the reference must not depend on the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import numpy as np

from kai_ray.core.state.accounting import QueueCount, queue_count
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job
from kai_ray.core.state.nodes import FloatArray

__all__ = ["AmountKey", "LeafSums", "add_groups"]

AmountKey = tuple[float, ...]  # a shared amount's values: equal amounts are one group
Held = tuple[AmountKey, bool]  # and whether its tasks are non-preemptible

_REQUESTED, _ALLOCATED = QueueCount.REQUESTED, QueueCount.ALLOCATED


def add_groups(
    pending: Mapping[AmountKey, int],
    held: Mapping[Held, int],
    allocated: FloatArray,
    nonpreemptible: FloatArray,
    requested: FloatArray,
) -> None:
    """Add a queue's groups to its rows, in place: the pending tasks' by amount, then
    the holding tasks' by (amount, non-preemptible)."""
    for values in sorted(pending):
        requested += np.array(values) * pending[values]
    for values, np_ in sorted(held):
        total = np.array(values) * held[values, np_]
        allocated += total
        requested += total
        if np_:
            nonpreemptible += total


class LeafSums:
    """Per leaf queue, its tasks counted per shared amount (kept by the cycle cache). A
    queue is counted when it first changes (`count`), then kept up job by job."""

    def __init__(self, queues: int) -> None:
        self.counted = [False] * queues
        self.pending: list[dict[AmountKey, int]] = [{} for _ in range(queues)]
        self.held: list[dict[Held, int]] = [{} for _ in range(queues)]
        self.per_node = [0] * queues  # tasks whose amount depends on their node
        self._keys: dict[int, AmountKey] = {}  # id(amount) -> its values (amounts are shared)

    def counted_from(
        self, pending: dict[int, dict[AmountKey, int]], held: dict[int, dict[Held, int]]
    ) -> None:
        """Every queue counted: the groups the full build summed (its per-node tasks
        are counted in `per_node` as it goes)."""
        self.counted = [True] * len(self.counted)
        for q, group in pending.items():
            self.pending[q] = group
        for q, held_group in held.items():
            self.held[q] = held_group

    def count(self, q: int, jobs: Iterable[Job]) -> None:
        """Count the queue afresh from its jobs."""
        self.pending[q], self.held[q], self.per_node[q] = {}, {}, 0
        self.counted[q] = True
        for job in jobs:
            self.add(job, 1)

    def add(self, job: Job, sign: int) -> None:
        """Count the job's tasks in (sign 1) or out (-1), as the snapshot has them."""
        q, np_ = job.queue, not job.info.preemptible
        if not self.counted[q]:
            return
        pending, held = self.pending[q], self.held[q]
        for t in job.tasks:
            counted = queue_count(t.status, t.node >= 0)
            if counted is _REQUESTED:
                group: dict[object, int] = pending  # type: ignore[assignment]
                key: object = None if t.amount is None else self._key(t.amount)
            elif counted is _ALLOCATED:
                group = held  # type: ignore[assignment]
                key = None if t.amount is None else (self._key(t.amount), np_)
            else:
                continue
            if key is None:
                self.per_node[q] += sign
                continue
            n = group.get(key, 0) + sign
            if n:
                group[key] = n
            else:
                del group[key]

    def _key(self, amount: FloatArray) -> AmountKey:
        key = self._keys.get(id(amount))
        if key is None:
            key = self._keys[id(amount)] = tuple(amount.tolist())
        return key

    def figures(
        self, q: int, state: ClusterState, jobs: Callable[[], Iterable[Job]]
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The queue's figures, as the full build sums them: its tasks sized per node one
        by one, in job order (`jobs()`, asked for only when it has such tasks), then its
        counted groups (add_groups)."""
        allocated, nonpreemptible, requested = np.zeros(3), np.zeros(3), np.zeros(3)
        if self.per_node[q]:
            for job in jobs():
                for t in job.tasks:
                    if t.amount is not None:
                        continue  # counted in the groups
                    counted = queue_count(t.status, t.node >= 0)
                    if counted is _REQUESTED:
                        requested += state.queue_amount(t)
                    elif counted is _ALLOCATED:
                        amount = state.queue_amount(t, t.node)
                        allocated += amount
                        requested += amount
                        if not job.info.preemptible:
                            nonpreemptible += amount
        add_groups(self.pending[q], self.held[q], allocated, nonpreemptible, requested)
        return allocated, nonpreemptible, requested
