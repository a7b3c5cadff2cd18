"""The user API for Ray work under a queue: a decorator, a context manager, handles.

    @kai_ray.workload(queue="team-a", priority="train", workers=4,
                      resources_per_worker={"GPU": 1, "CPU": 2}, min_workers=2)
    def train(cfg): ...          # the body is the driver of its reservation

    train(cfg)                   # waits for admission, runs inside the reservation
    ref = train.remote(cfg)      # an ObjectRef of the result, as with @ray.remote
    h = train.submit(cfg)        # a WorkloadHandle: status, position, reason, cancel, result

A worker's resources take Ray's names too: `num_gpus=1, num_cpus=2, memory=...,
resources={...}` (per worker). Inside the body, `kai_ray.workers()` lists the workers
admitted now, each with a scheduling strategy for its bundle (kai_ray.api.workers).

The body runs as a Ray task that holds no resources of its own, inside the workload's
placement group with child capture on: the tasks and actors it starts use the reserved
bundles. Preemption kills that task's process, which takes the actors and tasks it owns
down with it; the handle then waits for re-admission and runs the body again (resume from
your checkpoint), or raises WorkloadPreempted when on_preempt="fail".
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Generic, ParamSpec, TypeVar

import ray
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from kai_ray.api.client import Scheduler, get_scheduler
from kai_ray.api.notice import group_by_id
from kai_ray.ray.client import make_spec
from kai_ray.ray.jobs import ENV_ATTEMPT, ENV_WORKLOAD

__all__ = [
    "Reservation",
    "WorkloadCancelled",
    "WorkloadFailed",
    "WorkloadFunction",
    "WorkloadHandle",
    "WorkloadPreempted",
    "make_spec",
    "reservation",
    "workload",
]

P = ParamSpec("P")
R = TypeVar("R")
_LIVE = ("Admitting", "Running", "Preempting", "Queued")


class WorkloadFailed(RuntimeError):
    """The workload ended without success; the message says why."""


class WorkloadPreempted(WorkloadFailed):
    """Preempted with on_preempt="fail"."""


class WorkloadCancelled(WorkloadFailed):
    pass


class WorkloadHandle:
    """A submitted workload: where it stands, why it waits, and a way to cancel it."""

    def __init__(self, wid: str, scheduler: Scheduler, future: Future[Any] | None = None):
        self.id = wid
        self._scheduler = scheduler
        self._future = future

    def info(self) -> dict[str, Any]:
        return self._scheduler.info(self.id)

    def status(self) -> str:
        return str(self.info()["state"])

    def position(self) -> int | None:
        """1-based place among the queued workloads of its queue (None: not queued)."""
        return self.info()["position"]  # type: ignore[no-any-return]

    def reason(self) -> str:
        return str(self.info()["reason"])

    def explain(self) -> dict[str, Any]:
        return self._scheduler.explain(self.id)

    def cancel(self) -> None:
        self._scheduler.cancel(self.id)

    def wait_admitted(self, timeout: float | None = None) -> dict[str, Any]:
        return self._scheduler.wait(self.id, ["Running"], timeout)

    def result(self, timeout: float | None = None) -> Any:
        if self._future is None:
            raise RuntimeError("this handle has no result (a job or a reservation)")
        return self._future.result(timeout)

    def done(self) -> bool:
        return self._future.done() if self._future else self.status() not in _LIVE

    def __repr__(self) -> str:
        return f"WorkloadHandle({self.id!r})"


# max_calls=1: the body's worker process exits when the body returns, so the pid the
# scheduler may kill on preemption never belongs to a pooled worker running other work.
@ray.remote(num_cpus=0, max_retries=0, max_calls=1)
def _run_body(wid: str, attempt: int, handle: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """The workload's driver inside its group. It first tells the scheduler which process
    to kill on preemption; a refusal means this attempt was preempted meanwhile."""
    ctx = ray.get_runtime_context()
    if not ray.get(handle.register_runner.remote(wid, attempt, ctx.get_node_id(), os.getpid())):
        raise WorkloadPreempted(f"workload {wid} attempt {attempt} was preempted before it began")
    os.environ[ENV_WORKLOAD], os.environ[ENV_ATTEMPT] = wid, str(attempt)
    try:
        return fn(*args, **kwargs)
    finally:  # pooled workers run other tasks later
        os.environ.pop(ENV_WORKLOAD, None)
        os.environ.pop(ENV_ATTEMPT, None)


@ray.remote(num_cpus=0, max_retries=0)
def _drive_remotely(wid: str, handle: Any, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`.remote()`: the admission loop as a Ray task, so its result is an ObjectRef. The
    body's arguments are this task's own, so Ray resolves ObjectRefs among them."""
    return _drive(Scheduler(handle), wid, fn, args, kwargs)


