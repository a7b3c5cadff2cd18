"""The task that runs a workload's body, and the errors that end a workload.

Kept light on purpose: each body starts in a fresh Ray worker process (see run_body),
which imports this module first. It imports Ray and nothing of kai-ray's control plane.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import ray

from kai_ray.ray.env import ENV_ATTEMPT, ENV_WORKLOAD

__all__ = ["WorkloadCancelled", "WorkloadFailed", "WorkloadPreempted", "raise_if_over", "run_body"]


class WorkloadFailed(RuntimeError):
    """The workload ended without success; the message says why."""


class WorkloadPreempted(WorkloadFailed):
    """Preempted with on_preempt="fail"."""


class WorkloadCancelled(WorkloadFailed):
    pass


def raise_if_over(info: Mapping[str, Any]) -> None:
    """Raise the error that says why a workload ended, if it did without success."""
    state, reason = info["state"], info["reason"]
    if state == "Cancelled":
        raise WorkloadCancelled(f"workload {info['id']} was cancelled: {reason}")
    if state == "Failed":
        cls = WorkloadPreempted if reason.startswith("preempted") else WorkloadFailed
        raise cls(f"workload {info['id']} failed: {reason}")
    if state == "Succeeded":
        raise WorkloadFailed(f"workload {info['id']} already finished")


# max_calls=1, as Ray does for a task that holds GPUs: a body may have put a GPU's memory
# to use through its workers' devices, and its process exiting is what frees it.
@ray.remote(num_cpus=0, max_retries=0, max_calls=1)
def run_body(wid: str, attempt: int, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """The workload's driver inside its group. The arguments are the task's own, so Ray
    resolves ObjectRefs among them, as for a `@ray.remote` function. It is given no
    handle of the scheduler's: unpickling one would import the whole scheduler here."""
    os.environ[ENV_WORKLOAD], os.environ[ENV_ATTEMPT] = wid, str(attempt)
    return fn(*args, **kwargs)
