"""What a dispatcher hears from the scheduler about its workloads: admitted (running a
new attempt) or ended. One long poll at a time (`admissions`, kai_ray.ray.feed), however
many workloads wait; a waiting workload is a future here, nothing more.

Reports of one workload may arrive out of order (a report is the workload as it stood
when its poll was answered), so the newest wins: an end beats everything, then the later
attempt. A report may come before anyone waits for it (the workload was admitted before
its body reached the dispatcher): it is kept until asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from kai_ray.ray.feed import POLL_S

__all__ = ["AdmissionWatch"]

log = logging.getLogger(__name__)

RETRY_S = 1.0  # the scheduler restarting: poll again after this
FORGET_ENDED = 100_000  # ids of finished runs kept to drop late reports about them


def _newer(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return True
    return (new["ended"], new["attempt"]) >= (old["ended"], old["attempt"])


class AdmissionWatch:
    def __init__(self, scheduler: Any, dispatcher_id: str) -> None:
        self._sched, self._id = scheduler, dispatcher_id
        self._latest: dict[str, dict[str, Any]] = {}  # workload -> its newest report
        self._waiting: dict[str, tuple[int, asyncio.Future[dict[str, Any]]]] = {}
        self._ended: dict[str, None] = {}  # runs over: a late report of them is dropped
        self._epoch: str | None = None
        self._wake: asyncio.Event | None = None
        self._poller: asyncio.Task[None] | None = None

    async def admitted(self, wid: str, after: int) -> dict[str, Any]:
        """The workload's report once it runs an attempt later than `after`, or ends."""
        report = self._latest.get(wid)
        if report is not None and (report["ended"] or report["attempt"] > after):
            return report
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[wid] = (after, future)
        self._poke()
        try:
            return await future
        finally:
            self._waiting.pop(wid, None)

    def ended(self, wid: str) -> None:
        """The workload's run is over here: forget it (and drop reports still to come)."""
        self._latest.pop(wid, None)
        self._waiting.pop(wid, None)
        self._ended[wid] = None
        if len(self._ended) > FORGET_ENDED:
            del self._ended[next(iter(self._ended))]

    def _poke(self) -> None:
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def _poll(self) -> None:
        """One call at a time to the scheduler, while any workload here waits."""
        assert self._wake is not None
        while True:
            if not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                answer = await self._sched.admissions.remote(self._id, POLL_S)
            except Exception as exc:  # the scheduler restarting: its answer is lost
                log.info("waiting for the scheduler: %s", exc)
                await asyncio.sleep(RETRY_S)
                continue
            if answer["epoch"] != self._epoch:
                # A scheduler that restarted (maybe before this dispatcher first asked) has
                # lost the reports it had not sent: ask about the waiting workloads afresh.
                self._epoch = answer["epoch"]
                with contextlib.suppress(Exception):
                    answer["reports"] += await self._sched.reports.remote(list(self._waiting))
            for report in answer["reports"]:
                self._take(report)

    def _take(self, report: dict[str, Any]) -> None:
        wid = report["id"]
        if wid in self._ended:
            if report["ended"]:  # the last report there will be: forget the id
                del self._ended[wid]
            return
        if not _newer(self._latest.get(wid), report):
            return
        self._latest[wid] = report
        waiting = self._waiting.get(wid)
        if waiting is not None and (report["ended"] or report["attempt"] > waiting[0]):
            del self._waiting[wid]
            if not waiting[1].done():
                waiting[1].set_result(report)
