"""The simulated backend: an executor whose reservations are ready at once and whose runs
end when the simulation says so, and a store that keeps nothing (a simulation never
restarts, and serialising every record would be most of its cost)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kai_ray.control.memory import MemoryExecutor
from kai_ray.control.ports import Record, WorkerPlacement
from kai_ray.control.workload import group_owner
from kai_ray.core import DEFAULT_GPU_TYPE

__all__ = ["Amount", "ByType", "NullStore", "SimExecutor", "SimListener"]

Amount = tuple[float, float, float]  # GPUs, cores, bytes of memory
ByType = tuple[tuple[str, float], ...]  # GPUs per GPU type (the types of the nodes held)


class SimListener(Protocol):
    """What the simulation learns from its executor, at the virtual time it happens."""

    def held(self, wid: str, amount: Amount, by_type: ByType) -> None:
        """A workload's reservations grew (or shrank: negative) by this much (GPUs,
        cores, bytes of memory), and its GPUs by this much on each GPU type."""

    def started(self, wid: str, run_id: str) -> None: ...

    def stopped(self, wid: str, run_id: str) -> None:
        """A run ended before its work did: preempted."""


@dataclass
class SimExecutor(MemoryExecutor):
    """MemoryExecutor's reservations, ready at once. New reservations are listed in
    `reserved` (the engine drains it after every step and reports them ready, as a
    backend's watch would)."""

    listener: SimListener | None = None
    reserved: list[str] = field(default_factory=list)
    amounts: dict[str, Amount] = field(default_factory=dict)  # group -> what it holds
    node_types: dict[str, str] = field(default_factory=dict)  # node -> its GPU type
    by_type: dict[str, ByType] = field(default_factory=dict)  # group -> its GPUs per type
    # node -> what is reserved there (GPUs, cores, bytes of memory): the room in use
    held_on: dict[str, Amount] = field(default_factory=dict)

    def reserve(self, group: str, workers: Sequence[WorkerPlacement]) -> str:
        self.groups[group] = list(workers)
        self.reserved.append(group)
        for w in workers:
            self._hold(w, 1.0)
        amount = self.amounts[group] = (
            sum(w.request.gpu for w in workers),
            sum(w.request.cpu for w in workers),
            sum(w.request.memory for w in workers),
        )
        by_type = self.by_type[group] = self._by_type(workers)
        if self.listener is not None:
            self.listener.held(group_owner(group), amount, by_type)
        return group

    def _hold(self, worker: WorkerPlacement, sign: float) -> None:
        gpus, cpu, memory = self.held_on.get(worker.node, (0.0, 0.0, 0.0))
        r = worker.request
        self.held_on[worker.node] = (gpus + sign * r.gpu, cpu + sign * r.cpu, memory + sign * r.memory)

    def _by_type(self, workers: Sequence[WorkerPlacement]) -> ByType:
        gpus: dict[str, float] = {}
        for w in workers:
            if w.request.gpu:
                t = self.node_types.get(w.node, DEFAULT_GPU_TYPE)
                gpus[t] = gpus.get(t, 0.0) + w.request.gpu
        return tuple(gpus.items())

    def release(self, group: str, kill: bool = False) -> None:
        # No log of releases (MemoryExecutor keeps one): a simulation makes millions.
        for w in self.groups.pop(group, ()):
            self._hold(w, -1.0)
        amount = self.amounts.pop(group, None)
        by_type = tuple((t, -gpus) for t, gpus in self.by_type.pop(group, ()))
        if self.listener is not None and amount is not None:
            self.listener.held(group_owner(group), (-amount[0], -amount[1], -amount[2]), by_type)

    def start(self, workload: Any) -> str:
        run_id = f"{workload.id}/{workload.attempt}"
        self.runs[run_id] = "RUNNING"
        if self.listener is not None:
            self.listener.started(workload.id, run_id)
        return run_id

    def stop(self, runner: Mapping[str, Any] | None, run_id: str) -> None:
        if self.runs.pop(run_id, None) == "RUNNING" and self.listener is not None:
            self.listener.stopped(group_owner(run_id), run_id)

    def succeed(self, run_id: str) -> None:
        self.runs.pop(run_id, None)

    def notify(self, workload_id: str, notice: Mapping[str, Any] | None) -> None:
        return None


@dataclass
class NullStore:
    """Accepts every write and keeps nothing."""

    writes: int = 0

    def load(self, prefix: str) -> dict[str, Record]:
        return {}

    def get(self, key: str) -> Record | None:
        return None

    def put(self, key: str, value: Any, expected: int) -> int:
        self.writes += 1
        return expected + 1

    def put_many(self, items: Sequence[tuple[str, Any, int]]) -> list[int]:
        self.writes += len(items)
        return [expected + 1 for _, _, expected in items]

    def delete(self, key: str, expected: int) -> None:
        return None
