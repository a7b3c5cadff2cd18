"""The dashboard's Board from the operator's last cycle: gangs as workloads, the world's
nodes, and the queues with the cycle's figures. Pure: no I/O.

The API server holds no history of a gang's scheduling, so the operator keeps one in
memory (`GangHistory`): each cycle a gang's state is read off its pods (Queued: none
bound; Admitting: some bound, fewer than its gang; Running; Preempting: its pods are
being evicted) and a change is recorded with the cycle's reason, evictions with the
core's. A restarted operator starts a new history. A gang is read off its pods, so it
drops out of the world while all of them are gone (evicted, not yet made again by its
controller): its record is kept for `keep_absent_s` after it was last seen, so that it
comes back with its preemptions and history.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kai_ray.control.planner import Plan
from kai_ray.core import CycleResult, Evict, JobInfo, TaskStatus
from kai_ray.dashboard.board import Board, Holding, grouping_levels, node_row, queue_rows, row
from kai_ray.k8s.gangs import Gang
from kai_ray.k8s.queues import QueueSet
from kai_ray.k8s.world import World

__all__ = ["GangHistory", "board_from_world", "gang_state"]


def gang_state(job: JobInfo) -> str:
    if any(t.status is TaskStatus.RELEASING for t in job.tasks):
        return "Preempting"
    active = sum(1 for t in job.tasks if t.status.is_active)
    if active and active >= job.gang_size:
        return "Running"
    return "Admitting" if active else "Queued"


@dataclass
class _Seen:
    state: str
    since: float
    queued_at: float
    preemptions: int = 0
    history: list[tuple[float, str, str, str]] = field(default_factory=list)
    last_seen: float = 0.0


class GangHistory:
    def __init__(self, keep_absent_s: float = 600.0) -> None:
        self.seen: dict[str, _Seen] = {}
        self.keep_absent_s = keep_absent_s

    def observe(
        self, jobs: Iterable[JobInfo], result: CycleResult, evicted: Mapping[str, Evict], now: float
    ) -> bool:
        """Record each gang's state after a cycle; True when any changed."""
        changed, present = False, set()
        for job in jobs:
            present.add(job.name)
            state = "Preempting" if job.name in evicted else gang_state(job)
            seen = self.seen.get(job.name)
            if seen is None:
                seen = self.seen[job.name] = _Seen("", job.created_at, job.created_at)
            seen.last_seen = now
            if seen.state == state:
                continue
            changed = True
            why = _why(state, job.name, result, evicted)
            if state == "Preempting":
                seen.preemptions += 1
            if state == "Queued":
                seen.queued_at = now
            seen.history.append((now, seen.state, state, why))
            seen.state, seen.since = state, now
        # Deleted from the cluster, or all its pods gone for longer than a controller takes
        # to make them again.
        keep = self.keep_absent_s
        gone = [n for n, s in self.seen.items() if n not in present and now - s.last_seen > keep]
        for name in gone:
            del self.seen[name]
        return changed or bool(gone)


def _why(state: str, job: str, result: CycleResult, evicted: Mapping[str, Evict]) -> str:
    if state == "Preempting" and job in evicted:
        e = evicted[job]
        return f"{e.action}: {e.reason}"
    if state == "Queued" and job in result.waiting:
        return result.waiting[job].text
    return {"Running": "bound: all its gang's pods", "Admitting": "binding its pods"}.get(state, "seen")


def board_from_world(
    world: World,
    result: CycleResult,
    plan: Plan,
    queues: QueueSet,
    history: GangHistory,
    topologies: Mapping[str, object],
    now: float,
) -> Board:
    rows = [
        _gang_row(job, world.gangs.get(job.name), result, plan, history, now) for job in world.snapshot.jobs
    ]
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in rows:
        counts[str(r["queue"])][0 if r["state"] == "Queued" else 1] += 1
    holdings: dict[str, list[Holding]] = defaultdict(list)
    held: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    memory = {n.name: n.gpu_memory for n in world.snapshot.nodes}
    for job in world.snapshot.jobs:
        for t in job.tasks:
            if t.node is None or not t.status.holds_capacity:
                continue
            gpu = t.request.gpu_fraction(memory.get(t.node, 0.0))
            holdings[t.node].append(Holding(job.name, job.queue, gpu, t.gpu_group))
            for res, amount in (("gpu", gpu), ("cpu", t.request.cpu), ("memory", t.request.memory)):
                held[t.node][res] += amount
    levels = grouping_levels(topologies)
    nodes = [
        node_row(n, holdings.get(n.name, ()), levels, held.get(n.name, {})) for n in world.snapshot.nodes
    ]
    tree = queue_rows(queues.queues, result.queues, {q: (c[0], c[1]) for q, c in counts.items()})
    return Board(backend="kubernetes", at=now, queues=tree, workloads=rows, nodes=nodes, levels=levels)


def _gang_row(
    job: JobInfo, gang: Gang | None, result: CycleResult, plan: Plan, history: GangHistory, now: float
) -> dict[str, object]:
    seen = history.seen.get(job.name)
    state = seen.state if seen else gang_state(job)
    bound = [t for t in job.tasks if t.node is not None and t.status.holds_capacity]
    reason = result.waiting.get(job.name)
    return row(
        id=job.name,
        name=f"{gang.kind}/{gang.name}" if gang else job.name,
        kind=gang.kind if gang else "Pod",
        queue=job.queue,
        priority=job.priority,
        priority_class=gang.priority_class if gang else "",
        preemptible=job.preemptible,
        state=state,
        reason=reason.text if reason else (seen.history[-1][3] if seen and seen.history else ""),
        reason_code=reason.code if reason and state == "Queued" else "",
        position=plan.positions.get(job.name),
        created_at=job.created_at,
        since=seen.since if seen else job.created_at,
        waiting_s=max(0.0, now - seen.queued_at) if seen and state == "Queued" else None,
        workers=len(bound),
        min_workers=job.gang_size,
        max_workers=len(job.tasks),
        gpus_per_worker=max((t.request.gpu for t in job.tasks), default=0.0),
        gpus=sum(t.request.gpu for t in bound),
        nodes=sorted({t.node for t in bound if t.node}),
        preemptions=seen.preemptions if seen else 0,
        history=seen.history if seen else [],
    )
