"""How a scheduler's decision on a state is compared with KAI's (docs/conformance.md):
per job, the number of its tasks in each status, Binding and Pipelined both read as
placed (KAI pipelines whatever preempt or reclaim places, even on free room); nodes are
not compared."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["Counts", "differing_jobs", "task_counts"]

Counts = dict[str, int]
_PLACED = {"Binding": "placed", "Pipelined": "placed"}


def task_counts(statuses: Iterable[str]) -> Counts:
    """A job's tasks per status, placed ones together."""
    return dict(sorted(Counter(_PLACED.get(s, s) for s in statuses).items()))


def differing_jobs(
    kai: Mapping[str, Counts], ours: Mapping[str, Counts]
) -> dict[str, tuple[Counts, Counts | None]]:
    """KAI's jobs whose counts the other decision does not match: job -> (KAI's, ours)."""
    return {job: (theirs, ours.get(job)) for job, theirs in kai.items() if ours.get(job) != theirs}
