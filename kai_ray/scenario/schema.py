"""The scenario file, key by key, as pydantic models (docs/scenario-format.md, v1).

These models check shapes, types, quantities and bounds; cross-references (a job's
queue, a task's node, ...) and the file-wide task total are checked by the loader,
which knows the whole file.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from kai_ray.config.base import Duration, Labels, Quantity, StrictModel
from kai_ray.config.priority import PriorityClassSpec
from kai_ray.config.queues import QueueBody
from kai_ray.config.scheduler import SchedulerOptions, TopologySpec, check_actions
from kai_ray.core.model.snapshot import DEFAULT_ACTIONS, DEFAULT_GPU_TYPE, REASON_CODES, NodeInfo

__all__ = [
    "MAX_GPUS_PER_NODE",
    "MAX_ROUNDS",
    "MAX_TASKS",
    "ExpectedStatus",
    "JobExpectSpec",
    "JobSpec",
    "NodeSpec",
    "ScenarioFile",
    "ScenarioQueueSpec",
    "SubGroupSpec",
    "TaintSpec",
    "TaskCountSpec",
    "TaskExpectSpec",
    "TaskSpec",
    "TaskState",
    "TolerationSpec",
    "TopologyRefSpec",
    "UsageSpec",
]

TaskState = Literal["Pending", "Running", "Releasing", "Succeeded", "Failed"]
ExpectedStatus = Literal["Pending", "Binding", "Pipelined", "Running", "Releasing", "Succeeded", "Failed"]
_NODE = NodeInfo(name="")  # the core's node defaults: cpu 1000, memory 10Ti, gpuMemory 80Gi

# Bounds that keep a run finite and its memory small, each far above any real case (the
# format's documentation lists them). Cycles: a schedule still changing after a thousand
# cycles oscillates, more rounds would only take longer to say so. Tasks: every task is
# an object in every round, and `{count: N}` would otherwise let one line ask for any
# number. GPUs: the core keeps an index of nodes per level of idle GPUs, one level per
# device the largest node has; a machine with more is modelled as several nodes.
MAX_ROUNDS = 1000
MAX_TASKS = 100_000  # in the whole file, the count shorthand included
MAX_GPUS_PER_NODE = 1024


def _at_most(value: int, most: int, what: str, fix: str) -> int:
    if value > most:
        raise ValueError(f"{value} is more than {most}, the most {what}; {fix}")
    return value


class _Finite(StrictModel):
    # `.inf` and `.nan` are numbers to YAML, but no time or amount of a scenario.
    model_config = ConfigDict(allow_inf_nan=False)


def _symbol(value: object) -> object:
    # `gpuGroup: 0` is read by YAML as an int; a symbol is text.
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _symbols(value: object) -> object:
    return [_symbol(v) for v in value] if isinstance(value, list) else value


Symbol = Annotated[str, BeforeValidator(_symbol)]


def _priority(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is not a priority; write a class name (e.g. train) or an integer")
    return value


Priority = Annotated[int | str, BeforeValidator(_priority)]


def _gpu_types(value: Any) -> Any:
    if isinstance(value, str):
        value = [value]  # one type, written plainly
    if isinstance(value, list) and len(set(value)) != len(value):
        raise ValueError(f"{value!r} names a GPU type twice; list each type once, most preferred first")
    return value


GpuType = Annotated[str, Field(min_length=1, pattern=r"^\S+$")]
GpuTypeList = Annotated[tuple[GpuType, ...], BeforeValidator(_gpu_types)]


def _text(value: object) -> object:
    # YAML reads `value: true` or `value: 1` as a bool or a number; a taint's value is text.
    if isinstance(value, bool):
        return str(value).lower()
    return str(value) if isinstance(value, int | float) else value


Text = Annotated[str, BeforeValidator(_text)]
Effect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class TaintSpec(StrictModel):
    """A node's taint, as Kubernetes writes one (kai_ray.control.taints has the rule)."""

    key: str = Field(min_length=1)
    value: Text = ""
    effect: Effect


