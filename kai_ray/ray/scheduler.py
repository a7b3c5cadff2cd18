"""The Ray scheduler's engine room, behind the actor's RPC surface (kai_ray.ray.actor):
the Controller wired to Ray's adapters, stepped through the one scheduling loop by
control.pacing like every backend, with what a step on Ray also does: wake the callers
and dispatchers its events name, and the housekeeping of kai_ray.ray.upkeep.

All of it runs on the actor's event loop, one piece at a time, so the controller needs
no locks. A step runs when something changed (a submission, a finish, a cancel) and at a
short period (node changes, deadlines, timeouts); a placement group becoming ready wakes
only the cheap follow-up of its own workload, which keeps admission latency low.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kai_ray.control import ControlEvent, Controller, State, Workload
from kai_ray.control.pacing import Pacing, paced_steps
from kai_ray.core import Pipeline, QueueInfo, SchedulerConfig
from kai_ray.ray.adapters import RayExecutor, RayNodes
from kai_ray.ray.dashboard import RayDashboard
from kai_ray.ray.feed import DISPATCHER_KEY, AdmissionFeed
from kai_ray.ray.kvstore import KVStore
from kai_ray.ray.translate import NODE_ID_LABEL
from kai_ray.ray.upkeep import Upkeep

__all__ = ["PERIOD_S", "RayScheduler"]

log = logging.getLogger(__name__)

PERIOD_S = 0.5
PACE = 2.0  # after a step of d seconds, d * PACE for calls before the next step
# ...but never longer than this: a slow step on a busy machine (a node refresh, a loaded
# CPU) must not keep the next submission waiting seconds for its first cycle.
PACE_MAX_S = 0.5
NODE_REFRESH_S = 1.0
NODE_STALE_S = 5.0
REUSE_DELAY_S = 0.2
RELEASE_GAP_S = 0.1  # a step waits this long after a group was removed (measured: 50 ms)
EAGER_READY = 8  # groups of one step whose readiness is asked for as they are created


class _Clock:
    def now(self) -> float:
        return time.time()


class _ReadyWatchingExecutor(RayExecutor):
    """Tells the scheduler when a group it created becomes ready, so it need not poll."""

    def __init__(self, cluster: RayNodes, store: KVStore, on_created: Any) -> None:
        super().__init__(cluster, store)
        self._on_created = on_created

    def _created(self, name: str) -> None:
        self._on_created(name)


class RayScheduler:
    def __init__(self, queues: list[QueueInfo], config: SchedulerConfig, period_s: float = PERIOD_S) -> None:
        self.cluster, self.store = RayNodes(), KVStore()
        self.executor = _ReadyWatchingExecutor(self.cluster, self.store, self._watch_ready)
        # A long-lived process with many live objects: collect between cycles, not in them.
        self.engine = Controller(
            self.cluster,
            self.executor,
            self.store,
            _Clock(),
            queues,
            config,
            node_label=NODE_ID_LABEL,
            pause_gc=True,
        )
        self.waiters: dict[str, list[asyncio.Event]] = {}
        self.feed = AdmissionFeed()  # what each driver's dispatcher hears
        self.metrics: Any = None
        self.dashboard = RayDashboard(self.engine)
        self.engine.loop.listener = self.dashboard.feed  # the loop tells it of every cycle
        self.upkeep = Upkeep(self.engine, self.cluster, self.store, self.feed)
        self.period_s = period_s
        self.wake: asyncio.Event | None = None
        self._stepping: asyncio.Task[None] | None = None
        self.started_at = time.time()
        self._nodes_at = 0.0
        self._created_in_step = 0
        self.notify(self.engine.load())  # after a restart: state back, reconciled with Ray

    # ------------------------------------------------------------ the loop

    def start(self) -> asyncio.Task[str] | None:
        """Start stepping (on the running event loop) and the dashboard; its start task."""
        if self.wake is not None:
            return None
        self.wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._stepping = loop.create_task(self._run())  # kept: a task nobody holds may be collected
        return loop.create_task(self.dashboard.start())

    async def _run(self) -> None:
        from kai_ray.ray.metrics import SchedulerMetrics

        self.metrics = SchedulerMetrics()
        assert self.wake is not None
        pacing = Pacing(period=self.period_s, pace=PACE, pace_max=PACE_MAX_S)
        # Ray places a group on capacity removed less than ~50 ms ago only after a retry
        # back-off of up to a second: a step right after a release waits a moment, so the
        # room a finished workload left goes to the next at once.
        await paced_steps(
            self.wake,
            self._step,
            pacing,
            next_deadline=self.engine.next_deadline,
            not_before=lambda: self.executor.released_at + RELEASE_GAP_S,
        )

    async def _step(self, woken: bool) -> None:
        self._created_in_step = 0
        now = time.time()
        # A step woken by a submission or a finish is on someone's admission path: it
        # uses the node view of the last periodic step unless that one is quite old.
        refresh = now - self._nodes_at > (NODE_STALE_S if woken else NODE_REFRESH_S)
        if refresh:
            self._nodes_at = now
        step = self.engine.step(refresh_nodes=refresh)
        self.notify(step.events)
        self.notify(self.upkeep.after_step(now, refresh, self._refresh_soon))
        if any(isinstance(d, Pipeline) for d in step.result.decisions):
            # Placed on capacity being released: try again once Ray has it back (Ray
            # re-uses capacity freed a moment ago only after a ~1 s retry back-off).
            asyncio.get_running_loop().call_later(REUSE_DELAY_S, self.kick)
        if self.metrics is not None:
            self.metrics.record(self.engine.queue_status, self.engine.queues, self.engine.workloads.values())
            self.metrics.cycle_time(time.time() - now)

    def _refresh_soon(self) -> None:
        self._nodes_at = 0.0  # rebuild node info on the next step (a GPU probe came back)

    def kick(self) -> None:
        """Something changed: step soon."""
        if self.wake is not None:
            self.wake.set()

    def _watch_ready(self, group: str) -> None:
        # The first few groups of a step are waited for at once (the latency of one
        # admission); beyond those, once the step is over, so that a cycle's groups are
        # all created before Ray is asked to report on any (the throughput of many).
        self._created_in_step += 1
        early = self.executor.ready_ref(group) if self._created_in_step <= EAGER_READY else None

        async def wait() -> None:
            ref = early if early is not None else self.executor.ready_ref(group)
            if ref is None:  # released already
                return
            try:
                await ref
            except Exception:  # removed before ready: the engine finds out by itself
                return
            # Running is persisted by the next cycle: a restart before that finds the
            # group alive and marks it Running again.
            self.notify(self.engine.group_ready(group))

        asyncio.get_running_loop().create_task(wait())

    # ------------------------------------------------------------ events

    def notify(self, events: list[ControlEvent]) -> None:
        """Wake whoever waits on a workload an event names (a caller of `wait`, its
        driver's dispatcher); count them in the metrics."""
        for event in events:
            for ev in self.waiters.pop(event.workload, []):
                ev.set()
            w = self.engine.workloads.get(event.workload)
            if w is not None:
                self._dispatched(w)
        if self.metrics is not None:
            self.metrics.count(events)
        if events:
            self.dashboard.feed.touch()

    def _dispatched(self, w: Workload) -> None:
        """A workload whose body a driver's dispatcher runs: tell the dispatcher it was
        admitted or ended; once admitted, the dispatcher is the runner a preemption or a
        cancel stops (registered here, in the same pass: no round trip before its body)."""
        did = w.spec.metadata.get(DISPATCHER_KEY)
        if did is None:
            return
        if w.state is State.RUNNING and w.runner is None:
            self.engine.register_runner(
                w.id, w.attempt, {"dispatcher": did, "workload": w.id, "attempt": w.attempt}
            )
        self.feed.note(w)

    async def wait_for(self, wid: str, changed: Any, timeout: float | None) -> None:
        """Wait until `changed()` is true, waking on each event naming the workload."""
        deadline = None if timeout is None else time.time() + timeout
        while not changed():
            left = None if deadline is None else deadline - time.time()
            if left is not None and left <= 0:
                return
            ev = asyncio.Event()
            self.waiters.setdefault(wid, []).append(ev)
            try:
                async with asyncio.timeout(left):
                    await ev.wait()
            except TimeoutError:
                return
