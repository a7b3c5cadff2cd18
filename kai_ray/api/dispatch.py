"""One dispatcher per driver: the place where a driver's function workloads wait.

`.submit()` and `.remote()` queue the workload at the scheduler, then hand its body to
this driver's dispatcher, an async actor that holds no resources. A waiting workload
costs it an asyncio task and the body's arguments: no process, no thread, and no Ray call
in flight. The dispatcher hears of admissions through one long poll at the scheduler
(kai_ray.api.admissions), starts the body inside the workload's placement group once it
is admitted, and keeps the outcome until the driver asks for it (`result`).

`.remote()` must return an ObjectRef of the body's result, and the only ObjectRef Ray
lets another process fill later is the return of a call: each `.remote()` keeps one
`result` call in flight here while it waits, which costs Ray about 73 KB between the
driver and here (measured beside it by `kai-ray bench ray --only queued`). `.submit()`
handles ask only when asked.

Admitting a workload, the scheduler makes its dispatcher the runner of that attempt; to
preempt or cancel it, the scheduler asks the dispatcher to stop the attempt, which
force-cancels the body's task (Ray kills its process, and what the body owns goes with
it). The dispatcher then waits for the next admission and runs the body again, or ends with
WorkloadPreempted when on_preempt="fail".

The dispatcher is created by the driver, so it ends with the driver; the scheduler
cancels the workloads of a driver that exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from kai_ray.api.admissions import AdmissionWatch
from kai_ray.api.body import WorkloadFailed, raise_if_over, run_body
from kai_ray.api.notice import group_by_id
from kai_ray.ray.feed import DISPATCHER_KEY, NAMESPACE, dispatcher_name

__all__ = ["DISPATCHER_KEY", "TIMED_OUT", "Body", "Dispatcher", "dispatcher"]

# Calls in flight at once: every `.remote()` that waits holds one.
MAX_CALLS = 1_000_000
TIMED_OUT = "kai-ray/timed-out"  # what `result` returns when its timeout passed first
FORGET_AFTER = 100_000  # ids of outcomes given away, kept to answer a second ask

# A body as the driver hands it over: id, [the function's ObjectRef], args, kwargs.
Body = tuple[str, list[ray.ObjectRef], tuple[Any, ...], dict[str, Any]]


# Calls made once or more per workload: kept out of Ray's task events (in the GCS).
_quiet = ray.method(enable_task_events=False)


# Restartable: a dispatcher that died (out of memory, killed) comes back for the
# submissions still to come; what it held is lost, and it has the scheduler cancel that.
@ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=MAX_CALLS)
class Dispatcher:
    def __init__(self, scheduler: Any, dispatcher_id: str, token: str | None = None) -> None:
        self._sched, self._id = scheduler, dispatcher_id
        self._token = token  # its driver's: a cancel here is the driver's own
        self._lost: set[str] = set()
        if ray.get_runtime_context().was_current_actor_reconstructed:
            self._lost = self._cancel_lost()
        self._watch = AdmissionWatch(scheduler, dispatcher_id)
        self._runs: dict[str, asyncio.Task[Any]] = {}  # workload -> its run, until forgotten
        self._arrival: dict[str, asyncio.Future[None]] = {}  # asked for before it came
        self._forgotten: dict[str, None] = {}  # outcomes given away: asking again fails
        self._bodies: dict[str, tuple[int, ray.ObjectRef]] = {}  # running: attempt, body
        self._stopped: dict[str, int] = {}  # the last attempt the scheduler stopped
        self._asking = 0  # result calls started and waiting

    def _cancel_lost(self) -> set[str]:
        why = "its driver's dispatcher restarted, and the body it held was lost"
        try:
            return set(ray.get(self._sched.cancel_dispatched.remote(self._id, why, token=self._token)))
        except PermissionError as exc:  # tenants came after its driver started, without a token
            logging.getLogger(__name__).warning("dispatcher %s: %s", self._id, exc)
            return set()

    # ------------------------------------------------------------ the driver's calls

    @_quiet
    async def enqueue(self, bodies: Sequence[Body]) -> None:
        """Take the bodies of workloads just queued: each runs once admitted."""
        loop = asyncio.get_running_loop()
        for wid, fn, args, kwargs in bodies:
            if wid not in self._runs and wid not in self._forgotten:
                self._runs[wid] = loop.create_task(self._run(wid, fn, args, kwargs))
            arrived = self._arrival.pop(wid, None)
            if arrived is not None and not arrived.done():
                arrived.set_result(None)

    @_quiet
    async def result(self, wid: str, timeout: float | None = None, remote: bool = False) -> Any:
        """The body's result (or the error that ended the workload), once there is one;
        TIMED_OUT if `timeout` passed first. `remote`: the call stands for a `.remote()`
        ObjectRef, so the outcome is given once, then forgotten, and `ray.cancel` of that
        ref cancels the workload (once the call has started: Ray drops one that has not,
        and the workload then runs with nobody to take its result)."""
        self._asking += 1
        try:
            run = await self._run_of(wid)
            done, _ = await asyncio.wait([run], timeout=timeout)
        except asyncio.CancelledError:
            if remote:
                self._sched.cancel.remote(wid, token=self._token)
            raise
        finally:
            self._asking -= 1
        if not done:
            return TIMED_OUT
        if remote:
            self._drop(wid)
        return run.result()

    @_quiet
    async def asking(self) -> int:
        """How many result calls have started and wait (a `ray.cancel` of theirs is heard)."""
        return self._asking

    @_quiet
    async def done(self, wid: str) -> bool:
        run = self._runs.get(wid)
        return run is None or run.done()

    @_quiet
    async def forget(self, wid: str) -> None:
        """The driver dropped its handle: the outcome is not kept (the run goes on)."""
        run = self._runs.get(wid)
        if run is None:
            return
        if run.done():
            self._drop(wid)
        else:
            run.add_done_callback(lambda _: self._drop(wid))

    async def _run_of(self, wid: str) -> asyncio.Task[Any]:
        """A run by id; one asked for before its `enqueue` arrived is waited for (calls
        to an async actor may be taken out of order)."""
        while (run := self._runs.get(wid)) is None:
            if wid in self._forgotten:
                raise WorkloadFailed(f"workload {wid}: its outcome was already given or dropped")
            if wid in self._lost:
                raise WorkloadFailed(f"workload {wid}: lost when its driver's dispatcher restarted")
            arrived = self._arrival.setdefault(wid, asyncio.get_running_loop().create_future())
            await arrived
        return run

    def _drop(self, wid: str) -> None:
        run = self._runs.pop(wid, None)
        if run is not None and run.done() and not run.cancelled():
            run.exception()  # looked at: asyncio does not log it as never retrieved
        self._forgotten[wid] = None
        if len(self._forgotten) > FORGET_AFTER:
            del self._forgotten[next(iter(self._forgotten))]

    # ------------------------------------------------------------ the scheduler's calls

    @_quiet
    async def stop(self, wid: str, attempt: int) -> None:
        """The scheduler ends `attempt` (preempted, cancelled): kill its body's process,
        which takes the tasks and actors the body owns with it."""
        self._stopped[wid] = max(attempt, self._stopped.get(wid, 0))
        body = self._bodies.get(wid)
        if body is not None and body[0] == attempt:
            ray.cancel(body[1], force=True)

    # ------------------------------------------------------------ one workload

    async def _run(
        self, wid: str, fn: list[ray.ObjectRef], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        """Admission -> body -> (preempted: again) until the body returns or the
        workload ends; the body's result, or the error that ended it."""
        attempt = 0
        try:
            while True:
                info = await self._watch.admitted(wid, attempt)
                raise_if_over(info)
                attempt = info["attempt"]
                ref = self._start(wid, attempt, info, fn, args, kwargs)
                if ref is None:
                    continue  # that attempt was over before it began
                try:
                    result = await ref
                except Exception as exc:
                    after = await self._sched.info.remote(wid)
                    if after["state"] == "Running" and after["attempt"] == attempt:
                        await self._sched.finish.remote(wid, attempt, False, f"{type(exc).__name__}: {exc}")
                        raise  # the body's own error
                    raise_if_over(after)
                    continue  # preempted: wait for the next admission, run again
                finally:
                    self._bodies.pop(wid, None)
                await self._sched.finish.remote(wid, attempt, True)
                return result
        finally:
            self._watch.ended(wid)
            self._stopped.pop(wid, None)

    def _start(
        self,
        wid: str,
        attempt: int,
        info: Mapping[str, Any],
        fn: list[ray.ObjectRef],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> ray.ObjectRef | None:
        """Start the body of `attempt` in its group; None: the scheduler stopped that
        attempt already (the scheduler made this dispatcher its runner when it admitted
        it, so a stop may come before the body starts)."""
        if self._stopped.get(wid, 0) >= attempt:
            return None
        ref = run_body.options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                group_by_id(info["group_id"]), placement_group_capture_child_tasks=True
            ),
            name=f"kai-ray:{info['name'] or wid}",
        ).remote(wid, attempt, fn[0], *args, **kwargs)  # the body's process unpickles fn
        self._bodies[wid] = (attempt, ref)
        return ref


# ((job, scheduler, token), id, handle)
_current: tuple[tuple[str, str, str | None], str, Any] | None = None


def dispatcher(scheduler: Any, token: str | None = None) -> tuple[str, Any]:
    """This driver's dispatcher for `scheduler` (id, handle), started with its first
    workload, on this node. Started without waiting: calls queue at Ray until it runs.
    A new scheduler (the last one killed), or a new token, gets a new dispatcher."""
    global _current
    key = (ray.get_runtime_context().get_job_id(), scheduler._actor_id.hex(), token)
    if _current is None or _current[0] != key:
        if _current is not None:
            with contextlib.suppress(Exception):
                ray.kill(_current[2])  # it served a scheduler that is gone
        did = f"d-{uuid.uuid4().hex[:12]}"
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        handle = Dispatcher.options(  # type: ignore[attr-defined]
            scheduling_strategy=here, name=dispatcher_name(did), namespace=NAMESPACE
        ).remote(scheduler, did, token)
        _current = (key, did, handle)
    return _current[1], _current[2]
