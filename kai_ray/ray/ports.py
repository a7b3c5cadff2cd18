"""The narrow interfaces between the scheduler's state machine and the outside world.

`SchedulerEngine` only talks to a `PlacementBackend` (groups, nodes, killing processes),
a `JobRunner` (Ray Jobs) and a `Store` (persistence and notices). Nothing here imports
Ray: the engine is unit tested with in-memory fakes and run for real with kai_ray.ray.backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kai_ray.ray.workload import Workload

__all__ = [
    "GROUP_PREFIX",
    "KV_NAMESPACE",
    "ActionFailed",
    "JobRunner",
    "PlacementBackend",
    "Store",
    "notice_key",
]

GROUP_PREFIX = "kai-ray/"  # every group the scheduler creates: kai-ray/<workload>/<attempt>[/<task>]
KV_NAMESPACE = "kai-ray"


def notice_key(workload_id: str) -> str:
    return f"notice/{workload_id}"


class ActionFailed(RuntimeError):
    """Carrying out a decision for one workload failed in the backend.

    `permanent`: trying again cannot help (a bad runtime environment, a request Ray
    refuses as invalid): the workload fails at once and the message says what to fix.
    Otherwise (Ray's job agent not up yet, the dashboard restarting) the workload is
    re-queued and tried again after a back-off. Any other exception a port raises counts
    as transient until it has repeated too often (see SchedulerEngine)."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


class PlacementBackend(Protocol):
    def nodes(self) -> list[dict[str, Any]]:
        """Alive nodes, as `ray.nodes()` entries."""

    def available(self) -> dict[str, dict[str, float]]:
        """Per node id, the resources Ray has not handed out (empty: unknown)."""

    def create(self, name: str, bundles: list[dict[str, float]], nodes: list[str]) -> str:
        """Create a group whose bundle i is pinned to nodes[i]; returns its id."""

    def is_ready(self, name: str) -> bool: ...

    def remove(self, name: str) -> None: ...

    def live_groups(self) -> dict[str, list[str]]:
        """Groups named with GROUP_PREFIX that are not removed -> node per bundle."""

    def kill_process(self, node: str, pid: int) -> None:
        """Kill a workload's driver process; actors and tasks it owns die with it."""

    def kill_actors_in(self, group: str) -> None:
        """Kill actors that live in the group (detached ones do not die with an owner)."""


class Store(Protocol):
    def load(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """(workloads, queues or None) as last saved."""

    def save(self, workload: dict[str, Any]) -> None: ...

    def delete(self, workload_id: str) -> None: ...

    def save_queues(self, queues: list[dict[str, Any]]) -> None: ...

    def set_notice(self, workload_id: str, notice: Mapping[str, Any] | None) -> None: ...


class JobRunner(Protocol):
    def submit(self, w: Workload) -> str:
        """Start the workload's job; its id. Raises ActionFailed (permanent or not)."""

    def status(self, submission_id: str) -> str:
        """PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED, or UNKNOWN when not known now."""

    def outcome(self, submission_id: str) -> str:
        """How an ended job ended, in a few words (e.g. its exit code); "" if unknown."""

    def stop(self, submission_id: str) -> None: ...
