"""How long work is expected to run: the one rule every user of an estimate follows (the
forecast of when waiting work starts, in kai_ray.control, and reservations, here).

An estimate, in order:
1. the workload's own `expected_runtime`;
2. what the backend's history says work of its queue and shape took (`past`);
3. its queue's `expected_runtime` (a default for what declares none);
4. its max runtime, its own or its queue's (it is stopped then: an upper bound);
5. none: a user of the estimate says so rather than inventing one.
"""

from __future__ import annotations

from kai_ray.core.model.snapshot import JobInfo

__all__ = ["estimate_runtime", "expected_end"]


def estimate_runtime(
    job: JobInfo, past: float | None, queue_expected: float | None, queue_max: float | None
) -> tuple[float | None, str]:
    """Seconds of run time, and where they come from ("declared", "history",
    "queue default", "max runtime", or "unknown" with None)."""
    if job.expected_runtime is not None:
        return job.expected_runtime, "declared"
    if past is not None:
        return past, "history"
    if queue_expected is not None:
        return queue_expected, "queue default"
    limit = job.max_runtime if job.max_runtime is not None else queue_max
    return (limit, "max runtime") if limit is not None else (None, "unknown")


def expected_end(since: float, ran: float, seconds: float | None, now: float) -> float | None:
    """When work running since `since` (`ran` seconds of earlier runs counted) is expected
    to end, never before `now` (overdue work is expected to end any moment); None when
    its run time is not known."""
    if seconds is None:
        return None
    return max(since + max(0.0, seconds - ran), now)
