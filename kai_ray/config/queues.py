"""Queue files -> the core's QueueInfo list.

Three shapes are accepted (see `parse_queues`):

- a plain YAML list of queues in the shape of KAI's `scheduling.run.ai/v2` Queue spec
  (`name`, `parentQueue`, ...) written in kai-ray units: gpu in devices, cpu in cores or
  a quantity (`500m`), memory a quantity (`16Gi`);
- Kubernetes documents `apiVersion: scheduling.run.ai/v2, kind: Queue` exactly as KAI
  takes them, in KAI's units: cpu in millicores, memory in MB of 10^6 bytes (KAI's CRD:
  "Memory resources in megabytes. 1 = 10^6 (1000*1000) bytes"; its proportion plugin
  multiplies by 1000*1000), so existing KAI YAML carries over unchanged;
- documents `apiVersion: kai-ray.io/v1, kind: Queue` with the same spec in kai-ray units;
- documents `apiVersion: kai-ray.io/v2, kind: Queue`: kai-ray's Queue CRD on Kubernetes,
  KAI's spec in KAI's units (a KAI Queue with its apiVersion changed).

`kind: List` (as `kubectl get -o yaml` writes) with such items is read too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from kai_ray.config.access import AccessSpec, queue_access
from kai_ray.config.base import Duration, Quantity, StrictModel, read_yaml_documents
from kai_ray.config.errors import ConfigError, from_validation_error
from kai_ray.config.priority import PriorityClasses
from kai_ray.core.model.quantity import format_bytes, parse_run_time
from kai_ray.core.model.snapshot import (
    BORROW,
    RESOURCES,
    TRY_NEXT_TYPE,
    UNLIMITED,
    GpuTypeFungibility,
    GpuTypeShare,
    QueueInfo,
)
from kai_ray.core.state.queues import QueueTreeError, build_queue_tree, resource_problem

__all__ = [
    "KAI_API_VERSION",
    "KAI_RAY_API_VERSION",
    "KAI_RAY_KUBE_API_VERSION",
    "QueueBody",
    "QueueSpec",
    "ResourceSpec",
    "ResourcesSpec",
    "check_queue_tree",
    "load_queues",
    "parse_queue_object",
    "parse_queues",
    "queue_info",
    "queues_from_specs",
]

KAI_API_VERSION = "scheduling.run.ai/v2"
KAI_RAY_API_VERSION = "kai-ray.io/v1"
# kai-ray's Queue CRD on Kubernetes: KAI's v2 spec in KAI's units, under kai-ray's group.
KAI_RAY_KUBE_API_VERSION = "kai-ray.io/v2"
_LIST_KINDS = ("List", "QueueList")
_M = TypeVar("_M", bound=StrictModel)


class ResourceSpec(StrictModel):
    """One resource of a queue in kai-ray units (gpu devices, cpu cores, memory bytes)."""

    quota: Quantity = 0.0  # deserved; -1: the whole cluster
    limit: Quantity = UNLIMITED  # -1: no cap
    over_quota_weight: float = 1.0


class GpuTypeSpec(StrictModel):
    """A queue's GPUs of one type (kai-ray's extension, docs/gpu-types.md): devices."""

    quota: float = 0.0  # -1: every GPU of the type
    limit: float = UNLIMITED
    over_quota_weight: float | None = None  # unset: the queue's gpu over-quota weight


GpuTypes = dict[Annotated[str, Field(min_length=1, pattern=r"^\S+$")], GpuTypeSpec]


class FungibilitySpec(StrictModel):
    """How the queue's work that accepts several GPU types picks one (docs/gpu-types.md,
    "Fungibility"): Kueue's flavor fungibility, for GPU types."""

    when_can_borrow: Literal["Borrow", "TryNextType"] = BORROW  # type: ignore[assignment]
    when_can_preempt: Literal["TryNextType", "Preempt"] = TRY_NEXT_TYPE  # type: ignore[assignment]


class ResourcesSpec(StrictModel):
    gpu: ResourceSpec | None = None
    cpu: ResourceSpec | None = None
    memory: ResourceSpec | None = None
    gpu_types: GpuTypes | None = None  # per GPU type, beside the plain gpu total


class QueueBody(StrictModel):
    """What every queue shape shares; the name and the parent key differ between shapes."""

    priority: int = 100
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    preempt_min_runtime: Duration | None = None
    reclaim_min_runtime: Duration | None = None
    # Defaults for its workloads that declare none (seconds of run time).
    expected_runtime: Duration | None = None
    max_runtime: Duration | None = None
    gpu_type_fungibility: FungibilitySpec | None = None  # unset: the parent queue's
    access: AccessSpec | None = None  # unset: the parent's (at the top: open to all)


