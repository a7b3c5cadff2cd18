"""What the scheduler shows of a workload: plain dicts for clients, the CLI and the
dashboard (kept out of the controller, which decides; this only describes)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray.control.accessview import access_views, refused_by
from kai_ray.control.forecast import Eta
from kai_ray.control.snapshot import request_for
from kai_ray.control.workload import HOLDING, SlotState, State, Workload
from kai_ray.core import RESOURCES, NodeInfo, QueueInfo, QueueStatus

__all__ = [
    "History",
    "Holding",
    "WorkloadView",
    "owned_view",
    "queue_views",
    "refusal_of",
    "share_standing",
    "worker_signature",
    "workload_view",
]

_EPS = 1e-6
History = Sequence[tuple[float, str, str, str]]  # (at, from state, to state, why)


@dataclass(frozen=True, slots=True)
class Holding:
    """What one worker of a workload holds on a node: `gpu` devices (a fraction below 1,
    memory-sized fractions already turned into the node's share), on device `device`
    when the backend knows it (Kubernetes' GPU sharing)."""

    node: str
    gpu: float
    cpu: float
    memory: float
    device: int | None = None


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """A workload as people see it, the same from every backend (the dashboard's row):
    a workload the scheduler owns (owned_view), or one whose lifecycle a backend's API
    server holds (kai_ray.control.observed)."""

    id: str
    name: str
    kind: str  # function, block or job (Ray); RayCluster, RayJob, ... (Kubernetes)
    queue: str
    priority: int
    priority_class: str
    preemptible: bool
    state: str  # a State's value
    reason: str
    reason_code: str  # while queued: the stable code of the core's reason
    created_at: float
    since: float  # in this state since
    queued_at: float  # when it last entered Queued
    workers: int  # admitted now
    min_workers: int  # the gang
    max_workers: int
    gpus_per_worker: float
    gpus: float  # held now
    nodes: tuple[str, ...]
    preemptions: int
    history: History
    holdings: tuple[Holding, ...] = ()
    eta: Eta | None = None  # while queued: its forecast start (kai_ray.control.forecast)
    gpu_types: tuple[str, ...] = ()  # the GPU types it accepts, most preferred first; (): any


def owned_view(w: Workload, nodes: Mapping[str, NodeInfo], eta: Eta | None = None) -> WorkloadView:
    """A workload of the scheduler's own table, as people see it."""
    spec = w.spec
    per_worker = float(spec.resources_per_worker.get("GPU", 0.0))
    return WorkloadView(
        id=w.id,
        name=spec.name or w.id,
        kind=spec.kind,
        queue=spec.queue,
        priority=spec.priority,
        priority_class=spec.priority_class,
        preemptible=spec.preemptible,
        state=w.state.value,
        reason=w.reason,
        reason_code=w.reason_code if w.state is State.QUEUED else "",
        created_at=w.created_at,
        since=w.since,
        queued_at=w.queued_at,
        workers=len(w.slots),
        min_workers=spec.gang,
        max_workers=spec.workers,
        gpus_per_worker=per_worker,
        gpus=per_worker * len(w.slots) if w.state in HOLDING else 0.0,
        nodes=tuple(sorted({s.node for s in w.slots.values()})),
        preemptions=w.preemptions,
        history=w.history,
        holdings=_owned_holdings(w, nodes) if w.state in HOLDING else (),
        eta=eta if w.state is State.QUEUED else None,
        gpu_types=tuple(spec.accelerator_type),
    )


def _owned_holdings(w: Workload, nodes: Mapping[str, NodeInfo]) -> tuple[Holding, ...]:
    request = request_for(w.spec.resources_per_worker)
    out = []
    for s in w.slots.values():
        node = nodes.get(s.node)
        gpu = request.gpu_fraction(node.gpu_memory) if node is not None else request.gpu
        out.append(Holding(s.node, gpu, request.cpu, request.memory))
    return tuple(out)


def workload_view(
    w: Workload, pos: tuple[int, int] | None, eta: Eta | None = None, now: float = 0.0
) -> dict[str, Any]:
    """What clients see of a workload (`Scheduler.info`); `pos` is its place in its
    queue and the queue's length, and `eta` its forecast start, while it is queued."""
    return {
        "id": w.id,
        "name": w.spec.name,
        "kind": w.spec.kind,
        "queue": w.spec.queue,
        "priority": w.spec.priority,
        # The GPU types it accepts, most preferred first ([]: any; docs/gpu-types.md).
        "gpu_types": list(w.spec.accelerator_type),
        "state": w.state.value,
        "reason": w.reason,
        "reason_code": w.reason_code if w.state is State.QUEUED else "",
        "position": pos[0] if pos else None,
        "queue_length": pos[1] if pos else None,
        "eta": eta.as_dict(now) if eta is not None else None,
        "expected_runtime": w.spec.expected_runtime,
        "max_runtime": w.spec.max_runtime,
        "ran_s": w.ran,
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
    queues: Sequence[QueueInfo],
    status: Mapping[str, QueueStatus],
    workloads: Iterable[Workload],
    closed: bool = False,
) -> list[dict[str, Any]]:
    """Each queue: its spec, the last cycle's fair share, allocation and demand (per
    resource, in RESOURCES order), and how many of its workloads wait and run. Its
    `access`: its own rule as written and the rule in effect along its path, in words
    (kai_ray.control.accessview; `closed`: SchedulerConfig.closed_queues), as the
    dashboard shows it."""
    pending: Counter[str] = Counter()
    running: Counter[str] = Counter()
    for w in workloads:
        if w.state is State.QUEUED:
            pending[w.spec.queue] += 1
        elif w.state in HOLDING:
            running[w.spec.queue] += 1
    access = access_views(queues, closed)
    rows = []
    for q in queues:
        st = status.get(q.name)
        rows.append(
            {
                **dataclasses.asdict(q),
                "access": access[q.name],
                "deserved": list(st.deserved) if st else None,
                "fair_share": list(st.fair_share) if st else None,
                "allocated": list(st.allocated) if st else None,
                "requested": list(st.requested) if st else None,
                # Per GPU type a queue names: quota, limit, fair_share, allocated.
                "by_gpu_type": {t: dict(f) for t, f in st.gpu_types.items()} if st else {},
                "pending": pending[q.name],
                "running": running[q.name],
            }
        )
    return rows


def refusal_of(w: Workload, queues: Sequence[QueueInfo], closed: bool) -> dict[str, Any] | None:
    """Which access rule of its queue's path refuses the workload, for `kai-ray explain`
    (kai_ray.control.accessview.refused_by); None when its queue takes it, or it ended."""
    if w.terminal:
        return None
    s = w.spec
    return refused_by(s.queue, queues, closed, priority=s.priority, tenant=s.tenant, labels=s.tenant_labels)


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
