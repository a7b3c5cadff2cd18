"""The scheduling loop: one step, the same for every backend (Ray, Kubernetes, the
simulator, the scenario runner).

    observe   the ClusterSource's world (patched by the backend, not rebuilt)
    usage     the queues' usage history into the snapshot (time-based fair share)
    cycle     the core's run_cycle, incremental, checked against a full one where asked
    plan      plan_cycle: the decisions checked and grouped per workload
    apply     the backend's Actuator carries the plan out
    record    the Lifecycle's states, reasons and history; the events of what changed
    tell      positions, reasons and queue figures kept for readers; the listener
              (the dashboard's feed, metrics) hears of the cycle

The steps from `usage` to `plan` are `Cycles` and `plan_cycle`, so that no backend can
leave one out (the Kubernetes operator once ran a loop of its own that left the usage
history out, and time-based fair share was silently off there). A backend whose calls
are asynchronous (Kubernetes) awaits `step_async`; the others call `step`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kai_ray.control.cycles import Cycles
from kai_ray.control.events import ControlEvent
from kai_ray.control.planner import Plan, plan_cycle
from kai_ray.control.ports import Actuator, ClusterSource, Lifecycle
from kai_ray.core import ClusterSnapshot, CycleResult, QueueStatus, Reason, SchedulerConfig

__all__ = ["CycleListener", "Decided", "SchedulingLoop", "StepResult"]

log = logging.getLogger(__name__)


class CycleListener(Protocol):
    def cycled(self, now: float, queues: Mapping[str, QueueStatus], changed: bool) -> None:
        """A cycle ran at `now` with these queue figures; `changed`: workloads changed."""


@dataclass(slots=True)
class Decided:
    """What one cycle decided, before the backend carries it out."""

    snapshot: ClusterSnapshot
    result: CycleResult
    plan: Plan


@dataclass(slots=True)
class StepResult:
    result: CycleResult
    events: list[ControlEvent]
    plan: Plan | None = None


@dataclass(slots=True)
class _Told:
    """What the last cycle said, kept for readers between cycles."""

    queue_status: dict[str, QueueStatus] = field(default_factory=dict)
    positions: dict[str, tuple[int, int]] = field(default_factory=dict)
    waiting: dict[str, Reason] = field(default_factory=dict)


class SchedulingLoop:
    def __init__(
        self,
        source: ClusterSource,
        actuator: Actuator,
        lifecycle: Lifecycle,
        config: SchedulerConfig,
        cycles: Cycles,
        listener: CycleListener | None = None,
    ) -> None:
        self.source, self.actuator, self.lifecycle = source, actuator, lifecycle
        self.config, self.cycles, self.listener = config, cycles, listener
        self.last: Decided | None = None
        self.told = _Told()
        self.cycles_run = 0

    # ------------------------------------------------------------ one step

    def step(self, now: float) -> StepResult:
        decided = self.decide(now)
        pending = self.actuator.apply(decided.plan, decided.result, now)
        if inspect.isawaitable(pending):
            raise TypeError("this backend's Actuator is asynchronous: drive the loop with step_async")
        return self.settle(decided, now)

    async def step_async(self, now: float) -> StepResult:
        decided = self.decide(now)
        pending = self.actuator.apply(decided.plan, decided.result, now)
        if inspect.isawaitable(pending):
            await pending
        return self.settle(decided, now)

    def decide(self, now: float) -> Decided:
        """Observe, the usage history, the cycle and the plan: nothing carried out yet."""
        snapshot = self.source.observe(now)
        result = self.cycles(snapshot, self.config, now)
        nodes = (n.name for n in snapshot.nodes) if result.decisions else None
        return Decided(snapshot, result, plan_cycle(result, snapshot.jobs, nodes))

    def settle(self, decided: Decided, now: float) -> StepResult:
        """After the backend applied the plan: record, keep what was said, tell."""
        result, plan = decided.result, decided.plan
        events = self.lifecycle.record(decided.snapshot, result, plan, now)
        self.last = decided
        self.told = _Told(dict(result.queues), plan.positions, plan.waiting)
        self.cycles_run += 1
        if self.listener is not None:
            self.listener.cycled(now, result.queues, bool(events) or bool(plan.jobs))
        return StepResult(result, events, plan)

    # ------------------------------------------------------------ what readers see

    @property
    def queue_status(self) -> dict[str, QueueStatus]:
        return self.told.queue_status

    @property
    def positions(self) -> dict[str, tuple[int, int]]:
        """Waiting workload -> (1-based place in its queue, the queue's length)."""
        return self.told.positions
