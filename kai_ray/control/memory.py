"""In-memory implementations of the workload table's ports: nodes, an executor, a store
and a clock that live in this process. The controller's tests run on them, and so can a simulator:
nothing here is a stand-in for a test only. Failures can be injected per workload."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kai_ray.control.ports import Record, StoreConflict, WorkerPlacement
from kai_ray.control.workload import group_owner
from kai_ray.core import NodeInfo

__all__ = ["ManualClock", "MemoryExecutor", "MemoryNodes", "MemoryStore"]


@dataclass
class ManualClock:
    t: float = 0.0

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


@dataclass
class MemoryNodes:
    """Nodes as given; `outside` (node -> core resource -> amount) is work this
    scheduler does not manage, reported as NodeInfo.used_outside."""

    node_list: list[NodeInfo]
    outside: dict[str, dict[str, float]] = field(default_factory=dict)

    def nodes(self, held: Mapping[str, Mapping[str, float]]) -> list[NodeInfo]:
        return [
            replace(n, used_outside=tuple(sorted(self.outside[n.name].items())))
            if n.name in self.outside
            else n
            for n in self.node_list
        ]


@dataclass
class MemoryExecutor:
    """Reservations that become ready at once (unless `ready` is False), runs whose
    status a test sets, and a log of every call. `fail_*`: exceptions to raise, by the
    workload id that a group name or workload carries (a list: one per call)."""

    ready: bool = True
    groups: dict[str, list[WorkerPlacement]] = field(default_factory=dict)
    released: list[str] = field(default_factory=list)
    killed: list[str] = field(default_factory=list)  # groups released with kill
    runs: dict[str, str] = field(default_factory=dict)  # run id -> status
    stopped: list[tuple[Any, str]] = field(default_factory=list)
    notices: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    fail_reserve: dict[str, Exception] = field(default_factory=dict)
    fail_release: dict[str, Exception] = field(default_factory=dict)
    fail_start: dict[str, list[Exception]] = field(default_factory=dict)
    before_reserve: Any = None  # called with the group name: tests check write-ahead

    def reserve(self, group: str, workers: Sequence[WorkerPlacement]) -> str:
        if group_owner(group) in self.fail_reserve:
            raise self.fail_reserve[group_owner(group)]
        if self.before_reserve is not None:
            self.before_reserve(group)
        self.groups[group] = list(workers)
        return f"id-{group}"

    def is_ready(self, group: str) -> bool:
        return self.ready and group in self.groups

    def release(self, group: str, kill: bool = False) -> None:
        if group_owner(group) in self.fail_release:
            raise self.fail_release[group_owner(group)]
        self.groups.pop(group, None)
        self.released.append(group)
        if kill:
            self.killed.append(group)

    def live_groups(self) -> set[str]:
        return set(self.groups)

    def start(self, workload: Any) -> str:
        errors = self.fail_start.get(workload.id)
        if errors:
            raise errors.pop(0)
        run_id = f"{workload.id}-{workload.attempt}"
        self.runs[run_id] = "RUNNING"
        return run_id

    def run_status(self, run_id: str) -> str:
        return self.runs.get(run_id, "UNKNOWN")

    def run_outcome(self, run_id: str, status: str) -> str:
        detail = " (exit code 3)" if self.runs.get(run_id) == "FAILED" else ""
        return f"run {run_id} {status}{detail}"

    def stop(self, runner: Mapping[str, Any] | None, run_id: str) -> None:
        self.stopped.append((dict(runner) if runner else None, run_id))
        if run_id in self.runs:
            self.runs[run_id] = "STOPPED"

    def notify(self, workload_id: str, notice: Mapping[str, Any] | None) -> None:
        if notice is None:
            self.notices.pop(workload_id, None)
        else:
            self.notices[workload_id] = dict(notice)


@dataclass
class MemoryStore:
    """A dict with revisions and compare-and-swap; values are deep-copied, as a real
    store would serialise them."""

    data: dict[str, Record] = field(default_factory=dict)
    writes: int = 0

    def load(self, prefix: str) -> dict[str, Record]:
        return {k: copy.deepcopy(r) for k, r in self.data.items() if k.startswith(prefix)}

    def get(self, key: str) -> Record | None:
        record = self.data.get(key)
        return None if record is None else copy.deepcopy(record)

    def put(self, key: str, value: Any, expected: int) -> int:
        current = self.data[key].revision if key in self.data else 0
        if current != expected:
            raise StoreConflict(f"{key}: revision {current}, not {expected}: written by someone else")
        self.data[key] = Record(copy.deepcopy(value), current + 1)
        self.writes += 1
        return current + 1

    def put_many(self, items: Sequence[tuple[str, Any, int]]) -> list[int]:
        return [self.put(key, value, expected) for key, value, expected in items]

    def delete(self, key: str, expected: int) -> None:
        if key not in self.data:
            return
        if self.data[key].revision != expected:
            raise StoreConflict(f"{key}: revision {self.data[key].revision}, not {expected}")
        del self.data[key]
