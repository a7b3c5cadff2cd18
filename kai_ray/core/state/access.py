"""Queue access (model/access.py) over the tree: the rules on a queue's path, a child's
rule checked against its parents', and the one statement of whether a job may be
placed in its queue.

A job its queue does not admit keeps what it holds (running work is reported, never
evicted by this rule: a rule changed later must not kill work), but none of its pending
tasks enters the cycle: they are never placed, and they ask nothing of the queue's fair
share. Its reason names the rule (codes `queue-tenant` and `priority-ceiling`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from kai_ray.core.model.access import QueueAccess
from kai_ray.core.model.snapshot import JobInfo, QueueInfo, Reason, TaskStatus

__all__ = [
    "Refusal",
    "access_path",
    "admits",
    "allows",
    "ceiling",
    "held_part",
    "narrowing_problem",
    "path_of",
    "paths_of",
    "refusal",
    "refusing_rule",
]

AccessPath = tuple[tuple[str, QueueAccess], ...]  # (queue, its own rule), the queue first, rules set only


def access_path(path: tuple[int, ...], queues: Sequence[QueueInfo]) -> AccessPath:
    return tuple((queues[q].name, a) for q in path if (a := queues[q].access) is not None)


def path_of(queue: str, queues: Sequence[QueueInfo]) -> AccessPath:
    """The rules on a queue's path, read from a queue list (no tree at hand: a backend's
    check at the door, before anything is queued)."""
    return _walk(queue, {q.name: q for q in queues})


def paths_of(queues: Sequence[QueueInfo]) -> dict[str, AccessPath]:
    """Every queue's path of rules, with one index of the list (a dashboard's or a
    status report's thousand queues)."""
    by_name = {q.name: q for q in queues}
    return {q.name: _walk(q.name, by_name) for q in queues}


def _walk(queue: str, by_name: Mapping[str, QueueInfo]) -> AccessPath:
    out, seen, q = [], set(), by_name.get(queue)
    while q is not None and q.name not in seen:  # a cycle is the tree's to refuse
        seen.add(q.name)
        if q.access is not None:
            out.append((q.name, q.access))
        q = by_name.get(q.parent) if q.parent else None
    return tuple(out)


def admits(rules: AccessPath, closed: bool, tenant: str, labels: Mapping[str, str]) -> bool:
    """Whether the queue whose path holds `rules` takes work of this tenant."""
    setting = [a for _, a in rules if a.sets_tenants]
    if not setting:
        return not closed
    return all(a.admits_tenant(tenant, labels) for a in setting)


def allows(rules: AccessPath, priority: int) -> bool:
    """Whether the queue whose path holds `rules` takes work of this priority."""
    return all(_allows(a, priority) for _, a in rules)


def ceiling(rules: AccessPath) -> int | None:
    """The highest priority the path allows (None: no bound)."""
    bounds = [c for _, a in rules if (c := _ceiling(a)) is not None]
    return min(bounds) if bounds else None


@dataclasses.dataclass(frozen=True, slots=True)
class Refusal:
    """Why its queue does not take a job, and the rule that says so: the queue whose rule
    it is and that rule (None for both: no queue on the path names a tenant and queues
    are closed by default), and the field of it, as users write it."""

    reason: Reason
    queue: str | None
    rule: QueueAccess | None
    field: str  # access.tenants, access.tenantSelector, access.maxPriority, ..., or closedQueues


def refusal(info: JobInfo, rules: AccessPath, closed: bool) -> Reason | None:
    """Why its queue does not take the job, or None (refusing_rule's reason)."""
    found = refusing_rule(info, rules, closed)
    return None if found is None else found.reason


def refusing_rule(info: JobInfo, rules: AccessPath, closed: bool) -> Refusal | None:
    """The first rule on the path that does not take the job, or None. The tenant rule
    binds a job with a tenant (None: a trusted submitter); the priority rules bind every
    job."""
    if info.tenant is not None:
        said = _tenant_refusal(info, rules, closed)
        if said is not None:
            return said
    return _priority_refusal(info, rules)


