"""A queue's `access` block (who may submit to it, and at which priorities) -> the
core's QueueAccess, with each bad value refused naming the queue, the field and the fix.
The rule itself is the core's (kai_ray/core/state/access.py); docs/tenants.md says it
for users."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from kai_ray.config.base import StrictModel
from kai_ray.config.errors import ConfigError
from kai_ray.config.priority import PriorityClasses, UnknownPriorityClassError
from kai_ray.core.model.access import QueueAccess, TenantSelector
from kai_ray.core.model.affinity import NodeRequirement

__all__ = ["AccessSpec", "LabelExpressionSpec", "TenantSelectorSpec", "queue_access"]


class LabelExpressionSpec(StrictModel):
    """One matchExpressions entry of a label selector (Kubernetes' LabelSelectorRequirement)."""

    key: str = Field(min_length=1)
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)


class TenantSelectorSpec(StrictModel):
    """A Kubernetes label selector over a tenant's labels (a namespace's, on Kubernetes)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[LabelExpressionSpec] = Field(default_factory=list)


TenantName = Annotated[str, Field(min_length=1, pattern=r"^\S+$")]


class AccessSpec(StrictModel):
    """Who may submit to the queue, and at which priorities. Unset fields take the
    parent's; a child may narrow its parent's rule, never widen it."""

    tenants: list[TenantName] | None = None  # namespaces on Kubernetes, tenants on Ray
    tenant_selector: TenantSelectorSpec | None = None
    max_priority: int | str | None = None  # a priority class name or a value: the ceiling
    priority_classes: list[str] | None = None  # the classes allowed


def queue_access(queue: str, spec: AccessSpec | None, classes: PriorityClasses) -> QueueAccess | None:
    if spec is None:
        return None
    where = f"queue {queue!r}"
    ceiling, ceiling_class = _ceiling(spec.max_priority, classes, where)
    return QueueAccess(
        tenants=None if spec.tenants is None else tuple(dict.fromkeys(spec.tenants)),
        tenant_selector=_selector(spec.tenant_selector, where),
        max_priority=ceiling,
        max_priority_class=ceiling_class,
        priority_classes=_classes(spec.priority_classes, classes, where),
    )


def _ceiling(value: int | str | None, classes: PriorityClasses, where: str) -> tuple[int | None, str]:
    if value is None:
        return None, ""
    try:
        resolved = classes.resolve(value)
    except UnknownPriorityClassError as e:
        raise ConfigError(
            f"{e}; or write the ceiling as a number", field=f"{where}: access.maxPriority"
        ) from None
    named = value if isinstance(value, str) and value in classes else ""
    return resolved.value, named


def _classes(
    names: list[str] | None, classes: PriorityClasses, where: str
) -> tuple[tuple[str, int], ...] | None:
    if names is None:
        return None
    if not names:
        raise ConfigError(
            "is empty, which would allow no workload at all; list the classes allowed, or remove the key",
            field=f"{where}: access.priorityClasses",
        )
    out = []
    for i, name in enumerate(dict.fromkeys(names)):
        try:
            out.append((name, classes.resolve(name, numbers=False).value))
        except UnknownPriorityClassError as e:
            raise ConfigError(str(e), field=f"{where}: access.priorityClasses[{i}]") from None
    return tuple(out)


def _selector(spec: TenantSelectorSpec | None, where: str) -> TenantSelector | None:
    if spec is None:
        return None
    expressions = []
    for i, e in enumerate(spec.match_expressions):
        try:
            expressions.append(NodeRequirement(e.key, e.operator, tuple(e.values)))
        except ValueError as exc:
            raise ConfigError(
                str(exc), field=f"{where}: access.tenantSelector.matchExpressions[{i}]"
            ) from None
    return TenantSelector(tuple(sorted(spec.match_labels.items())), tuple(expressions))
