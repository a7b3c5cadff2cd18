"""A scenario file -> the core's snapshot and config, the rounds, the clock, the verdict.

Conversions the spec defines: node defaults; one `default` queue with quota -1 when no
queues are given; `since` and `staleSince` relative to `now` become absolute times;
`createdAt` defaults to the job's position; task names are `<job>-<index>`; gpuGroup
symbols become device indices (see symbols.py). Every cross-reference is checked here,
and each problem is one ConfigError naming the file, the object, the field and the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kai_ray.config.base import read_yaml
from kai_ray.config.errors import ConfigError, from_validation_error
from kai_ray.config.priority import PriorityClasses
from kai_ray.config.queues import check_queue_tree, queue_info
from kai_ray.config.scheduler import to_scheduler_config
from kai_ray.control.taints import apply_taints
from kai_ray.core.model.snapshot import (
    UNLIMITED,
    ClusterSnapshot,
    JobInfo,
    NodeInfo,
    QueueInfo,
    SchedulerConfig,
)
from kai_ray.core.model.words import count
from kai_ray.scenario.expect import JobExpectation, TaskExpectation
from kai_ray.scenario.jobs import JobContext, build_job, listing, task_tolerations
from kai_ray.scenario.schema import (
    MAX_TASKS,
    JobExpectSpec,
    NodeSpec,
    ScenarioFile,
    TaskCountSpec,
    TaskExpectSpec,
    UsageSpec,
)
from kai_ray.scenario.symbols import GpuSymbols

__all__ = ["DEFAULT_QUEUE", "Scenario", "load_scenario", "parse_scenario"]

# Without `queues`, everything runs in one queue that may use the whole cluster.
DEFAULT_QUEUE = QueueInfo(
    name="default",
    quota=(UNLIMITED, UNLIMITED, UNLIMITED),
    limit=(UNLIMITED, UNLIMITED, UNLIMITED),
)


@dataclass(slots=True)
class Scenario:
    file: str
    name: str
    source: str | None
    snapshot: ClusterSnapshot
    config: SchedulerConfig
    rounds: int
    now: float  # the clock at the first cycle; each further round adds 1 s
    expectations: dict[str, JobExpectation]
    symbols: GpuSymbols  # the input's gpuGroup symbols per node


def load_scenario(path: str | Path) -> Scenario:
    return parse_scenario(read_yaml(path), path=path)


def parse_scenario(raw: Any, *, path: str | Path | None = None) -> Scenario:
    if not isinstance(raw, dict):
        raise ConfigError(
            "a scenario is a YAML map with at least nodes: and jobs:; see docs/scenario-format.md",
            path=path,
        )
    try:
        spec = ScenarioFile.model_validate(raw)
    except ValidationError as e:
        raise from_validation_error(e, raw, path=path) from None
    try:
        return _build(spec, path)
    except ConfigError as e:
        raise (e.at(path) if path is not None else e) from None


def _build(spec: ScenarioFile, path: str | Path | None) -> Scenario:
    _check_task_total(spec)
    nodes = [_node(name, node) for name, node in spec.nodes.items()]
    classes = PriorityClasses(spec.priority_classes)
    queues = _queues(spec, classes)
    config = to_scheduler_config(spec.config, spec.actions, spec.topologies)
    context = JobContext(
        nodes={n.name: n for n in nodes},
        queues=queues,
        classes=classes,
        topologies=dict(config.topologies),
        symbols=GpuSymbols(),
        now=spec.now,
    )
    jobs = [build_job(job, i, context) for i, job in enumerate(spec.jobs)]
    _check_unique_jobs(jobs)
    nodes, jobs = _with_taints(spec, nodes, jobs)
    return Scenario(
        file="" if path is None else str(path),
        name=spec.name or (Path(path).name if path is not None else "scenario"),
        source=spec.source,
        snapshot=ClusterSnapshot(
            nodes=nodes,
            queues=queues,
            jobs=jobs,
            usage=_usage(spec.usage, queues, config),
            can_grow=spec.cluster_can_grow,
        ),
        config=config,
        rounds=spec.rounds,
        now=spec.now,
        expectations=_expectations(spec.expect, jobs),
        symbols=context.symbols,
    )


def _node(name: str, spec: NodeSpec) -> NodeInfo:
    return NodeInfo(
        name=name,
        gpus=spec.gpus,
        cpu=spec.cpu,
        memory=spec.memory,
        gpu_memory=spec.gpu_memory,
        labels=dict(spec.labels),
        unschedulable=spec.unschedulable,
        gpu_type=spec.gpu_type,
    )


def _with_taints(
    spec: ScenarioFile, nodes: list[NodeInfo], jobs: list[JobInfo]
) -> tuple[list[NodeInfo], list[JobInfo]]:
    """Blocking taints keep off the tasks that do not tolerate them, by the rule every
    backend shares (kai_ray.control.taints); a file without taints is left as it is."""
    if not any(node.taints for node in spec.nodes.values()):
        return nodes, jobs
    taints = {name: [(t.key, t.value, t.effect) for t in node.taints] for name, node in spec.nodes.items()}
    tolerations = {
        (job.name, task.name): tolerated
        for job_spec, job in zip(spec.jobs, jobs, strict=True)
        for task, tolerated in zip(job.tasks, task_tolerations(job_spec), strict=True)
    }
    return apply_taints(nodes, taints, jobs, tolerations)


def _queues(spec: ScenarioFile, classes: PriorityClasses) -> list[QueueInfo]:
    if spec.queues is None:
        return [DEFAULT_QUEUE]
    queues = [queue_info(q.name, q.parent, q, classes=classes) for q in spec.queues]
    check_queue_tree(queues)
    return queues


def _usage(
    specs: Mapping[str, UsageSpec], queues: Sequence[QueueInfo], config: SchedulerConfig
) -> dict[str, tuple[float, float, float]]:
    """The file's usage history; a parent queue left out gets the sum of its children's
    (what a recorded history gives it)."""
    if specs and config.usage_window_s > 0:
        raise ConfigError(
            "a fixed usage history and config.usageWindow (a history recorded round by round) "
            "exclude each other; remove one of them",
            field="usage",
        )
    names = {q.name for q in queues}
    usage: dict[str, tuple[float, float, float]] = {}
    for name, spec in specs.items():
        if name not in names:
            raise ConfigError(
                f"queue {name!r} does not exist; give usage for queues listed under queues:",
                field=f"usage.{name}",
            )
        usage[name] = (spec.gpu, spec.cpu, spec.memory)
    if not usage:
        return usage
    parent_of = {q.name: q.parent for q in queues}
    summed: dict[str, list[float]] = {}
    for name, row in list(usage.items()):  # up to the first ancestor the file gives
        parent = parent_of[name]
        while parent is not None and parent not in specs:
            acc = summed.setdefault(parent, [0.0, 0.0, 0.0])
            for r in range(3):
                acc[r] += row[r]
            parent = parent_of[parent]
    for name, acc in summed.items():
        usage[name] = (acc[0], acc[1], acc[2])
    return usage


def _check_task_total(spec: ScenarioFile) -> None:
    total = sum(j.tasks.count if isinstance(j.tasks, TaskCountSpec) else len(j.tasks) for j in spec.jobs)
    if total > MAX_TASKS:
        raise ConfigError(
            f"the jobs have {total} tasks in all, more than {MAX_TASKS}, the most a scenario file "
            "may hold; lower the counts or split the file",
            field="jobs",
        )


def _check_unique_jobs(jobs: Sequence[JobInfo]) -> None:
    seen: set[str] = set()
    for job in jobs:
        if job.name in seen:
            raise ConfigError("the name is used by two jobs; rename one of them", field=f"job {job.name!r}")
        seen.add(job.name)


def _expectations(specs: Mapping[str, JobExpectSpec], jobs: Sequence[JobInfo]) -> dict[str, JobExpectation]:
    by_name = {job.name: job for job in jobs}
    result: dict[str, JobExpectation] = {}
    for name, spec in specs.items():
        field = f"expect.{name}"
        job = by_name.get(name)
        if job is None:
            raise ConfigError(
                f"there is no job {name!r}; expectations name jobs of this file ({listing(list(by_name))})",
                field=field,
            )
        if spec.tasks is not None and len(spec.tasks) != len(job.tasks):
            raise ConfigError(
                f"lists {count(len(spec.tasks), 'task expectation')} but the job has "
                f"{count(len(job.tasks), 'task')}; give one per task, in order",
                field=f"{field}.tasks",
            )
        tasks = None if spec.tasks is None else tuple(_task_expectation(t) for t in spec.tasks)
        result[name] = JobExpectation(every_task=_task_expectation(spec), tasks=tasks, reason=spec.reason)
    return result


def _task_expectation(spec: TaskExpectSpec) -> TaskExpectation:
    return TaskExpectation(
        status=spec.status,
        node=spec.node,
        check_node="node" in spec.model_fields_set,
        gpu_groups=None if spec.gpu_groups is None else tuple(spec.gpu_groups),
    )
