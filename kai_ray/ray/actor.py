"""The scheduler actor: a detached, named, restartable Ray actor; its RPC surface only.
What it does between calls (the scheduling loop, waking callers, housekeeping) is
kai_ray.ray.scheduler's; its dashboard kai_ray.ray.dashboard's.

It is an async actor so that thousands of callers can wait for admission at once without
a thread each.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from typing import Any

import ray

from kai_ray.config.errors import ConfigError
from kai_ray.control import TERMINAL, QueueChangeError, State, SubmitError, WorkloadChanged, WorkloadSpec
from kai_ray.control.nodes import node_usage
from kai_ray.control.queues import queue_from_json
from kai_ray.control.snapshot import held_by_workloads
from kai_ray.control.snapshotfile import build_snapshot, write_snapshot
from kai_ray.control.tenants import TenantGate
from kai_ray.control.views import queue_views, refusal_of, worker_signature
from kai_ray.core import QueueInfo, SchedulerConfig
from kai_ray.ray.feed import DISPATCHER_KEY, NAMESPACE
from kai_ray.ray.metrics import watch_refusals
from kai_ray.ray.scheduler import PERIOD_S, RayScheduler
from kai_ray.ray.translate import NODE_ID_LABEL, short_node_ids

__all__ = ["NAMESPACE", "SCHEDULER_NAME", "SchedulerActor", "get_or_start_scheduler"]

SCHEDULER_NAME = "kai-ray-scheduler"
# Without a queue file: one queue that may use the whole cluster.
DEFAULT_QUEUE = QueueInfo("default", quota=(-1.0, -1.0, -1.0))


# Calls made once or more per workload: kept out of Ray's task events (its state API and
# dashboard), which would otherwise hold a record of each in the GCS.
_quiet = ray.method(enable_task_events=False)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1, max_concurrency=10_000)
class SchedulerActor:
    def __init__(
        self,
        queues: list[dict[str, Any]],
        config: dict[str, Any] | None = None,
        period_s: float = PERIOD_S,
        tenants: dict[str, Any] | None = None,
    ) -> None:
        logging.basicConfig(level=logging.INFO)
        cfg = SchedulerConfig(**config) if config else SchedulerConfig()
        infos = [queue_from_json(q) for q in queues] or [DEFAULT_QUEUE]
        self.scheduler = RayScheduler(infos, cfg, period_s)
        self.engine, self.feed = self.scheduler.engine, self.scheduler.feed
        # Tokens checked on every call that submits, cancels or changes (kai_ray.control.tenants);
        # the tenants stored before a restart win over those this actor was started with.
        self.gate = TenantGate(self.engine.records, tenants)
        self.refusals = watch_refusals(self.scheduler.dashboard.feed, self.engine.loop)  # access refusals
        self._dashboard_started: asyncio.Task[str] | None = None
        # The event loop is not running yet inside __init__: start the loop by a call.
        ray.get_runtime_context().current_actor.start.remote()

    async def start(self) -> bool:
        started = self.scheduler.start()
        if started is not None:
            self._dashboard_started = started
        return True

    def _kick(self) -> None:
        self.scheduler.kick()

    def _notify(self, events: Any) -> None:
        self.scheduler.notify(events)

    # ------------------------------------------------------------ workloads

    @_quiet
    async def submit(
        self, wid: str, spec: dict[str, Any], persist: bool = True, token: str | None = None
    ) -> dict[str, Any]:
        """Queue one workload: {"id"}, or {"id", "submit_error", "code"} when refused.
        TokenRefused when tenants are configured and the token names none."""
        who = self.gate.caller(token)
        try:
            self.engine.submit(wid, self.gate.stamp(who, WorkloadSpec(**spec)))
        except SubmitError as exc:
            self.refusals.at_door(spec.get("queue", ""), exc.code)
            return _refused(wid, exc)
        if persist:
            self.engine.flush()  # persisted before the caller hears back
        self._kick()
        return {"id": wid}

    @_quiet
    async def submit_many(
        self, items: list[tuple[str, dict[str, Any]]], token: str | None = None
    ) -> list[dict[str, Any]]:
        """Queue several at once: the next cycle sees them all (no first-come advantage).
        One token check for the whole call."""
        who = self.gate.caller(token)
        out = []
        specs: dict[int, WorkloadSpec] = {}  # one spec object for the copies of one spec
        for wid, spec in items:
            try:
                made = specs.get(id(spec))
                if made is None:
                    made = specs[id(spec)] = self.gate.stamp(who, WorkloadSpec(**spec))
                self.engine.submit(wid, made)
                out.append({"id": wid})
            except SubmitError as exc:
                self.refusals.at_door(spec.get("queue", ""), exc.code)
                out.append(_refused(wid, exc))
        self.engine.flush()
        self._kick()
        return out

    @_quiet
    async def admit(
        self, wid: str, spec: dict[str, Any], timeout: float | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """submit + wait for Running in one round trip (the lowest admission latency)."""
        # No write here: the caller hears back only once it runs, and the write-ahead
        # before its group is created persists it; a crash before that retries this call.
        answer = await self.submit(wid, spec, persist=False, token=token)
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
        await self.scheduler.wait_for(wid, lambda: self.engine.workloads[wid].state in wanted, timeout)
        return self._info(wid, with_eta=False)

    @_quiet
    async def info(self, wid: str) -> dict[str, Any]:
        return self._info(wid)

    @_quiet
    async def eta(self, wid: str) -> dict[str, Any] | None:
        """Its forecast start while it waits ({"at", "in_s", "text"}), else None."""
        return self.engine.info(wid)["eta"]  # type: ignore[no-any-return]

    @_quiet
    async def wait_workers(self, wid: str, seen: list[Any], timeout: float | None = None) -> dict[str, Any]:
        """Return once the workload's usable workers differ from `seen` (a
        worker_signature), or at the timeout (0: at once)."""
        view = lambda: self._info(wid, with_eta=False)  # noqa: E731 (asked on every event)
        await self.scheduler.wait_for(wid, lambda: worker_signature(view()) != seen, timeout)
        return view()

    async def list_workloads(self, include_finished: bool = True) -> list[dict[str, Any]]:
        ws = self.engine.workloads.values()
        return [
            {k: v for k, v in self._info(w.id).items() if k != "history"}
            for w in ws
            if include_finished or not w.terminal
        ]

    @_quiet
    async def cancel(self, wid: str, token: str | None = None) -> dict[str, Any]:
        """Cancel a workload: a tenant its own only (TokenRefused otherwise), an admin any."""
        self._check_owner(token, [wid])
        self._notify(self.engine.cancel(wid))
        self._kick()
        return self._info(wid)

    @_quiet
    async def cancel_many(self, ids: list[str], token: str | None = None) -> int:
        """Cancel the named workloads in one call; how many were cancelled. Refused as a
        whole when one of them is another tenant's."""
        self._check_owner(token, ids)
        events = self.engine.cancel_many(ids)
        self._notify(events)
        self._kick()
        return sum(1 for e in events if isinstance(e, WorkloadChanged) and e.new == State.CANCELLED.value)

    async def cancel_dispatched(self, dispatcher: str, reason: str, token: str | None = None) -> list[str]:
        """A dispatcher restarted and lost what it held: cancel its workloads that have
        not ended; every workload it ran, so that it can say so when asked. (Of those,
        a tenant's token reaches its own only.)"""
        mine = [
            w for w in self.engine.workloads.values() if w.spec.metadata.get(DISPATCHER_KEY) == dispatcher
        ]
        ids = [w.id for w in self.gate.owned(self.gate.caller(token), mine)]
        self._notify(self.engine.cancel_many(ids, reason))
        self._kick()
        return ids

    def _check_owner(self, token: str | None, ids: list[str]) -> None:
        """TokenRefused unless the token's tenant owns every known workload named (an
        unknown id is left to the engine, which says it is unknown)."""
        who = self.gate.caller(token)
        if who is not None:
            known = (self.engine.workloads.get(wid) for wid in ids)
            self.gate.check_owner(who, [w for w in known if w is not None], "cancel")

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

    # ------------------------------------------------------------ queues (admins, once tenants are on)

    async def apply_queues(
        self, queues: list[dict[str, Any]], prune: bool = False, token: str | None = None
    ) -> dict[str, Any]:
        """Add or update queues (kubectl-apply style); {"error"} when refused as a whole.
        An admin's call when tenants are configured, unless it changes nothing (a tenant's
        driver passing its usual queues to kai_ray.init() is not refused)."""
        infos = [queue_from_json(q) for q in queues]
        current = {q.name: q for q in self.engine.queues}
        if prune or any(current.get(q.name) != q for q in infos):
            self.gate.require_admin(token, "queue apply")
        try:
            change = self.engine.apply_queues(infos, prune=prune)
        except QueueChangeError as exc:
            return {"error": str(exc)}
        self._kick()
        return {**change.as_dict(), "summary": change.summary()}

    async def delete_queues(self, names: list[str], token: str | None = None) -> dict[str, Any]:
        self.gate.require_admin(token, "queue delete")
        try:
            change = self.engine.delete_queues(names)
        except QueueChangeError as exc:
            return {"error": str(exc)}
        self._kick()
        return {**change.as_dict(), "summary": change.summary()}

    # ------------------------------------------------------------ tenants

    async def apply_tenants(
        self, document: dict[str, Any] | None, token: str | None = None
    ) -> dict[str, Any]:
        """Replace the tenants file (None: stop checking tokens); {"error"} for a bad
        document, nothing changed. An admin's call when tenants are configured."""
        try:
            return self.gate.apply(document, token)
        except ConfigError as exc:
            return {"error": str(exc)}

    async def tenants(self) -> dict[str, Any]:
        """Who is configured (names, roles, labels; never the hashes)."""
        return self.gate.summary()

    async def whoami(self, token: str | None = None) -> dict[str, Any]:
        """Whom the token names: {"configured", "name", "admin", "labels"}."""
        who = self.gate.caller(token)
        if who is None:
            return {"configured": False, "name": None, "admin": False, "labels": {}}
        return {"configured": True, "name": who.name, "admin": who.admin, "labels": dict(who.labels)}

    # ------------------------------------------------------------ views

    async def queues(self) -> list[dict[str, Any]]:
        e = self.engine
        return queue_views(e.queues, e.queue_status, e.workloads.values(), e.config.closed_queues)

    async def explain(self, wid: str) -> dict[str, Any]:
        info = self._info(wid)
        rows = {q["name"]: q for q in await self.queues()}
        info["queue_status"] = rows.get(info["queue"])
        e = self.engine  # which access rule stops it, named (kai-ray explain):
        info["access_rule"] = refusal_of(e.workloads[wid], e.queues, e.config.closed_queues)
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
            "uptime_s": time.time() - self.scheduler.started_at,
        }

    async def snapshot(self) -> dict[str, Any]:
        """What the next cycle would decide from, as a snapshot document
        (kai_ray.control.snapshotfile): `kai-ray snapshot save`, replayed by `kai-ray sim`."""
        e, now = self.engine, time.time()
        usage = e.usage.usage(now) if e.usage is not None else {}
        snap = build_snapshot(
            e.workloads.values(), e.nodes.values(), e.queues, e.node_label, usage, e.cluster_grows
        )
        return write_snapshot(snap, e.config, now, "ray")

    def _info(self, wid: str, with_eta: bool = True) -> dict[str, Any]:
        """A workload's view, with Ray's 56-digit node ids in its words shortened, and
        its tenant (None: an admin's, or no tenants when it was submitted)."""
        view = short_node_ids(self.engine.info(wid, with_eta))
        view["tenant"] = self.engine.workloads[wid].spec.tenant
        return view

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
        return self.scheduler.dashboard.info()

    async def serve_dashboard(self, host: str, port: int, token: str | None) -> dict[str, Any]:
        """Listen on host:port instead (kept across restarts); {"error"} when refused,
        the dashboard listening as before."""
        await self.dashboard_info()
        try:
            await self.scheduler.dashboard.listen(host, port, token)
        except (ValueError, OSError) as exc:
            return {"error": str(exc)}
        return self.scheduler.dashboard.info()


def _refused(wid: str, exc: SubmitError) -> dict[str, Any]:
    return {"id": wid, "submit_error": str(exc), "code": exc.code}


def get_or_start_scheduler(
    queues: list[QueueInfo] | None = None,
    config: SchedulerConfig | None = None,
    tenants: dict[str, Any] | None = None,
) -> Any:
    """The running scheduler actor, or a new one (detached: it outlives this driver).
    Started on the head node, which a cluster keeps for as long as it lives. `tenants`:
    a tenants document (kai_ray.config.tenants), for a new one only."""
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
    ).remote([dataclasses.asdict(q) for q in (queues or [])], cfg, tenants=tenants)
    ray.get(handle.ping.remote())
    return handle