def _drive(sched: Scheduler, wid: str, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Admission -> run -> (preempted: again) until the body returns or the workload ends."""
    while True:
        info = sched.wait(wid, ["Running"])
        _raise_if_over(info)
        pg = group_by_id(info["group_id"])
        ref = _run_body.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_capture_child_tasks=True
            ),
            name=f"kai-ray:{info['name'] or wid}",
        ).remote(wid, info["attempt"], sched.handle, fn, args, kwargs)
        try:
            result = ray.get(ref)
        except Exception as exc:
            after = sched.info(wid)
            if after["state"] == "Running" and after["attempt"] == info["attempt"]:
                sched.finish(wid, info["attempt"], False, f"{type(exc).__name__}: {exc}")
                raise  # the body's own error
            _raise_if_over(after)
            continue  # preempted: wait for the next admission, run again
        sched.finish(wid, info["attempt"], True)
        return result


def _raise_if_over(info: Mapping[str, Any]) -> None:
    state, reason = info["state"], info["reason"]
    if state == "Cancelled":
        raise WorkloadCancelled(f"workload {info['id']} was cancelled: {reason}")
    if state == "Failed":
        cls = WorkloadPreempted if reason.startswith("preempted") else WorkloadFailed
        raise cls(f"workload {info['id']} failed: {reason}")
    if state == "Succeeded":
        raise WorkloadFailed(f"workload {info['id']} already finished")


class WorkloadFunction(Generic[P, R]):
    """What @workload returns: call it to run and wait, `.submit` for a handle."""

    def __init__(self, fn: Callable[P, R], spec_kwargs: dict[str, Any]) -> None:
        self._fn, self._spec_kwargs = fn, spec_kwargs
        functools.update_wrapper(self, fn)

    def options(self, **overrides: Any) -> WorkloadFunction[P, R]:
        return workload(self._fn, **{**self._spec_kwargs, **overrides})  # type: ignore[no-any-return]

    def _submit(self) -> tuple[Scheduler, str]:
        sched = get_scheduler()
        return sched, sched.submit(make_spec(**{"name": self._fn.__name__, **self._spec_kwargs}))

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> WorkloadHandle:
        """Queue the workload; a handle to follow it (status, position, reason, result)."""
        sched, wid = self._submit()
        future: Future[Any] = Future()

        def run() -> None:
            try:
                future.set_result(_drive(sched, wid, self._fn, args, kwargs))
            except BaseException as exc:
                future.set_exception(exc)

        threading.Thread(target=run, name=f"kai-ray-{wid}", daemon=True).start()
        return WorkloadHandle(wid, sched, future)

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ray.ObjectRef:
        """Queue the workload; an ObjectRef of the body's result (`ray.get` it), as a
        `@ray.remote` function gives. Refusals (SubmitError) are raised here, at once."""
        sched, wid = self._submit()
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        return _drive_remotely.options(  # type: ignore[no-any-return]
            scheduling_strategy=here, name=f"kai-ray-admission:{wid}"
        ).remote(wid, sched.handle, self._fn, *args, **kwargs)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.submit(*args, **kwargs).result()  # type: ignore[no-any-return]


def workload(fn: Callable[P, R] | None = None, /, **spec_kwargs: Any) -> Any:
    """Decorate a function as a kai-ray workload (see the module doc for the arguments).
    Options are checked here, so a typo fails at the decorator, not at the first call."""
    if "queue" not in spec_kwargs:
        raise TypeError("kai_ray.workload(...) needs queue=")
    make_spec(**spec_kwargs)  # raises TypeError / UnknownPriorityClassError
    if fn is not None:
        return WorkloadFunction(fn, spec_kwargs)
    return lambda f: WorkloadFunction(f, spec_kwargs)


class Reservation:
    """A reservation around a block of code in this process:

        with kai_ray.reservation(queue="team-a", workers=2,
                                 resources_per_worker={"CPU": 1}) as r:
            ray.get([step.options(scheduling_strategy=r.strategy()).remote() ...])

    On preemption the group is removed and the actors in it killed; the block sees its
    Ray calls fail, and `r.notice()` told it beforehand. Blocks are not re-run, so a
    preempted reservation fails (on_preempt="fail")."""

    def __init__(self, timeout: float | None = None, **spec_kwargs: Any) -> None:
        spec_kwargs.setdefault("on_preempt", "fail")
        self._spec_kwargs, self._timeout = spec_kwargs, timeout
        self.handle: WorkloadHandle | None = None
        self.placement_group: PlacementGroup | None = None
        self.attempt = 0

    def __enter__(self) -> Reservation:
        sched = get_scheduler()
        wid = sched.submit(make_spec(kind="block", **self._spec_kwargs))
        self.handle = WorkloadHandle(wid, sched)
        info = sched.wait(wid, ["Running"], self._timeout)
        if info["state"] != "Running":
            sched.cancel(wid)
            _raise_if_over(info)
            raise TimeoutError(
                f"workload {wid} not admitted within {self._timeout}s: "
                f"{info['reason']} (position {info['position']})"
            )
        self.attempt = info["attempt"]
        self.placement_group = group_by_id(info["group_id"])
        return self

    def strategy(self, bundle_index: int = -1) -> PlacementGroupSchedulingStrategy:
        if self.placement_group is None:
            raise RuntimeError("use strategy() inside the `with` block")
        return PlacementGroupSchedulingStrategy(
            self.placement_group, bundle_index, placement_group_capture_child_tasks=True
        )

    def notice(self) -> dict[str, Any] | None:
        from kai_ray.api.notice import notice_for

        return notice_for(self.handle.id) if self.handle else None

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.handle is not None:
            error = "" if exc is None else f"{exc_type.__name__}: {exc}"
            get_scheduler().finish(self.handle.id, self.attempt, exc is None, error)


def reservation(timeout: float | None = None, **spec_kwargs: Any) -> Reservation:
    return Reservation(timeout=timeout, **spec_kwargs)
