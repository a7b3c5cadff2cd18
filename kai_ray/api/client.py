"""Connecting to (or starting) the scheduler from a driver."""

from __future__ import annotations

import contextlib
from typing import Any

import ray

from kai_ray.core import SchedulerConfig
from kai_ray.ray.actor import NAMESPACE, SCHEDULER_NAME, get_or_start_scheduler
from kai_ray.ray.client import QueuesArg, Scheduler, load_queue_arg, new_workload_id

__all__ = [
    "Scheduler",
    "get_scheduler",
    "init",
    "load_queue_arg",
    "new_workload_id",
    "shutdown_scheduler",
]

_current: Scheduler | None = None


def init(
    address: str | None = None,
    queues: QueuesArg = None,
    config: SchedulerConfig | None = None,
    **ray_init_kwargs: Any,
) -> Scheduler:
    """Connect to Ray (start a local cluster when `address` is None and none runs), then
    find the scheduler actor or start it. `queues` (a file or a list) is applied to a
    running scheduler too; a bad file raises ConfigError and changes nothing."""
    global _current
    infos = load_queue_arg(queues)  # validate before touching anything
    if not ray.is_initialized():
        ray.init(address=address, **ray_init_kwargs)
    try:
        handle = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
        existed = True
    except ValueError:
        handle, existed = get_or_start_scheduler(infos, config), False
    _current = Scheduler(handle)
    if existed and infos is not None:
        _current.apply_queues(infos)
    return _current


def get_scheduler() -> Scheduler:
    """The scheduler of the current Ray session (connecting to it if this process has not)."""
    global _current
    if _current is None:
        if not ray.is_initialized():
            ray.init(address="auto")
        _current = Scheduler(ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE))
    return _current


def shutdown_scheduler() -> None:
    """Kill the scheduler actor (its state in Ray's KV store stays for a successor)."""
    global _current
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE), no_restart=True)
    _current = None
