"""A lifecycle read back from a backend that holds it (Kubernetes' API server): the
scheduler owns no workload table there, so after each cycle each workload's state is
read off its tasks, and a change is recorded with the cycle's reason.

States, from the tasks the ClusterSource reported (`observed_state`): Queued (none
holds capacity), Admitting (some do, fewer than its gang), Running, Preempting (some are
being released, or the cycle just evicted it). A workload drops out of the world while
all its pods are gone (evicted, not yet made again by its controller): its record is
kept for `keep_absent_s` after it was last seen, so that it comes back with its
preemptions and history. A restarted operator starts a new history.

Steady cycles cost what changed: a workload whose JobInfo is the same object as last
cycle's, and that the plan does not name, is not looked at again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from kai_ray.control.events import Admitted, ControlEvent, Preempted, WorkloadChanged
from kai_ray.control.forecast import Eta, Forecaster
from kai_ray.control.planner import Plan
from kai_ray.control.views import Holding, WorkloadView
from kai_ray.control.workload import State
from kai_ray.core import ClusterSnapshot, CycleResult, JobInfo, NodeInfo, Reason, TaskStatus
from kai_ray.core.model.subgroups import info_shortfall

__all__ = ["Facts", "ObservedLifecycle", "observed_state"]


@dataclass(frozen=True, slots=True)
class Facts:
    """What the backend says of a workload beyond the core's JobInfo, for people."""

    name: str  # e.g. "RayCluster/train-1"
    kind: str  # e.g. "RayCluster"
    priority_class: str


def observed_state(job: JobInfo) -> State:
    if any(t.status is TaskStatus.RELEASING for t in job.tasks):
        return State.PREEMPTING
    active = sum(1 for t in job.tasks if t.status.is_active)
    if active and not info_shortfall(job):  # every subgroup at its minimum, where it has them
        return State.RUNNING
    return State.ADMITTING if active else State.QUEUED


@dataclass(slots=True)
class _Seen:
    state: str
    since: float
    queued_at: float
    info: JobInfo
    preemptions: int = 0
    history: list[tuple[float, str, str, str]] = field(default_factory=list)
    last_seen: float = 0.0


class ObservedLifecycle:
    def __init__(
        self,
        facts: Callable[[str], Facts | None],
        keep_absent_s: float = 600.0,
        forecaster: Forecaster | None = None,
    ) -> None:
        """`forecaster`: when waiting workloads start (the backend's, from its world);
        None: the views say none."""
        self.facts = facts
        self.keep_absent_s = keep_absent_s
        self.seen: dict[str, _Seen] = {}
        self.waiting: dict[str, Reason] = {}
        self._jobs: list[JobInfo] = []
        self._nodes: list[NodeInfo] = []
        self.forecaster = forecaster

    def record(
        self, snapshot: ClusterSnapshot, result: CycleResult, plan: Plan, now: float
    ) -> list[ControlEvent]:
        events: list[ControlEvent] = []
        evicted = {job: jp.eviction_reason for job, jp in plan.jobs.items() if jp.evicted or jp.moved}
        for job in snapshot.jobs:
            seen = self.seen.get(job.name)
            if seen is not None and seen.info is job and job.name not in plan.jobs:
                seen.last_seen = now
                continue
            state = State.PREEMPTING.value if job.name in evicted else observed_state(job).value
            if seen is None:
                seen = self.seen[job.name] = _Seen("", job.created_at, job.created_at, job)
            seen.info, seen.last_seen = job, now
            if seen.state != state:
                events += self._moved(seen, job, state, _reason(state, job.name, result, evicted), now)
        self.waiting, self._jobs, self._nodes = dict(plan.waiting), snapshot.jobs, snapshot.nodes
        if len(self.seen) > len(snapshot.jobs):
            events += self._forget(snapshot, now)
        return events

    def _moved(self, seen: _Seen, job: JobInfo, state: str, why: str, now: float) -> list[ControlEvent]:
        events: list[ControlEvent] = [WorkloadChanged(job.name, job.queue, seen.state, state, why, now)]
        if state == State.PREEMPTING.value:
            seen.preemptions += 1
            events.append(Preempted(job.name, job.queue, why))
        if state == State.RUNNING.value and seen.state in ("", State.QUEUED.value, State.ADMITTING.value):
            events.append(Admitted(job.name, job.queue, now - seen.queued_at))
        if state == State.QUEUED.value:
            seen.queued_at = now
        seen.history.append((now, seen.state, state, why))
        seen.state, seen.since = state, now
        return events

    def _forget(self, snapshot: ClusterSnapshot, now: float) -> list[ControlEvent]:
        """Workloads deleted from the cluster, or whose pods have been gone longer than a
        controller takes to make them again."""
        present = {j.name for j in snapshot.jobs}
        gone = [
            n for n, s in self.seen.items() if n not in present and now - s.last_seen > self.keep_absent_s
        ]
        events: list[ControlEvent] = []
        for name in gone:
            seen = self.seen.pop(name)
            events.append(
                WorkloadChanged(name, seen.info.queue, seen.state, "", "gone from the cluster", now)
            )
        return events

    def views(self, now: float) -> list[WorkloadView]:
        memory = {n.name: n.gpu_memory for n in self._nodes}
        etas = self.forecaster.get(now) if self.forecaster is not None else {}
        return [self._view(job, memory, etas.get(job.name)) for job in self._jobs if job.name in self.seen]

    def _view(self, job: JobInfo, memory: Mapping[str, float], eta: Eta | None = None) -> WorkloadView:
        seen = self.seen[job.name]
        facts = self.facts(job.name) or Facts(job.name, "Pod", "")
        bound = [t for t in job.tasks if t.node is not None and t.status.holds_capacity]
        reason = self.waiting.get(job.name)
        queued = seen.state == State.QUEUED.value
        return WorkloadView(
            id=job.name,
            name=facts.name,
            kind=facts.kind,
            queue=job.queue,
            priority=job.priority,
            priority_class=facts.priority_class,
            preemptible=job.preemptible,
            state=seen.state,
            reason=reason.text if reason else (seen.history[-1][3] if seen.history else ""),
            reason_code=reason.code if reason and queued else "",
            created_at=job.created_at,
            since=seen.since,
            queued_at=seen.queued_at,
            workers=len(bound),
            min_workers=job.gang_size,
            max_workers=len(job.tasks),
            gpus_per_worker=max((t.request.gpu for t in job.tasks), default=0.0),
            gpu_types=job.gpu_types,
            gpus=sum(t.request.gpu for t in bound),
            nodes=tuple(sorted({t.node for t in bound if t.node})),
            preemptions=seen.preemptions,
            history=list(seen.history),
            holdings=tuple(
                Holding(
                    t.node,
                    t.request.gpu_fraction(memory.get(t.node, 0.0)),
                    t.request.cpu,
                    t.request.memory,
                    t.gpu_group,
                )
                for t in bound
                if t.node
            ),
            eta=eta if queued else None,
        )


def _reason(state: str, job: str, result: CycleResult, evicted: Mapping[str, str]) -> str:
    if state == State.PREEMPTING.value and job in evicted:
        return evicted[job]
    if state == State.QUEUED.value and job in result.waiting:
        return result.waiting[job].text
    return {State.RUNNING.value: "bound: all its gang's pods", State.ADMITTING.value: "binding its pods"}.get(
        state, "seen"
    )
