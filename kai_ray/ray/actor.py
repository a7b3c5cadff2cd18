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
    WorkloadSpec,
)
from kai_ray.control.demand import autoscaler_bundles
from kai_ray.control.nodes import node_usage
from kai_ray.control.queues import queue_from_json
from kai_ray.control.snapshot import held_by_workloads
from kai_ray.control.snapshotfile import build_snapshot, write_snapshot
from kai_ray.control.views import queue_views, worker_signature
from kai_ray.core import Pipeline, QueueInfo, SchedulerConfig
from kai_ray.ray.adapters import RayActuator, RayCluster
from kai_ray.ray.dashboard import RayDashboard
from kai_ray.ray.kvstore import KVStore
from kai_ray.ray.translate import NODE_ID_LABEL, autoscaler_request, short_node_ids

__all__ = ["NAMESPACE", "SCHEDULER_NAME", "SchedulerActor", "get_or_start_scheduler"]

log = logging.getLogger(__name__)

SCHEDULER_NAME = "kai-ray-scheduler"
NAMESPACE = "kai-ray"
PERIOD_S = 0.5
NODE_REFRESH_S = 1.0
NODE_STALE_S = 5.0
REUSE_DELAY_S = 0.2
EAGER_READY = 8  # groups of one step whose readiness is asked for as they are created
REAP_S = 5.0  # how often drivers that exited, and groups nobody holds, are looked for
AUTOSCALER_CHECK_S = 5.0  # how often to look whether an autoscaler appeared
PIN_S = 300.0  # how often uploaded job packages of waiting jobs are pinned again
PIN_FOR_S = 1800  # ... and for how long each time (Ray drops unpinned ones after 10 min)
# Without a queue file: one queue that may use the whole cluster.
DEFAULT_QUEUE = QueueInfo("default", quota=(-1.0, -1.0, -1.0))


def _autoscaler_runs() -> bool:
    """Whether an autoscaler manages this Ray cluster (KAI_RAY_AUTOSCALING=1 or 0 says so
    outright). Ray's monitor runs on every head and publishes its status in the GCS; on
    a cluster without an autoscaling config it runs read-only, naming each node's type
    after the node itself (`node_<id>`), while a real config names its node types."""
    import json
    import os

    forced = os.environ.get("KAI_RAY_AUTOSCALING")
    if forced is not None:
        return forced == "1"
    from ray.experimental import internal_kv

    try:
        raw = internal_kv._internal_kv_get("__autoscaling_status")
        report = (json.loads(raw).get("autoscaler_report") or {}) if raw else {}
    except Exception:
        return False
    types = report.get("node_type_mapping") or {}
    return any(kind != f"node_{node}" for node, kind in types.items())


@ray.remote(num_cpus=0, max_retries=0)
def _probe_gpus() -> list[dict[str, Any]]:
    from kai_ray.ray.gpus import local_gpus

    return local_gpus()


class _Clock:
    def now(self) -> float:
        return time.time()