class TolerationSpec(StrictModel):
    """A toleration, as a pod spec writes one: an empty key with Exists tolerates every
    taint, an empty effect every effect."""

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: Text = ""
    effect: Effect | None = None

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> TolerationSpec:
        # Kubernetes refuses both: each would tolerate nothing, or something else than meant.
        if self.operator == "Exists" and self.value:
            raise ValueError(
                "operator Exists takes no value (it tolerates its key's taints whatever their value); "
                "remove value, or use operator Equal"
            )
        if not self.key and self.operator == "Equal":
            raise ValueError(
                "a toleration without a key tolerates every taint only with operator Exists; "
                "give the taint's key, or write operator: Exists"
            )
        return self


def _check_taints(taints: list[TaintSpec]) -> list[TaintSpec]:
    seen = set()
    for taint in taints:
        if (taint.key, taint.effect) in seen:
            raise ValueError(
                f"taint {taint.key}:{taint.effect} is listed twice; a node has one taint per key and effect"
            )
        seen.add((taint.key, taint.effect))
    return taints


class NodeSpec(_Finite):
    gpus: int = Field(0, ge=0)
    cpu: Quantity = Field(_NODE.cpu, ge=0)  # cores
    memory: Quantity = Field(_NODE.memory, ge=0)  # bytes
    gpu_memory: Quantity = Field(_NODE.gpu_memory, gt=0)  # bytes per device
    labels: Labels = Field(default_factory=dict)
    unschedulable: bool = False
    gpu_type: GpuType = DEFAULT_GPU_TYPE  # H100, A100, ... (docs/gpu-types.md)
    taints: Annotated[list[TaintSpec], AfterValidator(_check_taints)] = Field(default_factory=list)

    @field_validator("gpus")
    @classmethod
    def _few_gpus(cls, gpus: int) -> int:
        fix = "model a larger machine as several nodes"
        return _at_most(gpus, MAX_GPUS_PER_NODE, "one node may have", fix)


class ScenarioQueueSpec(QueueBody):
    """A queue of a scenario: kai-ray units, and `parent` (not KAI's `parentQueue`)."""

    name: str = Field(min_length=1)
    parent: str | None = None


class TopologyRefSpec(StrictModel):
    name: str
    required: str | None = None
    preferred: str | None = None


class TaskSpec(_Finite):
    state: TaskState = "Pending"
    node: str | None = None
    since: Duration = 0.0  # relative to `now`
    gpu_group: Symbol | None = None
    gpu: float | None = Field(None, ge=0)
    gpu_memory: Quantity | None = Field(None, gt=0)
    cpu: Quantity | None = Field(None, ge=0)
    memory: Quantity | None = Field(None, ge=0)
    sub_group: str | None = Field(None, min_length=1)  # one of its job's subGroups
    # Kubernetes' nodeSelectorTerms (read by kai_ray.control.affinity, which names what
    # is wrong and where); replaces the job's nodeAffinity for this task.
    node_affinity: list[Any] | None = None
    node_selector: Labels | None = None  # replaces the job's nodeSelector for this task
    tolerations: list[TolerationSpec] | None = None  # replace the job's for this task


class TaskCountSpec(TaskSpec):
    """`tasks: {count: 4, state: Pending}`: that many identical tasks."""

    count: int = Field(ge=1)

    @field_validator("count")
    @classmethod
    def _bounded(cls, count: int) -> int:
        return _at_most(count, MAX_TASKS, "tasks a scenario file may hold", "lower count")


def _tasks_shape(value: Any) -> str:
    return "task-count" if isinstance(value, dict) else "task-list"


Tasks = Annotated[
    Annotated[list[TaskSpec], Tag("task-list")] | Annotated[TaskCountSpec, Tag("task-count")],
    Discriminator(_tasks_shape),
]


class SubGroupSpec(StrictModel):
    """One subgroup of a job's gang (KAI's PodGroup subGroups): its tasks name it."""

    name: str = Field(min_length=1)
    min_member: int = Field(ge=0)


