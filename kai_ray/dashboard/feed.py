"""The dashboard's side of a backend: the backend reports each cycle (`cycled`), the feed
keeps a revision, the timeline, and the Board built from the backend's state at most
once per revision, on the first request that needs it (so a scheduler nobody looks at
builds none). Waiters on a change (the live-update stream) are woken per revision.

A feed that follows its loop (`follow`) also counts the workloads the cycles find
refused by their queue's access rule (kai_ray.control.refusals), for `GET /metrics`:
the loop has set its last cycle when it reports it, so nothing else need be passed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from kai_ray.control.loop import SchedulingLoop
from kai_ray.control.refusals import RefusalCounter
from kai_ray.core import GPU, QueueStatus
from kai_ray.dashboard.board import Board
from kai_ray.dashboard.timeline import Timeline

__all__ = ["Feed"]


class Feed:
    def __init__(self, build: Callable[[], Board], timeline: Timeline | None = None) -> None:
        self._build = build
        self.timeline = timeline or Timeline()
        self.revision = 0
        self._board: Board | None = None
        self._board_revision = -1
        self._last_status: dict[str, QueueStatus] = {}
        self._changed: asyncio.Event | None = None
        self.refusals = RefusalCounter()
        self._loop: SchedulingLoop | None = None

    def follow(self, loop: SchedulingLoop) -> None:
        """Count the access refusals of each cycle `loop` reports to this feed."""
        self._loop = loop

    def cycled(self, now: float, queues: Mapping[str, QueueStatus], changed: bool) -> None:
        """A cycle ran at `now` with these queue figures; `changed`: workloads changed
        (the backend's events). A cycle that changed nothing a page shows costs one
        comparison."""
        self.timeline.record(now, {q: st.allocated[GPU] for q, st in queues.items()})
        last = self._loop.last if self._loop is not None else None
        if last is not None:
            self.refusals.cycled(last.result, last.snapshot.jobs)
        if changed or queues != self._last_status:
            self._last_status = dict(queues)
            self.touch()

    def touch(self) -> None:
        """Something a page shows changed."""
        self.revision += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def board(self) -> Board:
        if self._board is None or self._board_revision != self.revision:
            self._board, self._board_revision = self._build(), self.revision
        return self._board

    async def wait_change(self, seen: int, timeout: float) -> int:
        """The revision once it differs from `seen`, or the same one after `timeout`."""
        if self.revision != seen:
            return self.revision
        if self._changed is None:
            self._changed = asyncio.Event()
        event = self._changed
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await event.wait()
        return self.revision
