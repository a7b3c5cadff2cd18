"""The ports: what the scheduling loop needs from a backend, each small and not shaped
after any one backend.

The loop's own ports (kai_ray.control.loop drives them):

- `ClusterSource`: the world as the core sees it (nodes, queues, live workloads), kept
  up to date by the backend (Kubernetes patches it from its watches' deltas; a table of
  workloads the scheduler owns makes it from its rows);
- `Actuator`: carries a cycle's plan out (Kubernetes binds, evicts and writes
  conditions and Events; the workload table fires its lifecycle's transitions);
- `Lifecycle`: where a workload's state lives and is recorded after each cycle (the
  workload table itself on Ray and in the simulator; on Kubernetes the API server,
  read back by kai_ray.control.observed).

Where the scheduler owns its workloads (Ray, the simulator), the workload table
(kai_ray.control.controller) implements those three, and asks its backend through
narrower ports of its own:

- `NodeSource`: the nodes, with work outside the scheduler told apart;
- `Executor`: carries out the lifecycle's effects (reserve, release, start, stop, notify);
- `Store`: revisioned records with compare-and-swap (write-ahead);
- `Clock`: the time.

Ray implements those with placement groups, Ray Jobs and the GCS key-value store
(kai_ray.ray.adapters); tests and the simulator with kai_ray.control.memory.

Names of resources are kai-ray's: a worker asks for `Request`s of the core (gpu, cpu,
memory, gpu_memory, extended); node names are whatever the backend calls its nodes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kai_ray.control.events import ControlEvent
from kai_ray.control.planner import Plan
from kai_ray.control.views import WorkloadView
from kai_ray.core import ClusterSnapshot, CycleResult, NodeInfo, Request

__all__ = [
    "Actuator",
    "BackendError",
    "Clock",
    "ClusterSource",
    "Executor",
    "Lifecycle",
    "NodeSource",
    "Record",
    "Store",
    "StoreConflict",
    "WorkerPlacement",
]


# ---------------------------------------------------------------- the loop's ports


class ClusterSource(Protocol):
    def observe(self, now: float) -> ClusterSnapshot:
        """The world now. An object that did not change since the last call should be the
        same object as then (the incremental cycle reads identity as "unchanged")."""


class Actuator(Protocol):
    def apply(self, plan: Plan, result: CycleResult, now: float) -> Awaitable[None] | None:
        """Carry `plan` out (its binds, pipelined tasks, evictions and moves) and tell
        people why the rest waits (plan.waiting, plan.positions). A backend whose calls
        are asynchronous returns an awaitable (the loop's `step_async` awaits it)."""


class Lifecycle(Protocol):
    def record(
        self, snapshot: ClusterSnapshot, result: CycleResult, plan: Plan, now: float
    ) -> list[ControlEvent]:
        """After the plan is applied: each workload's state, reason and history as they
        stand now; the events of what changed."""

    def views(self, now: float) -> list[WorkloadView]:
        """Every workload known, as people see it (the dashboard's rows)."""


# ---------------------------------------------------------------- the workload table's ports


class BackendError(RuntimeError):
    """Carrying out an effect for one workload failed in the backend.

    `permanent`: trying again cannot help (a bad runtime environment, a request the
    backend refuses as invalid): the workload fails at once and the message says what to
    fix. Otherwise (a service not up yet, a restart in progress) the workload is re-queued
    and tried again after a back-off. Any other exception an adapter raises counts as
    transient until it has repeated too often (see the controller)."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


class StoreConflict(RuntimeError):
    """A write whose expected revision is not the stored one: someone else wrote since."""


@dataclass(frozen=True, slots=True)
class Record:
    value: Any
    revision: int


@dataclass(frozen=True, slots=True)
class WorkerPlacement:
    """One worker to reserve: on which node, asking for what."""

    node: str
    request: Request


class NodeSource(Protocol):
    def nodes(self, held: Mapping[str, Mapping[str, float]]) -> list[NodeInfo]:
        """The schedulable nodes now. `held`: per node, what this scheduler's own
        workloads hold there (core resource names: gpu, cpu, memory, extended), so the
        source can tell its own use from work outside the scheduler, which it reports
        as `NodeInfo.used_outside`."""


class Executor(Protocol):
    def reserve(self, group: str, workers: Sequence[WorkerPlacement]) -> str:
        """Reserve the workers together, each pinned to its node; returns the
        backend's id of the reservation. Raises BackendError."""

    def is_ready(self, group: str) -> bool:
        """Whether the reservation is in place (every worker reserved)."""

    def release(self, group: str, kill: bool = False) -> None:
        """Give the reservation up; `kill`: also end the work running inside it."""

    def live_groups(self) -> set[str]:
        """Reservations of this scheduler that exist now (for reconciliation)."""

    def start(self, workload: Any) -> str:
        """Start a workload's run (a job), once reserved; its run id. Raises
        BackendError (`permanent` when the run itself is invalid)."""

    def run_status(self, run_id: str) -> str:
        """PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED, or UNKNOWN when not known now."""

    def run_outcome(self, run_id: str, status: str) -> str:
        """How an ended run (`status`: SUCCEEDED, FAILED or STOPPED) ended, for people,
        in the backend's words: what the run was, how it ended and where its output is."""

    def stop(self, runner: Mapping[str, Any] | None, run_id: str) -> None:
        """End a workload's run: what runs its code (`runner`, as registered) and/or its
        run (a job's run id)."""

    def notify(self, workload_id: str, notice: Mapping[str, Any] | None) -> None:
        """Deliver the preemption notice the workload reads (None: withdraw it)."""


class Store(Protocol):
    """Revisioned records with compare-and-swap: a write names the revision it expects
    (0: the key must not exist yet) and fails with StoreConflict otherwise, so that two
    writers can never silently overwrite each other."""

    def load(self, prefix: str) -> dict[str, Record]:
        """Every record whose key starts with `prefix`."""

    def get(self, key: str) -> Record | None: ...

    def put(self, key: str, value: Any, expected: int) -> int:
        """Write if the stored revision is `expected`; the new revision."""

    def delete(self, key: str, expected: int) -> None:
        """Delete if the stored revision is `expected` (a missing key: nothing to do)."""

    def put_many(self, items: Sequence[tuple[str, Any, int]]) -> list[int]:
        """Several puts (key, value, expected revision) as one batch, which a backend may
        send concurrently; the new revisions, in order. Raises StoreConflict (the others
        may have been written)."""


class Clock(Protocol):
    def now(self) -> float:
        """Seconds (epoch, or any steady origin the whole backend shares)."""
