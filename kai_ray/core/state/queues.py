"""The queue tree as index arrays, built once per cycle from the queue list."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kai_ray.core.model.snapshot import (
    BORROW,
    PREEMPT,
    RESOURCES,
    TRY_NEXT_TYPE,
    UNLIMITED,
    GpuTypeFungibility,
    JobInfo,
    QueueInfo,
)
from kai_ray.core.state.access import AccessPath, access_path, narrowing_problem

__all__ = [
    "QueueTree",
    "QueueTreeError",
    "build_queue_tree",
    "first_type_only",
    "fungibility_modes",
    "leaf_queue_problem",
    "listing",
    "resource_problem",
    "tree_parents",
]

FloatArray = npt.NDArray[np.float64]


class QueueTreeError(ValueError):
    """An invalid queue tree; the message names the queue, the field and the fix, and
    `queue` the queue at fault (a backend leaves that one out and keeps the others)."""

    def __init__(self, message: str, queue: str) -> None:
        super().__init__(message)
        self.queue = queue


@dataclass(frozen=True, slots=True)
class QueueTree:
    """Queues by index; index order is creation order (older first)."""

    names: tuple[str, ...]
    index: dict[str, int]
    parent: tuple[int, ...]  # -1 for a top-level queue
    children: tuple[tuple[int, ...], ...]
    roots: tuple[int, ...]
    ancestors: tuple[tuple[int, ...], ...]  # the queue itself first, then up to its root
    is_leaf: tuple[bool, ...]
    priority: tuple[int, ...]
    quota: FloatArray  # [Q, 3]; -1 = the whole cluster
    limit: FloatArray  # [Q, 3]; -1 = no cap
    weight: FloatArray  # [Q, 3] over-quota weight
    preempt_min_runtime: tuple[float, ...]  # resolved from the queue upward (default 0)
    reclaim_min_runtime: tuple[float | None, ...]  # as given; resolved per victim
    limited: tuple[bool, ...]  # some queue on the path to the root has a limit
    # Per queue, the run-time defaults of its work (seconds; None: none): (expected, max).
    runtime_defaults: tuple[tuple[float | None, float | None], ...] = ()
    # Per queue, how its work that accepts several GPU types picks one: from the queue
    # upward, the first that says (default: GpuTypeFungibility()).
    type_fungibility: tuple[GpuTypeFungibility, ...] = ()
    # Some queue names a GPU type (QueueInfo.gpu_types): then every queue has a quota and
    # a limit of each type named, which the placement of a GPU gang reads (typedqueues.py).
    names_gpu_types: bool = False
    # Per queue, the access rules on its path (state/access.py): who may submit, and at
    # which priorities; empty where no queue on the path sets one.
    access: tuple[AccessPath, ...] = ()
    # Queues with a parent, deepest first (index order within a depth): the order that
    # adds each queue's figures into its parent's.
    bottom_up: tuple[int, ...] = ()
    # What other modules work out from the tree alone, kept with it (the tree is never
    # changed; fairshare.py keeps its levels here): a scheduler asks cycle after cycle.
    derived: dict[str, object] = field(default_factory=dict, compare=False, repr=False)

    def __len__(self) -> int:
        return len(self.names)

    def lowest_common_ancestor(self, a: int, b: int) -> int:
        """-1 when the two queues share no ancestor (different top-level queues)."""
        seen = set(self.ancestors[a])
        for q in self.ancestors[b]:
            if q in seen:
                return q
        return -1

    def child_toward(self, ancestor: int, q: int) -> int:
        """The child of `ancestor` on the path down to `q` (the root of q when ancestor is -1)."""
        path = self.ancestors[q]
        if ancestor == -1:
            return path[-1]
        return path[path.index(ancestor) - 1]

    def reclaim_min_runtime_for(self, reclaimer: int, victim: int) -> float:
        """reclaimMinRuntime: the value of the victim's ancestor one level below the lowest
        common ancestor; unset there, the nearest value set above it (as KAI)."""
        lca = self.lowest_common_ancestor(reclaimer, victim)
        start = self.child_toward(lca, victim)
        for q in self.ancestors[start]:
            value = self.reclaim_min_runtime[q]
            if value is not None:
                return value
        return 0.0


def build_queue_tree(queues: Sequence[QueueInfo]) -> QueueTree:
    index: dict[str, int] = {}
    for i, q in enumerate(queues):
        if q.name in index:
            raise QueueTreeError(f"queue {q.name!r}: the name is used twice; rename one of them", q.name)
        index[q.name] = i
    parent = tuple(_parent_index(q, index) for q in queues)
    children: list[list[int]] = [[] for _ in queues]
    for i, p in enumerate(parent):
        if p >= 0:
            children[p].append(i)
    ancestors = tuple(_ancestors(i, parent, queues) for i in range(len(queues)))
    _check_resources(queues)
    preempt_rt = tuple(_inherited_preempt_runtime(path, queues) for path in ancestors)
    access = tuple(access_path(path, queues) for path in ancestors)
    _check_narrowing(queues, access)
    has_limit = [any(v != UNLIMITED for v in q.limit) for q in queues]
    return QueueTree(
        names=tuple(q.name for q in queues),
        index=index,
        parent=parent,
        children=tuple(tuple(c) for c in children),
        roots=tuple(i for i, p in enumerate(parent) if p < 0),
        ancestors=ancestors,
        is_leaf=tuple(not c for c in children),
        priority=tuple(q.priority for q in queues),
        quota=np.array([q.quota for q in queues], dtype=np.float64).reshape(-1, 3),
        limit=np.array([q.limit for q in queues], dtype=np.float64).reshape(-1, 3),
        weight=np.array([q.over_quota_weight for q in queues], dtype=np.float64).reshape(-1, 3),
        preempt_min_runtime=preempt_rt,
        reclaim_min_runtime=tuple(q.reclaim_min_runtime for q in queues),
        limited=tuple(any(has_limit[a] for a in path) for path in ancestors),
        runtime_defaults=tuple((q.expected_runtime, q.max_runtime) for q in queues),
        type_fungibility=tuple(_inherited_fungibility(path, queues) for path in ancestors),
        names_gpu_types=any(q.gpu_types for q in queues),
        access=access,
        bottom_up=tuple(
            q for q in sorted(range(len(queues)), key=lambda q: -len(ancestors[q])) if parent[q] >= 0
        ),
    )


def _check_narrowing(queues: Sequence[QueueInfo], paths: Sequence[AccessPath]) -> None:
    for q, path in zip(queues, paths, strict=True):
        if q.access is not None:
            problem = narrowing_problem(q.name, q.access, path[1:])
            if problem:
                raise QueueTreeError(problem, q.name)


def _inherited_fungibility(path: tuple[int, ...], queues: Sequence[QueueInfo]) -> GpuTypeFungibility:
    for q in path:
        own = queues[q].gpu_type_fungibility
        if own is not None:
            return own
    return DEFAULT_FUNGIBILITY


DEFAULT_FUNGIBILITY = GpuTypeFungibility()


def _check_fungibility(queue: str, f: GpuTypeFungibility) -> None:
    for field_name, value, allowed in (
        ("whenCanBorrow", f.when_can_borrow, (BORROW, TRY_NEXT_TYPE)),
        ("whenCanPreempt", f.when_can_preempt, (TRY_NEXT_TYPE, PREEMPT)),
    ):
        if value not in allowed:
            raise QueueTreeError(
                f"queue {queue!r}: gpuTypeFungibility.{field_name} = {value!r}; use {' or '.join(allowed)}",
                queue,
            )


def fungibility_modes(tree: QueueTree) -> tuple[tuple[bool, ...], bool]:
    """Per queue whether it says whenCanBorrow TryNextType (() where none does), and
    whether any says whenCanPreempt Preempt: worked out once per tree."""
    modes = tree.derived.get("fungibility")
    if modes is None:
        borrow = tuple(f.when_can_borrow == TRY_NEXT_TYPE for f in tree.type_fungibility)
        held = any(f.when_can_preempt == PREEMPT for f in tree.type_fungibility)
        modes = tree.derived["fungibility"] = (borrow if any(borrow) else (), held)
    return modes  # type: ignore[return-value]


def first_type_only(tree: QueueTree, queue: int, info: JobInfo) -> bool:
    """Whether the job waits on its first GPU type before it takes another's room: its
    queue says whenCanPreempt Preempt, and it names several types (docs/gpu-types.md)."""
    return (
        len(info.gpu_types) > 1
        and not info.mixed_gpu_types
        and bool(tree.type_fungibility)
        and tree.type_fungibility[queue].when_can_preempt == PREEMPT
    )


def _parent_index(q: QueueInfo, index: dict[str, int]) -> int:
    if q.parent is None:
        return -1
    if q.parent not in index:
        raise QueueTreeError(
            f"queue {q.name!r}: parent {q.parent!r} does not exist; "
            "define that queue or remove the parent field",
            q.name,
        )
    return index[q.parent]


def _ancestors(i: int, parent: tuple[int, ...], queues: Sequence[QueueInfo]) -> tuple[int, ...]:
    path = [i]
    while parent[path[-1]] >= 0:
        nxt = parent[path[-1]]
        if nxt in path:
            cycle = " -> ".join(queues[j].name for j in [*path, nxt])
            raise QueueTreeError(
                f"queue {queues[i].name!r}: field parent makes a cycle ({cycle}); "
                "the tree must end at a queue without a parent",
                queues[i].name,
            )
        path.append(nxt)
    return tuple(path)


def _check_resources(queues: Sequence[QueueInfo]) -> None:
    for q in queues:
        for r, name in enumerate(RESOURCES):
            problem = resource_problem(name, q.quota[r], q.limit[r], q.over_quota_weight[r])
            if problem is not None:
                raise QueueTreeError(f"queue {q.name!r}: {problem}", q.name)
        if q.gpu_type_fungibility is not None:
            _check_fungibility(q.name, q.gpu_type_fungibility)


def _plain(_resource: str, value: float) -> str:
    return f"{value:g}"


def resource_problem(
    resource: str,
    quota: float,
    limit: float,
    weight: float,
    show: Callable[[str, float], str] = _plain,
) -> str | None:
    """What is wrong with one resource of a queue, and the fix, in a user's words (the
    quota and limit written by `show`, in the units the user wrote them); None when
    nothing is. The one statement of these rules: the core, the queue files and the
    Kubernetes operator all check queues with it."""
    key = f"resources.{resource}"
    if quota < 0 and quota != UNLIMITED:
        return f"{key}.quota is {show(resource, quota)}; use a value >= 0, or -1 for the whole cluster"
    if limit < 0 and limit != UNLIMITED:
        return f"{key}.limit is {show(resource, limit)}; use a value >= 0, or -1 for no limit"
    if limit != UNLIMITED and quota != UNLIMITED and limit < quota:
        return (
            f"{key}.limit {show(resource, limit)} is below its quota {show(resource, quota)}; "
            "raise the limit to at least the quota or lower the quota"
        )
    if weight < 0:
        return f"{key}.overQuotaWeight is {weight:g}; use a value >= 0 (0: no share of what is left over)"
    return None


def leaf_queue_problem(name: str, parents: Mapping[str, str | None]) -> str:
    """Why a workload may not go to queue `name` ("" when it may): it must exist and be a
    leaf (jobs run in leaf queues; parents only share quota out). `parents`: every
    queue's parent, in creation order. The one statement of this rule: Ray's submissions
    and scenario files are refused with it, the core leaves such a job out with it."""
    if name not in parents:
        leaves = [q for q in parents if q not in set(parents.values())]
        return f"queue {name!r} does not exist; use one of the leaf queues ({listing(leaves)})"
    children = [q for q, p in parents.items() if p == name]
    if children:
        return (
            f"queue {name!r} has child queues ({listing(children)}); only leaf queues hold jobs: "
            "put the job in one of them"
        )
    return ""


def tree_parents(tree: QueueTree) -> dict[str, str | None]:
    """Every queue of the tree -> its parent's name (None at the top), in creation order."""
    return {
        name: (tree.names[p] if p >= 0 else None) for name, p in zip(tree.names, tree.parent, strict=True)
    }


def listing(names: Sequence[str], most: int = 12) -> str:
    """`a, b, c`, shortened for long lists; `none` for an empty one."""
    if not names:
        return "none"
    shown = ", ".join(names[:most])
    return shown + (f", ... ({len(names)} in all)" if len(names) > most else "")


def _inherited_preempt_runtime(path: tuple[int, ...], queues: Sequence[QueueInfo]) -> float:
    for q in path:
        value = queues[q].preempt_min_runtime
        if value is not None:
            return value
    return 0.0
