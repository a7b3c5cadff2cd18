"""How a backend runs the core's cycles: incremental (core.CycleCache) by default, and,
where asked, each one checked against the full rebuild; and, when the config turns on
time-based fair share, fed the queues' usage history (`Cycles`).

Every backend hands its cycles through here (the Controller, so Ray and the simulator;
the Kubernetes operator), so one switch checks them all: with `KAI_RAY_CHECK_INCREMENTAL`
set, every cycle is decided both ways and a difference raises IncrementalMismatch, naming
the fields that differ. The test suite sets it, so the real backends' sequences of changes
test the cache as well as the random ones of tests/core do.

The cache tells what changed by identity first, then equality (core/incremental): an
equal object is the same job, but comparing it costs its fields; so every ClusterSource
hands the cycle the same object for what did not change (the Controller's JobInfos, the
Kubernetes source's patched world).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable

from kai_ray.control.usage import UsageHistory, cluster_capacity, history_for, queue_allocation
from kai_ray.core import (
    ClusterSnapshot,
    CycleCache,
    CycleResult,
    SchedulerConfig,
    run_cycle,
)
from kai_ray.core.rules.policy import DEFAULT_POLICY, Policy

__all__ = [
    "CHECK_INCREMENTAL_ENV",
    "CycleFn",
    "Cycles",
    "IncrementalMismatch",
    "cycle_function",
]

log = logging.getLogger(__name__)
CycleFn = Callable[[ClusterSnapshot, SchedulerConfig, float], CycleResult]
# Set (to anything): every incremental cycle is checked against the full rebuild.
CHECK_INCREMENTAL_ENV = "KAI_RAY_CHECK_INCREMENTAL"
_RESULT_FIELDS = ("decisions", "pending_reasons", "queues", "invalid", "queue_order", "waiting")


class IncrementalMismatch(AssertionError):
    """The incremental cycle decided otherwise than the full rebuild (a bug)."""

    def __init__(self, want: CycleResult, got: CycleResult) -> None:
        lines = [
            f"{k}: full {getattr(want, k)!r}, incremental {getattr(got, k)!r}"
            for k in _RESULT_FIELDS
            if getattr(want, k) != getattr(got, k)
        ]
        super().__init__("incremental cycle differs from the full one:\n" + "\n".join(lines))


def cycle_function(
    *, pause_gc: bool = False, incremental: bool = True, policy: Policy = DEFAULT_POLICY
) -> CycleFn:
    """One backend's cycles (with `policy`'s hooks): with a cache of its own when
    `incremental`; checked against the full rebuild when CHECK_INCREMENTAL_ENV is set."""
    if not incremental:
        return functools.partial(run_cycle, policy=policy, pause_gc=pause_gc)
    cache = CycleCache()
    if not os.environ.get(CHECK_INCREMENTAL_ENV):
        return functools.partial(run_cycle, policy=policy, pause_gc=pause_gc, cache=cache)
    log.debug("%s is set: every incremental cycle is checked against a full one", CHECK_INCREMENTAL_ENV)

    def checked(snapshot: ClusterSnapshot, config: SchedulerConfig, now: float) -> CycleResult:
        got = run_cycle(snapshot, config, now, policy=policy, pause_gc=pause_gc, cache=cache)
        want = run_cycle(snapshot, config, now, policy=policy, pause_gc=pause_gc)
        if got != want:
            raise IncrementalMismatch(want, got)
        return want

    return checked


class Cycles:
    """A backend's cycles with the queues' usage history: before each cycle the snapshot
    gets the usage over the window (time-based fair share), and after it the history
    records what the queues hold until the next one. Every backend decides through one
    of these, so none can leave the history out (the Kubernetes operator once did, and
    time-based fair share was silently off there). Without a window, only the cycle."""

    def __init__(self, usage: UsageHistory | None, cycle: CycleFn) -> None:
        self.usage, self._cycle = usage, cycle

    @classmethod
    def of(
        cls,
        config: SchedulerConfig,
        cycle: CycleFn | None = None,
        *,
        pause_gc: bool = False,
        incremental: bool = True,
    ) -> Cycles:
        """The history `config` asks for, around `cycle` (or a cycle_function)."""
        return cls(history_for(config), cycle or cycle_function(pause_gc=pause_gc, incremental=incremental))

    def __call__(self, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float) -> CycleResult:
        if self.usage is not None:
            snapshot.usage = self.usage.usage(now)
        result = self._cycle(snapshot, config, now)
        if self.usage is not None:
            self.usage.record(now, queue_allocation(result), cluster_capacity(snapshot.nodes))
        return result