class QueueSpec(QueueBody):
    """An entry of a plain queue list (kai-ray units)."""

    name: str = Field(min_length=1)
    parent_queue: str | None = None


class KaiRayQueueSpec(QueueBody):
    """`spec` of a `kai-ray.io/v1` Queue document."""

    parent_queue: str | None = None
    display_name: str | None = None


def _kai_number(value: object) -> object:
    # KAI's CRD types these as plain numbers; say so rather than "unable to parse".
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError(
                f"{value!r} is not a number; {KAI_API_VERSION} takes plain numbers "
                "(cpu in millicores, memory in MB), e.g. 1500; or use apiVersion "
                f"{KAI_RAY_API_VERSION} to write quantities like 1500m or 16Gi"
            ) from None
    return value


KaiNumber = Annotated[float, BeforeValidator(_kai_number)]


class KaiResourceSpec(StrictModel):
    """One resource of a KAI Queue, in KAI's units (cpu millicores, memory MB)."""

    quota: KaiNumber = 0.0
    limit: KaiNumber = UNLIMITED
    over_quota_weight: KaiNumber = 1.0


class KaiResourcesSpec(StrictModel):
    gpu: KaiResourceSpec | None = None
    cpu: KaiResourceSpec | None = None
    memory: KaiResourceSpec | None = None


class KaiQueueSpec(StrictModel):
    """`spec` of a `scheduling.run.ai/v2` Queue (KAI's own units)."""

    parent_queue: str | None = None
    display_name: str | None = None  # KAI shows it instead of the name; kai-ray ignores it
    priority: int = 100
    resources: KaiResourcesSpec = Field(default_factory=KaiResourcesSpec)
    preempt_min_runtime: Duration | None = None
    reclaim_min_runtime: Duration | None = None


class KaiRayKubeResourcesSpec(KaiResourcesSpec):
    gpu_types: GpuTypes | None = None  # per GPU type (devices), beside the plain gpu total


class KaiRayKubeQueueSpec(KaiQueueSpec):
    """`spec` of a `kai-ray.io/v2` Queue: KAI's, with kai-ray's run-time defaults and
    quotas per GPU type."""

    resources: KaiRayKubeResourcesSpec = Field(default_factory=KaiRayKubeResourcesSpec)

    expected_runtime: Duration | None = None
    max_runtime: Duration | None = None
    gpu_type_fungibility: FungibilitySpec | None = None  # unset: the parent queue's
    access: AccessSpec | None = None  # unset: the parent's (at the top: open to all)


class _Metadata(BaseModel):
    # Kubernetes metadata carries much that is not ours (labels, uid, ...): ignore it.
    model_config = ConfigDict(extra="ignore", frozen=True)
    name: str = Field(min_length=1)


class _Document(StrictModel):
    api_version: str
    kind: str
    metadata: _Metadata
    spec: dict[str, Any] = Field(default_factory=dict)
    status: dict[str, Any] | None = None  # as exported by kubectl; not read


# ------------------------------------------------------------------ units


@dataclass(frozen=True, slots=True)
class _Units:
    """How one file shape writes resources: conversion to core units and display."""

    to_core: Callable[[str, float], float]
    show: Callable[[str, float], str]


def _kai_to_core(resource: str, value: float) -> float:
    if value == UNLIMITED:
        return value
    return {"cpu": value / 1000.0, "memory": value * 1e6}.get(resource, value)


def _show_kai_ray(resource: str, value: float) -> str:
    if resource == "memory" and value != UNLIMITED:
        return format_bytes(value)
    return f"{value:g}"


KAI_RAY_UNITS = _Units(to_core=lambda _r, v: v, show=_show_kai_ray)
KAI_UNITS = _Units(to_core=_kai_to_core, show=lambda _r, v: f"{v:g}")


# ------------------------------------------------------------------ conversion


