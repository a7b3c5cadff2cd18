"""Run a scenario: cycles on the scenario's own clock, decisions applied, rounds advanced.

Applying a CycleResult (at the cycle's clock `t`):
  Bind -> Binding on that node/device; Pipeline -> Pipelined; Evict -> Releasing, except
  a task that is also placed in the same cycle: a consolidation move, Pipelined on its
  new node. A task's `since` becomes `t` whenever its status changes.
Between rounds (after every cycle but the last), also at `t`:
  Binding -> Running; Releasing -> Pending (its capacity is free now, node and device
  cleared); Pipelined (moves included) -> Pending, to be placed again by the next cycle.
  The next cycle runs at `t + 1`.
Usage history: the file's fixed `usage`, or with `config.usageWindow` a history recorded
after every round (what the queues hold from `t` until the next round's cycle).

Each round is one step of the scheduling loop every backend runs (kai_ray.control.loop),
on the scenario's own state as the world (`ScenarioWorld`): the same usage history, the
same cycles (incremental, checked against a full one under KAI_RAY_CHECK_INCREMENTAL)
and the same planner. A job that changes is a new JobInfo (never changed in place), as
the incremental cycle reads an unchanged object as an unchanged job.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kai_ray.control.cycles import Cycles, cycle_function
from kai_ray.control.events import ControlEvent
from kai_ray.control.loop import SchedulingLoop
from kai_ray.control.planner import Plan, PlanError, plan_cycle
from kai_ray.control.views import WorkloadView
from kai_ray.core.model.snapshot import (
    Bind,
    ClusterSnapshot,
    CycleResult,
    JobInfo,
    Pipeline,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
)
from kai_ray.core.model.subgroups import info_shortfall
from kai_ray.scenario.expect import Mismatch, compare
from kai_ray.scenario.loader import Scenario
from kai_ray.scenario.symbols import GpuSymbols

__all__ = [
    "CycleFn",
    "ScenarioResult",
    "ScenarioRunError",
    "ScenarioWorld",
    "advance_round",
    "apply_plan",
    "apply_result",
    "run_scenario",
]

CycleFn = Callable[[ClusterSnapshot, SchedulerConfig, float], CycleResult]


class ScenarioRunError(RuntimeError):
    """The core decided something that cannot be applied (a bug in the core, not the file):
    the planner's PlanError, said as the scenario's failure."""


@dataclass(slots=True)
class ScenarioResult:
    file: str
    name: str
    passed: bool
    mismatches: list[Mismatch]
    jobs: list[JobInfo]  # the state after the last round
    symbols: GpuSymbols  # the input's symbols plus those the expectations bound
    pending_reasons: dict[str, str] = field(default_factory=dict)  # from the last cycle
    error: str | None = None  # the run itself failed (the core raised, or decided nonsense)


def run_scenario(
    scenario: Scenario, cycle: CycleFn | None = None, *, keep_traceback: bool = False
) -> ScenarioResult:
    """Run every round, then compare with the expectations. Never raises for a core
    failure: it becomes a failed result with `error` set, so one scenario cannot stop
    a whole run. `cycle`: another decision in place of the core's (tests)."""
    world = ScenarioWorld(_working_copy(scenario.snapshot))
    # config.usageWindow: usage recorded round by round, as every backend records it
    cycles = Cycles.of(scenario.config, cycle or cycle_function())
    loop = SchedulingLoop(world, world, world, scenario.config, cycles)
    last: CycleResult | None = None
    try:
        for round_ in range(scenario.rounds):
            clock = scenario.now + round_
            try:
                last = loop.step(clock).result
            except PlanError as e:
                raise ScenarioRunError(str(e)) from None
            if round_ < scenario.rounds - 1:
                advance_round(world.state, clock)
    except Exception as e:  # reported as this scenario's failure, not raised
        error = traceback.format_exc() if keep_traceback else f"{type(e).__name__}: {e}"
        return _result(scenario, world.state, [], last, error)
    symbols = scenario.symbols.copy()
    jobs = {job.name: job for job in world.state.jobs}
    codes = {job: reason.code for job, reason in last.waiting.items()} if last is not None else None
    mismatches = compare(scenario.expectations, jobs, symbols, codes)
    return _result(scenario, world.state, mismatches, last, None, symbols)


class ScenarioWorld:
    """A scenario's state as the loop's three ports: its world (ClusterSource), where
    the plan is carried out (Actuator: the tasks' statuses), and a lifecycle with
    nothing more to record (the file's expectations read the tasks)."""

    def __init__(self, state: ClusterSnapshot) -> None:
        self.state = state

    def observe(self, now: float) -> ClusterSnapshot:
        return self.state

    def apply(self, plan: Plan, result: CycleResult, now: float) -> None:
        apply_plan(self.state, plan, now)

    def record(
        self, snapshot: ClusterSnapshot, result: CycleResult, plan: Plan, now: float
    ) -> list[ControlEvent]:
        return []

    def views(self, now: float) -> list[WorkloadView]:
        return []


