"""The policies a simulation compares. Each is the same core with another configuration
or another set of policy hooks (kai_ray.core.rules.policy): nothing here decides placement.

- fifo: the baseline. One queue holding every job, served in submission order (a job
  that does not fit is skipped, so smaller jobs behind it may start: first fit in FIFO
  order), the allocate action only: no reclaim, no preemption, no consolidation.
- default: kai-ray's defaults (SchedulerConfig()): queues with quota and fair share,
  reclaim between queues, preemption inside a queue, consolidation.
- timeshare: the default plus time-based fair share: a queue's over-quota share shrinks
  with its recent usage (a sliding window with a half-life; usage_window_s > 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kai_ray.config.errors import ConfigError
from kai_ray.control.cycles import CycleFn, cycle_function
from kai_ray.core import QueueInfo, SchedulerConfig
from kai_ray.core.rules.policy import DEFAULT_POLICY, Policy
from kai_ray.core.state.jobs import Job

__all__ = ["POLICIES", "POOL_QUEUE", "SimPolicy", "make_policy", "with_reservations"]

POOL_QUEUE = "fifo"  # the one queue of a pooled (FIFO) policy
DAY = 86400.0


def submission_order(job: Job) -> tuple[object, ...]:
    """Older first, whatever the priority: first come, first served."""
    return (job.info.created_at, job.order)


FIFO_POLICY = Policy(job_order=submission_order)


@dataclass(frozen=True, slots=True)
class SimPolicy:
    name: str
    config: SchedulerConfig
    hooks: Policy = DEFAULT_POLICY
    pooled: bool = False  # every job in one queue (POOL_QUEUE): the trace's queues only label jobs
    about: str = ""

    def cycle(self, incremental: bool = True) -> CycleFn:
        """The controller's cycle with these hooks: incremental (a cache per simulation:
        a step costs what changed) unless asked otherwise, the garbage collector paused
        inside it as a long-lived scheduler does."""
        return cycle_function(policy=self.hooks, pause_gc=True, incremental=incremental)

    def queues(self, team_queues: Sequence[QueueInfo]) -> list[QueueInfo]:
        """The queues the controller gets: the trace's, or the one pool."""
        if self.pooled:
            return [QueueInfo(name=POOL_QUEUE, quota=(-1.0, -1.0, -1.0))]
        return list(team_queues)


def _fifo(base: SchedulerConfig) -> SimPolicy:
    config = dataclasses.replace(base, actions=("allocate",))
    return SimPolicy("fifo", config, FIFO_POLICY, pooled=True, about="FIFO (first fit), no preemption")


def _default(base: SchedulerConfig) -> SimPolicy:
    return SimPolicy("default", base, about="kai-ray's defaults: fair share, reclaim, preempt")


def _timeshare(base: SchedulerConfig) -> SimPolicy:
    window = base.usage_window_s or 7 * DAY
    half_life = base.usage_half_life_s or DAY
    config = dataclasses.replace(base, usage_window_s=window, usage_half_life_s=half_life)
    about = f"time-based fair share ({window / DAY:g}-day window, {half_life / DAY:g}-day half-life)"
    return SimPolicy("timeshare", config, about=about)


POLICIES: dict[str, Callable[[SchedulerConfig], SimPolicy]] = {
    "fifo": _fifo,
    "default": _default,
    "timeshare": _timeshare,
}


def make_policy(name: str, base: SchedulerConfig | None = None) -> SimPolicy:
    """The named policy on top of `base` (the --config file's options, or the defaults)."""
    if name not in POLICIES:
        raise ConfigError(f"unknown policy {name!r}; use one of {', '.join(POLICIES)}", field="--policy")
    return POLICIES[name](base or SchedulerConfig())


def with_reservations(policy: SimPolicy, after_s: float) -> SimPolicy:
    """The same policy with reservations and backfill (a gang that waited `after_s`
    holds its room), named `<policy>+reserve`: run beside the policy, the trade shows."""
    config = dataclasses.replace(policy.config, reserve_after_s=after_s)
    about = f"{policy.about}; reservations for gangs waiting {after_s / 60:g} min, with backfill"
    return dataclasses.replace(policy, name=f"{policy.name}+reserve", config=config, about=about)
