"""The candidate victims of an eviction action, and one search's pool of them.

A cycle with a deep backlog runs several victim searches per action, each over the same
few hundred running gangs. What does not change between them is built once:

- `Candidates`: every unit the policy lets be a victim (its running tasks, and those
  placed earlier in the cycle: Task.takeable), in victim order, with their tasks as
  arrays (node, demand, unit). An action takes them when its first search needs them
  and keeps them to its end (a unit it evicts stays in, no longer live); the next
  action takes the same while the same state stands (Statement.state_mark): they are
  then exactly what a fresh build would give.
- `VictimPool`: one search's view of them: which candidates it may look at (its
  members) and which of those may still be taken, as a mask over the shared arrays.

`VictimPool.may_fit` is an upper bound that lets a hopeless search end before it
evicts anything: the gang fits nowhere even if every unit the search could ever take
were gone. Exact in what it decides: a search that passes the bound runs as before,
and one that fails it would have failed: a scenario of the solver (solver.py) takes
only some of the candidates and may place some again, never making more room.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kai_ray.core.cluster import EPS, FloatArray, Job, Task
from kai_ray.core.gpushare import device_shares
from kai_ray.core.hooks import Unit

if TYPE_CHECKING:  # the context holds the shared candidates; victims.py holds the pools
    from kai_ray.core.context import CycleContext
    from kai_ray.core.statement import Statement

__all__ = [
    "ROOM_SLACK",
    "ActionCandidates",
    "Candidates",
    "Piece",
    "SharedUnits",
    "VictimPool",
    "fractions_may_fit",
    "room_holds",
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


def unit_piece(u: Unit, width: int) -> Piece:
    demand = np.array([t.demand for t in u.tasks], dtype=np.float64).reshape(-1, width)
    return np.array([t.node for t in u.tasks], dtype=np.int64), demand


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
        """(each task's node, its unit, its demand; each unit's queue)."""
        if self._arrays is None and self._pieces is not None:
            self._arrays = self._joined(self._pieces)
        if self._arrays is None:
            nodes, unit_of, demand = [], [], []
            for i, u in enumerate(self.units):
                for t in u.tasks:
                    nodes.append(t.node)
                    unit_of.append(i)
                    demand.append(t.demand)
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
        if self._live is not None and self._live[0] is stmt and self._live[1] == seen:
            return self._live[2]
        flags = self._task_flags(stmt)
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


def shared_candidates(ctx: CycleContext) -> Candidates:
    """The policy's victims as the state stands; the last built while the same state
    stands (a placement makes a candidate too: Task.takeable); with a cycle cache,
    before the cycle evicts, those it keeps between cycles (incremental/candidates.py)."""
    mark = ctx.stmt.state_mark
    kept = ctx.victims
    if kept is not None and kept[0] == mark:
        return kept[1]
    policy = ctx.policy
    candidates = None if ctx.kept is None else ctx.kept.victims.candidates(ctx)
    if candidates is None:
        # A job with no active task has none running (most of a deep line): not asked.
        jobs = [j for j in ctx.state.jobs if j.active_count and policy.may_be_victim(j)]
        candidates = Candidates(victim_units(jobs, policy.victim_order), ctx.state.nodes.idle.shape[1])
    ctx.victims = (mark, candidates)
    return candidates


class ActionCandidates:
    """One action's candidates: taken at its first search, kept to its end."""

    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        self._candidates: Candidates | None = None
        self._taken: dict[Hashable, list[Unit]] = {}

    def get(self) -> Candidates:
        if self._candidates is None:
            self._candidates = shared_candidates(self.ctx)
        return self._candidates

    def taken_by(self, inputs: Hashable, takes: Callable[[Unit], bool]) -> list[Unit]:
        """The candidates that `takes` accepts (in victim order), for every job whose
        victim inputs (failedsearches.victim_inputs) are `inputs`: by the policy's
        contract its eligibility hooks read nothing else of the job, so the list is
        made once per action (these candidates are the action's own) and shared.
        Read-only."""
        units = self._taken.get(inputs)
        if units is None:
            candidates = self.get()
            units = self._taken[inputs] = SharedUnits(u for u in candidates.units if takes(u))
            candidates.keep_places(units)
        return units


class SharedUnits(list[Unit]):
    """A list of candidates many searches share (ActionCandidates.taken_by), read-only,
    with room for what a search derives from the list alone (`derived`, by name), made
    once for all of them."""

    __slots__ = ("derived",)

    def __init__(self, units: Iterable[Unit] = ()) -> None:
        super().__init__(units)
        self.derived: dict[str, object] = {}


