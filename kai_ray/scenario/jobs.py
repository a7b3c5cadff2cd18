"""A scenario's job entries -> the core's JobInfo, with every reference checked."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from kai_ray.config.errors import ConfigError
from kai_ray.config.priority import PriorityClasses, UnknownPriorityClassError
from kai_ray.control.affinity import node_affinity, read_terms
from kai_ray.control.taints import Toleration
from kai_ray.control.validate import listing, queue_problem
from kai_ray.core.model.snapshot import (
    HOSTNAME_LABEL,
    JobInfo,
    NodeAffinity,
    NodeInfo,
    NodeSelectorTerm,
    QueueInfo,
    Request,
    TaskInfo,
    TaskStatus,
    Topology,
    TopologyConstraint,
)
from kai_ray.core.model.words import count
from kai_ray.scenario.schema import JobSpec, TaskCountSpec, TaskSpec, TolerationSpec, TopologyRefSpec
from kai_ray.scenario.symbols import GpuSymbols

__all__ = ["HOSTNAME_LABEL", "JobContext", "build_job", "listing", "task_tolerations"]

_HOLDS_NODE = ("Running", "Releasing")


@dataclass(slots=True)
class JobContext:
    """What a job entry may refer to; `symbols` fills up as tasks name gpuGroups."""

    nodes: Mapping[str, NodeInfo]
    queues: Sequence[QueueInfo]
    classes: PriorityClasses
    topologies: Mapping[str, Topology]
    symbols: GpuSymbols
    now: float


def build_job(spec: JobSpec, position: int, context: JobContext) -> JobInfo:
    where = f"job {spec.name!r}"
    _check_queue(spec.queue, context.queues, where)
    try:
        priority = context.classes.resolve(spec.priority, spec.preemptible)
    except UnknownPriorityClassError as e:
        raise ConfigError(str(e), field=f"{where}: priority") from None
    if spec.gpu > 0 and spec.gpu_memory > 0:
        raise ConfigError(_BOTH_GPU, field=where)
    _check_gpu(spec.gpu, f"{where}: gpu")
    field_of = _task_fields(spec.tasks, where)
    expanded = _expand(spec.tasks)
    selectors = [spec.node_selector if t.node_selector is None else t.node_selector for t in expanded]
    shared = _shared(selectors)
    tasks = _tasks(spec, expanded, selectors, shared, context)
    subgroups = _subgroups(spec, where)
    _check_task_subgroups(spec, subgroups, field_of)
    return JobInfo(
        name=spec.name,
        queue=spec.queue,
        tasks=tasks,
        priority=priority.value,
        preemptible=priority.preemptible,
        min_member=spec.min_member or 0,
        created_at=float(position) if spec.created_at is None else spec.created_at,
        topology=_topology(spec.topology, context.topologies, where),
        node_selector=shared,
        stale_since=None if spec.stale_since is None else context.now + spec.stale_since,
        subgroups=subgroups,
        gpu_types=tuple(spec.gpu_types),
        mixed_gpu_types=spec.mixed_gpu_types,
        tenant=spec.tenant,
        tenant_labels=dict(spec.tenant_labels),
    )


def _tasks(
    spec: JobSpec,
    expanded: Sequence[TaskSpec],
    selectors: Sequence[Mapping[str, str]],
    shared: Mapping[str, str],
    context: JobContext,
) -> list[TaskInfo]:
    """The tasks, each with its own constraint: its nodeAffinity (or the job's) and its
    selector pairs beyond those every task shares (`shared`, the job's node selector)."""
    where = f"job {spec.name!r}"
    field_of = _task_fields(spec.tasks, where)
    # Read once per entry, and one object per constraint: `{count: N}` tasks and those
    # taking the job's share one (the core groups a job's pending tasks by identity).
    terms: dict[int, tuple[NodeSelectorTerm, ...]] = {id(None): _terms(spec.node_affinity, where)}
    made: dict[tuple[int, tuple[tuple[str, str], ...]], NodeAffinity | None] = {}
    tasks = []
    for i, task in enumerate(expanded):
        raw = task.node_affinity
        if id(raw) not in terms:
            terms[id(raw)] = _terms(raw, field_of(i))
        own = tuple(sorted((k, v) for k, v in selectors[i].items() if shared.get(k) != v))
        if (id(raw), own) not in made:
            made[(id(raw), own)] = node_affinity(terms[id(raw)], dict(own))
        tasks.append(_task(spec, task, i, field_of(i), context, made[(id(raw), own)]))
    return tasks


def _subgroups(spec: JobSpec, where: str) -> dict[str, int]:
    """The job's subGroups as name -> minimum; with them, a minMember must be their sum
    (the gang is the subgroups' minimums: a different total would say two things)."""
    if spec.sub_groups is None:
        return {}
    field = f"{where}: subGroups"
    if not spec.sub_groups:
        raise ConfigError("lists no subgroup; list at least one, or remove subGroups:", field=field)
    out: dict[str, int] = {}
    for i, group in enumerate(spec.sub_groups):
        if group.name in out:
            raise ConfigError(
                f"{group.name!r} is listed twice; give each subgroup its own name", field=f"{field}[{i}]"
            )
        out[group.name] = group.min_member
    total = sum(out.values())
    if spec.min_member is not None and spec.min_member != total:
        raise ConfigError(
            f"minMember {spec.min_member} is not the sum of the subGroups' minMember ({total}); "
            "remove minMember (the subgroups make the gang) or make it their sum",
            field=f"{where}: minMember",
        )
    return out


def _check_task_subgroups(
    spec: JobSpec, subgroups: Mapping[str, int], field_of: Callable[[int], str]
) -> None:
    """With subGroups, every task names one of them; without, none names any."""
    for i, task in enumerate(_expand(spec.tasks)):
        name = task.sub_group
        if not subgroups and name is not None:
            raise ConfigError(
                f"the job lists no subGroups; add subGroups: with {name!r} or remove subGroup:",
                field=f"{field_of(i)}.subGroup",
            )
        if subgroups and name not in subgroups:
            said = "names no subgroup" if name is None else f"subgroup {name!r} is not one of the job's"
            raise ConfigError(
                f"{said}; give it subGroup: one of {listing(list(subgroups))}",
                field=f"{field_of(i)}.subGroup",
            )


_BOTH_GPU = "gives both gpu and gpuMemory; ask for devices (gpu) or device memory (gpuMemory)"


def _check_queue(name: str, queues: Sequence[QueueInfo], where: str) -> None:
    problem = queue_problem(name, queues)
    if problem:
        raise ConfigError(problem, field=f"{where}: queue")


def _expand(tasks: list[TaskSpec] | TaskCountSpec) -> list[TaskSpec]:
    if isinstance(tasks, TaskCountSpec):
        one = TaskSpec.model_validate(tasks.model_dump(by_alias=True, exclude={"count"}))
        return [one] * tasks.count
    return tasks


def _task_fields(tasks: list[TaskSpec] | TaskCountSpec, where: str) -> Callable[[int], str]:
    # The shorthand has one entry for all its tasks: name that entry, not an index.
    if isinstance(tasks, TaskCountSpec):
        return lambda _i: f"{where}: tasks"
    return lambda i: f"{where}: tasks[{i}]"


def _terms(raw: list[object] | None, field: str) -> tuple[NodeSelectorTerm, ...]:
    if raw is None:
        return ()
    try:
        return read_terms(raw, "nodeAffinity")
    except ValueError as e:
        raise ConfigError(str(e), field=field) from None


def _shared(selectors: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The nodeSelector pairs every task has: the job's (a task's own others go in its
    affinity, as the Kubernetes backend and KAI's snapshots read pods)."""
    common = dict(selectors[0]) if selectors else {}
    for selector in selectors[1:]:
        common = {k: v for k, v in common.items() if selector.get(k) == v}
    return common


def task_tolerations(spec: JobSpec) -> list[frozenset[Toleration]]:
    """Each task's tolerations, in task order: its own, else the job's."""
    job = _tolerations(spec.tolerations)
    return [job if t.tolerations is None else _tolerations(t.tolerations) for t in _expand(spec.tasks)]


def _tolerations(specs: Sequence[TolerationSpec]) -> frozenset[Toleration]:
    return frozenset((t.key, t.operator, t.value, t.effect or "") for t in specs)


def _task(
    job: JobSpec, spec: TaskSpec, index: int, field: str, context: JobContext, affinity: NodeAffinity | None
) -> TaskInfo:
    _check_placement(spec, field, context.nodes)
    gpu_group = None
    if spec.gpu_group is not None and spec.node is not None:
        gpu_group = _device(spec.node, spec.gpu_group, field, context)
    return TaskInfo(
        name=f"{job.name}-{index}",
        status=TaskStatus(spec.state),
        request=_request(job, spec, field),
        node=spec.node,
        gpu_group=gpu_group,
        since=context.now + spec.since,
        subgroup=spec.sub_group or "",
        node_affinity=affinity,
    )


def _check_placement(spec: TaskSpec, field: str, nodes: Mapping[str, NodeInfo]) -> None:
    if spec.node is not None and spec.node not in nodes:
        raise ConfigError(
            f"node {spec.node!r} does not exist; use one of the nodes ({listing(list(nodes))})",
            field=f"{field}.node",
        )
    if spec.state in _HOLDS_NODE and spec.node is None:
        raise ConfigError(
            f"a {spec.state} task needs node: (the node it holds capacity on); add it",
            field=f"{field}.node",
        )
    if spec.state == "Pending" and spec.node is not None:
        raise ConfigError(
            "a Pending task is on no node; remove node: or give the task state Running",
            field=f"{field}.node",
        )
    if spec.gpu_group is not None and spec.node is None:
        raise ConfigError(
            "a task on no node sits on no device; remove gpuGroup: or give the task a node",
            field=f"{field}.gpuGroup",
        )


def _device(node: str, symbol: str, field: str, context: JobContext) -> int:
    symbols, gpus = context.symbols, context.nodes[node].gpus
    if symbols.index_of(node, symbol) is None and symbols.count(node) >= gpus:
        named = listing(symbols.symbols(node))
        raise ConfigError(
            f"{symbol!r} would be a device of node {node!r}, which has {count(gpus, 'GPU')}, "
            f"all named already ({named}); reuse one of those or give the node more gpus",
            field=f"{field}.gpuGroup",
        )
    return symbols.assign(node, symbol)


def _request(job: JobSpec, spec: TaskSpec, field: str) -> Request:
    gpu, gpu_memory = job.gpu, job.gpu_memory
    if spec.gpu is not None or spec.gpu_memory is not None:
        # A task's own gpu or gpuMemory replaces the job's GPU request as a whole.
        gpu, gpu_memory = spec.gpu or 0.0, spec.gpu_memory or 0.0
        if gpu > 0 and gpu_memory > 0:
            raise ConfigError(_BOTH_GPU, field=field)
        _check_gpu(gpu, f"{field}.gpu")
    return Request(
        gpu=gpu,
        gpu_memory=gpu_memory,
        cpu=job.cpu if spec.cpu is None else spec.cpu,
        memory=job.memory if spec.memory is None else spec.memory,
    )


def _check_gpu(gpu: float, field: str) -> None:
    if gpu > 1 and not gpu.is_integer():
        raise ConfigError(
            f"{gpu:g} is neither whole devices nor a fraction of one; "
            "ask for 1, 2, ... devices or a fraction below 1 (e.g. 0.5)",
            field=field,
        )


def _topology(
    ref: TopologyRefSpec | None, topologies: Mapping[str, Topology], where: str
) -> TopologyConstraint | None:
    if ref is None:
        return None
    topology = topologies.get(ref.name)
    if topology is None:
        raise ConfigError(
            f"topology {ref.name!r} does not exist; define it under topologies: "
            f"(defined: {listing(sorted(topologies))})",
            field=f"{where}: topology.name",
        )
    levels = (*topology.levels, HOSTNAME_LABEL)  # any topology may name the node itself
    for key, level in (("required", ref.required), ("preferred", ref.preferred)):
        if level is not None and level not in levels:
            raise ConfigError(
                f"{level!r} is not a level of topology {ref.name!r}; use one of {listing(list(levels))}",
                field=f"{where}: topology.{key}",
            )
    return TopologyConstraint(topology=ref.name, required=ref.required, preferred=ref.preferred)