def queue_info(
    name: str,
    parent: str | None,
    body: QueueBody | KaiQueueSpec,
    *,
    units: _Units = KAI_RAY_UNITS,
    classes: PriorityClasses | None = None,
) -> QueueInfo:
    """One queue; checks each resource in the user's own units so messages quote them.
    `classes`: the priority classes its access rule may name (None: the defaults)."""
    quota, limit, weight = [], [], []
    for resource in RESOURCES:
        spec = getattr(body.resources, resource)
        q, lim, w = (0.0, UNLIMITED, 1.0) if spec is None else _triple(spec)
        _check_resource(name, resource, q, lim, w, units)
        quota.append(units.to_core(resource, q))
        limit.append(units.to_core(resource, lim))
        weight.append(w)
    return QueueInfo(
        name=name,
        parent=parent or None,
        priority=body.priority,
        quota=(quota[0], quota[1], quota[2]),
        limit=(limit[0], limit[1], limit[2]),
        over_quota_weight=(weight[0], weight[1], weight[2]),
        preempt_min_runtime=body.preempt_min_runtime,
        reclaim_min_runtime=body.reclaim_min_runtime,
        expected_runtime=_positive_runtime(name, "expectedRuntime", getattr(body, "expected_runtime", None)),
        max_runtime=_positive_runtime(name, "maxRuntime", getattr(body, "max_runtime", None)),
        gpu_types=_gpu_types(name, getattr(body.resources, "gpu_types", None), quota[0], limit[0]),
        gpu_type_fungibility=_fungibility(getattr(body, "gpu_type_fungibility", None)),
        access=queue_access(name, getattr(body, "access", None), classes or PriorityClasses()),
    )


def _fungibility(spec: FungibilitySpec | None) -> GpuTypeFungibility | None:
    if spec is None:
        return None
    return GpuTypeFungibility(when_can_borrow=spec.when_can_borrow, when_can_preempt=spec.when_can_preempt)


def _gpu_types(
    name: str, specs: Mapping[str, GpuTypeSpec] | None, gpu_quota: float, gpu_limit: float
) -> tuple[GpuTypeShare, ...]:
    """A queue's per-type figures, each checked as a resource of its own, and against the
    queue's plain gpu figures, which are the total over every type."""
    shares = []
    for gpu_type, spec in (specs or {}).items():
        weight = 1.0 if spec.over_quota_weight is None else spec.over_quota_weight
        _check_resource(name, f"gpuTypes.{gpu_type}", spec.quota, spec.limit, weight, KAI_RAY_UNITS)
        if gpu_limit != UNLIMITED and spec.limit != UNLIMITED and spec.limit > gpu_limit:
            raise ConfigError(
                f"resources.gpuTypes.{gpu_type}.limit = {spec.limit:g} is over the queue's gpu limit "
                f"of {gpu_limit:g}; lower it to at most {gpu_limit:g}, or raise resources.gpu.limit",
                field=f"queue {name!r}",
            )
        shares.append(GpuTypeShare(gpu_type, spec.quota, spec.limit, spec.over_quota_weight))
    typed = sum(s.quota for s in shares if s.quota != UNLIMITED)
    if gpu_quota != UNLIMITED and typed > gpu_quota:
        raise ConfigError(
            f"resources.gpuTypes quotas add up to {typed:g}, over the queue's gpu quota of "
            f"{gpu_quota:g} (the total over every type); raise resources.gpu.quota to at least "
            f"{typed:g}, or lower a type's quota",
            field=f"queue {name!r}",
        )
    return tuple(shares)