class VictimPool:
    """The candidate victims of one search: the members it may look at and which of them
    still run, as arrays, so that bounding the search (may_fit) is a few vectorised
    passes rather than a loop over every victim."""

    def __init__(self, ctx: CycleContext, candidates: Candidates, members: Sequence[Unit]) -> None:
        self.ctx, self.candidates = ctx, candidates
        self.units = candidates.units
        self.task_node, self.task_unit, self.task_demand, self.unit_queue = candidates.arrays()
        self.members = candidates.places(members)
        self.live = np.zeros(len(self.units), dtype=bool)
        self.live[self.members] = candidates.live(ctx.stmt)[self.members]
        self._queues: list[int] | None = None  # the members' queues
        self._takes: tuple[object, int, np.ndarray] | None = None  # the last _taken_by: (ever, mark, mask)
        self._members: set[int] | None = None  # the members' places, as a set (_add_moved)

    def _taken_by(self, ever: Callable[[int], bool] | None) -> np.ndarray:
        """The live members whose queue `ever` accepts (`self.live` itself when all).
        Kept while the same evictions stand: `ever` reads the standings, which only an
        eviction moves inside one search (its job's tasks are placed on its own side)."""
        if ever is None:
            return self.live
        mark = self.ctx.stmt.running_mark
        if self._takes is not None and self._takes[0] is ever and self._takes[1] == mark:
            return self._takes[2]
        if self._queues is None:
            self._queues = np.unique(self.unit_queue[self.members]).tolist()
        refused = [q for q in self._queues if not ever(q)]
        takes = self.live
        if refused:
            accepted = np.ones(len(self.ctx.state.tree), dtype=bool)
            accepted[refused] = False
            takes = self.live & accepted[self.unit_queue]
        self._takes = (ever, mark, takes)
        return takes

    def may_fit(self, tasks: Sequence[Task], ever: Callable[[int], bool] | None) -> bool:
        """False when the tasks fit nowhere even with every live member that `ever`
        takes (by its queue; None: every one) gone: their room counted free on each node
        the job may use, as many tasks per node as that room holds. `ever` must accept
        every unit the search may take at any point (reclaim's eligibility as the search
        begins: a side it refuses gives no victim, so its standing, which is all the
        verdict reads, does not move). Tasks that share a device's fraction are not
        bounded here (True)."""
        if any(t.fraction_request for t in tasks):
            return True
        takes = self._taken_by(ever)
        nodes = self.ctx.state.nodes
        room = nodes.idle + nodes.releasing
        taken = takes[self.task_unit]
        np.add.at(room, self.task_node[taken], self.task_demand[taken])
        self._add_moved(room, ever)
        return room_holds(self.ctx, tasks, room)

    def _add_moved(self, room: FloatArray, ever: Callable[[int], bool] | None) -> None:
        """Tasks of the members moved this cycle are victims again where they now are,
        which their rows do not say (Candidates.live leaves them out): their room
        counted there, whether or not the rest of their unit runs (a bound may count
        more, never less)."""
        moved = self.ctx.stmt.moved
        if not moved:
            return
        at = self.candidates.task_index()
        members = self._member_set()
        for t in moved:
            i = at.get(id(t))
            if i is None or not t.takeable:
                continue
            u = int(self.task_unit[i])
            if u in members and (ever is None or ever(int(self.unit_queue[u]))):
                room[t.node] += t.demand

    def _member_set(self) -> set[int]:
        if self._members is None:
            self._members = set(self.members.tolist())
        return self._members


def room_holds(ctx: CycleContext, tasks: Sequence[Task], room: FloatArray) -> bool:
    """Whether whole-device tasks might fit `room` (a row per node): their room counted
    on each node the job may use, as many tasks per node as that room holds; a task
    with its own affinity each on its own. An upper bound: False means they cannot."""
    job = tasks[0].job
    placer = ctx.placer
    mask = placer.job_mask(job)
    first = tasks[0].demand
    if not job.per_task and all(t.demand is first for t in tasks):
        return int(tasks_per_node(room[mask], first).sum()) >= len(tasks)
    return all(int(tasks_per_node(room[placer.task_mask(t, mask)], t.demand).sum()) >= 1 for t in tasks)


def fractions_may_fit(ctx: CycleContext, tasks: Sequence[Task]) -> bool:
    """Whether tasks sharing a device's fraction might fit the room now free or being
    released: on each node the job may use, as many as its shared devices' room and its
    whole free devices hold, and its other resources allow. An upper bound: False means
    they cannot. (Tasks that ask differently, or each with its own affinity: True.)"""
    first = tasks[0]
    job = first.job
    if job.per_task or any(t.info.request != first.info.request for t in tasks):
        return True
    nodes = ctx.state.nodes
    share = device_shares(first.info.request, nodes.device_memory)
    whole = nodes.idle[:, 0] + nodes.releasing[:, 0]
    others = tasks_per_node(nodes.idle + nodes.releasing, first.demand)
    near = ctx.placer.job_mask(job) & ((whole >= 1 - EPS) | (nodes.frac_future >= share - EPS)) & (others > 0)
    held = 0
    for node in np.flatnonzero(near).tolist():
        f = float(share[node]) if isinstance(share, np.ndarray) else float(share)
        per_device = math.floor((1 + EPS) / f)
        room = math.floor(whole[node] + EPS) * per_device
        room += sum(math.floor((d.idle + d.releasing + EPS) / f) for d in nodes.devices[node].values())
        held += min(room, int(others[node]))
        if held >= len(tasks):
            return True
    return False


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
