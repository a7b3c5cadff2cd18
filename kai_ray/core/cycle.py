"""One scheduling cycle: fair shares, then the actions in order, then the decisions."""

from __future__ import annotations

from kai_ray.core.model import ClusterSnapshot, CycleResult, SchedulerConfig

__all__ = ["run_cycle"]


def run_cycle(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float) -> CycleResult:
    """Decide one cycle. Pure: the snapshot is not modified; same input, same output."""
    raise NotImplementedError("being written")
