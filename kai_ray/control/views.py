"""What the scheduler shows of a workload: plain dicts for clients, the CLI and the
dashboard (kept out of the controller, which decides; this only describes)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kai_ray.control.workload import HOLDING, SlotState, State, Workload
from kai_ray.core import RESOURCES, QueueInfo, QueueStatus

__all__ = ["queue_views", "share_standing", "worker_signature", "workload_view"]

_EPS = 1e-6


def workload_view(w: Workload, pos: tuple[int, int] | None) -> dict[str, Any]:
    """What clients see of a workload (`Scheduler.info`); `pos` is its place in its
    queue and the queue's length, while it is queued."""
    return {
        "id": w.id,
        "name": w.spec.name,
        "kind": w.spec.kind,
        "queue": w.spec.queue,
        "priority": w.spec.priority,
        "state": w.state.value,
        "reason": w.reason,
        "reason_code": w.reason_code if w.state is State.QUEUED else "",
        "position": pos[0] if pos else None,
        "queue_length": pos[1] if pos else None,
        "attempt": w.attempt,
        "group": w.gang_group if w.slots else None,
        "group_id": w.group_ids.get(w.gang_group) if w.slots else None,
        "group_ids": dict(w.group_ids),
        "groups": sorted(w.groups()),
        "nodes": [s.node for _, s in w.ordered_slots()],
        "workers": len(w.slots),
        "slots": _slot_views(w),
        "preemptions": w.preemptions,
        "failed_admissions": w.failed_admissions,  # in a row; retried from retry_at
        "retry_at": w.retry_at,
        "submission_id": w.submission_id,
        "error": w.error,
        "created_at": w.created_at,
        "history": [list(h) for h in w.history],
    }


def _slot_views(w: Workload) -> list[dict[str, Any]]:
    """Each admitted worker: its group id and bundle index there (the gang's group
    holds one bundle per gang worker, in task order; a surplus worker a group alone)."""
    out, index = [], 0
    for task, s in w.ordered_slots():
        bundle = 0 if s.surplus else index
        index += 0 if s.surplus else 1
        out.append(
            {
                "task": task,
                "node": s.node,
                "group_id": w.group_ids.get(s.group),
                "bundle": bundle,
                "surplus": s.surplus,
                "state": s.state.value,
                # Reserved: work may use it (a slot being taken back still holds it).
                "ready": s.state is not SlotState.RESERVING or (not s.surplus and w.state is State.RUNNING),
                "releasing_at": s.releasing_at,
            }
        )
    return out


def worker_signature(view: dict[str, Any]) -> list[Any]:
    """What a body waiting for its workers to change compares (kai_ray.workers()): the
    workload's state, and each ready worker with the time it is taken back, if it is."""
    slots = [[s["task"], s["releasing_at"]] for s in view["slots"] if s["ready"] and s["group_id"]]
    return [view["state"], slots]


def queue_views(
    queues: Sequence[QueueInfo], status: Mapping[str, QueueStatus], workloads: Iterable[Workload]
) -> list[dict[str, Any]]:
    """Each queue: its spec, the last cycle's fair share, allocation and demand (per
    resource, in RESOURCES order), and how many of its workloads wait and run."""
    pending: Counter[str] = Counter()
    running: Counter[str] = Counter()
    for w in workloads:
        if w.state is State.QUEUED:
            pending[w.spec.queue] += 1
        elif w.state in HOLDING:
            running[w.spec.queue] += 1
    rows = []
    for q in queues:
        st = status.get(q.name)
        rows.append(
            {
                **dataclasses.asdict(q),
                "deserved": list(st.deserved) if st else None,
                "fair_share": list(st.fair_share) if st else None,
                "allocated": list(st.allocated) if st else None,
                "requested": list(st.requested) if st else None,
                "pending": pending[q.name],
                "running": running[q.name],
            }
        )
    return rows


def share_standing(status: QueueStatus | None) -> tuple[str, list[str]]:
    """A queue against its fair share, for people: "over" when it holds more than its
    fair share of some resource (the resources named: other queues may reclaim them, as
    the core's reclaim rules read it), "under" when it asks for more of a resource than
    it holds and holds less than its fair share of it (it may reclaim), else "at"."""
    if status is None:
        return "at", []
    over = [
        res for res, a, f in zip(RESOURCES, status.allocated, status.fair_share, strict=True) if a > f + _EPS
    ]
    if over:
        return "over", over
    under = any(
        r > a + _EPS and a + _EPS < f
        for a, f, r in zip(status.allocated, status.fair_share, status.requested, strict=True)
    )
    return ("under" if under else "at"), []
