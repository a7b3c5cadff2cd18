"""The ports: what the controller needs from a backend, each small and not shaped after
any one backend. Ray implements them with placement groups, Ray Jobs and the GCS
key-value store (kai_ray.ray.adapters); Kubernetes with pods, bindings and the API
server; tests and the simulator with kai_ray.control.memory.

Names of resources are kai-ray's: a worker asks for `Request`s of the core (gpu, cpu,
memory, gpu_memory, extended); node names are whatever the backend calls its nodes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kai_ray.core import NodeInfo, Request

__all__ = [
    "ActionFailed",
    "Actuator",
    "Clock",
    "ClusterSource",
    "Record",
    "Store",
    "StoreConflict",
    "WorkerPlacement",
]


class ActionFailed(RuntimeError):
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


class ClusterSource(Protocol):
    def nodes(self, held: Mapping[str, Mapping[str, float]]) -> list[NodeInfo]:
        """The schedulable world now. `held`: per node, what this scheduler's own
        workloads hold there (core resource names: gpu, cpu, memory, extended), so the
        source can tell its own use from work outside the scheduler, which it reports
        as `NodeInfo.used_outside`."""


class Actuator(Protocol):
    def reserve(self, group: str, workers: Sequence[WorkerPlacement]) -> str:
        """Reserve the workers together, each pinned to its node; returns the
        backend's id of the reservation. Raises ActionFailed."""

    def is_ready(self, group: str) -> bool:
        """Whether the reservation is in place (every worker reserved)."""

    def release(self, group: str, kill: bool = False) -> None:
        """Give the reservation up; `kill`: also end the work running inside it."""

    def live_groups(self) -> set[str]:
        """Reservations of this scheduler that exist now (for reconciliation)."""

    def start(self, workload: Any) -> str:
        """Start a workload's run (a job), once reserved; its run id. Raises
        ActionFailed (`permanent` when the run itself is invalid)."""

    def run_status(self, run_id: str) -> str:
        """PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED, or UNKNOWN when not known now."""

    def run_outcome(self, run_id: str) -> str:
        """How an ended run ended, in a few words (its exit code); "" when unknown."""

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
