"""The dispatcher's side of the admission feed, without a cluster: one long poll however
many wait, the newest report wins, a report may come before anyone waits for it, and a
scheduler that restarted (a new epoch) is asked again about what waits."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

pytest.importorskip("ray")

from kai_ray.api.admissions import AdmissionWatch


def report(wid: str, state: str = "Running", attempt: int = 1) -> dict[str, Any]:
    ended = state in ("Succeeded", "Failed", "Cancelled")
    return {
        "id": wid,
        "state": state,
        "attempt": attempt,
        "group_id": "g",
        "name": "",
        "reason": "",
        "ended": ended,
    }


class _Method:
    def __init__(self, fn: Any) -> None:
        self.remote = fn


class FakeScheduler:
    """The two calls the watch makes, answered from queues a test fills."""

    def __init__(self) -> None:
        self.answers: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.polls = 0
        self.asked: list[list[str]] = []
        self.known: dict[str, dict[str, Any]] = {}
        self.admissions = _Method(self._admissions)
        self.reports = _Method(self._reports)

    def _admissions(self, did: str, timeout: float) -> Awaitable[dict[str, Any]]:
        self.polls += 1
        return self.answers.get()

    async def _reports(self, ids: list[str]) -> list[dict[str, Any]]:
        self.asked.append(sorted(ids))
        return [self.known[i] for i in ids if i in self.known]


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 5))


def test_many_wait_on_one_poll_and_each_gets_its_own_report() -> None:
    async def scenario() -> None:
        sched = FakeScheduler()
        watch = AdmissionWatch(sched, "d")
        waits = [asyncio.ensure_future(watch.admitted(f"w{i}", 0)) for i in range(100)]
        await asyncio.sleep(0.01)
        assert sched.polls == 1  # one call in flight, not one per workload
        await sched.answers.put({"epoch": "e1", "reports": [report("w7"), report("w3", "Cancelled", 0)]})
        done = await asyncio.gather(waits[7], waits[3])
        assert [r["state"] for r in done] == ["Running", "Cancelled"]
        assert not any(w.done() for i, w in enumerate(waits) if i not in (3, 7))
        for w in waits:
            w.cancel()

    run(scenario())


def test_the_newest_report_wins_and_one_that_came_first_is_kept() -> None:
    async def scenario() -> None:
        sched = FakeScheduler()
        watch = AdmissionWatch(sched, "d")
        first = asyncio.ensure_future(watch.admitted("other", 0))  # keeps the poll going
        await asyncio.sleep(0.01)
        # A report of attempt 2, then a stale one of attempt 1, before anyone asks for w.
        await sched.answers.put({"epoch": "e1", "reports": [report("w", attempt=2)]})
        await sched.answers.put({"epoch": "e1", "reports": [report("w", attempt=1)]})
        await asyncio.sleep(0.01)
        assert (await watch.admitted("w", 1))["attempt"] == 2  # kept, not replaced
        # A workload that ran attempt 2 waits for a later one (it was preempted).
        later = asyncio.ensure_future(watch.admitted("w", 2))
        await asyncio.sleep(0.01)
        assert not later.done()
        await sched.answers.put({"epoch": "e1", "reports": [report("w", attempt=3)]})
        assert (await later)["attempt"] == 3
        watch.ended("w")
        await sched.answers.put({"epoch": "e1", "reports": [report("w", attempt=4)]})
        await asyncio.sleep(0.01)
        assert "w" not in watch._latest  # a late report of a run that is over is dropped
        first.cancel()

    run(scenario())


def test_a_new_epoch_asks_again_about_what_waits() -> None:
    async def scenario() -> None:
        sched = FakeScheduler()
        watch = AdmissionWatch(sched, "d")
        waiting = asyncio.ensure_future(watch.admitted("w", 0))
        await asyncio.sleep(0.01)
        await sched.answers.put({"epoch": "e1", "reports": []})
        await asyncio.sleep(0.01)
        assert sched.asked == [["w"]]  # the first answer starts an epoch: asked once
        # The scheduler restarted after admitting w: its report was never sent.
        sched.known["w"] = report("w")
        await sched.answers.put({"epoch": "e2", "reports": []})
        assert (await waiting)["state"] == "Running"
        assert sched.asked == [["w"], ["w"]]

    run(scenario())
