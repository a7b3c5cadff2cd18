"""Queue capacity checks, at every ancestor: the limit (OverLimit) and, for jobs that
cannot be preempted, the deserved quota (NonPreemptibleOverQuota). Fair share is NOT
checked here: preemptible jobs may use idle capacity beyond it and are reclaimable there."""

from __future__ import annotations

from kai_ray.core.cluster import EPS, ClusterState, FloatArray, Job
from kai_ray.core.fairshare import FairShares
from kai_ray.core.model import RESOURCES
from kai_ray.core.quantity import format_bytes
from kai_ray.core.words import count

__all__ = ["capacity_problem", "capped", "describe_amount", "format_resource"]


def format_resource(r: int, value: float) -> str:
    if RESOURCES[r] == "memory":
        return f"{format_bytes(value)} memory"
    return count(float(f"{value:.4g}"), "GPU" if RESOURCES[r] == "gpu" else "CPU")


def describe_amount(amount: FloatArray) -> str:
    parts = [format_resource(r, float(amount[r])) for r in range(3) if amount[r] > EPS]
    return ", ".join(parts) or "nothing"


def capped(state: ClusterState, job: Job) -> bool:
    """Whether any capacity check applies to the job (else capacity_problem is "")."""
    return not job.info.preemptible or bool(state.tree.limited[job.queue])


def capacity_problem(state: ClusterState, shares: FairShares, job: Job, amount: FloatArray) -> str:
    """Why adding `amount` for `job` is not allowed, or "" when it is."""
    tree, usage = state.tree, state.usage
    if not capped(state, job):
        return ""
    for q in tree.ancestors[job.queue]:
        for r in range(3):
            limit = tree.limit[q, r]
            held = usage.allocated[q][r]
            if limit >= 0 and amount[r] > EPS and held + amount[r] > limit + EPS:
                return (
                    f"queue {tree.names[q]} is at its limit of {format_resource(r, limit)} "
                    f"(holds {format_resource(r, held)}, this job asks for "
                    f"{format_resource(r, float(amount[r]))} more)"
                )
        if job.info.preemptible:
            continue
        for r in range(3):
            deserved = shares.deserved[q, r]
            held = usage.allocated_nonpreemptible[q][r]
            if amount[r] > EPS and held + amount[r] > deserved + EPS:
                return (
                    f"non-preemptible job: queue {tree.names[q]} would go over its deserved "
                    f"quota of {format_resource(r, deserved)} (non-preemptible jobs hold "
                    f"{format_resource(r, held)}, this job asks for "
                    f"{format_resource(r, float(amount[r]))}); use a preemptible priority "
                    "or raise the queue's quota"
                )
    return ""
