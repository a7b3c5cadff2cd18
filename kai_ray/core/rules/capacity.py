"""Queue capacity checks, at every ancestor: the limit (OverLimit) and, for jobs that
cannot be preempted, the deserved quota (NonPreemptibleOverQuota). Fair share is NOT
checked here: preemptible jobs may use idle capacity beyond it and are reclaimable there."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from kai_ray.core.model.quantity import format_bytes
from kai_ray.core.model.snapshot import RESOURCES, Reason
from kai_ray.core.model.words import count
from kai_ray.core.rules.fairshare import FairShares
from kai_ray.core.state.cluster import ClusterState
from kai_ray.core.state.jobs import Job, Task
from kai_ray.core.state.nodes import EPS, FloatArray

__all__ = [
    "capacity_problem",
    "capped",
    "describe_amount",
    "format_resource",
    "quota_problem",
    "refused_with_all_gone",
]


def format_resource(r: int, value: float) -> str:
    if RESOURCES[r] == "memory":
        return f"{format_bytes(value)} memory"
    return count(float(f"{value:.4g}"), "GPU" if RESOURCES[r] == "gpu" else "CPU")


def describe_amount(amount: FloatArray) -> str:
    parts = [format_resource(r, float(amount[r])) for r in range(3) if amount[r] > EPS]
    return ", ".join(parts) or "nothing"


def capped(state: ClusterState, job: Job) -> bool:
    """Whether any capacity check applies to the job (else capacity_problem is None)."""
    return not job.info.preemptible or bool(state.tree.limited[job.queue])


def capacity_problem(state: ClusterState, shares: FairShares, job: Job, amount: FloatArray) -> Reason | None:
    """Why adding `amount` for `job` is not allowed, or None when it is. Queue by queue
    from the leaf up: its limit, then (non-preemptible jobs) its quota."""
    if not capped(state, job):
        return None
    for q in state.tree.ancestors[job.queue]:
        problem = _limit_reason(state, q, amount) or _quota_reason(state, shares, job, q, amount)
        if problem is not None:
            return problem
    return None


def quota_problem(state: ClusterState, shares: FairShares, job: Job, amount: FloatArray) -> Reason | None:
    """The quota part of capacity_problem alone. Victims never change it: they are
    preemptible, and only non-preemptible work counts against this check."""
    if job.info.preemptible:
        return None
    for q in state.tree.ancestors[job.queue]:
        problem = _quota_reason(state, shares, job, q, amount)
        if problem is not None:
            return problem
    return None


def refused_with_all_gone(
    state: ClusterState, shares: FairShares, job: Job, amount: FloatArray, gone: Iterable[Task]
) -> bool:
    """Whether capacity_problem refuses `amount` for `job` even once every task of `gone`
    has left its queue (what an eviction gives back: ClusterState.queue_amount where it
    runs): then no choice of victims among them lets the job in, and a victim search
    need not play one. A bound: a margin of EPS is left for the order of the sums."""
    if not capped(state, job):
        return False
    tree = state.tree
    quota = not job.info.preemptible
    checked = [q for q in tree.ancestors[job.queue] if quota or (tree.limit[q] >= 0).any()]
    if not checked:
        return False
    freed = {q: np.zeros(3) for q in checked}
    freed_np = {q: np.zeros(3) for q in checked}
    for t in gone:
        giving = [q for q in tree.ancestors[t.job.queue] if q in freed]
        if giving:
            amount_t = state.queue_amount(t, t.node)
            for q in giving:
                freed[q] += amount_t
                if not t.job.info.preemptible:
                    freed_np[q] += amount_t
    return any(
        _limit_reason(state, q, amount, freed[q], 2 * EPS)
        or _quota_reason(state, shares, job, q, amount, freed_np[q], 2 * EPS)
        for q in checked
    )


def _limit_reason(
    state: ClusterState, q: int, amount: FloatArray, gone: FloatArray | None = None, margin: float = EPS
) -> Reason | None:
    """Queue q's limit against `amount` more; `gone`: what it holds that counts as gone
    (refused_with_all_gone), with its `margin` for the order of the sums."""
    tree = state.tree
    for r in range(3):
        limit = tree.limit[q, r]
        held = state.usage.allocated[q][r] - (0.0 if gone is None else gone[r])
        if limit >= 0 and amount[r] > EPS and held + amount[r] > limit + margin:
            return Reason(
                "queue-limit",
                f"queue {tree.names[q]} is at its limit of {format_resource(r, limit)} "
                f"(holds {format_resource(r, held)}, this job asks for "
                f"{format_resource(r, float(amount[r]))} more)",
            )
    return None


def _quota_reason(
    state: ClusterState,
    shares: FairShares,
    job: Job,
    q: int,
    amount: FloatArray,
    gone: FloatArray | None = None,
    margin: float = EPS,
) -> Reason | None:
    if job.info.preemptible:
        return None
    for r in range(3):
        deserved = shares.deserved[q, r]
        held = state.usage.allocated_nonpreemptible[q][r] - (0.0 if gone is None else gone[r])
        if amount[r] > EPS and held + amount[r] > deserved + margin:
            return Reason(
                "queue-quota",
                f"non-preemptible job: queue {state.tree.names[q]} would go over its deserved "
                f"quota of {format_resource(r, deserved)} (non-preemptible jobs hold "
                f"{format_resource(r, held)}, this job asks for "
                f"{format_resource(r, float(amount[r]))}); use a preemptible priority "
                "or raise the queue's quota",
            )
    return None
