"""The Kubernetes operator: the one scheduling loop (kai_ray.control.loop) on the
Kubernetes backend's adapters. No loop of its own:

    ClusterSource   KubeSource: the world patched from the watches' deltas
    Actuator        KubeActuator: bind, evict, pod conditions, Events, Queue status
    Lifecycle       ObservedLifecycle: the API server holds it; read back each cycle

Level-triggered: nothing the operator knows lives anywhere but the API server, so a
restarted operator carries on from the objects alone: a gang left partly bound by a
crash is completed when it still fits, and evicted by the core's stale-gang rule when
it does not. The loop steps when a watch sees a change (or a second passes, for timers
such as a gang's grace period), through control.pacing like every backend.

With leader election (`OperatorOptions.leader`, kai_ray.k8s.leader) a replica lists and
watches as a warm standby, and steps (binds, evicts, writes status) only while it holds
the Lease: every write passes the lease's fence, and losing the lease ends `run` with
LeadershipLost at once.

What it is doing (listing, waiting for the lease and for whom, scheduling) is logged
once per step and reported by `status()` (kai_ray.k8s.progress), on the dashboard too.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kai_ray.control.cycles import Cycles
from kai_ray.control.forecast import Eta, Forecaster, forecast
from kai_ray.control.kubenodes import GPU_PRODUCT_LABEL
from kai_ray.control.loop import SchedulingLoop, StepResult
from kai_ray.control.observed import ObservedLifecycle
from kai_ray.control.pacing import Pacing, paced_steps
from kai_ray.control.runtime import Runtimes
from kai_ray.core import SchedulerConfig
from kai_ray.dashboard import DEFAULT_PORT, Board, DashboardServer, Feed, access_for, board_of
from kai_ray.k8s import DEFAULT_SCHEDULER_NAMES
from kai_ray.k8s.actuator import KubeActuator
from kai_ray.k8s.client import Kube
from kai_ray.k8s.devices import DeviceSharing, SharingOptions
from kai_ray.k8s.leader import LeaderElector, LeaseOptions
from kai_ray.k8s.progress import LISTING, SCHEDULING, Progress
from kai_ray.k8s.source import KubeSource
from kai_ray.k8s.watches import Watches
from kai_ray.k8s.webhook import start_webhook

__all__ = ["Operator", "OperatorOptions"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class OperatorOptions:
    scheduler_names: tuple[str, ...] = DEFAULT_SCHEDULER_NAMES
    default_queue: str = "default-queue"
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    # A cluster-autoscaler or Karpenter adds nodes for pending pods: a gang that would
    # evict others first waits config.preemption_delay_s for them (ClusterSnapshot.can_grow).
    cluster_can_grow: bool = False
    in_flight: int = 32  # concurrent requests when binding or evicting
    tick: float = 1.0  # seconds between cycles when nothing changes (timers, min runtimes)
    settle: float = 0.02  # seconds to let a burst of watch events arrive before a cycle
    sharing: SharingOptions | None = None  # GPU sharing on: reservation pods and ConfigMaps
    webhook: tuple[int, str, str] | None = None  # (port, cert file, key file) of the webhook
    # (host, port, token) of the dashboard; None: no dashboard. A host other than
    # loopback needs a token.
    dashboard: tuple[str, int, str | None] | None = ("127.0.0.1", DEFAULT_PORT, None)
    leader: LeaseOptions | None = None  # None: no election, this process acts at once
    # The node label whose value is the node's GPU type (H100, A100, ...); pods name the
    # types they accept with a nodeSelector or required affinity on it.
    gpu_type_label: str = GPU_PRODUCT_LABEL


@dataclass(slots=True)
class CycleStats:
    cycles: int = 0
    bound: int = 0
    evicted: int = 0
    last_cycle_s: float = 0.0


class Operator:
    def __init__(self, kube: Kube, options: OperatorOptions | None = None) -> None:
        self.kube = kube
        self.options = options = options or OperatorOptions()
        self.watches = Watches(kube)
        self.source = KubeSource(
            self.watches,
            options.scheduler_names,
            options.default_queue,
            can_grow=options.cluster_can_grow,
            gpu_type_label=options.gpu_type_label,
            closed_queues=options.config.closed_queues,
        )
        sharing = None if options.sharing is None else DeviceSharing(kube, options.sharing)
        self.actuator = KubeActuator(kube, self.source, sharing, options.in_flight)
        # When waiting gangs start: from the world the last observe built, for the
        # dashboard and for the waiting pods' messages alike.
        self.forecaster = Forecaster(self._forecast)
        self.lifecycle = ObservedLifecycle(self.source.facts, forecaster=self.forecaster)
        self.actuator.etas = self.forecaster.get
        self.feed = Feed(self._board)
        self.progress = Progress(on_change=self.feed.touch)
        # A long-lived process with many live objects (every pod of the cluster): the
        # cycle runs with the garbage collector paused, and what the first list brought,
        # then the world the first step built from it, are frozen out of the collector's
        # generations (a full collection over 100,000 pods stalls a step for a second).
        cycles = Cycles.of(options.config, pause_gc=True)
        self.loop = SchedulingLoop(
            self.source, self.actuator, self.lifecycle, options.config, cycles, self.feed
        )
        self.feed.follow(self.loop)  # the refusals counter reads each cycle's result
        self.stats = CycleStats()
        self.runtimes = Runtimes()
        self.dashboard: DashboardServer | None = None
        self.leader = None if options.leader is None else LeaderElector(kube, options.leader)
        if self.leader is not None:
            kube.fence = self.leader.check  # no write from this session unless leading
        self._webhook: Any = None
        self._tasks: list[asyncio.Task[None]] = []

    def _forecast(self, now: float) -> dict[str, Eta]:
        snapshot = self.source.snapshot
        if snapshot is None:
            return {}
        self.runtimes.set_queues(snapshot.queues)
        return forecast(snapshot, now, self.runtimes, self.loop.queue_status)

    @property
    def changed(self) -> asyncio.Event:
        """Set by the watches whenever they see a change."""
        return self.watches.changed

    # ------------------------------------------------------------ running

    async def start(self) -> None:
        """Start the watches and wait for their first lists."""
        started = time.monotonic()
        self.progress.enter(LISTING, f"listing the cluster from {self.kube.config.server}")
        self._tasks = [asyncio.create_task(i.run()) for i in self.watches.all()]
        await self.watches.synced()
        gc.freeze()  # the cluster's objects, as listed: long-lived, never cyclic garbage
        self.progress.listed_cluster(self._counts(), time.monotonic() - started)

    def _counts(self) -> dict[str, int]:
        w = self.watches
        owners = {f"{kind}s": len(i.items) for kind, i in w.owners.items() if i.present}
        queues = sum(len(q.items) for q in w.queues)
        return {"nodes": len(w.nodes.items), "pods": len(w.pods.items), "queues": queues, **owners}

    def status(self) -> dict[str, Any]:
        """Where the operator stands (kai_ray.k8s.progress) and its figures so far."""
        standing = None if self.leader is None else self.leader.standing()
        return {**self.progress.status(standing), **asdict(self.stats)}

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
        return board_of(self.loop, time.time(), backend="kubernetes", status=self.status())

    async def run(self) -> None:
        try:
            await self.start_dashboard()  # inside: a failed start closes what started
            if self.options.webhook is not None:
                port, cert, key = self.options.webhook
                self._webhook = await start_webhook(port, cert, key, self.options.scheduler_names)
            await self.start()  # a standby's informers are warm when it takes over
            if self.leader is not None:
                leader = self.leader
                await leader.acquire(on_try=lambda: self.progress.waiting(leader.standing()))
            if self.actuator.sharing is not None:
                await self.actuator.sharing.ensure_namespace()
            await self._schedule()
        finally:
            await self.stop()
            if self.leader is not None:
                await self.leader.release()  # the steps have stopped: a standby may act now

    async def _schedule(self) -> None:
        """Step the loop; with leader election, until the lease is lost (LeadershipLost)."""
        pacing = Pacing(period=self.options.tick, settle=self.options.settle)
        lease = "" if self.leader is None else f" as the holder of lease {self.leader.standing()['lease']}"
        self.progress.enter(SCHEDULING, f"scheduling{lease}")
        steps = asyncio.create_task(paced_steps(self.changed, self._step, pacing))
        if self.leader is None:
            await steps
            return
        keep = asyncio.create_task(self.leader.keep())
        try:
            done, _ = await asyncio.wait({steps, keep}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (steps, keep):  # the step in flight stops at its next request
                task.cancel()
            await asyncio.gather(steps, keep, return_exceptions=True)
        for task in done:
            task.result()  # LeadershipLost

    async def _step(self, woken: bool) -> None:
        await self.cycle()

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

    async def cycle(self) -> StepResult:
        """One step of the loop now."""
        started = time.monotonic()
        step = await self.loop.step_async(time.time())
        if self.stats.cycles == 0:
            gc.freeze()
        self.stats.cycles += 1
        self.stats.bound, self.stats.evicted = self.actuator.stats.bound, self.actuator.stats.evicted
        self.stats.last_cycle_s = time.monotonic() - started
        if self.stats.cycles == 1:  # a (re)started operator acts again: said once
            log.info("first cycle in %.2fs: %d pods bound", self.stats.last_cycle_s, self.stats.bound)
        return step
