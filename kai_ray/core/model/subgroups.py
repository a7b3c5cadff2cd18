"""Sub-gangs (KAI's PodGroup subGroups): the one rule for "are these tasks enough for
the gang".

A job without subgroups is one gang: any `gang_size` of its tasks. A job with subgroups
(`JobInfo.subgroups`: name -> minimum; `TaskInfo.subgroup`: each task's) is whole only
when every subgroup has its own minimum: 1 head and 3 workers of group A are not a
RayCluster whose group B needs 2. A task beyond its subgroup's minimum, or of a subgroup
the job does not list, is elastic surplus: it never stands in for another subgroup's
minimum, and it may be taken back on its own.

`shortfall` is the rule; `surplus` is its other side (what may go while the rest stays
enough). Everything that reads a gang goes through them: the cycle's `Job`
(kai_ray/core/state/cluster.py: what allocate places first, whether a job still waits for its
gang, which running tasks a victim search may take one by one, whether a gang is
stale) and a backend's JobInfo (`info_shortfall`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from kai_ray.core.model.snapshot import JobInfo, TaskInfo, TaskStatus
from kai_ray.core.model.words import count

__all__ = [
    "WHOLE",
    "gang_tasks",
    "info_shortfall",
    "pick",
    "short_words",
    "shortfall",
    "surplus",
    "tally",
]

T = TypeVar("T")

# The one key of a job without subgroups: its gang is the whole job.
WHOLE = ""

Counts = Callable[[], Mapping[str, int]]


def shortfall(info: JobInfo, held: int, per_subgroup: Counts) -> dict[str, int]:
    """What a set of the job's tasks lacks to be enough for its gang: per subgroup below
    its minimum, how many more it needs ({WHOLE: n} for a job without subgroups); {} when
    the set is enough. `held`: how many tasks the set has; `per_subgroup()`: how many of
    each subgroup (asked only for a job with subgroups, so a plain job costs nothing)."""
    if not info.subgroups:
        short = info.gang_size - held
        return {WHOLE: short} if short > 0 else {}
    have = per_subgroup()
    return {
        name: least - have.get(name, 0) for name, least in info.subgroups.items() if have.get(name, 0) < least
    }


def surplus(info: JobInfo, held: int, per_subgroup: Counts) -> dict[str, int]:
    """How many of a set's tasks each subgroup holds beyond its minimum (every one of a
    subgroup the job does not list): those may go one at a time and the rest still
    satisfies `shortfall`. Arguments as there."""
    if not info.subgroups:
        extra = held - info.gang_size
        return {WHOLE: extra} if extra > 0 else {}
    least = info.subgroups
    return {name: n - least.get(name, 0) for name, n in per_subgroup().items() if n > least.get(name, 0)}


def tally(subgroups: Iterable[str]) -> dict[str, int]:
    """How many times each subgroup name comes."""
    out: dict[str, int] = {}
    for name in subgroups:
        out[name] = out.get(name, 0) + 1
    return out


def pick(
    info: JobInfo, wanted: Mapping[str, int], tasks: Sequence[T], subgroup_of: Callable[[T], str]
) -> list[T]:
    """Of `tasks` (in their order), the first ones of each subgroup up to `wanted` of it
    (a shortfall, or a surplus); fewer where fewer are there."""
    if not info.subgroups:
        return list(tasks[: wanted.get(WHOLE, 0)])
    left = dict(wanted)
    out: list[T] = []
    for t in tasks:
        name = subgroup_of(t)
        if left.get(name, 0) > 0:
            out.append(t)
            left[name] -= 1
    return out


def info_shortfall(info: JobInfo) -> dict[str, int]:
    """`shortfall` of a backend's JobInfo: what its active tasks lack of its gang."""
    active = [t for t in info.tasks if t.status.is_active]
    return shortfall(info, len(active), lambda: tally(t.subgroup for t in active))


def gang_tasks(info: JobInfo) -> list[TaskInfo]:
    """The job's gang as it would start: its active tasks, then the first pending ones of
    each subgroup its active tasks lack (for a new job: each subgroup's minimum)."""
    active = [t for t in info.tasks if t.status.is_active]
    pending = [t for t in info.tasks if t.status is TaskStatus.PENDING]
    short = shortfall(info, len(active), lambda: tally(t.subgroup for t in active))
    return active + pick(info, short, pending, _subgroup)


def short_words(info: JobInfo, short: Mapping[str, int], held: Mapping[str, int]) -> str:
    """The subgroups a gang lacks, for people: 'subgroup gpu has 0 of its 2 tasks, ...'."""
    return ", ".join(
        f"subgroup {name} has {held.get(name, 0)} of its {count(info.subgroups[name], 'task')}"
        for name in short
    )


def _subgroup(task: TaskInfo) -> str:
    return task.subgroup
