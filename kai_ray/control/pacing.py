"""When a backend's scheduling loop steps: at once when something changed (after a short
settle, so that a burst of changes makes one step), and at least every `period` for
timers (grace periods, minimum runtimes, retries), paced so that a costly step leaves
the backend time for its calls. Both the Ray scheduler actor and the Kubernetes operator
step their loop through `paced_steps`; neither has a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Pacing", "paced_steps"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Pacing:
    period: float  # the longest wait between two steps
    settle: float = 0.0  # after a wake-up: let a burst of changes arrive first
    # After a step of d seconds, the next waits until pace * d has passed (at most
    # pace_max): a deep backlog's costly steps never take more than 1 / (1 + pace) of the
    # backend's time, and calls are served between them.
    pace: float = 0.0
    pace_max: float = math.inf


async def paced_steps(
    wake: asyncio.Event,
    step: Callable[[bool], Awaitable[None]],
    pacing: Pacing,
    *,
    next_deadline: Callable[[], float | None] = lambda: None,
    not_before: Callable[[], float] = lambda: 0.0,
) -> None:
    """Step forever: `step(woken)` when `wake` is set (woken) or when the period or the
    next deadline (epoch seconds) comes. `not_before`: a time.monotonic() before which no
    step starts (a backend's own reason to wait). One failed step never ends the loop."""
    ended = cost = 0.0
    while True:
        deadline = next_deadline()
        timeout = pacing.period if deadline is None else min(pacing.period, max(0.0, deadline - time.time()))
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
        # arrives as the event is set, and the loop would then never stop.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await wake.wait()
        woken = wake.is_set()
        now = time.monotonic()
        rest = max(
            pacing.settle if woken else 0.0,
            ended + min(pacing.pace * cost, pacing.pace_max) - now,
            not_before() - now,
        )
        if rest > 0:
            await asyncio.sleep(rest)
        wake.clear()
        began = time.monotonic()
        try:
            await step(woken)
        except Exception:  # one bad step must not stop the scheduler
            log.exception("scheduling step failed")
        ended = time.monotonic()
        cost = ended - began
        await asyncio.sleep(0)
