"""How long a workload runs: what it declares, what its queue says, what its kind took
before. One place for every backend: Ray's and the simulator's controller, and the
Kubernetes operator, each describe a workload to the core as a JobInfo whose
`expected_runtime` and `max_runtime` they fill from it; the forecast of when waiting
work starts (kai_ray.control.forecast) asks `Runtimes.expected` here.

An estimate follows the one rule of kai_ray.core.model.runtimes (declared, history, queue
default, max runtime, none); the history is kept here (`RuntimeHistory`: the median run
time of the last workloads of the same queue and shape that finished, a shape being
the task count and request per task).
"""

from __future__ import annotations

import statistics
from collections import OrderedDict, deque
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

from kai_ray.core import JobInfo, QueueInfo, Request
from kai_ray.core.model.runtimes import estimate_runtime

__all__ = [
    "HISTORY_KEPT",
    "Estimate",
    "RuntimeHistory",
    "Runtimes",
    "format_duration",
    "max_runtime_reason",
    "runtime_over_at",
    "shape_key",
    "shape_of",
]

HISTORY_KEPT = 20  # run times kept per queue and shape: recent work says most
_SHAPES_KEPT = 4096  # shapes kept at most (the least recently finished go first)


def format_duration(seconds: float) -> str:
    """A duration the way people say it, in its two largest units (rounded to the
    smaller): 45s, 5m, 1h30m, 2d3h; 7198 s is 2h."""
    s = max(0, round(seconds))
    step = next((finer for unit, finer in ((86400, 3600), (3600, 60)) if s >= unit), 1)
    s = round(s / step) * step
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (s, "s")]
    shown = [f"{n}{unit}" for n, unit in parts if n][:2]
    return "".join(shown) or "0s"


def runtime_over_at(since: float, ran: float, limit: float | None) -> float | None:
    """When a workload running since `since` reaches its max runtime, its earlier runs
    (`ran` seconds) counted; None without a limit. The one rule of max runtime: Ray's
    and the simulator's controller and the Kubernetes operator each carry out the stop."""
    return None if limit is None else since + max(0.0, limit - ran)


def max_runtime_reason(limit: float) -> str:
    return f"stopped: it ran past its max runtime of {format_duration(limit)}"


def shape_key(queue: str, tasks: int, request: Request | None) -> Hashable:
    """What makes two workloads of one queue alike for the history: how many tasks, and
    what each asks for."""
    return (queue, tasks, request)


def shape_of(job: JobInfo) -> Hashable:
    return shape_key(job.queue, len(job.tasks), job.tasks[0].request if job.tasks else None)


@dataclass(frozen=True, slots=True)
class Estimate:
    """A workload's expected run time and where it came from (for the reason people
    read); `seconds` None: nothing is known."""

    seconds: float | None
    source: str  # "declared", "history", "queue default", "max runtime", "unknown"


UNKNOWN = Estimate(None, "unknown")


class RuntimeHistory:
    """The run times of finished workloads, per queue and shape."""

    def __init__(self, kept: int = HISTORY_KEPT) -> None:
        self.kept = kept
        self._runs: OrderedDict[Hashable, deque[float]] = OrderedDict()

    def finished(self, key: Hashable, ran: float) -> None:
        """A workload of this shape (`shape_key`) finished after `ran` seconds of run
        time (a success: a failure says little of how long the work takes)."""
        runs = self._runs.pop(key, None) or deque(maxlen=self.kept)
        runs.append(ran)
        self._runs[key] = runs
        while len(self._runs) > _SHAPES_KEPT:
            self._runs.popitem(last=False)

    def median(self, job: JobInfo) -> float | None:
        runs = self._runs.get(shape_of(job))
        return statistics.median(runs) if runs else None


class Runtimes:
    """Each workload's estimate, from its JobInfo, its queue and the history."""

    def __init__(self, history: RuntimeHistory | None = None) -> None:
        self.history = history or RuntimeHistory()
        self._queues: dict[str, QueueInfo] = {}

    def set_queues(self, queues: Iterable[QueueInfo]) -> None:
        self._queues = {q.name: q for q in queues}

    def expected(self, job: JobInfo) -> Estimate:
        """The estimate by the one rule (kai_ray.core.model.runtimes), with this history."""
        past = None if job.expected_runtime is not None else self.history.median(job)
        queue = self._queues.get(job.queue)
        seconds, source = estimate_runtime(
            job,
            past,
            queue.expected_runtime if queue is not None else None,
            queue.max_runtime if queue is not None else None,
        )
        return Estimate(seconds, source) if seconds is not None else UNKNOWN

    def max_runtime(self, job: JobInfo) -> float | None:
        return job.max_runtime if job.max_runtime is not None else self.max_runtime_of_queue(job.queue)

    def max_runtime_of_queue(self, name: str) -> float | None:
        queue = self._queues.get(name)
        return queue.max_runtime if queue is not None else None