def _positive_runtime(queue: str, key: str, value: float | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_run_time(value)
    except ValueError as exc:
        raise ConfigError(f"{key} = {value:g}s: {exc}", field=f"queue {queue!r}") from None


def _triple(spec: ResourceSpec | KaiResourceSpec) -> tuple[float, float, float]:
    return spec.quota, spec.limit, spec.over_quota_weight


def _check_resource(
    name: str, resource: str, quota: float, limit: float, weight: float, units: _Units
) -> None:
    problem = resource_problem(resource, quota, limit, weight, units.show)
    if problem is not None:
        raise ConfigError(problem, field=f"queue {name!r}")


def check_queue_tree(queues: Sequence[QueueInfo]) -> None:
    """Duplicate names, unknown parents, cycles: the core's own checks, as a ConfigError."""
    try:
        build_queue_tree(queues)
    except QueueTreeError as e:
        raise ConfigError(str(e)) from None


def queues_from_specs(specs: Sequence[QueueSpec]) -> list[QueueInfo]:
    queues = [queue_info(s.name, s.parent_queue, s) for s in specs]
    check_queue_tree(queues)
    return queues


# ------------------------------------------------------------------ files


def parse_queues(documents: Sequence[Any], *, path: str | Path | None = None) -> list[QueueInfo]:
    """Queues from the YAML documents of one file, in file order (older first)."""
    try:
        queues = [q for i, doc in enumerate(documents) for q in _from_document(doc, i)]
        check_queue_tree(queues)
    except ConfigError as e:
        raise (e.at(path) if path is not None else e) from None
    return queues


def parse_queue_object(doc: Mapping[str, Any], *, classes: PriorityClasses | None = None) -> QueueInfo:
    """One Queue document, checked on its own (the tree is checked by the caller, who
    may hold queues from elsewhere): for objects read one at a time from an API server.
    `classes`: the priority classes an access rule may name (None: the defaults)."""
    queues = _from_kubernetes(doc, f"queue {doc.get('metadata', {}).get('name', '?')!r}", classes)
    if len(queues) != 1:
        raise ConfigError("expected one Queue", field="kind")
    return queues[0]


def load_queues(path: str | Path) -> list[QueueInfo]:
    """The queues of a file; a file without any is refused (applying it would change
    nothing, and it is usually the wrong file or an unfinished one)."""
    queues = parse_queues(read_yaml_documents(path), path=path)
    if not queues:
        raise ConfigError(
            "holds no queues; list at least one (to remove queues, use "
            "`kai-ray queue delete NAME` or `kai-ray queue apply --prune`)",
            path=path,
        )
    return queues


def _from_document(doc: Any, index: int) -> list[QueueInfo]:
    if isinstance(doc, list):
        queues: list[QueueInfo] = []
        for i, entry in enumerate(doc):
            if isinstance(entry, Mapping) and "apiVersion" in entry:
                queues.extend(_from_kubernetes(entry, f"queues[{i}]"))
            else:
                queues.append(_from_entry(entry, i))
        return queues
    if isinstance(doc, Mapping) and "apiVersion" in doc:
        return _from_kubernetes(doc, f"document {index + 1}")
    raise ConfigError(
        "expected a list of queues, or Queue documents with apiVersion "
        f"{KAI_API_VERSION} or {KAI_RAY_API_VERSION}",
        field=f"document {index + 1}",
    )


def _from_entry(entry: Any, index: int) -> QueueInfo:
    try:
        spec = QueueSpec.model_validate(entry)
    except ValidationError as e:
        raise _located(e, entry, f"queues[{index}]") from None
    return queue_info(spec.name, spec.parent_queue, spec)


def _from_kubernetes(
    doc: Mapping[str, Any], where: str, classes: PriorityClasses | None = None
) -> list[QueueInfo]:
    if doc.get("kind") in _LIST_KINDS:
        items = doc.get("items") or []
        return [q for i, item in enumerate(items) for q in _from_kubernetes(item, f"items[{i}]", classes)]
    try:
        parsed = _Document.model_validate(doc)
    except ValidationError as e:
        raise _located(e, doc, where) from None
    name = parsed.metadata.name
    if parsed.kind != "Queue":
        raise ConfigError(f"kind {parsed.kind!r} is not a queue; use kind: Queue", field=where)
    if parsed.api_version in (KAI_API_VERSION, KAI_RAY_KUBE_API_VERSION):
        shape = KaiRayKubeQueueSpec if parsed.api_version == KAI_RAY_KUBE_API_VERSION else KaiQueueSpec
        kai = _validate_spec(shape, parsed.spec, name)
        return [queue_info(name, kai.parent_queue, kai, units=KAI_UNITS, classes=classes)]
    if parsed.api_version == KAI_RAY_API_VERSION:
        own = _validate_spec(KaiRayQueueSpec, parsed.spec, name)
        return [queue_info(name, own.parent_queue, own, classes=classes)]
    raise ConfigError(
        f"apiVersion {parsed.api_version!r} is not supported; use {KAI_API_VERSION} or "
        f"{KAI_RAY_KUBE_API_VERSION} (KAI's units) or {KAI_RAY_API_VERSION} (kai-ray units)",
        field=f"queue {name!r}",
    )


def _validate_spec(model: type[_M], spec: Mapping[str, Any], name: str) -> _M:
    try:
        return model.model_validate(spec)
    except ValidationError as e:
        raise _located(e, spec, f"queue {name!r}: spec") from None


def _located(error: ValidationError, raw: Any, where: str) -> ConfigError:
    inner = from_validation_error(error, raw)
    name = _queue_name(raw)
    joint = "." if where.startswith("queues[") else ": "  # queues[0].name reads as a path
    if name is not None:
        where, joint = f"queue {name!r}", ": "
    field = f"{where}{joint}{inner.field}" if inner.field else where
    return ConfigError(inner.message, field=field)


def _queue_name(raw: Any) -> str | None:
    """The name of a queue entry or document, when it has a readable one."""
    if not isinstance(raw, Mapping):
        return None
    metadata = raw.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else raw.get("name")
    return name if isinstance(name, str) and name else None
