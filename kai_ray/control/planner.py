"""The one decision applier: a cycle's decisions, checked and grouped per job.

`plan_cycle(result, jobs)` turns the core's flat list of decisions into one `JobPlan`
per job (what to bind, what waits on capacity being released, what to evict, what moves)
and says, for every job left waiting, why and where it stands in its queue. It refuses a
decision that cannot be carried out (an unknown task, a task placed twice, an eviction of
a task that holds nothing): that is a bug in the core, found here rather than half
applied. Every backend and the scenario runner apply the same plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kai_ray.core import Bind, CycleResult, Evict, JobInfo, Pipeline, Reason, TakeBack, TaskInfo, TaskStatus

__all__ = ["JobPlan", "Plan", "PlanError", "plan_cycle"]

_HOLDING = (TaskStatus.RUNNING, TaskStatus.RELEASING, TaskStatus.BINDING)
Placed = Bind | Pipeline


class PlanError(RuntimeError):
    """The core decided something that cannot be applied (a bug in the core)."""


@dataclass(slots=True)
class JobPlan:
    binds: list[Bind] = field(default_factory=list)  # placed on capacity free now
    pipelined: list[Pipeline] = field(default_factory=list)  # on capacity being released
    evicted: list[Evict] = field(default_factory=list)  # taken away, not placed again
    moved: list[tuple[Evict, Placed]] = field(default_factory=list)  # evicted and re-placed

    @property
    def evicted_tasks(self) -> frozenset[str]:
        return frozenset(e.task for e in self.evicted) | frozenset(e.task for e, _ in self.moved)

    @property
    def eviction_reason(self) -> str:
        """Why the job loses tasks, for people: the first eviction's action and reason."""
        first = (self.evicted or [e for e, _ in self.moved])[0]
        return f"{first.action}: {first.reason}"


@dataclass(slots=True)
class Plan:
    jobs: dict[str, JobPlan]  # jobs with decisions
    waiting: dict[str, Reason]  # every job left with pending tasks, and why
    positions: dict[str, tuple[int, int]]  # waiting job -> (1-based place, queue length)
    # Placed this cycle and taken back as victims before they started: nothing to carry
    # out (they stay pending, and no JobPlan says anything of them), only to tell (a
    # scenario reports them Releasing, as KAI does).
    taken_back: list[TakeBack] = field(default_factory=list)


def plan_cycle(result: CycleResult, jobs: Iterable[JobInfo], nodes: Iterable[str] | None = None) -> Plan:
    """Check and group `result`'s decisions by job (`jobs`: the cycle's input)."""
    tasks = _Tasks(jobs)
    known_nodes = None if nodes is None else set(nodes)
    placed: dict[tuple[str, str], Placed] = {}
    evicted: dict[tuple[str, str], Evict] = {}
    taken_back: list[TakeBack] = []
    for d in result.decisions:
        key = (d.job, d.task)
        if tasks.get(key) is None:
            raise PlanError(f"{type(d).__name__} names an unknown task {d.task!r} of job {d.job!r}")
        if isinstance(d, TakeBack):
            taken_back.append(d)
            continue
        seen = evicted if isinstance(d, Evict) else placed
        if key in seen:
            raise PlanError(f"task {d.task!r} of job {d.job!r} is {_verb(d)} twice in one cycle")
        if known_nodes is not None and d.node not in known_nodes:
            raise PlanError(f"{type(d).__name__} of task {d.task!r} names an unknown node {d.node!r}")
        if isinstance(d, Evict):
            evicted[key] = d
        else:
            placed[key] = d
    plans: dict[str, JobPlan] = {}
    for key, e in evicted.items():
        _check_holds(tasks[key], e)
        plan = plans.setdefault(key[0], JobPlan())
        move = placed.pop(key, None)
        if move is None:
            plan.evicted.append(e)
        else:
            plan.moved.append((e, move))
    for key, p in placed.items():
        _check_pending(tasks[key], p)
        plan = plans.setdefault(key[0], JobPlan())
        (plan.binds if isinstance(p, Bind) else plan.pipelined).append(p)  # type: ignore[arg-type]
    for t in taken_back:
        key = (t.job, t.task)
        if key in placed or key in evicted or tasks[key].status is not TaskStatus.PENDING:
            raise PlanError(
                f"TakeBack of task {t.task!r} of job {t.job!r}, which was not pending or is decided twice"
            )
    return Plan(
        jobs=plans,
        waiting=dict(result.waiting),
        positions=_positions(result.queue_order),
        taken_back=taken_back,
    )


class _Tasks:
    """(job, task) -> TaskInfo, indexing only the jobs that decisions name: a cycle with
    a handful of decisions among thousands of jobs does not index every task."""

    def __init__(self, jobs: Iterable[JobInfo]) -> None:
        self._jobs = {job.name: job for job in jobs}
        self._tasks: dict[str, dict[str, TaskInfo]] = {}

    def get(self, key: tuple[str, str]) -> TaskInfo | None:
        job, task = key
        tasks = self._tasks.get(job)
        if tasks is None:
            info = self._jobs.get(job)
            if info is None:
                return None
            tasks = self._tasks[job] = {t.name: t for t in info.tasks}
        return tasks.get(task)

    def __getitem__(self, key: tuple[str, str]) -> TaskInfo:
        found = self.get(key)
        assert found is not None, "looked up only after get() found it"
        return found


def _positions(order: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[int, int]]:
    return {job: (i + 1, len(jobs)) for jobs in order.values() for i, job in enumerate(jobs)}


def _check_holds(task: TaskInfo, e: Evict) -> None:
    if task.status not in _HOLDING:
        raise PlanError(f"Evict of task {task.name!r}, which is {task.status.value}")


def _check_pending(task: TaskInfo, p: Placed) -> None:
    if task.status is not TaskStatus.PENDING:
        raise PlanError(
            f"{type(p).__name__} of task {task.name!r}, which is {task.status.value} "
            "and was not evicted in the same cycle"
        )


def _verb(d: Bind | Pipeline | Evict | TakeBack) -> str:
    return "evicted" if isinstance(d, Evict) else "placed"
