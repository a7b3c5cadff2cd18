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
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from kai_ray.control.cycles import Cycles
from kai_ray.control.planner import PlanError, plan_cycle
from kai_ray.core.model import (
    Bind,
    ClusterSnapshot,
    CycleResult,
    JobInfo,
    Pipeline,
    SchedulerConfig,
    TaskInfo,
    TaskStatus,
)
from kai_ray.scenario.expect import Mismatch, compare
from kai_ray.scenario.loader import Scenario
from kai_ray.scenario.symbols import GpuSymbols

__all__ = [
    "CycleFn",
    "ScenarioResult",
    "ScenarioRunError",
    "advance_round",
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
    a whole run."""
    # config.usageWindow: usage recorded round by round, as every backend records it
    cycles = Cycles.of(scenario.config, cycle or _core_cycle())
    state = _working_copy(scenario.snapshot)
    last: CycleResult | None = None
    try:
        for round_ in range(scenario.rounds):
            clock = scenario.now + round_
            last = cycles(state, scenario.config, clock)
            apply_result(state, last, clock)
            if round_ < scenario.rounds - 1:
                advance_round(state, clock)
    except Exception as e:  # reported as this scenario's failure, not raised
        error = traceback.format_exc() if keep_traceback else f"{type(e).__name__}: {e}"
        return _result(scenario, state, [], last, error)
    symbols = scenario.symbols.copy()
    jobs = {job.name: job for job in state.jobs}
    mismatches = compare(scenario.expectations, jobs, symbols)
    return _result(scenario, state, mismatches, last, None, symbols)


def _core_cycle() -> CycleFn:
    # Looked up at call time, so the runner always uses the core as it is now.
    from kai_ray.core.cycle import run_cycle

    return run_cycle


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
        nodes=list(snapshot.nodes), queues=list(snapshot.queues), jobs=jobs, usage=snapshot.usage
    )


def apply_result(snapshot: ClusterSnapshot, result: CycleResult, clock: float) -> None:
    """Carry the cycle's decisions into the tasks' states (see the module docstring),
    through the same planner every backend uses."""
    try:
        plan = plan_cycle(result, snapshot.jobs, (n.name for n in snapshot.nodes))
    except PlanError as e:
        raise ScenarioRunError(str(e)) from None
    tasks = {(job.name, t.name): t for job in snapshot.jobs for t in job.tasks}
    for job, jp in plan.jobs.items():
        for e in jp.evicted:
            _set(tasks[(job, e.task)], TaskStatus.RELEASING, clock)
        for e, move in jp.moved:  # a consolidation move: it waits on its new node
            _put(tasks[(job, e.task)], move, TaskStatus.PIPELINED, clock)
        for b in jp.binds:
            _put(tasks[(job, b.task)], b, TaskStatus.BINDING, clock)
        for p in jp.pipelined:
            _put(tasks[(job, p.task)], p, TaskStatus.PIPELINED, clock)


def _put(task: TaskInfo, placement: Bind | Pipeline, status: TaskStatus, clock: float) -> None:
    task.node, task.gpu_group = placement.node, placement.gpu_group
    _set(task, status, clock)


def advance_round(snapshot: ClusterSnapshot, clock: float) -> None:
    """What happens between two cycles: binds complete, releases finish, waiters re-queue."""
    for job in snapshot.jobs:
        for task in job.tasks:
            if task.status is TaskStatus.BINDING:
                _set(task, TaskStatus.RUNNING, clock)
            elif task.status in (TaskStatus.RELEASING, TaskStatus.PIPELINED):
                task.node, task.gpu_group = None, None
                _set(task, TaskStatus.PENDING, clock)
        _refresh_stale_since(job)


def _refresh_stale_since(job: JobInfo) -> None:
    # A staleSince from the file describes the input; once the gang is whole again (or
    # gone), it no longer holds, and the core derives staleness from the tasks instead.
    active = sum(t.status.is_active for t in job.tasks)
    if job.stale_since is not None and not 0 < active < job.gang_size:
        job.stale_since = None


def _set(task: TaskInfo, status: TaskStatus, clock: float) -> None:
    if task.status is not status:
        task.status, task.since = status, clock
