"""Who may submit to a queue, and at which priorities: a queue's access rule.

A tenant is who submits: a namespace on Kubernetes, a tenant named by its token on Ray.
A tenant has a name and labels (a namespace's labels; a Ray tenant's, from the tenants
file). A queue admits a tenant named in `tenants` or whose labels match
`tenant_selector` (either will do); a queue that sets neither takes its parent's rule,
and a child's rule narrows its parent's, never widens it: a tenant must be admitted by
every queue on the path that sets a rule (kai_ray.core.state.access).

Priorities: `max_priority` is a ceiling (a value; its class name kept for words), and
`priority_classes` a list of the classes allowed (name, value). Both bound every
workload of the queue and of its children, whoever submits it.

Validation is construction: a selector that Kubernetes would refuse raises ValueError
with the fix; the config readers turn the message into one naming the queue and field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kai_ray.core.model.affinity import NodeRequirement, requirement_matches

__all__ = [
    "SELECTOR_OPERATORS",
    "QueueAccess",
    "TenantSelector",
]

# What a Kubernetes label selector's matchExpressions allow (no Gt/Lt, unlike a node's).
SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


@dataclass(frozen=True, slots=True)
class TenantSelector:
    """A Kubernetes label selector over a tenant's labels: every pair of match_labels and
    every expression must hold. An empty selector matches every tenant (as Kubernetes'
    `{}` selects everything)."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[NodeRequirement, ...] = ()

    def __post_init__(self) -> None:
        for req in self.match_expressions:
            if req.operator not in SELECTOR_OPERATORS:
                raise ValueError(
                    f"operator {req.operator!r} is not allowed in a label selector; use one of "
                    f"{', '.join(SELECTOR_OPERATORS)}"
                )

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels):
            return False
        return all(requirement_matches(r, labels.get(r.key)) for r in self.match_expressions)

    def describe(self) -> str:
        """`team=a, tier In [gold, silver]`; `{}` (everything) for an empty selector."""
        parts = [f"{k}={v}" for k, v in self.match_labels]
        for r in self.match_expressions:
            values = f" [{', '.join(r.values)}]" if r.values else ""
            parts.append(f"{r.key} {r.operator}{values}")
        return ", ".join(parts) or "{}"


@dataclass(frozen=True, slots=True)
class QueueAccess:
    """One queue's own rule, as written (None: not set, the parent's holds)."""

    tenants: tuple[str, ...] | None = None
    tenant_selector: TenantSelector | None = None
    max_priority: int | None = None
    max_priority_class: str = ""  # the class the ceiling was written as ("" for a number)
    priority_classes: tuple[tuple[str, int], ...] | None = None  # (name, value), allowed

    @property
    def sets_tenants(self) -> bool:
        return self.tenants is not None or self.tenant_selector is not None

    @property
    def sets_priorities(self) -> bool:
        return self.max_priority is not None or self.priority_classes is not None

    def admits_tenant(self, name: str, labels: Mapping[str, str]) -> bool:
        """This queue's own tenant rule (one not set admits everyone)."""
        if not self.sets_tenants:
            return True
        if self.tenants is not None and name in self.tenants:
            return True
        return self.tenant_selector is not None and self.tenant_selector.matches(labels)

    def describe_tenants(self) -> str:
        """`tenants team-a, team-b or tenants labelled team=a`; "no tenant" for an empty rule."""
        parts = []
        if self.tenants:
            parts.append(f"{'tenant' if len(self.tenants) == 1 else 'tenants'} {', '.join(self.tenants)}")
        if self.tenant_selector is not None:
            parts.append(f"tenants labelled {self.tenant_selector.describe()}")
        return " or ".join(parts) or "no tenant"

    def allowed_values(self) -> tuple[int, ...] | None:
        """The priority values its classes allow (None: any value under the ceiling)."""
        if self.priority_classes is None:
            return None
        return tuple(sorted({v for _, v in self.priority_classes}))
