"""Scheduler metrics through ray.util.metrics (exported on each node's Prometheus port,
with Ray's `ray_` prefix): per queue quota, fair share, allocated, requested and waiting
workloads; admissions and admission wait; preemptions by reason; cycle time. The Grafana
dashboard in kai_ray/dashboard/grafana/ charts exactly these series."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from ray.util.metrics import Counter, Gauge, Histogram

from kai_ray.control import Admitted, ControlEvent, Preempted, State, Workload
from kai_ray.control.loop import SchedulingLoop
from kai_ray.control.refusals import HELP as REFUSALS_HELP
from kai_ray.control.refusals import METRIC as REFUSALS
from kai_ray.control.refusals import RefusalCounter
from kai_ray.core import RESOURCES, QueueInfo, QueueStatus
from kai_ray.dashboard.feed import Feed

__all__ = ["SERIES", "SchedulerMetrics", "watch_refusals"]

_WAIT_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800]
_CYCLE_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]
# Every series, as Prometheus names it (Ray adds `ray_`; a counter gets `_total`).
SERIES = (
    "ray_kai_ray_queue_quota",
    "ray_kai_ray_queue_fair_share",
    "ray_kai_ray_queue_allocated",
    "ray_kai_ray_queue_requested",
    "ray_kai_ray_queue_pending_workloads",
    "ray_kai_ray_admissions_total",
    "ray_kai_ray_admission_wait_seconds",
    "ray_kai_ray_preemptions_total",
    "ray_kai_ray_cycle_seconds",
)


class SchedulerMetrics:
    def __init__(self) -> None:
        keys = ("queue", "resource")
        self.quota = Gauge("kai_ray_queue_quota", "quota per queue (-1: unlimited)", tag_keys=keys)
        self.fair_share = Gauge("kai_ray_queue_fair_share", "fair share per queue", tag_keys=keys)
        self.allocated = Gauge("kai_ray_queue_allocated", "allocated per queue", tag_keys=keys)
        self.requested = Gauge(
            "kai_ray_queue_requested", "requested per queue (held + waiting)", tag_keys=keys
        )
        self.pending = Gauge("kai_ray_queue_pending_workloads", "queued workloads", tag_keys=("queue",))
        self.admissions = Counter("kai_ray_admissions_total", "workloads admitted", tag_keys=("queue",))
        self.preemptions = Counter(
            "kai_ray_preemptions_total", "workloads preempted, by reason", tag_keys=("queue", "reason")
        )
        self.admission_wait = Histogram(
            "kai_ray_admission_wait_seconds",
            "queued to running",
            boundaries=_WAIT_BUCKETS,
            tag_keys=("queue",),
        )
        self.cycle = Histogram("kai_ray_cycle_seconds", "one scheduling step", boundaries=_CYCLE_BUCKETS)
        # Per GPU type, where queues name types (docs/gpu-types.md): one gauge per figure.
        typed = ("queue", "gpu_type")
        self.by_type = {
            figure: Gauge(
                f"kai_ray_queue_gpu_type_{figure}", f"{figure} per queue and GPU type", tag_keys=typed
            )
            for figure in ("quota", "limit", "fair_share", "allocated")
        }

    def record(
        self, status: Mapping[str, QueueStatus], queues: Sequence[QueueInfo], workloads: Iterable[Workload]
    ) -> None:
        """The gauges, after a cycle."""
        for q in queues:
            for i, res in enumerate(RESOURCES):
                self.quota.set(q.quota[i], tags={"queue": q.name, "resource": res})
        for queue, st in status.items():
            for i, res in enumerate(RESOURCES):
                tags = {"queue": queue, "resource": res}
                self.allocated.set(st.allocated[i], tags=tags)
                self.fair_share.set(st.fair_share[i], tags=tags)
                self.requested.set(st.requested[i], tags=tags)
            for gpu_type, figures in st.gpu_types.items():
                for figure, gauge in self.by_type.items():
                    gauge.set(figures[figure], tags={"queue": queue, "gpu_type": gpu_type})
        pending: dict[str, int] = {q.name: 0 for q in queues}
        for w in workloads:
            if w.state is State.QUEUED:
                pending[w.spec.queue] = pending.get(w.spec.queue, 0) + 1
        for queue, n in pending.items():
            self.pending.set(n, tags={"queue": queue})

    def cycle_time(self, seconds: float) -> None:
        self.cycle.observe(max(0.0, seconds))

    def count(self, events: Iterable[ControlEvent]) -> None:
        """The counters and histograms, from the controller's events."""
        for e in events:
            if isinstance(e, Preempted):
                # The core's action (reclaim, preempt, consolidation, stalegangeviction):
                # a handful of values, so a label; the words stay in the workload's history.
                reason = e.why.split(":", 1)[0].strip() or "unknown"
                self.preemptions.inc(1, tags={"queue": e.queue, "reason": reason})
            elif isinstance(e, Admitted):
                self.admissions.inc(1, tags={"queue": e.queue})
                self.admission_wait.observe(max(0.0, e.waited), tags={"queue": e.queue})


def watch_refusals(feed: Feed, loop: SchedulingLoop) -> RefusalCounter:
    """The dashboard's feed counts the access refusals of each cycle of `loop` (and, as
    the actor tells it, those at the door), for its `GET /metrics`; Ray's metrics export
    each count too, as ray_kai_ray_queue_access_refusals_total. (Not in SERIES: a Ray
    counter appears only once counted, and SERIES is what every cluster exports.)"""
    feed.follow(loop)
    counter = Counter(REFUSALS, REFUSALS_HELP, tag_keys=("queue", "rule"))
    feed.refusals.subscribe(lambda queue, rule: counter.inc(1, tags={"queue": queue, "rule": rule}))
    return feed.refusals
