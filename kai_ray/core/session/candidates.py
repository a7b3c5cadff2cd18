"""The candidate victims of the actions that evict, kept for the cycle (an in-cycle memo
the session hands out: CycleContext.victim_candidates builds it).

- `Candidates`: every unit the policy lets be a victim (its running tasks, and those
  placed earlier in the cycle: Task.takeable), in victim order, with their tasks as
  arrays (node, demand, unit). An action takes them when its first search needs them
  and keeps them to its end (a unit it evicts stays in, no longer live); the next
  action takes the same while the same state stands (Statement.state_mark): they are
  then exactly what a fresh build would give. A cycle cache keeps them between cycles
  (incremental/candidates.py).
- `SharedUnits`: the part of them many searches share, read-only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from kai_ray.core.state.jobs import Job, Task, Unit
from kai_ray.core.state.nodes import EPS, FloatArray
from kai_ray.core.state.statement import Statement

__all__ = [
    "ROOM_SLACK",
    "Candidates",
    "Piece",
    "SharedUnits",
    "frees_at_most",
    "tasks_per_node",
    "unit_piece",
    "victim_units",
]

# Rounding slack of the bound: the search sums freed room in another order than this.
ROOM_SLACK = 1e-9


def victim_units(jobs: Sequence[Job], order: Callable[[Unit], Any]) -> list[Unit]:
    """Eviction units of running jobs (a gang, or one elastic surplus task, last task
    first; surplus: Job.surplus_of), sorted by the policy's victim order. Their tasks are
    those that may be taken (Task.takeable): running, or placed earlier in the cycle, as
    KAI takes a session's new placements too. A task still reported running on a node
    that left the cluster holds nothing here: evicting it would free nothing."""
    units: list[Unit] = []
    for job in jobs:
        running = [t for t in job.tasks if t.takeable]
        if not running:
            continue
        # Surplus beyond each subgroup's minimum goes one task at a time; the rest of
        # the gang only as a whole (taking part of it would break the gang).
        extra = job.surplus_of(running)
        if not extra:
            units.append(Unit(job, tuple(running), False))
            continue
        units.extend(Unit(job, (t,), True) for t in extra)
        rest = tuple(t for t in running if t not in extra)
        if rest:
            units.append(Unit(job, rest, False))
    units.sort(key=order)
    return units


# A unit's part of the candidates' arrays: its tasks' nodes and their demands.
Piece = tuple[np.ndarray, np.ndarray]


def frees_at_most(t: Task) -> FloatArray:
    """What the task's leaving frees at node level, at most: its demand, and for a share
    of a device that whole device (freed once the device's other shares go too). The
    victim bounds read it: a share's own demand holds no whole device, and a bound built
    on it would never let a share make room for a whole-GPU task."""
    if not t.fraction_request:
        return t.demand
    freed = t.demand.copy()
    freed[0] = max(freed[0], 1.0)
    return freed


def unit_piece(u: Unit, width: int) -> Piece:
    demand = np.array([frees_at_most(t) for t in u.tasks], dtype=np.float64).reshape(-1, width)
    return np.array([t.node for t in u.tasks], dtype=np.int64), demand


# Past this many tasks changed since the last look, the units' liveness is worked out
# anew in one vectorised pass rather than unit by unit (a scenario of thousands of victims).
_RECOUNT_AFTER = 64


class Candidates:
    """Units in victim order, with their tasks as arrays (built when first needed)."""

    def __init__(self, units: list[Unit], width: int, pieces: Sequence[Piece] | None = None) -> None:
        """`pieces`: each unit's (unit_piece), where they are kept."""
        self.units = units
        self.width = width
        self._pieces = pieces
        self._arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self._live: tuple[Statement, int, np.ndarray] | None = None  # (as of, changes seen, flags)
        self.index = {id(u): i for i, u in enumerate(units)}
        # Every unit's tasks in one list, and where each unit's tasks begin (it has one
        # at least): whether each runs whole is then one pass over tasks, not a call per unit.
        self._tasks = [t for u in units for t in u.tasks]
        self._starts = np.cumsum([0] + [len(u.tasks) for u in units[:-1]], dtype=np.int64)
        # Lists of members kept for many searches (ActionCandidates.taken_by), by id,
        # with their places: each list is held here, so its id stays its own.
        self._members: dict[int, tuple[Sequence[Unit], np.ndarray]] = {}
        self._task_index: dict[int, int] | None = None
        # Each task's live flag, with the statement and the place in its changed_tasks
        # they were made at (live).
        self._flags: tuple[Statement, int, np.ndarray] | None = None

    def task_rows(self, unit: int) -> range:
        """The rows of the unit's tasks in the arrays."""
        end = int(self._starts[unit + 1]) if unit + 1 < len(self._starts) else len(self._tasks)
        return range(int(self._starts[unit]), end)

    def task_index(self) -> dict[int, int]:
        """Each task's row in the arrays, by the task's id (made when first asked)."""
        if self._task_index is None:
            self._task_index = {id(t): i for i, t in enumerate(self._tasks)}
        return self._task_index

    def for_cycle(self) -> Candidates:
        """The same units for another cycle (a cycle cache keeps them between cycles,
        incremental/candidates.py): what is read from them alone is shared; what a cycle
        keeps of its own (its members' places, its tasks' live flags) starts afresh."""
        self.arrays()  # made once, on the shared units, before the copy
        other = copy.copy(self)
        other._members = {}
        other._flags = other._live = None
        return other

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(each task's node, its unit, what it frees at most; each unit's queue)."""
        if self._arrays is None and self._pieces is not None:
            self._arrays = self._joined(self._pieces)
        if self._arrays is None:
            nodes, unit_of, demand = [], [], []
            for i, u in enumerate(self.units):
                for t in u.tasks:
                    nodes.append(t.node)
                    unit_of.append(i)
                    demand.append(frees_at_most(t))
            self._arrays = (
                np.array(nodes, dtype=np.int64),
                np.array(unit_of, dtype=np.int64),
                np.array(demand, dtype=np.float64).reshape(-1, self.width),
                np.array([u.job.queue for u in self.units], dtype=np.int64),
            )
        return self._arrays

    def _joined(self, pieces: Sequence[Piece]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The arrays from the units' pieces: joined, not made task by task."""
        if not pieces:
            none = np.zeros(0, dtype=np.int64)
            return none, none.copy(), np.zeros((0, self.width)), none.copy()
        counts = np.diff(self._starts, append=len(self._tasks))  # each unit's tasks
        return (
            np.concatenate([piece[0] for piece in pieces]),
            np.repeat(np.arange(len(pieces), dtype=np.int64), counts),
            np.concatenate([piece[1] for piece in pieces]),
            np.array([u.job.queue for u in self.units], dtype=np.int64),
        )

    def live(self, stmt: Statement) -> np.ndarray:
        """Which units may be taken whole (Unit.live) as the statement stands. Read-only.

        A task moved since they were built (by this action) is not where its row says:
        not live here (the next action's candidates have it where it is; the bound counts
        it there, VictimPool._add_moved). Each task's flag is made once, then only those
        the statement changed since are made again."""
        seen = len(stmt.changed_tasks)
        kept = self._live
        if kept is not None and kept[0] is stmt and kept[1] == seen:
            return kept[2]
        flags = self._task_flags(stmt)
        if kept is not None and kept[0] is stmt and seen - _RECOUNT_AFTER < kept[1] < seen:
            live = kept[2].copy()  # a fresh array: a caller may hold the last one
            unit_of, index = self.arrays()[1], self.task_index()
            for t in stmt.changed_tasks[kept[1] : seen]:  # the units of the tasks changed
                i = index.get(id(t))
                if i is not None:
                    u = int(unit_of[i])
                    rows = self.task_rows(u)
                    live[u] = bool(flags[rows.start : rows.stop].all())
        else:
            live = np.logical_and.reduceat(flags, self._starts) if self.units else flags.copy()
        live.setflags(write=False)
        self._live = (stmt, seen, live)
        return live

    def _task_flags(self, stmt: Statement) -> np.ndarray:
        at = self.arrays()[0]
        kept = self._flags
        if kept is None or kept[0] is not stmt:
            nodes = at.tolist()
            flags = np.array(
                [t.takeable and t.node == n for t, n in zip(self._tasks, nodes, strict=True)], dtype=bool
            )
        else:
            flags = kept[2]
            index = self.task_index()
            for t in stmt.changed_tasks[kept[1] :]:
                i = index.get(id(t))
                if i is not None:
                    flags[i] = t.takeable and t.node == at[i]
        self._flags = (stmt, len(stmt.changed_tasks), flags)
        return flags

    def places(self, members: Sequence[Unit]) -> np.ndarray:
        """Where each of `members` (some of the units) is among them. Read-only."""
        kept = self._members.get(id(members))
        if kept is not None and kept[0] is members:
            return kept[1]
        index = self.index
        return np.array([index[id(u)] for u in members], dtype=np.int64)

    def keep_places(self, members: Sequence[Unit]) -> None:
        """`members` will be searched over many times: their places made once."""
        places = self.places(members)
        places.setflags(write=False)
        self._members[id(members)] = (members, places)


class SharedUnits(list[Unit]):
    """A list of candidates many searches share (ActionCandidates.taken_by), read-only,
    with room for what a search derives from the list alone (`derived`, by name), made
    once for all of them."""

    __slots__ = ("derived",)

    def __init__(self, units: Iterable[Unit] = ()) -> None:
        super().__init__(units)
        self.derived: dict[str, object] = {}


# What a node holds of a task that asks for none of the resources counted: plenty, and
# still summable over any number of nodes.
_PLENTY = 2**40


def tasks_per_node(room: FloatArray, demand: FloatArray) -> np.ndarray:
    """Per row of `room` (a node), how many tasks asking `demand` it holds, with the
    bound's rounding slack (the search sums freed room in another order)."""
    cols = np.flatnonzero(demand)
    if not len(cols):
        return np.full(len(room), _PLENTY, dtype=np.int64)
    slack = (room[:, cols] + EPS) * (1 + ROOM_SLACK)
    per_node = np.floor(slack / demand[cols]).min(axis=1)
    return np.asarray(np.maximum(per_node, 0), dtype=np.int64)  # an overcommitted node holds none
