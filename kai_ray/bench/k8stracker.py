"""What a shape of `kai-ray bench k8s --shape` waits for, seen the same way whichever
scheduler runs: one watch of the bench namespace's pods, in the bench's own process. Each
pod carries the label PART (which part of the shape it is); per part the tracker counts
the pods there, bound (spec.nodeName set), Running, deleted, and those whose
`PodScheduled` condition is False with a reason (a scheduler said why it waits), and
`until` returns the moment (time.perf_counter) a count is reached, taken in the watch
event that reached it.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kai_ray.k8s.client import Kube
from kai_ray.k8s.informer import Informer

__all__ = ["PART", "Tracker"]

PART = "bench.kai-ray.io/part"


@dataclass(slots=True)
class _Pod:
    part: str
    node: str = ""
    running: bool = False
    reason: str = ""
    message: str = ""


@dataclass(slots=True)
class Counts:
    made: int = 0
    bound: int = 0
    running: int = 0
    deleted: int = 0
    told: int = 0  # PodScheduled=False with a reason
    first_deleted: float = 0.0  # time.perf_counter of the first deletion seen, and the last
    last_deleted: float = 0.0
    first_bound: float = 0.0  # time.perf_counter of the first pod seen bound
    reasons: Counter[str] = field(default_factory=Counter)


def _state(obj: dict[str, Any]) -> _Pod:
    meta, status = obj.get("metadata", {}), obj.get("status") or {}
    pod = _Pod(str((meta.get("labels") or {}).get(PART, "")), str(obj.get("spec", {}).get("nodeName") or ""))
    pod.running = status.get("phase") == "Running"
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason"):
            pod.reason, pod.message = str(c["reason"]), str(c.get("message") or "")
    return pod


class Tracker:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.informer = Informer(
            kube,
            f"/api/v1/namespaces/{namespace}/pods",
            changed=asyncio.Event(),
            on_change=self._changed,
            on_relist=self._relisted,
        )
        self.pods: dict[str, _Pod] = {}
        self.parts: dict[str, Counts] = {}
        self.messages: dict[tuple[str, str], str] = {}  # (part, reason) -> a message seen
        self.nodes: dict[str, str] = {}  # pod name -> node, of every pod bound so far
        self._waits: list[tuple[Callable[[Tracker], bool], asyncio.Future[float]]] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.informer.run())
        await self.informer.synced.wait()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def part(self, name: str) -> Counts:
        return self.parts.setdefault(name, Counts())

    def _count(self, pod: _Pod, sign: int) -> None:
        counts = self.part(pod.part)
        counts.bound += sign * bool(pod.node)
        counts.running += sign * pod.running
        counts.told += sign * bool(pod.reason)

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        old = self.pods.pop(name, None)
        if old is not None:
            self._count(old, -1)
        if kind == "DELETED":
            if old is not None:
                counts = self.part(old.part)
                counts.deleted += 1
                counts.last_deleted = time.perf_counter()
                counts.first_deleted = counts.first_deleted or counts.last_deleted
        else:
            new = _state(obj)
            if old is None:
                self.part(new.part).made += 1
            self.pods[name] = new
            self._count(new, 1)
            if new.node and not self.part(new.part).first_bound:
                self.part(new.part).first_bound = time.perf_counter()
            if new.node:
                self.nodes[name] = new.node
            if new.reason and (old is None or old.reason != new.reason):
                self.part(new.part).reasons[new.reason] += 1
                self.messages.setdefault((new.part, new.reason), new.message)
        self._settle()

    def _relisted(self) -> None:
        """After a list (the first, or one after 410 Gone): the counts of the pods there."""
        present = {name for _, name in self.informer.items}
        for name in [n for n in self.pods if n not in present]:
            self._changed("DELETED", {"metadata": {"name": name}})
        for obj in list(self.informer.items.values()):
            self._changed("MODIFIED", obj)

    def reasons_now(self, part: str) -> dict[str, int]:
        """The reasons the part's pods carry now (PodScheduled=False), by count."""
        return dict(Counter(p.reason for p in self.pods.values() if p.part == part and p.reason))

    def _settle(self) -> None:
        now = time.perf_counter()
        for check, done in list(self._waits):
            if not done.done() and check(self):
                done.set_result(now)
        self._waits = [(c, d) for c, d in self._waits if not d.done()]

    async def until(
        self, what: str, check: Callable[[Tracker], bool], timeout: float, alive: Callable[[], None]
    ) -> float:
        """The perf_counter moment `check` first held; TimeoutError saying `what` and the
        counts after `timeout` s; whatever `alive()` raises (a scheduler that exited)."""
        done: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waits.append((check, done))
        self._settle()
        deadline = time.monotonic() + timeout
        while not done.done():
            alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not after {timeout:g} s; pods by part: {self.summary()}")
            await asyncio.wait([done], timeout=0.5)
        return done.result()

    def summary(self) -> dict[str, Any]:
        return {
            part: {k: v for k, v in vars_of(c).items() if v} for part, c in sorted(self.parts.items()) if part
        }


def vars_of(counts: Counts) -> dict[str, Any]:
    return {
        "made": counts.made,
        "bound": counts.bound,
        "running": counts.running,
        "deleted": counts.deleted,
        "told": counts.told,
        "reasons": dict(counts.reasons),
    }
