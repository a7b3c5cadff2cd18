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

A queued workload costs no process and no thread: it waits in this driver's dispatcher
(kai_ray.api.dispatch), which starts the body once the workload is admitted. Many at once
go in one call: `train.map(configs)` (ObjectRefs) or `train.submit_many(configs)` (handles).

The body runs as a Ray task that holds no resources of its own, inside the workload's
placement group with child capture on: the tasks and actors it starts use the reserved
bundles. Preemption kills that task's process, which takes the actors and tasks it owns
down with it; the workload then waits for re-admission and runs the body again (resume
from your checkpoint), or raises WorkloadPreempted when on_preempt="fail".
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from typing import Any, Generic, ParamSpec, TypeVar

import ray
from ray.util.placement_group import PlacementGroup
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from kai_ray.api.body import WorkloadCancelled, WorkloadFailed, WorkloadPreempted, raise_if_over
from kai_ray.api.client import Scheduler, get_scheduler
from kai_ray.api.dispatch import DISPATCHER_KEY, TIMED_OUT, dispatcher
from kai_ray.api.notice import group_by_id
from kai_ray.ray.client import make_spec

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


class WorkloadHandle:
    """A submitted workload: where it stands, why it waits, and a way to cancel it; for a
    function, its result too (`result`, `done`), kept by this driver's dispatcher for as
    long as the handle lives."""

    def __init__(self, wid: str, scheduler: Scheduler, dispatcher: Any = None):
        self.id = wid
        self._scheduler = scheduler
        self._dispatcher = dispatcher
        self._owns = True  # the dispatcher keeps the outcome while this handle lives

    def info(self) -> dict[str, Any]:
        return self._scheduler.info(self.id)

    def status(self) -> str:
        return str(self.info()["state"])

    def position(self) -> int | None:
        """1-based place among the queued workloads of its queue (None: not queued)."""
        return self.info()["position"]  # type: ignore[no-any-return]

    def reason(self) -> str:
        return str(self.info()["reason"])

    def eta(self) -> dict[str, Any] | None:
        """While it waits, when it is forecast to start: {"at": epoch seconds, "in_s":
        seconds from now, "text": for people}; "at" is None when no start can be
        forecast ("text" says why). None once it is not waiting."""
        return self._scheduler.eta(self.id)

    def explain(self) -> dict[str, Any]:
        return self._scheduler.explain(self.id)

    def cancel(self) -> None:
        self._scheduler.cancel(self.id)

    def wait_admitted(self, timeout: float | None = None) -> dict[str, Any]:
        return self._scheduler.wait(self.id, ["Running"], timeout)

    def result(self, timeout: float | None = None) -> Any:
        """The body's result, waiting for it (TimeoutError after `timeout` seconds); the
        error that ended the workload (WorkloadCancelled, WorkloadPreempted, the body's
        own) is raised as itself."""
        if self._dispatcher is None:
            raise RuntimeError("this handle has no result (a job or a reservation)")
        try:
            value = ray.get(self._dispatcher.result.remote(self.id, timeout))
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, WorkloadFailed):
                raise exc.cause from None
            raise
        if isinstance(value, str) and value == TIMED_OUT:
            raise TimeoutError(f"workload {self.id} has no result after {timeout}s ({self.status()})")
        return value

    def done(self) -> bool:
        if self._dispatcher is None:
            return self.status() not in _LIVE
        return bool(ray.get(self._dispatcher.done.remote(self.id)))

    def __getstate__(self) -> dict[str, Any]:
        # A copy sent elsewhere (to a task) reads the outcome; the original keeps it.
        return {**self.__dict__, "_owns": False}

    def __del__(self) -> None:
        if self._dispatcher is not None and self._owns and ray.is_initialized():
            with contextlib.suppress(Exception):
                self._dispatcher.forget.remote(self.id)

    def __repr__(self) -> str:
        return f"WorkloadHandle({self.id!r})"


