"""Connecting to (or starting) the scheduler from a driver."""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Any

import ray

from kai_ray.core import SchedulerConfig
from kai_ray.ray.actor import NAMESPACE, SCHEDULER_NAME, get_or_start_scheduler
from kai_ray.ray.client import (
    QueuesArg,
    Scheduler,
    TenantsArg,
    load_queue_arg,
    load_tenants_arg,
    new_workload_id,
)

__all__ = [
    "Scheduler",
    "SchedulerNotRunning",
    "get_scheduler",
    "init",
    "load_queue_arg",
    "new_workload_id",
    "shutdown_scheduler",
]

log = logging.getLogger("kai_ray")
_current: Scheduler | None = None

START_HINT = (
    "call kai_ray.init() first (it starts the scheduler), or start it on the cluster "
    "with `kai-ray start [--queues QUEUES.yaml]`"
)


_dashboard_said = False


class SchedulerNotRunning(RuntimeError):
    """No kai-ray scheduler runs on the Ray cluster (or no Ray cluster was found)."""


def init(
    address: str | None = None,
    queues: QueuesArg = None,
    config: SchedulerConfig | None = None,
    *,
    token: str | None = None,
    tenants: TenantsArg = None,
    **ray_init_kwargs: Any,
) -> Scheduler:
    """Connect to Ray (start a local cluster when `address` is None and none runs), then
    find the scheduler actor or start it.

    `queues` (a file or a list) are added to the scheduler's queues, or update the
    queues of the same name; other queues are kept, and what changed is logged. A bad
    file raises ConfigError and changes nothing.

    `token` (default: $KAI_RAY_TOKEN): this driver's tenant or admin token, sent with
    every call that submits, cancels or changes; checked once the scheduler has tenants.
    `tenants`: a tenants file (or its document) for the scheduler: it starts with them,
    or a running one has its tenants replaced (an admin's token needed once it has
    some). Changing queues of a scheduler with tenants takes an admin's token too."""
    global _current
    infos = load_queue_arg(queues)  # validate before touching anything
    tenants_doc = load_tenants_arg(tenants)
    if not ray.is_initialized():
        ray.init(address=address, **ray_init_kwargs)
    try:
        handle = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
        existed = True
    except ValueError:
        handle, existed = get_or_start_scheduler(infos, config, tenants_doc), False
    _current = Scheduler(handle, token)
    if existed and tenants_doc is not None:
        _say(f"kai-ray: tenants of the running scheduler: {_current.apply_tenants(tenants_doc)['summary']}")
    if existed and infos is not None:
        change = _current.apply_queues(infos)
        if change["added"] or change["updated"]:
            _say(f"kai-ray: queues of the running scheduler: {change['summary']}")
    _say_dashboard(_current)
    return _current


def _say_dashboard(sched: Scheduler) -> None:
    """The dashboard's URL, once per process (a driver calling init() again is not
    told twice)."""
    global _dashboard_said
    if _dashboard_said:
        return
    try:
        url = sched.dashboard().get("url")
    except Exception as exc:  # an older scheduler without a dashboard: nothing to say
        log.debug("dashboard: %s", exc)
        return
    if url:
        _dashboard_said = True
        _say(f"kai-ray: dashboard at {url} (`kai-ray dashboard` prints it again)")


def get_scheduler() -> Scheduler:
    """The scheduler of the current Ray session (connecting to it if this process has
    not; its token then is $KAI_RAY_TOKEN's). Raises SchedulerNotRunning, saying what to
    do, when there is none."""
    global _current
    if _current is None:
        if not ray.is_initialized():
            try:
                ray.init(address="auto")
            except ConnectionError as exc:
                raise SchedulerNotRunning(f"no Ray cluster to connect to ({exc}); {START_HINT}") from None
        try:
            handle = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
        except ValueError:
            raise SchedulerNotRunning(
                f"no kai-ray scheduler runs on this Ray cluster; {START_HINT}"
            ) from None
        _current = Scheduler(handle)
    return _current


def shutdown_scheduler() -> None:
    """Kill the scheduler actor (its state in Ray's KV store stays for a successor)."""
    global _current
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE), no_restart=True)
    _current = None


class _Stderr(logging.Handler):
    """Writes to the sys.stderr of the moment (which tools and tests may swap)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(self.format(record), file=sys.stderr, flush=True)


def _say(text: str) -> None:
    """A line for the person running the driver, on the `kai_ray` logger. Like Ray's
    own `ray` logger, it prints INFO to stderr by itself unless the application
    configured the `kai_ray` logger."""
    if not log.handlers and log.level == logging.NOTSET:
        log.addHandler(_Stderr())
        log.setLevel(logging.INFO)
        log.propagate = False
    log.info(text)
