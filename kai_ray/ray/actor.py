"""The scheduler actor: a detached, named, restartable Ray actor around the control
plane's Controller, wired to Ray's adapters of its ports (kai_ray.ray.adapters).

It is an async actor so that thousands of callers can wait for admission at once without
a thread each. All controller work runs on the actor's event loop, one piece at a time,
so the controller needs no locks. A cycle runs when something changed (a submission, a finish, a
cancel) and at a short period (node changes, deadlines, timeouts); a placement group
becoming ready wakes only the cheap progress pass, which keeps admission latency low.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

import ray

from kai_ray.control import (
    TERMINAL,
    ControlEvent,
    Controller,
    QueueChangeError,
    State,
    SubmitError,
    Workload,
    WorkloadChanged,
    WorkloadSpec,
)
from kai_ray.control.nodes import node_usage
from kai_ray.control.queues import queue_from_json
from kai_ray.control.snapshot import held_by_workloads
from kai_ray.control.snapshotfile import build_snapshot, write_snapshot
from kai_ray.control.views import queue_views, worker_signature
from kai_ray.core import Pipeline, QueueInfo, SchedulerConfig
from kai_ray.ray.adapters import RayExecutor, RayNodes
from kai_ray.ray.dashboard import RayDashboard
from kai_ray.ray.feed import DISPATCHER_KEY, NAMESPACE, AdmissionFeed
from kai_ray.ray.kvstore import KVStore
from kai_ray.ray.translate import NODE_ID_LABEL, short_node_ids
from kai_ray.ray.upkeep import Upkeep

__all__ = ["NAMESPACE", "SCHEDULER_NAME", "SchedulerActor", "get_or_start_scheduler"]

log = logging.getLogger(__name__)

SCHEDULER_NAME = "kai-ray-scheduler"
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
REAP_S = 5.0  # how often drivers that exited, and groups nobody holds, are looked for
PIN_S = 300.0  # how often uploaded job packages of waiting jobs are pinned again
# Without a queue file: one queue that may use the whole cluster.
DEFAULT_QUEUE = QueueInfo("default", quota=(-1.0, -1.0, -1.0))


# Calls made once or more per workload: kept out of Ray's task events (its state API and
# dashboard), which would otherwise hold a record of each in the GCS.
_quiet = ray.method(enable_task_events=False)


class _Clock:
    def now(self) -> float:
        return time.time()


class _ReadyWatchingExecutor(RayExecutor):
    """Tells the actor when a group it created becomes ready, so it need not poll."""

    def __init__(self, cluster: RayNodes, store: KVStore, on_created: Any) -> None:
        super().__init__(cluster, store)
        self._on_created = on_created

    def _created(self, name: str) -> None:
        self._on_created(name)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=10_000)
class SchedulerActor:
    def __init__(
        self,
        queues: list[dict[str, Any]],
        config: dict[str, Any] | None = None,
        period_s: float = PERIOD_S,
    ) -> None:
        logging.basicConfig(level=logging.INFO)
        cfg = SchedulerConfig(**config) if config else SchedulerConfig()
        self.cluster, self.store = RayNodes(), KVStore()
        store = self.store
        executor = self.executor = _ReadyWatchingExecutor(self.cluster, store, self._watch_ready)
        infos = [queue_from_json(q) for q in queues] or [DEFAULT_QUEUE]
        # A long-lived process with many live objects: collect between cycles, not in them.
        self.engine = Controller(
            self.cluster, executor, store, _Clock(), infos, cfg, node_label=NODE_ID_LABEL, pause_gc=True
        )
        self._waiters: dict[str, list[asyncio.Event]] = {}
        self.feed = AdmissionFeed()  # what each driver's dispatcher hears
        self._metrics: Any = None
        self.dashboard = RayDashboard(self.engine)
        self.engine.loop.listener = self.dashboard.feed  # the loop tells it of every cycle
        self._dashboard_started: asyncio.Task[str] | None = None
        self._notify(self.engine.load())  # after a restart: state back, reconciled with Ray
        self.period_s = period_s
        self._step_ended = self._step_cost = 0.0
        self._wake: asyncio.Event | None = None
        self._nodes_at = 0.0
        self._started_at = time.time()
        self.upkeep = Upkeep(self.engine, self.cluster)
        self._reaped_at = 0.0
        self._pinned_at = 0.0
        self._created_in_step = 0
        # The event loop is not running yet inside __init__: start the loop by a call.
        ray.get_runtime_context().current_actor.start.remote()

    # ------------------------------------------------------------ the loop

    async def start(self) -> bool:
        if self._wake is None:
            self._wake = asyncio.Event()
            asyncio.get_running_loop().create_task(self._loop())
            self._dashboard_started = asyncio.get_running_loop().create_task(self.dashboard.start())
        return True

    async def _loop(self) -> None:
        from kai_ray.ray.metrics import SchedulerMetrics

        self._metrics = SchedulerMetrics()
        assert self._wake is not None
        while True:
            deadline = self.engine.next_deadline()
            timeout = (
                self.period_s if deadline is None else min(self.period_s, max(0.0, deadline - time.time()))
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
            kicked = self._wake.is_set()
            # Calls (submissions, reads) are served between steps: after a step that took
            # d seconds, the next waits until PACE * d has passed, so that a deep queue's
            # costly cycles never take more than 1 / (1 + PACE) of the actor's time. A
            # step after a quiet spell starts at once.
            rest = self._step_ended + min(PACE * self._step_cost, PACE_MAX_S) - time.monotonic()
            # Ray places a group on capacity removed less than ~50 ms ago only after a
            # retry back-off of up to a second: a step right after a release waits a
            # moment, so the room a finished workload left goes to the next at once.
            rest = max(rest, self.executor.released_at + RELEASE_GAP_S - time.monotonic())
            if rest > 0:
                await asyncio.sleep(rest)
            self._wake.clear()
            began = time.monotonic()
            try:
                self._step(kicked)
            except Exception:  # one bad cycle must not stop the scheduler
                log.exception("scheduling cycle failed")
            self._step_ended = time.monotonic()
            self._step_cost = self._step_ended - began
            await asyncio.sleep(0)

    def _step(self, kicked: bool = False) -> None:
        self._created_in_step = 0
        now = time.time()
        # A step woken by a submission or a finish is on someone's admission path: it
        # uses the node view of the last periodic step unless that one is quite old.
        refresh = now - self._nodes_at > (NODE_STALE_S if kicked else NODE_REFRESH_S)
        if refresh:
            self._nodes_at = now
        step = self.engine.step(refresh_nodes=refresh)
        result = step.result
        self._notify(step.events)
        if refresh:
            self.upkeep.probe_new_nodes(self._refresh_soon)
            self.upkeep.ask_autoscaler()
        if now - self._reaped_at > REAP_S:
            self._reaped_at = now
            self._notify(self.upkeep.reap())
            self.feed.forget_idle(now)
            self.engine.sweep_orphans()
            # Journaled records move to their own keys while nothing is being admitted
            # (the writes would otherwise compete with placement groups at the GCS).
            quiet = not any(w.state is State.ADMITTING for w in self.engine.workloads.values())
            if self.store.compaction_due(quiet):
                self.store.compact()
        if now - self._pinned_at > PIN_S:
            self._pinned_at = now
            self.upkeep.pin_packages()
        if any(isinstance(d, Pipeline) for d in result.decisions):
            # Placed on capacity being released: try again once Ray has it back (Ray
            # re-uses capacity freed a moment ago only after a ~1 s retry back-off).
            asyncio.get_running_loop().call_later(REUSE_DELAY_S, self._kick)
        if self._metrics is not None:
            self._metrics.record(self.engine.queue_status, self.engine.queues, self.engine.workloads.values())
            self._metrics.cycle_time(time.time() - now)

    def _refresh_soon(self) -> None:
        self._nodes_at = 0.0  # rebuild node info on the next step (a GPU probe came back)

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

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
            self._notify(self.engine.group_ready(group))

        asyncio.get_running_loop().create_task(wait())

    def _notify(self, events: list[ControlEvent]) -> None:
        """Wake whoever waits on a workload an event names (a caller of `wait`, its
        driver's dispatcher); count them in the metrics."""
        for event in events:
            for ev in self._waiters.pop(event.workload, []):
                ev.set()
            w = self.engine.workloads.get(event.workload)
            if w is not None:
                self._dispatched(w)
        if self._metrics is not None:
            self._metrics.count(events)
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

    # ------------------------------------------------------------ workloads

    @_quiet
    async def submit(self, wid: str, spec: dict[str, Any], persist: bool = True) -> dict[str, Any]:
        """Queue one workload: {"id"}, or {"id", "submit_error"} when refused."""
        try:
            self.engine.submit(wid, WorkloadSpec(**spec))
        except SubmitError as exc:
            return {"id": wid, "submit_error": str(exc)}
        if persist:
            self.engine.flush()  # persisted before the caller hears back
        self._kick()
        return {"id": wid}

    @_quiet
    async def submit_many(self, items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Queue several at once: the next cycle sees them all (no first-come advantage)."""
        out = []
        specs: dict[int, WorkloadSpec] = {}  # one spec object for the copies of one spec
        for wid, spec in items:
            try:
                made = specs.get(id(spec))
                if made is None:
                    made = specs[id(spec)] = WorkloadSpec(**spec)
                self.engine.submit(wid, made)
                out.append({"id": wid})
            except SubmitError as exc:
                out.append({"id": wid, "submit_error": str(exc)})
        self.engine.flush()
        self._kick()
        return out

    @_quiet
    async def admit(self, wid: str, spec: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """submit + wait for Running in one round trip (the lowest admission latency)."""
        # No write here: the caller hears back only once it runs, and the write-ahead
        # before its group is created persists it; a crash before that retries this call.
        answer = await self.submit(wid, spec, persist=False)
        if "submit_error" in answer:
            return answer
        return await self.wait(wid, [State.RUNNING.value], timeout)

    @_quiet
    async def admissions(self, dispatcher: str, timeout: float) -> dict[str, Any]:
        """A dispatcher's long poll: its workloads admitted or ended since it last asked
        (kai_ray.ray.feed)."""
        return await self.feed.poll(dispatcher, timeout, self.engine.workloads.get)

    @_quiet
    async def reports(self, ids: list[str]) -> list[dict[str, Any]]:
        """The named workloads as a dispatcher sees them (after a restart of this actor)."""
        return self.feed.reports(ids, self.engine.workloads.get)

    @_quiet
    async def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in self.engine.workloads.values():
            out[w.state.value] = out.get(w.state.value, 0) + 1
        return out

    @_quiet
    async def wait(self, wid: str, states: list[str], timeout: float | None = None) -> dict[str, Any]:
        """Return once the workload is in one of `states` (or finished), or at the timeout."""
        wanted = {State(s) for s in states} | TERMINAL
        deadline = None if timeout is None else time.time() + timeout
        while self.engine.workloads[wid].state not in wanted:
            left = None if deadline is None else deadline - time.time()
            if left is not None and left <= 0:
                break
            ev = asyncio.Event()
            self._waiters.setdefault(wid, []).append(ev)
            try:
                await asyncio.wait_for(ev.wait(), timeout=left)
            except TimeoutError:
                break
        return self._info(wid)

    @_quiet
    async def info(self, wid: str) -> dict[str, Any]:
        return self._info(wid)

    @_quiet
    async def wait_workers(self, wid: str, seen: list[Any], timeout: float | None = None) -> dict[str, Any]:
        """Return once the workload's usable workers differ from `seen` (a
        worker_signature), or at the timeout (0: at once)."""
        deadline = None if timeout is None else time.time() + timeout
        while worker_signature(info := self._info(wid)) == seen:
            left = None if deadline is None else deadline - time.time()
            if left is not None and left <= 0:
                break
            ev = asyncio.Event()
            self._waiters.setdefault(wid, []).append(ev)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), timeout=left)
        return info

    async def list_workloads(self, include_finished: bool = True) -> list[dict[str, Any]]:
        ws = self.engine.workloads.values()
        return [
            {k: v for k, v in self._info(w.id).items() if k != "history"}
            for w in ws
            if include_finished or not w.terminal
        ]

    @_quiet
    async def cancel(self, wid: str) -> dict[str, Any]:
        self._notify(self.engine.cancel(wid))
        self._kick()
        return self._info(wid)

    @_quiet
    async def cancel_many(self, ids: list[str]) -> int:
        """Cancel the named workloads in one call; how many were cancelled."""
        events = self.engine.cancel_many(ids)
        self._notify(events)
        self._kick()
        return sum(1 for e in events if isinstance(e, WorkloadChanged) and e.new == State.CANCELLED.value)

    async def cancel_dispatched(self, dispatcher: str, reason: str) -> list[str]:
        """A dispatcher restarted and lost what it held: cancel its workloads that have
        not ended; every workload it ran, so that it can say so when asked."""
        ids = [
            w.id for w in self.engine.workloads.values() if w.spec.metadata.get(DISPATCHER_KEY) == dispatcher
        ]
        self._notify(self.engine.cancel_many(ids, reason))
        self._kick()
        return ids

    @_quiet
    async def finish(self, wid: str, attempt: int, ok: bool, error: str = "") -> dict[str, Any]:
        self._notify(self.engine.finish(wid, attempt, ok, error))
        self._kick()
        return self._info(wid)

    @_quiet
    async def placement(self, wid: str) -> dict[str, Any]:
        """The groups a running workload holds (gang first, then elastic surplus)."""
        info = self._info(wid)
        return {
            "state": info["state"],
            "attempt": info["attempt"],
            "groups": info["groups"],
            "gang_group": info["group"],
        }

    # ------------------------------------------------------------ queues and views

    async def apply_queues(self, queues: list[dict[str, Any]], prune: bool = False) -> dict[str, Any]:
        """Add or update queues (kubectl-apply style); {"error"} when refused as a whole."""
        try:
            change = self.engine.apply_queues([queue_from_json(q) for q in queues], prune=prune)
        except QueueChangeError as exc:
            return {"error": str(exc)}
        self._kick()
        return {**change.as_dict(), "summary": change.summary()}

    async def delete_queues(self, names: list[str]) -> dict[str, Any]:
        try:
            change = self.engine.delete_queues(names)
        except QueueChangeError as exc:
            return {"error": str(exc)}
        self._kick()
        return {**change.as_dict(), "summary": change.summary()}

    async def queues(self) -> list[dict[str, Any]]:
        return queue_views(self.engine.queues, self.engine.queue_status, self.engine.workloads.values())

    async def explain(self, wid: str) -> dict[str, Any]:
        info = self._info(wid)
        rows = {q["name"]: q for q in await self.queues()}
        info["queue_status"] = rows.get(info["queue"])
        return info

    async def status(self) -> dict[str, Any]:
        held = held_by_workloads(self.engine.workloads.values(), self.engine.nodes)
        counts: dict[str, int] = {}
        for w in self.engine.workloads.values():
            counts[w.state.value] = counts.get(w.state.value, 0) + 1
        return {
            "nodes": [
                node_usage(n, held.get(n.name, {}), (NODE_ID_LABEL,)) for n in self.engine.nodes.values()
            ],
            "workloads": counts,
            "queues": await self.queues(),
            "uptime_s": time.time() - self._started_at,
        }

    async def snapshot(self) -> dict[str, Any]:
        """What the next cycle would decide from, as a snapshot document
        (kai_ray.control.snapshotfile): `kai-ray snapshot save`, replayed by `kai-ray sim`."""
        e, now = self.engine, time.time()
        usage = e.usage.usage(now) if e.usage is not None else {}
        snap = build_snapshot(e.workloads.values(), e.nodes.values(), e.queues, e.node_label, usage)
        return write_snapshot(snap, e.config, now, "ray")

    def _info(self, wid: str) -> dict[str, Any]:
        """A workload's view, with Ray's 56-digit node ids in its words shortened."""
        return short_node_ids(self.engine.info(wid))

    async def ping(self) -> float:
        return time.time()

    # ------------------------------------------------------------ the dashboard

    async def dashboard_info(self) -> dict[str, Any]:
        """Where the dashboard listens ({"url", "host", "port", "token_required"})."""
        if self._dashboard_started is None:  # asked before the loop's start call arrived
            await self.start()
        assert self._dashboard_started is not None
        with contextlib.suppress(Exception):
            await self._dashboard_started
        return self.dashboard.info()

    async def serve_dashboard(self, host: str, port: int, token: str | None) -> dict[str, Any]:
        """Listen on host:port instead (kept across restarts); {"error"} when refused,
        the dashboard listening as before."""
        await self.dashboard_info()
        try:
            await self.dashboard.listen(host, port, token)
        except (ValueError, OSError) as exc:
            return {"error": str(exc)}
        return self.dashboard.info()


def get_or_start_scheduler(
    queues: list[QueueInfo] | None = None, config: SchedulerConfig | None = None
) -> Any:
    """The running scheduler actor, or a new one (detached: it outlives this driver).
    Started on the head node, which a cluster keeps for as long as it lives."""
    try:
        return ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
    except ValueError:
        pass
    cfg = None
    if config is not None:
        cfg = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
        cfg["topologies"] = dict(config.topologies)  # a plain dict pickles everywhere
    handle = SchedulerActor.options(  # type: ignore[attr-defined]
        name=SCHEDULER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        resources={"node:__internal_head__": 0.001},
    ).remote([dataclasses.asdict(q) for q in (queues or [])], cfg)
    ray.get(handle.ping.remote())
    return handle