class WorkloadFunction(Generic[P, R]):
    """What @workload returns: call it to run and wait, `.submit` for a handle."""

    def __init__(self, fn: Callable[P, R], spec_kwargs: dict[str, Any]) -> None:
        self._fn, self._spec_kwargs = fn, spec_kwargs
        self._put: tuple[str, ray.ObjectRef] | None = None  # (Ray job, the function put once)
        functools.update_wrapper(self, fn)

    def options(self, **overrides: Any) -> WorkloadFunction[P, R]:
        return workload(self._fn, **{**self._spec_kwargs, **overrides})  # type: ignore[no-any-return]

    def _queue(self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> tuple[Scheduler, Any, list[str]]:
        """Queue one workload per call, in one round trip to the scheduler (durable when
        it answers): the scheduler, this driver's dispatcher, and the workloads' ids."""
        sched = get_scheduler()
        did, disp = dispatcher(sched.handle, sched.token)
        spec = make_spec(**{"name": self._fn.__name__, **self._spec_kwargs})
        spec.metadata[DISPATCHER_KEY] = did
        wids = [sched.submit(spec)] if len(calls) == 1 else sched.submit_many([spec] * len(calls))
        return sched, disp, wids

    def _handles(self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[WorkloadHandle]:
        """Queued, their bodies handed to the dispatcher in one call: nothing waits here,
        and nothing is in flight while they wait."""
        sched, disp, wids = self._queue(calls)
        fn = self._function()
        disp.enqueue.remote([(wid, fn, a, kw) for wid, (a, kw) in zip(wids, calls, strict=True)])
        return [WorkloadHandle(wid, sched, disp) for wid in wids]

    def _refs(self, calls: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> list[ray.ObjectRef]:
        """Queued, each an ObjectRef of the body's result: a call to the dispatcher that
        answers with it (`ray.cancel` of the ref cancels the workload). The bodies go
        first, in a call of their own: Ray drops a cancelled call that has not started,
        and a workload admitted with no body would hold its room for good."""
        _, disp, wids = self._queue(calls)
        fn = self._function()
        disp.enqueue.remote([(wid, fn, a, kw) for wid, (a, kw) in zip(wids, calls, strict=True)])
        return [disp.result.remote(wid, None, True) for wid in wids]

    def _function(self) -> list[ray.ObjectRef]:
        """The body's function, put in Ray's object store once per Ray job: each workload
        carries only its ref (in a list, so that Ray hands the ref on rather than the
        function), and only the body's process unpickles it."""
        job = ray.get_runtime_context().get_job_id()
        if self._put is None or self._put[0] != job:
            self._put = (job, ray.put(self._fn))
        return [self._put[1]]

    def submit(self, *args: P.args, **kwargs: P.kwargs) -> WorkloadHandle:
        """Queue the workload; a handle to follow it (status, position, reason, result)."""
        return self._handles([(args, kwargs)])[0]

    def remote(self, *args: P.args, **kwargs: P.kwargs) -> ray.ObjectRef:
        """Queue the workload; an ObjectRef of the body's result (`ray.get` it), as a
        `@ray.remote` function gives. Refusals (SubmitError) are raised here, at once."""
        return self._refs([(args, kwargs)])[0]

    def submit_many(self, *iterables: Iterable[Any]) -> list[WorkloadHandle]:
        """One workload per item, as `map` calls a function (one argument from each
        iterable), queued in one call: a handle each."""
        calls = [(tuple(args), {}) for args in zip(*iterables, strict=True)]
        return self._handles(calls) if calls else []

    def map(self, *iterables: Iterable[Any]) -> list[ray.ObjectRef]:
        """`submit_many`, with an ObjectRef of each body's result, as `.remote()` gives."""
        calls = [(tuple(args), {}) for args in zip(*iterables, strict=True)]
        return self._refs(calls) if calls else []

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
            raise_if_over(info)
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
