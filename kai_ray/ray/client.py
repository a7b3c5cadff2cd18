"""A thin client of the scheduler actor, and the helpers every front end shares (the
user API in kai_ray.api, the CLI, the benchmark): workload ids, specs, queue arguments."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import ray

from kai_ray.core import QueueInfo
from kai_ray.ray.engine import OWNER_JOB_KEY, SubmitError
from kai_ray.ray.workload import WorkloadSpec

__all__ = ["QueuesArg", "Scheduler", "load_queue_arg", "make_spec", "new_workload_id"]

_List = list  # `Scheduler.list` shadows the builtin inside the class

QueuesArg = str | Path | Sequence[QueueInfo] | Sequence[dict[str, Any]] | None


def load_queue_arg(queues: QueuesArg) -> list[QueueInfo] | None:
    """A queues file path, a list of queue dicts (the file's format) or QueueInfo objects."""
    if queues is None:
        return None
    from kai_ray.config import load_queues, parse_queues

    if isinstance(queues, str | Path):
        return load_queues(queues)
    items = list(queues)
    if all(isinstance(q, QueueInfo) for q in items):
        return items  # type: ignore[return-value]
    return parse_queues([items])


class Scheduler:
    """A thin client of the scheduler actor; every call is one actor round trip."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def _call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        try:
            return ray.get(getattr(self.handle, method).remote(*args), timeout=timeout)
        except ray.exceptions.RayTaskError as exc:
            # A mistake of the caller's (unknown workload, bad queue tree): raise it as is.
            if isinstance(exc.cause, KeyError | ValueError):
                raise exc.cause from None
            raise

    def submit(self, spec: WorkloadSpec, wid: str | None = None) -> str:
        wid = wid or new_workload_id(spec.name)
        _stamp_owner(spec)
        info = self._call("submit", wid, dataclasses.asdict(spec))
        if "submit_error" in info:
            raise SubmitError(info["submit_error"])
        return wid

    def submit_many(self, specs: Sequence[WorkloadSpec]) -> list[str]:
        """Submit together, in one call: one cycle sees them all. Raises on the first
        refused spec (the others are queued)."""
        items = [(new_workload_id(s.name), dataclasses.asdict(_stamp_owner(s))) for s in specs]
        answers = self._call("submit_many", items)
        for a in answers:
            if "submit_error" in a:
                raise SubmitError(a["submit_error"])
        return [a["id"] for a in answers]

    def wait(self, wid: str, states: Sequence[str], timeout: float | None = None) -> dict[str, Any]:
        return self._call("wait", wid, list(states), timeout)  # type: ignore[no-any-return]

    def info(self, wid: str) -> dict[str, Any]:
        return self._call("info", wid)  # type: ignore[no-any-return]

    def explain(self, wid: str) -> dict[str, Any]:
        return self._call("explain", wid)  # type: ignore[no-any-return]

    def cancel(self, wid: str) -> dict[str, Any]:
        return self._call("cancel", wid)  # type: ignore[no-any-return]

    def finish(self, wid: str, attempt: int, ok: bool, error: str = "") -> dict[str, Any]:
        return self._call("finish", wid, attempt, ok, error)  # type: ignore[no-any-return]

    def list(self, include_finished: bool = True) -> _List[dict[str, Any]]:
        return self._call("list_workloads", include_finished)  # type: ignore[no-any-return]

    def queues(self) -> _List[dict[str, Any]]:
        return self._call("queues")  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any]:
        return self._call("status")  # type: ignore[no-any-return]

    def apply_queues(self, queues: QueuesArg) -> _List[str]:
        infos = load_queue_arg(queues) or []
        return self._call("apply_queues", [dataclasses.asdict(q) for q in infos])  # type: ignore[no-any-return]


def _stamp_owner(spec: WorkloadSpec) -> WorkloadSpec:
    """Functions and blocks live as long as this driver: the scheduler cancels them when
    its Ray job ends. Jobs run on their own and are not stamped."""
    if spec.kind != "job":
        spec.metadata.setdefault(OWNER_JOB_KEY, ray.get_runtime_context().get_job_id())
    return spec


def new_workload_id(name: str = "") -> str:
    stem = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:24].strip("-")
    return f"{stem + '-' if stem else ''}{uuid.uuid4().hex[:10]}"


def make_spec(
    queue: str,
    priority: str | int = "train",
    *,
    preemptible: bool | None = None,
    workers: int = 1,
    resources_per_worker: Mapping[str, Any] | None = None,
    min_workers: int = 0,
    strategy: str = "PACK",
    name: str = "",
    grace_period: float = 5.0,
    on_preempt: Literal["requeue", "fail"] = "requeue",
    admission_timeout: float = 30.0,
    kind: Literal["function", "block", "job"] = "function",
    **extra: Any,
) -> WorkloadSpec:
    from kai_ray.config import PriorityClasses

    resolved = PriorityClasses().resolve(priority, preemptible)
    return WorkloadSpec(
        queue=queue,
        priority=resolved.value,
        preemptible=resolved.preemptible,
        priority_class=str(priority),
        workers=workers,
        min_workers=min_workers,
        resources_per_worker=dict(resources_per_worker or {"CPU": 1}),
        strategy=strategy.upper(),
        kind=kind,
        name=name,
        on_preempt=on_preempt,
        grace_period=grace_period,
        admission_timeout=admission_timeout,
        **extra,
    )
