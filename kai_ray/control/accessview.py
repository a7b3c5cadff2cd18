"""Queue access rules as people read them: the dashboard's queue rows, the Ray client's
queue views, and `kai-ray explain` on both backends.

For each queue: its own rule as written, and the rule in effect along its path (who is
admitted, by which queues' rules; the priority ceiling and the classes allowed, and
from which queue; whether queues are closed by default). For a workload its queue does
not take: which rule stops it (the queue whose rule it is, the field), what that rule
allows and the fix. Whether a workload is taken is the core's decision alone
(core/state/access.py); this module only locates and describes the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kai_ray.core import JobInfo, QueueAccess, QueueInfo
from kai_ray.core.state.access import AccessPath, Refusal, allows, ceiling, paths_of, refusing_rule

__all__ = [
    "ACCESS_CODES",
    "access_views",
    "own_rule",
    "refused_by",
    "rule_lines",
]

# The reason codes of a workload its queue's access rule refuses (core REASON_CODES).
ACCESS_CODES = ("queue-tenant", "priority-ceiling")


# ---------------------------------------------------------------- a queue's rule


def own_rule(rule: QueueAccess) -> dict[str, Any]:
    """A rule as written (None: a field not set, the parent's holds)."""
    classes = rule.priority_classes
    return {
        "tenants": None if rule.tenants is None else list(rule.tenants),
        "tenant_selector": None if rule.tenant_selector is None else rule.tenant_selector.describe(),
        "max_priority": rule.max_priority,
        "max_priority_class": rule.max_priority_class or None,
        "priority_classes": None if classes is None else [{"name": n, "value": v} for n, v in classes],
    }


def access_views(queues: Sequence[QueueInfo], closed: bool) -> dict[str, dict[str, Any]]:
    """Per queue: {"own": its rule as written or None, "effective": the rule along its
    path} (docs/dashboard.md documents the fields)."""
    paths = paths_of(queues)
    return {
        q.name: {
            "own": None if q.access is None else own_rule(q.access),
            "effective": _effective(q.name, paths[q.name], closed),
        }
        for q in queues
    }


def _effective(queue: str, rules: AccessPath, closed: bool) -> dict[str, Any]:
    tenant_rules = [(q, a) for q, a in rules if a.sets_tenants]
    top = _tightest_ceiling(rules)
    classes = _allowed_classes(rules)
    return {
        "tenants": _tenant_words(queue, tenant_rules, closed),
        "tenant_rules": [
            {
                "queue": q,
                "tenants": None if a.tenants is None else list(a.tenants),
                "tenant_selector": None if a.tenant_selector is None else a.tenant_selector.describe(),
                "words": a.describe_tenants(),
            }
            for q, a in tenant_rules
        ],
        "open": not tenant_rules and not closed,
        "closed_by_default": not tenant_rules and closed,
        "max_priority": None if top is None else top[0],
        "max_priority_class": None if top is None else top[1] or None,
        "max_priority_from": None if top is None else top[2],
        "priority_classes": None if classes is None else classes[0],
        "priority_classes_from": None if classes is None else classes[1],
    }


def _tenant_words(queue: str, tenant_rules: list[tuple[str, QueueAccess]], closed: bool) -> str:
    if not tenant_rules:
        return "no tenant (queues are closed by default)" if closed else "every tenant"
    # Every rule on the path must admit a tenant: a child narrows its parent's rule.
    return " and ".join(
        a.describe_tenants() if q == queue else f"{a.describe_tenants()} (rule of {q})"
        for q, a in tenant_rules
    )


def _tightest_ceiling(rules: AccessPath) -> tuple[int, str, str] | None:
    """(value, its class name or "", the queue whose rule sets it): the lowest ceiling on
    the path, the nearest queue's on a tie."""
    best: tuple[int, str, str] | None = None
    for queue, rule in rules:
        value = ceiling(((queue, rule),))
        if value is not None and (best is None or value < best[0]):
            best = (value, _class_named(rule, value), queue)
    return best


def _class_named(rule: QueueAccess, value: int) -> str:
    if rule.max_priority == value and rule.max_priority_class:
        return rule.max_priority_class
    return next((n for n, v in rule.priority_classes or () if v == value), "")


def _allowed_classes(rules: AccessPath) -> tuple[list[dict[str, Any]], str] | None:
    """The classes the nearest rule that lists classes allows, less those another rule
    on the path does not allow; and that rule's queue."""
    for queue, rule in rules:
        if rule.priority_classes is not None:
            kept = [{"name": n, "value": v} for n, v in rule.priority_classes if allows(rules, v)]
            return kept, queue
    return None


# ---------------------------------------------------------------- the rule that stops a workload


def refused_by(
    queue: str,
    queues: Sequence[QueueInfo],
    closed: bool,
    *,
    priority: int,
    tenant: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Which rule of its queue's path refuses a workload (None: its queue takes it):
    {"code", "reason" (the core's words), "queue", "rule_queue" (None: no queue names any
    tenant and queues are closed by default), "inherited", "field", "allows", "fix"}."""
    rules = paths_of(queues).get(queue, ())
    probe = JobInfo(queue, queue, [], priority=priority, tenant=tenant, tenant_labels=labels or {})
    said = refusing_rule(probe, rules, closed)  # the core decides, and names the rule
    if said is None:
        return None
    return {
        "code": said.reason.code,
        "reason": said.reason.text,
        "queue": queue,
        "rule_queue": said.queue,
        "inherited": said.queue is not None and said.queue != queue,
        "field": said.field,
        **_described(said, queue, tenant or ""),
    }


def _described(said: Refusal, queue: str, tenant: str) -> dict[str, str]:
    """What the refusing rule allows, and the fix, in words."""
    rule, rule_queue = said.rule, said.queue
    if rule is None:  # no queue on the path names any tenant: closed by default
        return {
            "allows": (
                f"no tenant: no queue on the path of {queue!r} names any, and queues are closed by default"
            ),
            "fix": f"an admin names tenant {tenant!r} in access.tenants of queue {queue!r} or of a parent",
        }
    if said.reason.code == "queue-tenant":
        fix = f"submit to a queue that admits tenant {tenant!r}, or an admin adds it to access.tenants"
        if rule.tenant_selector is not None:
            fix += " or gives it labels that match access.tenantSelector"
        return {"allows": rule.describe_tenants(), "fix": f"{fix} of queue {rule_queue!r}"}
    if said.field == "access.maxPriority":
        named = f" ({rule.max_priority_class})" if rule.max_priority_class else ""
        return {
            "allows": f"priorities up to {rule.max_priority}{named}",
            "fix": f"use a priority class of at most {rule.max_priority}, or submit to another queue",
        }
    classes = ", ".join(f"{n} ({v})" for n, v in rule.priority_classes or ())
    return {
        "allows": f"the priority classes {classes}",
        "fix": f"use one of {classes}, or submit to another queue",
    }


def rule_lines(found: Mapping[str, Any], indent: str = "  ", waiting: bool = True) -> list[str]:
    """`kai-ray explain`'s lines naming the rule (both backends): which queue's rule,
    which field, what it allows, the fix. `waiting` False: the workload runs (a rule
    changed since it started), and keeps running."""
    rule_queue, queue = found["rule_queue"], found["queue"]
    if found["field"] == "closedQueues":
        where = "closedQueues (the scheduler's setting)"
    elif found["inherited"]:
        where = f"{found['field']} of queue {rule_queue!r} (a parent of {queue!r}: its rule holds below it)"
    else:
        where = f"{found['field']} of queue {rule_queue!r}"
    said = (
        "stopped by the access rule"
        if waiting
        else "runs, but its queue no longer admits it: the access rule"
    )
    return [
        f"{indent}{said} ({found['code']}): {where}",
        f"{indent}  it allows {found['allows']}",
        f"{indent}  fix: {found['fix']}",
    ]
