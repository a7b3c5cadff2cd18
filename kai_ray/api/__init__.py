"""What users import: init, the @workload decorator, reservations, handles, notices.

Loaded lazily: the CLI imports `kai_ray.api.commands` for every command, and most
commands (scenarios, benchmarks of the core) should not pay for importing Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "Scheduler": "kai_ray.api.client",
    "get_scheduler": "kai_ray.api.client",
    "init": "kai_ray.api.client",
    "shutdown_scheduler": "kai_ray.api.client",
    "current_workload": "kai_ray.api.notice",
    "preemption_notice": "kai_ray.api.notice",
    "reservation_strategy": "kai_ray.api.notice",
    "reservation_placement": "kai_ray.api.notice",
    "train_scaling_config": "kai_ray.api.notice",
    "worker_strategies": "kai_ray.api.workers",
    "workers": "kai_ray.api.workers",
    "Worker": "kai_ray.api.workers",
    "Workers": "kai_ray.api.workers",
    "SchedulerNotRunning": "kai_ray.api.client",
    "Reservation": "kai_ray.api.workloads",
    "WorkloadCancelled": "kai_ray.api.workloads",
    "WorkloadFailed": "kai_ray.api.workloads",
    "WorkloadFunction": "kai_ray.api.workloads",
    "WorkloadHandle": "kai_ray.api.workloads",
    "WorkloadPreempted": "kai_ray.api.workloads",
    "reservation": "kai_ray.api.workloads",
    "workload": "kai_ray.api.workloads",
    "SubmitError": "kai_ray.control",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'kai_ray.api' has no attribute {name!r}")
