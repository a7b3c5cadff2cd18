"""What the scheduler tells each driver's dispatcher (kai_ray.api.dispatch): which of its
workloads were admitted (running a new attempt) or ended.

A workload carries its dispatcher's id in its spec's metadata. Whenever one changes, the
scheduler notes its id in that dispatcher's outbox; the dispatcher's one long poll
(`admissions`) takes the outbox, described as it stands then. So ten thousand waiting
workloads cost the scheduler ten thousand ids at most, and one waiting call per driver,
where a call per workload would hold ten thousand of the actor's concurrent calls.

Reports are not persisted: a scheduler that restarts starts a new epoch, and a
dispatcher that sees the epoch change asks again about the workloads it waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kai_ray.control import State, Workload

__all__ = [
    "DISPATCHER_KEY",
    "NAMESPACE",
    "POLL_S",
    "AdmissionFeed",
    "by_dispatcher",
    "dispatcher_name",
    "report",
]

DISPATCHER_KEY = "kai-ray/dispatcher"  # spec.metadata: the dispatcher that runs its body
NAMESPACE = "kai-ray"  # Ray's namespace of the scheduler and the dispatchers
POLL_S = 30.0  # a long poll returns empty after this, so a dispatcher that died is noticed
FORGET_AFTER_S = 600.0  # an outbox nobody polled for this long belongs to a driver gone


_UNKNOWN = {
    "state": "Cancelled",
    "attempt": 0,
    "group_id": None,
    "name": "",
    "reason": "no longer known to the scheduler",
    "ended": True,
}


def by_dispatcher(workloads: Iterable[Workload], live_only: bool = False) -> dict[str, list[str]]:
    """The ids of the workloads whose bodies each dispatcher runs (`live_only`: those
    that have not ended)."""
    out: dict[str, list[str]] = {}
    for w in workloads:
        did = w.spec.metadata.get(DISPATCHER_KEY)
        if did is not None and not (live_only and w.terminal):
            out.setdefault(did, []).append(w.id)
    return out


def dispatcher_name(did: str) -> str:
    """The Ray actor name of dispatcher `did` (the scheduler finds it by name to stop a
    body it started)."""
    return f"kai-ray-dispatcher-{did}"


def report(w: Workload) -> dict[str, Any]:
    """What a dispatcher needs to start (or give up) a workload's body."""
    return {
        "id": w.id,
        "state": w.state.value,
        "attempt": w.attempt,
        "group_id": w.group_ids.get(w.gang_group) if w.slots else None,
        "name": w.spec.name,
        "reason": w.reason,
        "ended": w.terminal,
    }


class AdmissionFeed:
    def __init__(self) -> None:
        self.epoch = uuid.uuid4().hex
        self._outbox: dict[str, dict[str, None]] = {}  # dispatcher -> workload ids, in order
        self._wake: dict[str, asyncio.Event] = {}
        self._polled_at: dict[str, float] = {}

    def note(self, w: Workload) -> None:
        """A workload changed: its dispatcher hears of it if it now runs or ended."""
        did = w.spec.metadata.get(DISPATCHER_KEY)
        if did is None or not (w.state is State.RUNNING or w.terminal):
            return
        self._outbox.setdefault(did, {})[w.id] = None
        self._polled_at.setdefault(did, time.time())  # forgotten if it never polls
        wake = self._wake.get(did)
        if wake is not None:
            wake.set()

    async def poll(
        self, did: str, timeout: float, lookup: Callable[[str], Workload | None]
    ) -> dict[str, Any]:
        """The reports noted for `did` since its last poll, waiting up to `timeout` for
        the first one."""
        self._polled_at[did] = time.time()
        if not self._outbox.get(did):
            wake = self._wake.setdefault(did, asyncio.Event())
            wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await wake.wait()
            self._polled_at[did] = time.time()
        ids = self._outbox.pop(did, {})
        return {"epoch": self.epoch, "reports": self.reports(ids, lookup)}

    @staticmethod
    def reports(ids: Iterable[str], lookup: Callable[[str], Workload | None]) -> list[dict[str, Any]]:
        """Each named workload as it stands now; one no longer kept reads as ended."""
        out = []
        for wid in ids:
            w = lookup(wid)
            if w is None:
                out.append({**_UNKNOWN, "id": wid})
            else:
                out.append(report(w))
        return out

    def forget_idle(self, now: float) -> None:
        """Drop the outboxes of dispatchers that stopped polling long ago (their driver
        exited; its workloads were cancelled)."""
        for did in [d for d, at in self._polled_at.items() if now - at > FORGET_AFTER_S]:
            self._polled_at.pop(did, None)
            self._outbox.pop(did, None)
            self._wake.pop(did, None)
