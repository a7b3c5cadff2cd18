"""Workloads refused by their queue's access rule, counted for the metric
`kai_ray_queue_access_refusals_total{queue, rule}` (rule: the reason code, queue-tenant
or priority-ceiling), the same on every backend.

A workload counts once per refusal: at the door (Ray refuses a submission its queue
would never take: `at_door`), or when the scheduler first finds it waiting with that
code (`cycled`, after each cycle). A workload that keeps waiting for the same rule is
not counted again on every cycle; one the rule lets go and then refuses again, or
refuses for the other rule, is. Running work a changed rule no longer admits keeps
running and is not counted (the Queue status and the dashboard report it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from kai_ray.control.accessview import ACCESS_CODES
from kai_ray.core import CycleResult, JobInfo

__all__ = ["METRIC", "RefusalCounter"]

METRIC = "kai_ray_queue_access_refusals_total"
HELP = "workloads refused by their queue's access rule, by queue and rule (reason code)"

Listener = Callable[[str, str], None]  # (queue, rule) of one more refusal


class RefusalCounter:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()  # (queue, rule) -> refusals
        self._waiting: dict[str, str] = {}  # job refused and counted -> the code counted
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        """Hear of every refusal counted (a backend's own metrics exporter)."""
        self._listeners.append(listener)

    def at_door(self, queue: str, code: str) -> None:
        """A submission refused before it was queued (`code`: its SubmitError's; a
        refusal for another cause, code "" or another, is not this metric's)."""
        if code in ACCESS_CODES:
            self._count(queue, code)

    def cycled(self, result: CycleResult, jobs: Iterable[JobInfo]) -> None:
        """After a cycle: count the waiting workloads newly refused. `jobs`: the cycle's
        snapshot, read only when one is new (for its queue)."""
        refused = {
            job: reason.code
            for job, reason in result.refused.items()
            if reason.code in ACCESS_CODES and job in result.waiting
        }
        for job in [j for j in self._waiting if j not in refused]:
            del self._waiting[job]  # let go (or gone): a later refusal counts again
        new = [(job, code) for job, code in refused.items() if self._waiting.get(job) != code]
        if not new:
            return
        queue_of = {j.name: j.queue for j in jobs}
        for job, code in new:
            self._waiting[job] = code
            self._count(queue_of.get(job, ""), code)

    def _count(self, queue: str, code: str) -> None:
        self.counts[(queue, code)] += 1
        for listener in self._listeners:
            listener(queue, code)
