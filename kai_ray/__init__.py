"""kai-ray: KAI Scheduler's policies (queues, fair share, gangs, preemption) for Ray.

The user API (`kai_ray.init`, `kai_ray.workload`, ...) is loaded on first use, so that
`import kai_ray` stays cheap and the pure core never pulls in Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {
    "Reservation",
    "Scheduler",
    "SubmitError",
    "WorkloadCancelled",
    "WorkloadFailed",
    "WorkloadFunction",
    "WorkloadHandle",
    "WorkloadPreempted",
    "current_workload",
    "get_scheduler",
    "init",
    "preemption_notice",
    "reservation",
    "reservation_strategy",
    "shutdown_scheduler",
    "workload",
    "reservation_placement",
    "train_scaling_config",
    "worker_strategies",
    "workers",
    "Worker",
    "Workers",
    "SchedulerNotRunning",
}

__all__ = ["__version__", *sorted(_API)]


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module("kai_ray.api"), name)
    raise AttributeError(f"module 'kai_ray' has no attribute {name!r}")
