"""What the scheduler shows of a workload: plain dicts for clients, the CLI and the
dashboard (kept out of the engine, which decides; this only describes)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from kai_ray.ray.workload import State, Workload

__all__ = ["queue_positions", "worker_signature", "workload_view"]


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
        "position": pos[0] if pos else None,
        "queue_length": pos[1] if pos else None,
        "attempt": w.attempt,
        "group": w.gang_group if w.slots else None,
        "group_id": w.group_ids.get(w.gang_group) if w.slots else None,
        "group_ids": dict(w.group_ids),
        "groups": sorted(w.groups()),
        "nodes": [w.slots[t].node for t in sorted(w.slots, key=lambda t: int(t[1:]))],
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
    for task in sorted(w.slots, key=lambda t: int(t[1:])):
        s = w.slots[task]
        bundle = 0 if s.surplus else index
        index += 0 if s.surplus else 1
        out.append(
            {
                "task": task,
                "node": s.node,
                "group_id": w.group_ids.get(s.group),
                "bundle": bundle,
                "surplus": s.surplus,
                "ready": s.ready or (not s.surplus and w.state is State.RUNNING),
                "releasing_at": s.releasing_at,
            }
        )
    return out


def worker_signature(view: dict[str, Any]) -> list[Any]:
    """What a body waiting for its workers to change compares (kai_ray.workers()): the
    workload's state, and each ready worker with the time it is taken back, if it is."""
    slots = [[s["task"], s["releasing_at"]] for s in view["slots"] if s["ready"] and s["group_id"]]
    return [view["state"], slots]


def queue_positions(live: Iterable[Workload]) -> dict[str, tuple[int, int]]:
    """Queued workload -> (its 1-based place in its queue, the queue's length)."""
    by_queue: dict[str, list[Workload]] = defaultdict(list)
    for w in live:
        if w.state is State.QUEUED:
            by_queue[w.spec.queue].append(w)
    positions = {}
    for ws in by_queue.values():
        ws.sort(key=lambda w: (-w.spec.priority, w.created_at, w.id))
        for i, w in enumerate(ws):
            positions[w.id] = (i + 1, len(ws))
    return positions
