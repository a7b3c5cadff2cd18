"""Scheduler metrics through ray.util.metrics (exported on each node's Prometheus port,
with Ray's `ray_` prefix): per queue allocated / fair share / pending, preemptions and
admission wait time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ray.util.metrics import Counter, Gauge, Histogram

from kai_ray.control import Admitted, ControlEvent, Preempted, State, Workload
from kai_ray.core import RESOURCES, QueueInfo, QueueStatus

__all__ = ["SchedulerMetrics"]

_WAIT_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800]


class SchedulerMetrics:
    def __init__(self) -> None:
        keys = ("queue", "resource")
        self.allocated = Gauge("kai_ray_queue_allocated", "allocated per queue", tag_keys=keys)
        self.fair_share = Gauge("kai_ray_queue_fair_share", "fair share per queue", tag_keys=keys)
        self.pending = Gauge("kai_ray_queue_pending_workloads", "queued workloads", tag_keys=("queue",))
        self.preemptions = Counter("kai_ray_preemptions_total", "workloads preempted", tag_keys=("queue",))
        self.admission_wait = Histogram(
            "kai_ray_admission_wait_seconds",
            "queued to running",
            boundaries=_WAIT_BUCKETS,
            tag_keys=("queue",),
        )

    def record(
        self, status: Mapping[str, QueueStatus], queues: Sequence[QueueInfo], workloads: Iterable[Workload]
    ) -> None:
        """The gauges, after a cycle."""
        for queue, st in status.items():
            for i, res in enumerate(RESOURCES):
                tags = {"queue": queue, "resource": res}
                self.allocated.set(st.allocated[i], tags=tags)
                self.fair_share.set(st.fair_share[i], tags=tags)
        pending: dict[str, int] = {q.name: 0 for q in queues}
        for w in workloads:
            if w.state is State.QUEUED:
                pending[w.spec.queue] = pending.get(w.spec.queue, 0) + 1
        for queue, n in pending.items():
            self.pending.set(n, tags={"queue": queue})

    def count(self, events: Iterable[ControlEvent]) -> None:
        """The counters and histograms, from the controller's events."""
        for e in events:
            if isinstance(e, Preempted):
                self.preemptions.inc(1, tags={"queue": e.queue})
            elif isinstance(e, Admitted):
                self.admission_wait.observe(max(0.0, e.waited), tags={"queue": e.queue})