def _result(
    scenario: Scenario,
    state: ClusterSnapshot,
    mismatches: list[Mismatch],
    last: CycleResult | None,
    error: str | None,
    symbols: GpuSymbols | None = None,
) -> ScenarioResult:
    reasons: dict[str, str] = {}
    if last is not None and error is None:
        # A job the core could not consider at all is pending too; say why.
        reasons = {**last.invalid, **last.pending_reasons}
    return ScenarioResult(
        file=scenario.file,
        name=scenario.name,
        passed=error is None and not mismatches,
        mismatches=mismatches,
        jobs=state.jobs,
        symbols=symbols or scenario.symbols.copy(),
        pending_reasons=reasons,
        error=error,
    )


def _working_copy(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """Jobs and tasks are mutated round by round; the loaded scenario stays as it was."""
    jobs = [
        dataclasses.replace(job, tasks=[dataclasses.replace(t) for t in job.tasks]) for job in snapshot.jobs
    ]
    return ClusterSnapshot(
        nodes=list(snapshot.nodes),
        queues=list(snapshot.queues),
        jobs=jobs,
        usage=snapshot.usage,
        can_grow=snapshot.can_grow,
    )


def apply_result(snapshot: ClusterSnapshot, result: CycleResult, clock: float) -> None:
    """One cycle's decisions applied as a round applies them: checked by the planner
    (a decision that cannot be carried out is a ScenarioRunError), then apply_plan."""
    try:
        plan = plan_cycle(result, snapshot.jobs, (n.name for n in snapshot.nodes))
    except PlanError as e:
        raise ScenarioRunError(str(e)) from None
    apply_plan(snapshot, plan, clock)


def apply_plan(snapshot: ClusterSnapshot, plan: Plan, clock: float) -> None:
    """Carry a cycle's plan into the tasks' states (see the module docstring)."""
    changes: dict[tuple[str, str], tuple[TaskStatus, Bind | Pipeline | None]] = {}
    for job, jp in plan.jobs.items():
        for e in jp.evicted:
            changes[(job, e.task)] = (TaskStatus.RELEASING, None)
        for e, move in jp.moved:  # a consolidation move: it waits on its new node
            changes[(job, e.task)] = (TaskStatus.PIPELINED, move)
        for b in jp.binds:
            changes[(job, b.task)] = (TaskStatus.BINDING, b)
        for p in jp.pipelined:
            changes[(job, p.task)] = (TaskStatus.PIPELINED, p)
    for tb in plan.taken_back:  # reported as KAI reports it; pending again next round
        changes[(tb.job, tb.task)] = (TaskStatus.RELEASING, None)
    touched = {job for job, _ in changes}
    snapshot.jobs = [_changed(job, changes, clock) if job.name in touched else job for job in snapshot.jobs]


def _changed(
    job: JobInfo, changes: dict[tuple[str, str], tuple[TaskStatus, Bind | Pipeline | None]], clock: float
) -> JobInfo:
    tasks = []
    for t in job.tasks:
        change = changes.get((job.name, t.name))
        if change is None:
            tasks.append(t)
            continue
        status, placement = change
        if placement is None:
            tasks.append(_set(t, status, clock))
        else:
            tasks.append(_set(replace(t, node=placement.node, gpu_group=placement.gpu_group), status, clock))
    return replace(job, tasks=tasks)


def advance_round(snapshot: ClusterSnapshot, clock: float) -> None:
    """What happens between two cycles: binds complete, releases finish, waiters re-queue."""
    jobs = []
    for job in snapshot.jobs:
        tasks = [_advanced(t, clock) for t in job.tasks]
        if any(a is not b for a, b in zip(tasks, job.tasks, strict=True)) or _stale_since_ends(job):
            job = replace(job, tasks=tasks)
            _refresh_stale_since(job)
        jobs.append(job)
    snapshot.jobs = jobs


def _advanced(task: TaskInfo, clock: float) -> TaskInfo:
    if task.status is TaskStatus.BINDING:
        return _set(task, TaskStatus.RUNNING, clock)
    if task.status in (TaskStatus.RELEASING, TaskStatus.PIPELINED):
        return _set(replace(task, node=None, gpu_group=None), TaskStatus.PENDING, clock)
    return task


def _stale_since_ends(job: JobInfo) -> bool:
    return job.stale_since is not None and not _below_its_gang(job)


def _refresh_stale_since(job: JobInfo) -> None:
    # A staleSince from the file describes the input; once the gang is whole again (or
    # gone), it no longer holds, and the core derives staleness from the tasks instead.
    if job.stale_since is not None and not _below_its_gang(job):
        job.stale_since = None


def _below_its_gang(job: JobInfo) -> bool:
    """Some task active, the gang (some subgroup of it) short."""
    return any(t.status.is_active for t in job.tasks) and bool(info_shortfall(job))


def _set(task: TaskInfo, status: TaskStatus, clock: float) -> TaskInfo:
    """The task in `status`; its `since` becomes `clock` when the status changes."""
    return task if task.status is status else replace(task, status=status, since=clock)