def _tenant_refusal(info: JobInfo, rules: AccessPath, closed: bool) -> Refusal | None:
    tenant = info.tenant or ""
    setting = [(q, a) for q, a in rules if a.sets_tenants]
    if not setting:
        if not closed:
            return None
        reason = Reason(
            "queue-tenant",
            f"queue {info.queue!r} is closed to tenants (closedQueues) and no queue on its path names any: "
            f"tenant {tenant!r} may not submit to it; an admin names it in the queue's access.tenants",
        )
        return Refusal(reason, None, None, "closedQueues")
    for queue, rule in setting:
        if not rule.admits_tenant(tenant, info.tenant_labels):
            whose = f"queue {queue!r}" if queue == info.queue else f"queue {info.queue!r}'s parent {queue!r}"
            reason = Reason(
                "queue-tenant",
                f"{whose} admits {rule.describe_tenants()}, not tenant {tenant!r}; submit to a queue "
                f"that admits it, or an admin adds it to access.tenants of queue {queue!r}",
            )
            return Refusal(reason, queue, rule, _tenant_field(rule))
    return None


def _tenant_field(rule: QueueAccess) -> str:
    if rule.tenant_selector is None:
        return "access.tenants"
    return "access.tenantSelector" if rule.tenants is None else "access.tenants / access.tenantSelector"


def _priority_refusal(info: JobInfo, rules: AccessPath) -> Refusal | None:
    for queue, rule in rules:
        if rule.max_priority is not None and info.priority > rule.max_priority:
            named = f" ({rule.max_priority_class})" if rule.max_priority_class else ""
            reason = Reason(
                "priority-ceiling",
                f"priority {info.priority} is over the ceiling of queue {queue!r}, "
                f"{rule.max_priority}{named}; use a priority class of at most {rule.max_priority}",
            )
            return Refusal(reason, queue, rule, "access.maxPriority")
        allowed = rule.allowed_values()
        if allowed is not None and info.priority not in allowed:
            classes = ", ".join(f"{n} ({v})" for n, v in rule.priority_classes or ())
            reason = Reason(
                "priority-ceiling",
                f"priority {info.priority} is not a class queue {queue!r} allows; use one of {classes}",
            )
            return Refusal(reason, queue, rule, "access.priorityClasses")
    return None


def held_part(info: JobInfo) -> JobInfo | None:
    """The job as the cycle may see it when its queue does not take it: what it holds
    (counted as ever), none of what waits; None when it holds nothing."""
    held = [t for t in info.tasks if t.status is not TaskStatus.PENDING]
    if not held:
        return None
    return dataclasses.replace(info, tasks=held)


def narrowing_problem(queue: str, own: QueueAccess, parents: AccessPath) -> str:
    """Why a child's rule is wider than its parents' ("" when it is not): a tenant named
    that a parent's names-only rule leaves out, a ceiling over a parent's, a class that a
    parent does not allow. (A selector cannot be compared with names: the path's rules
    all hold, so it narrows in effect.)"""
    for parent, rule in parents:
        fix = f"a child queue may only narrow its parent's rule: {{}}, or widen {parent!r}'s rule"
        if own.tenants and rule.tenants is not None and rule.tenant_selector is None:
            outside = [t for t in own.tenants if t not in rule.tenants]
            if outside:
                return (
                    f"queue {queue!r}: access.tenants names {outside[0]!r}, which its parent {parent!r} "
                    f"does not admit (it admits {rule.describe_tenants()}); "
                    + fix.format(f"remove {outside[0]!r}")
                )
        ceiling = _ceiling(rule)
        if ceiling is not None and own.max_priority is not None and own.max_priority > ceiling:
            return (
                f"queue {queue!r}: access.maxPriority {own.max_priority} is over its parent {parent!r}'s "
                f"ceiling of {ceiling}; " + fix.format(f"lower it to at most {ceiling}")
            )
        for name, value in own.priority_classes or ():
            if not _allows(rule, value):
                return (
                    f"queue {queue!r}: access.priorityClasses names {name!r} ({value}), which its parent "
                    f"{parent!r} does not allow; " + fix.format(f"remove {name!r}")
                )
    return ""


def _ceiling(rule: QueueAccess) -> int | None:
    values = rule.allowed_values()
    top = max(values) if values else None
    if rule.max_priority is None:
        return top
    return rule.max_priority if top is None else min(top, rule.max_priority)


def _allows(rule: QueueAccess, value: int) -> bool:
    allowed = rule.allowed_values()
    if allowed is not None and value not in allowed:
        return False
    return rule.max_priority is None or value <= rule.max_priority
