"""The candidate victims of an eviction action, and one search's pool of them.

A cycle with a deep backlog runs several victim searches per action, each over the same
few hundred running gangs. What does not change between them is built once:

- the candidates (candidates.py), through the session (CycleContext.victim_candidates),
  and one action's, `ActionCandidates`;
- `VictimPool`: one search's view of them: which candidates it may look at (its
  members) and which of those may still be taken, as a mask over the shared arrays.

`VictimPool.may_fit` is an upper bound that lets a hopeless search end before it
evicts anything: the gang fits nowhere even if every unit the search could ever take
were gone. Exact in what it decides: a search that passes the bound runs as before,
and one that fails it would have failed: a scenario of the solver (solver.py) takes
only some of the candidates and may place some again, never making more room.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from kai_ray.core.model.gpushare import device_shares
from kai_ray.core.session.candidates import Candidates, SharedUnits, tasks_per_node
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.jobs import Task, Unit
from kai_ray.core.state.nodes import EPS, FloatArray

__all__ = ["ActionCandidates", "VictimPool", "fractions_may_fit", "room_holds"]


class ActionCandidates:
    """One action's candidates: taken at its first search, kept to its end."""

    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        self._candidates: Candidates | None = None
        self._taken: dict[Hashable, list[Unit]] = {}

    def get(self) -> Candidates:
        if self._candidates is None:
            self._candidates = self.ctx.victim_candidates()
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


class VictimPool:
    """The candidate victims of one search: the members it may look at and which of them
    still run, as arrays, so that bounding the search (may_fit) is a few vectorised
    passes rather than a loop over every victim."""

    def __init__(self, ctx: CycleContext, candidates: Candidates, members: Sequence[Unit]) -> None:
        self.ctx, self.candidates = ctx, candidates
        self.units = candidates.units
        self.task_node, self.task_unit, self.task_demand, self.unit_queue = candidates.arrays()
        self.members = candidates.places(members)
        self._member_list = members
        self._live: np.ndarray | None = None
        self._queues: list[int] | None = None  # the members' queues
        self._takes: tuple[object, int, np.ndarray] | None = None  # the last _taken_by: (ever, mark, mask)
        self._members: set[int] | None = None  # the members' places, as a set (_add_moved)

    @property
    def live(self) -> np.ndarray:
        """Per candidate, whether it is a member still live (made when first asked)."""
        if self._live is None:
            self._live = np.zeros(len(self.units), dtype=bool)
            self._live[self.members] = self.candidates.live(self.ctx.stmt)[self.members]
        return self._live

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
        nodes = self.ctx.state.nodes
        room = nodes.idle + nodes.releasing
        if ever is None and isinstance(self._member_list, SharedUnits):
            room += self._kept_frees()  # every member the search may take: kept in step
        else:
            taken = self._taken_by(ever)[self.task_unit]
            room += _frees_by_node(self.task_node[taken], self.task_demand[taken], len(room))
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

    def _kept_frees(self) -> FloatArray:
        """What the live members free per node, kept with the shared list of members for
        the action (a search per waiting gang, each over the same candidates)."""
        members = self._member_list
        assert isinstance(members, SharedUnits)
        kept = members.derived.get("live frees")
        if (
            not isinstance(kept, LiveFrees)
            or kept.candidates is not self.candidates
            or kept.stmt is not self.ctx.stmt
        ):
            kept = members.derived["live frees"] = LiveFrees(self.candidates, self.members, self.ctx)
        return kept.now()

    def _member_set(self) -> set[int]:
        if self._members is None:
            self._members = set(self.members.tolist())
        return self._members


def _frees_by_node(at: np.ndarray, demand: FloatArray, nodes: int) -> FloatArray:
    """Per node, the demands of the tasks at `at` summed (column by column: bincount
    sums far faster than add.at)."""
    sums = np.zeros((nodes, demand.shape[1]))
    for c in range(demand.shape[1]):
        sums[:, c] = np.bincount(at, weights=demand[:, c], minlength=nodes)
    return sums


# Past this many members changed since the last look, their frees are summed anew in
# one vectorised pass rather than member by member.
_RESUM_AFTER = 32


class LiveFrees:
    """Per node, what the live members of one list free at most (their tasks' rows
    summed), kept in step with the statement: summed once, then each member whose
    liveness changed since is added or taken off. A deep backlog runs a search per
    waiting gang over the same candidates, and each one's bound (VictimPool.may_fit)
    would otherwise sum every candidate's tasks again."""

    def __init__(self, candidates: Candidates, places: np.ndarray, ctx: CycleContext) -> None:
        self.candidates, self.stmt = candidates, ctx.stmt
        self.members = np.zeros(len(candidates.units), dtype=bool)
        self.members[places] = True
        self.nodes = len(ctx.state.nodes)
        self._summed(candidates.live(self.stmt) & self.members)

    def _summed(self, live: np.ndarray) -> None:
        """The sums worked out anew over the `live` members."""
        at, unit, demand, _ = self.candidates.arrays()
        taken = live[unit]
        self.sums = _frees_by_node(at[taken], demand[taken], self.nodes)
        self.counted = live

    def now(self) -> FloatArray:
        """The sums as the statement stands. Read-only."""
        live = self.candidates.live(self.stmt) & self.members
        changed = np.flatnonzero(live != self.counted).tolist()
        if len(changed) > _RESUM_AFTER:  # many at once (a big scenario): summed anew
            self._summed(live)
        elif changed:
            at, _, demand, _ = self.candidates.arrays()
            for u in changed:
                sign = 1.0 if live[u] else -1.0
                for i in self.candidates.task_rows(u):
                    self.sums[at[i]] += sign * demand[i]
            self.counted = live
        return self.sums


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
