"""The workers a workload holds now, from inside its body.

An elastic workload (`workers=4, min_workers=2`) starts with its gang and grows as
capacity frees up; surplus workers may be taken back (after a notice) when another
queue needs them. Each worker is one reserved bundle, so the body starts one actor or
task per worker with that worker's scheduling strategy:

    pool = kai_ray.workers()                      # the workers admitted now
    actors = {w.index: Shard.options(scheduling_strategy=w.strategy).remote() for w in pool}
    ...
    pool = pool.wait_change(timeout=0)            # or block until something changes
    for w in pool.added: ...                      # a worker was admitted: start its actor
    for w in pool.removed: ...                    # taken back (w.releasing_at: by when)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from kai_ray.control import task_index
from kai_ray.control.views import worker_signature as signature

__all__ = ["Worker", "Workers", "worker_strategies", "workers"]


@dataclass(frozen=True, slots=True)
class Worker:
    """One admitted worker: bundle `index` of the workload (0 .. workers-1, the gang's
    first), the node it is pinned to, and a strategy that puts work into its bundle."""

    index: int
    node_id: str
    surplus: bool  # above the gang (min_workers): may be taken back
    strategy: PlacementGroupSchedulingStrategy
    releasing_at: float | None = None  # taken back at this time (epoch s): stop using it


class Workers(Sequence[Worker]):
    """The usable workers at one moment (ready, not being taken back), with what
    changed since the set it was waited from (`added`, `removed`)."""

    def __init__(
        self,
        workload_id: str,
        info: Mapping[str, Any],
        before: Workers | None = None,
    ) -> None:
        self.workload_id = workload_id
        self.state: str = info["state"]
        self._signature = signature(info)
        every = [_worker(s) for s in info["slots"] if s["ready"] and s["group_id"]]
        self._items = [w for w in every if w.releasing_at is None]
        was = {w.index: w for w in before} if before is not None else {}
        now = {w.index for w in self._items}
        leaving = {w.index: w for w in every if w.releasing_at is not None}
        self.added: list[Worker] = [w for w in self._items if w.index not in was]
        self.removed: list[Worker] = [leaving.get(i, w) for i, w in was.items() if i not in now]

    def wait_change(self, timeout: float | None = None) -> Workers:
        """The workers once they differ from these (one admitted, one taken back, or the
        workload no longer running), or at the timeout: `added`/`removed` say what
        changed. timeout=0 looks once without waiting."""
        info = _scheduler().wait_workers.remote(self.workload_id, self._signature, timeout)
        return Workers(self.workload_id, cast(dict[str, Any], ray.get(info)), self)

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Worker]:
        return iter(self._items)

    def __repr__(self) -> str:
        return f"Workers({self.workload_id!r}, {[w.index for w in self._items]}, state={self.state})"


def workers() -> Workers:
    """Inside a workload's body (or a task or actor in its reservation): its usable
    workers now. Raises RuntimeError outside a workload."""
    from kai_ray.api.notice import current_workload

    wid = current_workload()
    if wid is None:
        raise RuntimeError(
            "kai_ray.workers() is for code running inside a kai-ray workload "
            "(the body of a @kai_ray.workload function)"
        )
    info = ray.get(_scheduler().info.remote(wid))
    return Workers(wid, cast(dict[str, Any], info))


def worker_strategies() -> list[PlacementGroupSchedulingStrategy]:
    """A scheduling strategy per usable worker (see `workers()`); [] outside a workload."""
    from kai_ray.api.notice import current_workload

    return [w.strategy for w in workers()] if current_workload() else []


def _worker(slot: Mapping[str, Any]) -> Worker:
    from kai_ray.api.notice import group_by_id

    return Worker(
        index=task_index(slot["task"]),
        node_id=slot["node"],
        surplus=bool(slot["surplus"]),
        strategy=PlacementGroupSchedulingStrategy(
            group_by_id(slot["group_id"]), slot["bundle"], placement_group_capture_child_tasks=True
        ),
        releasing_at=slot["releasing_at"],
    )


def _scheduler() -> Any:
    from kai_ray.ray.actor import NAMESPACE, SCHEDULER_NAME

    return ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
