"""What a scenario expects after its last round, and the comparison with what happened."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kai_ray.core.model.snapshot import JobInfo, TaskInfo
from kai_ray.scenario.symbols import GpuSymbols

__all__ = ["JobExpectation", "Mismatch", "TaskExpectation", "compare"]


@dataclass(frozen=True, slots=True)
class TaskExpectation:
    status: str | None = None  # None: not checked
    node: str | None = None
    check_node: bool = False  # `node: null` expects no node, so "given" is separate
    gpu_groups: tuple[str, ...] | None = None  # symbols; () expects no device


@dataclass(frozen=True, slots=True)
class JobExpectation:
    every_task: TaskExpectation  # job-level status/node/gpuGroups hold for every task
    tasks: tuple[TaskExpectation, ...] | None = None  # one per task, in order
    reason: str | None = None  # the code of why it waits after the last round; "none": it does not


@dataclass(frozen=True, slots=True)
class Mismatch:
    job: str
    task: str  # "" for the job as a whole (its reason)
    field: str  # status | node | gpuGroups | reason
    expected: Any
    actual: Any

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "task": self.task,
            "field": self.field,
            "expected": self.expected,
            "actual": self.actual,
        }

    def __str__(self) -> str:
        where = f"job {self.job}, task {self.task}" if self.task else f"job {self.job}"  # "": the job's
        return f"{where}: {self.field} expected {_show(self.expected)}, actual {_show(self.actual)}"


def _show(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def compare(
    expectations: Mapping[str, JobExpectation],
    jobs: Mapping[str, JobInfo],
    symbols: GpuSymbols,
    reasons: Mapping[str, str] | None = None,
) -> list[Mismatch]:
    """Every difference, in expectation order. `symbols` is updated with the symbols
    the expectations bind, so actual devices can be shown by those names. `reasons`:
    each waiting job's reason code after the last round (None: no round ran)."""
    mismatches: list[Mismatch] = []
    for name, expectation in expectations.items():
        job = jobs[name]
        for i, task in enumerate(job.tasks):
            for expected in _for_task(expectation, i):
                mismatches.extend(_check(job.name, task, expected, symbols))
        if expectation.reason is not None:
            actual = (reasons or {}).get(name, "none")
            if actual != expectation.reason:
                mismatches.append(Mismatch(name, "", "reason", expectation.reason, actual))
    return mismatches


def _for_task(expectation: JobExpectation, index: int) -> Iterator[TaskExpectation]:
    yield expectation.every_task
    if expectation.tasks is not None and index < len(expectation.tasks):
        yield expectation.tasks[index]


def _check(job: str, task: TaskInfo, expected: TaskExpectation, symbols: GpuSymbols) -> Iterator[Mismatch]:
    if expected.status is not None and task.status.value != expected.status:
        yield Mismatch(job, task.name, "status", expected.status, task.status.value)
    if expected.check_node and task.node != expected.node:
        yield Mismatch(job, task.name, "node", expected.node, task.node)
    if expected.gpu_groups is not None and not _groups_match(task, expected.gpu_groups, symbols):
        yield Mismatch(job, task.name, "gpuGroups", list(expected.gpu_groups), actual_groups(task, symbols))


def _groups_match(task: TaskInfo, expected: tuple[str, ...], symbols: GpuSymbols) -> bool:
    if task.node is None or task.gpu_group is None:
        return not expected
    # A task sits on at most one device, so a match is exactly one symbol bound to it.
    return len(expected) == 1 and symbols.bind(task.node, expected[0], task.gpu_group)


def actual_groups(task: TaskInfo, symbols: GpuSymbols) -> list[str]:
    if task.node is None or task.gpu_group is None:
        return []
    return [symbols.name(task.node, task.gpu_group)]
