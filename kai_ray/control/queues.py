"""Changing the queue tree of a running scheduler, the way `kubectl apply` changes
objects: the queues named are added or updated, the others are kept. Removing a queue
is explicit (delete, or apply with prune) and refused while the queue or one of its
children still holds workloads, because those would be left in a queue that no longer
exists. Pure functions over plain data: the engine passes in who holds what.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kai_ray.core import (
    GpuTypeFungibility,
    GpuTypeShare,
    NodeRequirement,
    QueueAccess,
    QueueInfo,
    TenantSelector,
)
from kai_ray.core.model.words import listed
from kai_ray.core.state.queues import QueueTreeError, build_queue_tree

__all__ = [
    "QueueChange",
    "QueueChangeError",
    "plan_apply",
    "plan_delete",
    "queue_from_json",
    "queue_holders",
]


class QueueChangeError(ValueError):
    """A queue change refused as a whole: the message names the queue and the fix."""


@dataclass(frozen=True, slots=True)
class QueueChange:
    """What a change does, and the tree after it (nothing is applied until the caller
    stores `queues`)."""

    queues: tuple[QueueInfo, ...]
    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # queues the change did not name, left as they were

    def summary(self) -> str:
        """One line for people, e.g. "added ml; updated team-a; kept team-b"."""
        parts = [
            f"{verb} {', '.join(names)}"
            for verb, names in (
                ("added", self.added),
                ("updated", self.updated),
                ("unchanged", self.unchanged),
                ("removed", self.removed),
                ("kept", self.kept),
            )
            if names
        ]
        return "; ".join(parts) or "no queues"

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "added": list(self.added),
            "updated": list(self.updated),
            "unchanged": list(self.unchanged),
            "removed": list(self.removed),
            "kept": list(self.kept),
        }


def plan_apply(
    current: Sequence[QueueInfo],
    incoming: Sequence[QueueInfo],
    holders: Mapping[str, Sequence[str]],
    *,
    prune: bool = False,
) -> QueueChange:
    """Add or update the `incoming` queues; with `prune`, also remove every queue the
    file does not name. `holders`: queue -> ids of the live workloads in it."""
    if not incoming:
        raise QueueChangeError(
            "no queues given; a queues file lists at least one queue (to remove queues, "
            "use `kai-ray queue delete NAME` or `kai-ray queue apply --prune`)"
        )
    names = [q.name for q in incoming]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise QueueChangeError(f"queue {twice[0]!r}: the name is used twice; rename one of them")
    by_name = {q.name: q for q in incoming}
    old = {q.name: q for q in current}
    removed = [q.name for q in current if q.name not in by_name] if prune else []
    _refuse_removal(removed, current, holders, hint="name it in the file, or move its workloads")
    result = [by_name.get(q.name, q) for q in current if q.name not in removed]
    result += [q for q in incoming if q.name not in old]
    _refuse_new_children(result, holders)
    tree = _checked(result)
    return QueueChange(
        queues=tree,
        added=tuple(n for n in names if n not in old),
        updated=tuple(n for n in names if n in old and old[n] != by_name[n]),
        unchanged=tuple(n for n in names if n in old and old[n] == by_name[n]),
        removed=tuple(removed),
        kept=tuple(q.name for q in current if q.name not in by_name and q.name not in removed),
    )


def plan_delete(
    current: Sequence[QueueInfo], names: Iterable[str], holders: Mapping[str, Sequence[str]]
) -> QueueChange:
    """Remove the named queues (a parent only together with its children)."""
    wanted = list(dict.fromkeys(names))
    known = {q.name for q in current}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise QueueChangeError(
            f"queue {unknown[0]!r} does not exist; `kai-ray queue list` shows the queues there are"
        )
    _refuse_removal(wanted, current, holders, hint="cancel them or wait for them to finish")
    orphans = [q for q in current if q.parent in wanted and q.name not in wanted]
    if orphans:
        children = ", ".join(q.name for q in orphans)
        raise QueueChangeError(
            f"queue {orphans[0].parent!r} has child queues ({children}); delete them too "
            f"(`kai-ray queue delete {' '.join([*wanted, *(q.name for q in orphans)])}`)"
        )
    result = [q for q in current if q.name not in wanted]
    return QueueChange(
        queues=_checked(result),
        removed=tuple(wanted),
        kept=tuple(q.name for q in result),
    )


def _refuse_removal(
    removed: Sequence[str],
    current: Sequence[QueueInfo],
    holders: Mapping[str, Sequence[str]],
    hint: str,
) -> None:
    """A queue goes only when neither it nor any queue below it holds a workload."""
    for name in removed:
        held = {q: ids for q in _subtree(name, current) if (ids := holders.get(q))}
        if held:
            where = ", ".join(
                f"{q}: {listed(ids)}" if q == name else f"child {q}: {listed(ids)}" for q, ids in held.items()
            )
            raise QueueChangeError(
                f"queue {name!r} still holds workloads ({where}); {hint} before removing it"
            )


def _refuse_new_children(queues: Sequence[QueueInfo], holders: Mapping[str, Sequence[str]]) -> None:
    """Workloads run in leaf queues: a queue holding some cannot become a parent."""
    for q in queues:
        if q.parent and holders.get(q.parent):
            raise QueueChangeError(
                f"queue {q.name!r}: parent {q.parent!r} holds workloads ({listed(holders[q.parent])}) "
                "and workloads run in leaf queues; choose another parent, or wait until they finish"
            )


def _subtree(name: str, queues: Sequence[QueueInfo]) -> list[str]:
    out, frontier = [name], [name]
    while frontier:
        frontier = [q.name for q in queues if q.parent in frontier]
        out += frontier
    return out


def _checked(queues: list[QueueInfo]) -> tuple[QueueInfo, ...]:
    try:
        build_queue_tree(queues)
    except QueueTreeError as exc:
        raise QueueChangeError(str(exc)) from None
    return tuple(queues)


def queue_holders(members: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(queue, workload id) pairs of live workloads -> the ids each queue holds."""
    holders: dict[str, list[str]] = defaultdict(list)
    for queue, wid in members:
        holders[queue].append(wid)
    return dict(holders)


def queue_from_json(data: Mapping[str, Any]) -> QueueInfo:
    """A queue as stored (dataclasses.asdict, through JSON: tuples became lists)."""
    fields = dict(data)
    for key in ("quota", "limit", "over_quota_weight"):
        if key in fields:
            fields[key] = tuple(float(x) for x in fields[key])
    fields["gpu_types"] = tuple(GpuTypeShare(**share) for share in fields.get("gpu_types") or ())
    fungibility = fields.get("gpu_type_fungibility")
    fields["gpu_type_fungibility"] = None if fungibility is None else GpuTypeFungibility(**fungibility)
    access = fields.get("access")
    fields["access"] = None if access is None else _access_from_json(access)
    return QueueInfo(**fields)


def _access_from_json(data: Mapping[str, Any]) -> QueueAccess:
    selector = data.get("tenant_selector")
    tenants = data.get("tenants")
    classes = data.get("priority_classes")
    return QueueAccess(
        tenants=None if tenants is None else tuple(tenants),
        tenant_selector=None
        if selector is None
        else TenantSelector(
            tuple((k, v) for k, v in selector.get("match_labels") or ()),
            tuple(
                NodeRequirement(r["key"], r["operator"], tuple(r.get("values") or ()))
                for r in selector.get("match_expressions") or ()
            ),
        ),
        max_priority=data.get("max_priority"),
        max_priority_class=data.get("max_priority_class") or "",
        priority_classes=None if classes is None else tuple((n, int(v)) for n, v in classes),
    )
