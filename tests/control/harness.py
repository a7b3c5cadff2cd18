"""A controller on in-memory ports, with the real core, and small builders for tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kai_ray.control import Controller, Workload, WorkloadSpec
from kai_ray.control.events import ControlEvent
from kai_ray.control.memory import ManualClock, MemoryExecutor, MemoryNodes, MemoryStore
from kai_ray.core import HOSTNAME_LABEL, NodeInfo, QueueInfo, SchedulerConfig

GIB = 2**30
QUEUES = [
    QueueInfo("a", quota=(-1, -1, -1)),
    QueueInfo("parent"),
    QueueInfo("child", parent="parent", quota=(-1, -1, -1)),
]


def node(name: str, gpus: int = 4, cpu: float = 8, **labels: str) -> NodeInfo:
    return NodeInfo(name, gpus=gpus, cpu=cpu, memory=64 * GIB, labels={HOSTNAME_LABEL: name, **labels})


def spec(**kw: Any) -> WorkloadSpec:
    kw.setdefault("resources_per_worker", {"GPU": 4, "CPU": 1})
    return WorkloadSpec(queue=kw.pop("queue", "a"), **kw)


@dataclass
class Harness:
    """`h.at(t).step()`: one controller step at time t; `events` keeps all returned."""

    controller: Controller
    cluster: MemoryNodes
    executor: MemoryExecutor
    store: MemoryStore
    clock: ManualClock
    events: list[ControlEvent] = field(default_factory=list)

    def at(self, t: float) -> Harness:
        self.clock.t = t
        return self

    def step(self) -> Harness:
        self.events += self.controller.step().events
        return self

    def submit(self, wid: str, **kw: Any) -> Workload:
        return self.controller.submit(wid, spec(**kw))

    def w(self, wid: str) -> Workload:
        return self.controller.workloads[wid]

    def restarted(self) -> Harness:
        """A new controller on the same store, executor and cluster (a scheduler restart)."""
        fresh = Controller(self.cluster, self.executor, self.store, self.clock, QUEUES)
        self.events += fresh.load()
        return Harness(fresh, self.cluster, self.executor, self.store, self.clock, self.events)


def make(
    nodes: int = 2, queues: list[QueueInfo] | None = None, config: SchedulerConfig | None = None
) -> Harness:
    cluster = MemoryNodes([node(f"n{i}") for i in range(nodes)])
    executor, store, clock = MemoryExecutor(), MemoryStore(), ManualClock()
    controller = Controller(cluster, executor, store, clock, queues or QUEUES, config)
    return Harness(controller, cluster, executor, store, clock)
