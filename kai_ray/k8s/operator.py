"""The Kubernetes operator: the core's decisions carried out on an API server.

One loop, level-triggered: whenever the informers see a change (or a second passes,
for timers such as a gang's grace period), the whole world is rebuilt from their caches,
one core cycle decides, the control plane's planner checks and groups the decisions, and
the operator binds, evicts and reports. Nothing it knows lives anywhere but the API
server, so a restarted operator carries on from the objects alone: a gang left partly
bound by a crash is completed when it still fits, and evicted by the core's stale-gang
rule when it does not.

Bindings go out concurrently on kept-alive connections (kai_ray.k8s.client); a
binding sent but not yet seen in the pods' watch is remembered (`assumed`) so the next
cycle does not place the pod twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kai_ray.control.cycles import Cycles, Stable
from kai_ray.control.planner import JobPlan, Plan, plan_cycle
from kai_ray.core import CycleResult, Evict, SchedulerConfig
from kai_ray.dashboard import DEFAULT_PORT, Board, DashboardServer, Feed, access_for
from kai_ray.k8s import DEFAULT_SCHEDULER_NAMES
from kai_ray.k8s.board import GangHistory, board_from_world
from kai_ray.k8s.client import ApiError, Kube, gather_limited
from kai_ray.k8s.devices import DeviceSharing, SharingOptions
from kai_ray.k8s.gangs import Gang, build_gangs
from kai_ray.k8s.informer import Informer
from kai_ray.k8s.queues import KAI_RAY_QUEUE_API, read_queues
from kai_ray.k8s.report import Reporter
from kai_ray.k8s.sharing import idle_reservations, is_reservation
from kai_ray.k8s.webhook import start_webhook
from kai_ray.k8s.world import GPU_GROUP_ANNOTATION, SUBMITTER_TASK, World, build_world

__all__ = ["Operator", "OperatorOptions"]

log = logging.getLogger(__name__)
ASSUME_TTL = 30.0  # seconds a sent binding is trusted before the pods' watch confirms it
OWNER_APIS = {
    "RayCluster": "/apis/ray.io/v1/rayclusters",
    "RayJob": "/apis/ray.io/v1/rayjobs",
    "RayService": "/apis/ray.io/v1/rayservices",
    "Job": "/apis/batch/v1/jobs",
}
QUEUE_APIS = (f"/apis/{KAI_RAY_QUEUE_API}/queues", "/apis/scheduling.run.ai/v2/queues")


@dataclass(slots=True)
class OperatorOptions:
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    default_queue: str = "default-queue"
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    in_flight: int = 32  # concurrent requests when binding or evicting
    tick: float = 1.0  # seconds between cycles when nothing changes (timers, min runtimes)
    settle: float = 0.02  # seconds to let a burst of watch events arrive before a cycle
    sharing: SharingOptions | None = None  # GPU sharing on: reservation pods and ConfigMaps
    webhook: tuple[int, str, str] | None = None  # (port, cert file, key file) of the webhook
    # (host, port, token) of the dashboard; None: no dashboard. A host other than
    # loopback needs a token.
    dashboard: tuple[str, int, str | None] | None = ("127.0.0.1", DEFAULT_PORT, None)


@dataclass(slots=True)
class CycleStats:
    cycles: int = 0
    bound: int = 0
    evicted: int = 0
    last_cycle_s: float = 0.0


class Operator:
    def __init__(self, kube: Kube, options: OperatorOptions | None = None) -> None:
        self.kube = kube
        self.options = options or OperatorOptions()
        self.changed = asyncio.Event()
        self.nodes = self._informer("/api/v1/nodes")
        self.pods = self._informer("/api/v1/pods")
        self.priority_classes = self._informer("/apis/scheduling.k8s.io/v1/priorityclasses")
        self.queues = [self._informer(path, optional=True) for path in QUEUE_APIS]
        self.owners = {kind: self._informer(path, optional=True) for kind, path in OWNER_APIS.items()}
        self.assumed: dict[str, tuple[str, float]] = {}  # pod uid -> (node, when sent)
        self.placeholders: dict[str, str] = {}  # gang id -> node holding its submitter's room
        self.reporter = Reporter(kube)
        self.stats = CycleStats()
        self.last: tuple[World, CycleResult] | None = None
        # The world is listed afresh each pass: unchanged nodes and gangs keep last pass's
        # objects, so each cycle patches the state it kept (control/cycles.py).
        self._stable = Stable()
        self._cycles = Cycles.of(self.options.config)  # with time-based fair share's history
        self.last_plan: Plan | None = None
        self.history = GangHistory()
        self.feed = Feed(self._board)
        self.dashboard: DashboardServer | None = None
        self.queue_set = read_queues([])
        self._direct: list[tuple[str, str, str]] = []
        sharing = self.options.sharing
        self.sharing = None if sharing is None else DeviceSharing(kube, sharing)
        self._webhook: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def _informer(self, path: str, *, optional: bool = False) -> Informer:
        return Informer(self.kube, path, changed=self.changed, optional=optional)

    def informers(self) -> list[Informer]:
        return [self.nodes, self.pods, self.priority_classes, *self.queues, *self.owners.values()]

    # ------------------------------------------------------------ running

    async def start(self) -> None:
        """Start the watches and wait for their first lists."""
        self._tasks = [asyncio.create_task(i.run()) for i in self.informers()]
        await asyncio.gather(*(i.synced.wait() for i in self.informers()))

    async def start_dashboard(self) -> str | None:
        """Serve the dashboard as the options say; its URL (None: no dashboard)."""
        if self.options.dashboard is None or self.dashboard is not None:
            return None if self.dashboard is None else self.dashboard.url
        host, port, token = self.options.dashboard
        server = DashboardServer(self.feed, access_for(host, token), host, port)
        url = await server.start()
        self.dashboard = server
        log.info("kai-ray dashboard: %s", url)
        return url

    def _board(self) -> Board:
        now = time.time()
        if self.last is None or self.last_plan is None:
            return Board(backend="kubernetes", at=now)
        world, result = self.last
        return board_from_world(
            world, result, self.last_plan, self.queue_set, self.history, self.options.config.topologies, now
        )

    async def run(self) -> None:
        await self.start_dashboard()
        if self.options.webhook is not None:
            port, cert, key = self.options.webhook
            self._webhook = await start_webhook(port, cert, key, self.options.scheduler_names)
        if self.sharing is not None:
            await self.sharing.ensure_namespace()
        await self.start()
        try:
            while True:
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=self.options.tick)
                    await asyncio.sleep(self.options.settle)
                except TimeoutError:
                    pass
                self.changed.clear()
                try:
                    await self.cycle()
                except Exception:  # one bad cycle must not end the operator
                    log.exception("scheduling cycle failed")
        finally:
            await self.stop()

    async def stop(self) -> None:
        if self.dashboard is not None:
            await self.dashboard.stop()
            self.dashboard = None
        if self._webhook is not None:
            await self._webhook.cleanup()
            self._webhook = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # ------------------------------------------------------------ one cycle

    def world(self, now: float) -> World:
        self._expire_assumed(now)
        names = self.options.scheduler_names
        owners = {
            (kind, ns, name): obj
            for kind, inf in self.owners.items()
            for (ns, name), obj in inf.items.items()
        }
        classes = {
            o["metadata"]["name"]: int(o.get("value", 0)) for o in self.priority_classes.items.values()
        }
        pods = [p for p in self.pods.items.values() if not is_reservation(p)]
        idle = idle_reservations(self.pods.items.values(), {u: n for u, (n, _) in self.assumed.items()})
        gangs = build_gangs(
            pods,
            owners,
            classes,
            scheduler_names=names,
            default_queue=self.options.default_queue,
        )
        self._direct = self._submitters_to_held_room(gangs, now)
        self._drop_placeholders({g.id for g in gangs if g.submitter is not None})
        queue_set = read_queues(o for inf in self.queues for o in inf.items.values())
        self.queue_set = queue_set
        return build_world(
            self.nodes.items.values(),
            pods,
            gangs,
            queue_set.queues,
            scheduler_names=names,
            assumed={uid: node for uid, (node, _) in self.assumed.items()},
            placeholders=self.placeholders,
            idle_holders=idle,
        )

    async def cycle(self) -> CycleResult:
        started = time.monotonic()
        now = time.time()
        world = self.world(now)
        world.snapshot = self._stable.keep(world.snapshot)
        result = self._cycles(world.snapshot, self.options.config, now)
        plan = plan_cycle(result, world.snapshot.jobs)
        evictions = [(job, e) for job, jp in plan.jobs.items() for e in _evictions(jp)]
        binds = [(job, b.task, b.node, b.gpu_group) for job, jp in plan.jobs.items() for b in jp.binds]
        await self._evict(world, evictions)
        binds += [(job, task, node, None) for job, task, node in self._direct]
        await self._bind(world, binds, now)
        self.last, self.last_plan = (world, result), plan
        evicted = {job: e for job, e in evictions}
        changed = self.history.observe(world.snapshot.jobs, result, evicted, now)
        self.feed.cycled(now, result.queues, changed or bool(binds))
        await self.reporter.report(world, result, plan, self.queue_set)
        if self.sharing is not None:
            await self.sharing.reconcile(world, self.pods.items.values())
        self.stats.cycles += 1
        self.stats.last_cycle_s = time.monotonic() - started
        return result

    # ------------------------------------------------------------ actions

    async def _bind(self, world: World, binds: list[tuple[str, str, str, int | None]], now: float) -> None:
        calls = []
        for job, task, node, gpu_group in binds:
            if task == SUBMITTER_TASK:
                self.placeholders[job] = node  # room held: the submitter pod goes there when it comes
                continue
            pod = world.pods[(job, task)]
            calls.append(self._bind_pod(pod, node, gpu_group, now))
        results = await gather_limited(calls, self.options.in_flight)
        for outcome in results:
            if isinstance(outcome, BaseException):
                log.warning("binding failed: %s", outcome)

    async def _bind_pod(self, pod: dict[str, Any], node: str, gpu_group: int | None, now: float) -> None:
        meta = pod["metadata"]
        ns, name, uid = meta["namespace"], meta["name"], meta.get("uid", "")
        if gpu_group is not None and self.sharing is not None:
            await self.sharing.reserve(node, gpu_group)  # the whole device held, before any share
        if gpu_group is not None:  # the device goes with the pod, for the next cycle and a restart
            await self.kube.patch(
                f"/api/v1/namespaces/{ns}/pods/{name}",
                {"metadata": {"annotations": {GPU_GROUP_ANNOTATION: str(gpu_group)}}},
            )
        try:
            await self.kube.bind(ns, name, node, uid)
        except ApiError as exc:
            if exc.status == 409:  # bound already (by an earlier life of this operator)
                return
            raise
        self.assumed[uid] = (node, now)
        self.stats.bound += 1

    async def _evict(self, world: World, evictions: list[tuple[str, Evict]]) -> None:
        calls = []
        for job, e in evictions:
            if e.task == SUBMITTER_TASK:
                self.placeholders.pop(job, None)
                continue
            calls.append(self._evict_pod(world.pods[(job, e.task)], job, e))
        for outcome in await gather_limited(calls, self.options.in_flight):
            if isinstance(outcome, BaseException):
                log.warning("eviction failed: %s", outcome)

    async def _evict_pod(self, pod: dict[str, Any], job: str, e: Evict) -> None:
        meta = pod["metadata"]
        if await self.kube.evict(meta["namespace"], meta["name"]):
            self.stats.evicted += 1
            await self.reporter.evicted(pod, job, e)

    # ------------------------------------------------------------ soft state

    def _expire_assumed(self, now: float) -> None:
        seen = {p["metadata"].get("uid"): p for p in self.pods.items.values()}
        for uid, (_, sent) in list(self.assumed.items()):
            pod = seen.get(uid)
            if pod is None or pod.get("spec", {}).get("nodeName") or now - sent > ASSUME_TTL:
                del self.assumed[uid]

    def _submitters_to_held_room(self, gangs: Iterable[Gang], now: float) -> list[tuple[str, str, str]]:
        """A RayJob's submitter pod that appeared where room was held for it goes there,
        without waiting its turn: the room was its own since the cluster was admitted."""
        direct = []
        for gang in gangs:
            node = self.placeholders.get(gang.id)
            if node is None or gang.submitter is not None:
                continue
            for pod in gang.pods:
                meta = pod["metadata"]
                if meta["name"] in gang.subgroups.get("submitter", []) and not pod["spec"].get("nodeName"):
                    self.assumed[meta.get("uid", "")] = (node, now)
                    direct.append((gang.id, meta["name"], node))
        return direct

    def _drop_placeholders(self, waiting_for_submitter: Iterable[str]) -> None:
        keep = set(waiting_for_submitter)
        for gang in list(self.placeholders):
            if gang not in keep:
                del self.placeholders[gang]


def _evictions(plan: JobPlan) -> list[Evict]:
    # A task the core moves (consolidation) is evicted here: a pod cannot change nodes,
    # its controller (KubeRay) makes a new one, which queues and is placed again.
    return [*plan.evicted, *(e for e, _ in plan.moved)]
