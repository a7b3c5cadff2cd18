"""What every action works on during one cycle (kept small on purpose: no god object)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kai_ray.core.cluster import ClusterState, FloatArray, Job, Task
from kai_ray.core.fairshare import FairShares
from kai_ray.core.model import SchedulerConfig
from kai_ray.core.ordering import QueueRank, queue_rank, tasks_to_allocate
from kai_ray.core.placement import Placer
from kai_ray.core.statement import Statement

__all__ = ["CycleContext"]


@dataclass(slots=True)
class CycleContext:
    state: ClusterState
    shares: FairShares
    config: SchedulerConfig
    now: float
    total: FloatArray  # cluster capacity per queue resource [gpu, cpu, memory]
    placer: Placer
    stmt: Statement
    reasons: dict[str, str] = field(default_factory=dict)  # job -> why it still waits

    def amount(self, tasks: list[Task]) -> FloatArray:
        """What these tasks count against their queue before they are placed."""
        total = np.zeros(3)
        for t in tasks:
            total += self.state.queue_amount(t, t.node if t.node >= 0 else -1)
        return total

    def rank(self, q: int, job: Job) -> QueueRank:
        return queue_rank(self.state, self.shares, self.total, q, self.amount(tasks_to_allocate(job)))