class _ReadyWatchingActuator(RayActuator):
    """Tells the actor when a group it created becomes ready, so it need not poll."""

    def __init__(self, cluster: RayCluster, store: KVStore, on_created: Any) -> None:
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
        self.cluster, self.store = RayCluster(), KVStore()
        store = self.store
        actuator = self.actuator = _ReadyWatchingActuator(self.cluster, store, self._watch_ready)
        infos = [queue_from_json(q) for q in queues] or [DEFAULT_QUEUE]
        # A long-lived process with many live objects: collect between cycles, not in them.
        self.engine = Controller(
            self.cluster, actuator, store, _Clock(), infos, cfg, node_label=NODE_ID_LABEL, pause_gc=True
        )
        self._waiters: dict[str, list[asyncio.Event]] = {}
        self._metrics: Any = None
        self.dashboard = RayDashboard(self.engine)
        self._dashboard_started: asyncio.Task[str] | None = None
        self._notify(self.engine.load())  # after a restart: state back, reconciled with Ray
        self.period_s = period_s
        self._wake: asyncio.Event | None = None
        self._nodes_at = 0.0
        self._started_at = time.time()
        self._probed: set[str] = set()
        self._reaped_at = 0.0
        self._pinned_at = 0.0
        self._created_in_step = 0
        self._asked: list[dict[str, float]] = []  # what Ray's autoscaler was last asked for
        self.engine.cluster_grows = _autoscaler_runs()
        self._autoscaler_checked = time.time()
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
            self._wake.clear()
            try:
                self._step(kicked)
            except Exception:  # one bad cycle must not stop the scheduler
                log.exception("scheduling cycle failed")
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
            self._probe_new_nodes()
            self._ask_autoscaler()
        if now - self._reaped_at > REAP_S:
            self._reaped_at = now
            self._reap()
            self.engine.sweep_orphans()
            # Journaled records move to their own keys while nothing is being admitted
            # (the writes would otherwise compete with placement groups at the GCS).
            quiet = not any(w.state is State.ADMITTING for w in self.engine.workloads.values())
            if self.store.compaction_due(quiet):
                self.store.compact()
        if now - self._pinned_at > PIN_S:
            self._pinned_at = now
            self._pin_packages()
        if any(isinstance(d, Pipeline) for d in result.decisions):
            # Placed on capacity being released: try again once Ray has it back (Ray
            # re-uses capacity freed a moment ago only after a ~1 s retry back-off).
            asyncio.get_running_loop().call_later(REUSE_DELAY_S, self._kick)
        if self._metrics is not None:
            self._metrics.record(self.engine.queue_status, self.engine.queues, self.engine.workloads.values())
            self._metrics.cycle_time(time.time() - now)
        self.dashboard.feed.cycled(now, self.engine.queue_status, bool(step.events))

    def _ask_autoscaler(self) -> None:
        """Tell Ray's autoscaler about gangs that wait for room, and only those: work
        held back by its queue must never make the cluster grow (kai_ray.control.demand)."""
        if not self.engine.cluster_grows:
            # The autoscaler may publish its first status after the scheduler started.
            if time.time() - self._autoscaler_checked < AUTOSCALER_CHECK_S:
                return
            self._autoscaler_checked = time.time()
            self.engine.cluster_grows = _autoscaler_runs()
            if not self.engine.cluster_grows:
                return
        bundles = autoscaler_request(autoscaler_bundles(self.engine.workloads.values()))
        if bundles == self._asked:
            return
        from ray.autoscaler.sdk import request_resources

        try:
            request_resources(bundles=bundles)
            self._asked = bundles
        except Exception:  # an autoscaler that went away: nothing to ask
            log.warning("asking Ray's autoscaler for %d bundles failed", len(bundles), exc_info=True)

    def _probe_new_nodes(self) -> None:
        """NVML on each new GPU node, once: model and memory per device."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from kai_ray.ray.gpus import summarize

        for node in self.engine.nodes.values():
            if node.gpus == 0 or node.name in self._probed:
                continue
            self._probed.add(node.name)
            ref = _probe_gpus.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.name, soft=False)
            ).remote()

            async def record(ref: Any = ref, node_id: str = node.name) -> None:
                try:
                    found = summarize(await asyncio.wait_for(ref, timeout=60))
                except Exception as exc:  # a node that went away, a broken driver
                    log.warning("GPU discovery on %s failed: %s", node_id[:12], exc)
                    return
                if found:
                    self.cluster.gpu_devices[node_id] = found
                    self._nodes_at = 0.0  # rebuild node info with it on the next step

            asyncio.get_running_loop().create_task(record())

    def _reap(self) -> None:
        """Workloads of drivers that exited are cancelled (see Controller.reap_orphans)."""
        from ray._private.state import state

        try:
            dead = {j["JobID"] for j in state.job_table() if j.get("IsDead")}
        except Exception as exc:  # the GCS is busy or restarting: try again later
            log.debug("job table: %s", exc)
            return
        self._notify(self.engine.reap_orphans(dead))

    def _pin_packages(self) -> None:
        """Keep the working_dir / py_modules a job uploaded at submission in Ray's GCS
        until the job is admitted: Ray garbage-collects an unreferenced package after 10
        minutes, and a job may wait in its queue far longer."""
        from ray.experimental.internal_kv import _pin_runtime_env_uri

        from kai_ray.ray.jobs import package_uris

        for w in self.engine.workloads.values():
            if w.spec.kind == "job" and not w.terminal:
                for uri in package_uris(w.spec.runtime_env):
                    try:
                        _pin_runtime_env_uri(uri, expiration_s=PIN_FOR_S)
                    except Exception as exc:
                        log.warning("pinning %s for %s: %s", uri, w.id, exc)

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def _watch_ready(self, group: str) -> None:
        # The first few groups of a step are waited for at once (the latency of one
        # admission); beyond those, once the step is over, so that a cycle's groups are
        # all created before Ray is asked to report on any (the throughput of many).
        self._created_in_step += 1
        early = self.actuator.ready_ref(group) if self._created_in_step <= EAGER_READY else None

        async def wait() -> None:
            ref = early if early is not None else self.actuator.ready_ref(group)
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
        """Wake whoever waits on a workload an event names; count them in the metrics."""
        for event in events:
            for ev in self._waiters.pop(event.workload, []):
                ev.set()
        if self._metrics is not None:
            self._metrics.count(events)
        if events:
            self.dashboard.feed.touch()

    # ------------------------------------------------------------ workloads

    async def submit(self, wid: str, spec: dict[str, Any], persist: bool = True) -> dict[str, Any]:
        try:
            self.engine.submit(wid, WorkloadSpec(**spec))
        except SubmitError as exc:
            return {"submit_error": str(exc)}
        if persist:
            self.engine.flush()  # persisted before the caller hears back
        self._kick()
        return self._info(wid)

    async def submit_many(self, items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Queue several at once: the next cycle sees them all (no first-come advantage)."""
        out = []
        for wid, spec in items:
            try:
                self.engine.submit(wid, WorkloadSpec(**spec))
                out.append({"id": wid})
            except SubmitError as exc:
                out.append({"id": wid, "submit_error": str(exc)})
        self.engine.flush()
        self._kick()
        return out

    async def admit(self, wid: str, spec: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """submit + wait for Running in one round trip (the lowest admission latency)."""
        # No write here: the caller hears back only once it runs, and the write-ahead
        # before its group is created persists it; a crash before that retries this call.
        info = await self.submit(wid, spec, persist=False)
        if "submit_error" in info:
            return info
        return await self.wait(wid, [State.RUNNING.value], timeout)

    async def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for w in self.engine.workloads.values():
            out[w.state.value] = out.get(w.state.value, 0) + 1
        return out

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

    async def info(self, wid: str) -> dict[str, Any]:
        return self._info(wid)

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

    async def cancel(self, wid: str) -> dict[str, Any]:
        self._notify(self.engine.cancel(wid))
        self._kick()
        return self._info(wid)

    async def finish(self, wid: str, attempt: int, ok: bool, error: str = "") -> dict[str, Any]:
        self._notify(self.engine.finish(wid, attempt, ok, error))
        self._kick()
        return self._info(wid)

    async def register_runner(self, wid: str, attempt: int, node: str, pid: int) -> bool:
        return self.engine.register_runner(wid, attempt, node, pid)

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