class JobSpec(_Finite):
    name: str = Field(min_length=1)
    queue: str = "default"
    priority: Priority = "train"
    preemptible: bool | None = None
    min_member: int | None = Field(None, ge=1)
    created_at: Duration | None = None  # default: the job's position in the list
    gpu: float = Field(0.0, ge=0)
    gpu_memory: Quantity = Field(0.0, ge=0)
    cpu: Quantity = Field(0.0, ge=0)
    memory: Quantity = Field(0.0, ge=0)
    topology: TopologyRefSpec | None = None
    node_selector: Labels = Field(default_factory=dict)
    node_affinity: list[Any] | None = None  # for every task that gives none of its own
    tolerations: list[TolerationSpec] = Field(default_factory=list)  # the same
    stale_since: Duration | None = None  # relative to `now`
    sub_groups: list[SubGroupSpec] | None = None  # the gang as subgroups, each with its minimum
    gpu_types: GpuTypeList = ()  # the GPU types it accepts, most preferred first; none: any
    mixed_gpu_types: bool = False  # its gang may span GPU types
    # Who submitted it (docs/tenants.md): a namespace on Kubernetes, a token's tenant on
    # Ray; unset: a trusted submitter, whom no tenant rule binds. Its labels: the
    # namespace's (or the Ray tenant's), for a queue's tenantSelector.
    tenant: str | None = Field(None, min_length=1)
    tenant_labels: Labels = Field(default_factory=dict)
    tasks: Tasks

    @field_validator("tasks")
    @classmethod
    def _some_tasks(cls, tasks: list[TaskSpec] | TaskCountSpec) -> list[TaskSpec] | TaskCountSpec:
        if isinstance(tasks, list) and not tasks:
            raise ValueError("a job needs at least one task; list them or write {count: N}")
        return tasks


class TaskExpectSpec(StrictModel):
    status: ExpectedStatus | None = None
    node: str | None = None  # null: expect no node
    gpu_groups: Annotated[list[str], BeforeValidator(_symbols)] | None = None


class JobExpectSpec(TaskExpectSpec):
    tasks: list[TaskExpectSpec] | None = None
    # The code of why the job waits after the last round (model.REASON_CODES); `none`:
    # it does not wait.
    reason: str | None = None

    @field_validator("reason")
    @classmethod
    def _known_code(cls, reason: str | None) -> str | None:
        if reason is not None and reason != "none" and reason not in REASON_CODES:
            raise ValueError(f"{reason!r} is not a reason code; use none or one of {', '.join(REASON_CODES)}")
        return reason


def _node_names(value: object) -> object:
    # YAML reads a node named 1 as an int key; node names are text.
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else value


class UsageSpec(_Finite):
    """A queue's historical usage, normalised to the cluster's capacity (0..1)."""

    gpu: float = Field(0.0, ge=0, le=1)
    cpu: float = Field(0.0, ge=0, le=1)
    memory: float = Field(0.0, ge=0, le=1)


class ScenarioFile(_Finite):
    name: str | None = None
    source: str | None = None
    actions: list[str] = Field(default_factory=lambda: list(DEFAULT_ACTIONS))
    rounds: int = Field(1, ge=1)
    now: Duration = 0.0
    # An autoscaler may add nodes to this cluster (config.preemptionDelay applies).
    cluster_can_grow: bool = False
    config: SchedulerOptions = Field(default_factory=lambda: SchedulerOptions.model_validate({}))
    nodes: Annotated[dict[str, NodeSpec], BeforeValidator(_node_names)]
    queues: list[ScenarioQueueSpec] | None = None
    priority_classes: dict[str, PriorityClassSpec] = Field(default_factory=dict)
    topologies: dict[str, TopologySpec] = Field(default_factory=dict)
    jobs: list[JobSpec]
    expect: dict[str, JobExpectSpec] = Field(default_factory=dict)
    usage: dict[str, UsageSpec] = Field(default_factory=dict)

    @field_validator("config", "priority_classes", "topologies", "expect", "usage", mode="before")
    @classmethod
    def _empty_is_default(cls, value: object) -> object:
        # `expect:` with nothing under it reads as null: the same as leaving it out.
        return {} if value is None else value

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str]) -> list[str]:
        check_actions(actions)
        return actions

    @field_validator("rounds")
    @classmethod
    def _bounded_rounds(cls, rounds: int) -> int:
        fix = "lower rounds (a schedule still changing after that many cycles oscillates)"
        return _at_most(rounds, MAX_ROUNDS, "cycles a scenario may run", fix)
