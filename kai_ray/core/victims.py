"""Victim search: which running work to evict so that a pending gang can be placed.

Pure over the cycle's state and safe: every trial runs inside the Statement and a search
that fails rolls back to where it started, leaving no trace. The search works task by
task: a task that fits (now or on releasing capacity) is placed; otherwise the node
needing the least extra room is freed by evicting victims in victim order (elastic
surplus first, lowest priority, youngest), and the set is then minimised (each victim
is dropped again if the task still fits without it), so evictions are few and only
ever on nodes the pending job can use.

Between queues (reclaim) the victim order is also dynamic: victims come from the queue
that gives first *as the queues stand now*, re-ranked after every victim (GivingOrder).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kai_ray.core.cluster import EPS, Job, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.hooks import Unit
from kai_ray.core.model import TaskStatus

__all__ = [
    "MAX_NODES_TRIED",
    "Allowed",
    "EvictReason",
    "GivingOrder",
    "Unit",
    "evict_unit",
    "free_room_for",
    "keep_fewest",
    "next_victim",
    "victim_units",
]

MAX_NODES_TRIED = 64  # nodes tried per task before the search gives up

Allowed = Callable[[Unit], bool]
EvictReason = Callable[[Unit], str]


def victim_units(jobs: Sequence[Job], order: Callable[[Unit], Any]) -> list[Unit]:
    """Eviction units of running jobs (a gang, or one elastic surplus task, last task
    first; surplus: Job.surplus_of), sorted by the policy's victim order. A task still
    reported running on a node that left the cluster holds nothing here: evicting it
    would free nothing."""
    units: list[Unit] = []
    running_status = TaskStatus.RUNNING
    for job in jobs:
        running = [t for t in job.tasks if t.status is running_status and t.node >= 0]
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


def evict_unit(ctx: CycleContext, unit: Unit, action: str, reason: str) -> None:
    for t in unit.tasks:
        if t.status is TaskStatus.RUNNING:
            ctx.stmt.evict(t, action, reason)


class GivingOrder:
    """The order in which queues give victims, as they stand now: the queue that would be
    served last gives first (KAI's victim queue is its queue order reversed), compared
    level by level down the tree. A queue's rank depends on its own usage only, so ranks
    are cached per queue and recomputed when its usage changed (a victim left it)."""

    def __init__(self, ctx: CycleContext) -> None:
        self.ctx = ctx
        self._ranks: dict[int, tuple[list[float], Any]] = {}

    def _rank(self, q: int) -> Any:
        row = self.ctx.state.usage.allocated[q]
        cached = self._ranks.get(q)
        if cached is None or cached[0] != row:
            rows = self.ctx.rows
            assert rows is not None
            cached = (list(row), self.ctx.policy.queue_rank(self.ctx.state, rows, q, (0.0, 0.0, 0.0)))
            self._ranks[q] = cached
        return cached[1]

    def key(self, q: int) -> tuple[Any, ...]:
        """Queue order along the path from the top: a larger key gives first."""
        return tuple(self._rank(a) for a in reversed(self.ctx.state.tree.ancestors[q]))

    def positions(self, queues: Sequence[int]) -> dict[int, int]:
        """Each queue's place in the giving order now (0 gives first)."""
        ranked = sorted(dict.fromkeys(queues), key=self.key, reverse=True)
        return {q: i for i, q in enumerate(ranked)}

    def signature(self, queues: Sequence[int]) -> tuple[tuple[int, bool], ...]:
        """The giving order of these queues as it stands: each in turn, and whether it
        ties with the one before (a search that compares the same way takes the same
        victims)."""
        ranked = sorted(((self.key(q), q) for q in dict.fromkeys(queues)), key=lambda kq: kq[0], reverse=True)
        return tuple((q, i > 0 and key == ranked[i - 1][0]) for i, (key, q) in enumerate(ranked))

    def first(self, units: Sequence[tuple[int, Unit]]) -> tuple[int, Unit]:
        """Of (victim-order index, unit) pairs, the one taken first now."""
        best = units[0]
        best_key = self.key(best[1].job.queue)
        for item in units[1:]:
            key = self.key(item[1].job.queue)
            if best_key < key or (not key < best_key and item[0] < best[0]):
                best, best_key = item, key
        return best


def next_victim(units: Sequence[Unit], ok: Allowed, giving: GivingOrder | None) -> Unit | None:
    """The unit of `units` (in victim order) taken next among those `ok` accepts: the
    first, or, with a giving order, the first of the queue that gives first now."""
    if giving is None:
        return next((u for u in units if ok(u)), None)
    candidates = [(i, u) for i, u in enumerate(units) if ok(u)]
    return giving.first(candidates)[1] if candidates else None


def keep_fewest(
    ctx: CycleContext,
    start: int,
    taken: Sequence[Unit],
    action: str,
    reason: EvictReason,
    enough: Callable[[], bool],
) -> list[Unit]:
    """`taken` (evicted since checkpoint `start`, in that order) made `enough()` hold:
    keep only the victims it needs. Each but the last is dropped again when `enough()`
    still holds without it; the state ends with the kept ones evicted."""
    stmt = ctx.stmt
    keep = list(taken)
    for u in taken[:-1]:
        trial = [k for k in keep if k is not u]
        stmt.rollback(start)
        for k in trial:
            evict_unit(ctx, k, action, reason(k))
        if enough():
            keep = trial
    stmt.rollback(start)
    for k in keep:
        evict_unit(ctx, k, action, reason(k))
    return keep


def free_room_for(
    ctx: CycleContext,
    tasks: Sequence[Task],
    units: Sequence[Unit],
    allowed: Allowed,
    action: str,
    reason: EvictReason,
    giving: GivingOrder | None = None,
) -> bool:
    """Place every task, evicting from `units` (in victim order; between queues in
    `giving` order) where needed; all or nothing."""
    start = ctx.stmt.checkpoint()
    job = tasks[0].job
    pool = _VictimPool(ctx, units, giving)
    for task in tasks:
        # Only nodes the task may use are freed: victims elsewhere would not help it.
        mask = ctx.placer.task_mask(task, ctx.placer.job_mask(job))
        spot = ctx.placer.spot(task, mask, allow_pipeline=True)
        if spot is None and not _free_a_node(ctx, task, mask, pool, allowed, action, reason):
            ctx.stmt.rollback(start)
            return False
        if spot is not None:
            ctx.stmt.place(task, spot[0], spot[1], spot[2], action)
    if any(t.status is TaskStatus.PIPELINED for t in tasks):
        ctx.stmt.pipeline_job(job)
    return True


class _VictimPool:
    """The candidate victims of one search, as arrays over their tasks, so that scoring
    nodes is a few vectorised passes rather than a loop over every victim."""

    def __init__(self, ctx: CycleContext, units: Sequence[Unit], giving: GivingOrder | None) -> None:
        self.ctx = ctx
        self.units = list(units)
        self.giving = giving
        self.live = np.array([u.live() for u in self.units], dtype=bool)
        nodes, unit_of, demand = [], [], []
        self.by_node: dict[int, list[int]] = {}
        for i, u in enumerate(self.units):
            for t in u.tasks:
                nodes.append(t.node)
                unit_of.append(i)
                demand.append(t.demand)
            for node in dict.fromkeys(t.node for t in u.tasks):
                self.by_node.setdefault(node, []).append(i)
        width = ctx.state.nodes.idle.shape[1]
        self.task_node = np.array(nodes, dtype=np.int64)
        self.task_unit = np.array(unit_of, dtype=np.int64)
        self.task_demand = np.array(demand, dtype=np.float64).reshape(-1, width)
        self.unit_queue = np.array([u.job.queue for u in self.units], dtype=np.int64)
        self.index = {id(u): i for i, u in enumerate(self.units)}

    def on_node(self, node: int) -> list[Unit]:
        return [self.units[i] for i in self.by_node.get(node, []) if self.live[i]]

    def gone(self, evicted: Sequence[Unit]) -> None:
        for u in evicted:
            self.live[self.index[id(u)]] = False

    def ranks(self) -> np.ndarray:
        """Each unit's place in the order victims are taken now: victim order, or, with
        a giving order, queue by queue as the queues stand now and victim order inside."""
        order = np.arange(len(self.units), dtype=np.int64)
        if self.giving is None or not len(self.units):
            return order
        positions = self.giving.positions(self.unit_queue.tolist())
        place = np.zeros(len(self.ctx.state.tree), dtype=np.int64)
        for q, i in positions.items():
            place[q] = i
        result: np.ndarray = place[self.unit_queue] * len(self.units) + order
        return result

    def nodes_worth_freeing(self, task: Task, mask: np.ndarray) -> np.ndarray:
        """Nodes where evicting live victims could make room: least missing room first;
        for a spreading job, then the node holding the fewest of its tasks (the spread
        stays as even as allocate would make it); then the node whose victims come first
        in victim order (as a global youngest-first search would take them); node order."""
        nodes = self.ctx.state.nodes
        n = len(nodes)
        alive = self.live[self.task_unit]
        if not alive.any():  # nothing left to take: no node is worth freeing (and no pass over them)
            return np.empty(0, dtype=np.intp)
        where = self.task_node[alive]
        freeable = np.zeros_like(nodes.idle)
        np.add.at(freeable, where, self.task_demand[alive])
        none = np.iinfo(np.int64).max
        first = np.full(n, none, dtype=np.int64)
        np.minimum.at(first, where, self.ranks()[self.task_unit[alive]])
        room = nodes.idle + nodes.releasing
        ok = mask & (first < none)
        for c in np.flatnonzero(task.demand):
            ok &= room[:, c] + freeable[:, c] >= task.demand[c] - EPS
        col = 0 if (task.demand[0] > 0 or task.fraction_request) else 1
        candidates = np.flatnonzero(ok)
        missing = np.maximum(0.0, task.demand[col] - room[candidates, col])
        keys = [candidates, first[candidates]]
        if task.job.info.spread:
            held = self.ctx.placer.own_counts(task.job)
            keys.append(np.array([held.get(n, 0) for n in candidates.tolist()], dtype=np.int64))
        order = np.lexsort((*keys, missing))
        return candidates[order]


def _free_a_node(
    ctx: CycleContext,
    task: Task,
    mask: np.ndarray,
    pool: _VictimPool,
    allowed: Allowed,
    action: str,
    reason: EvictReason,
) -> bool:
    for node in pool.nodes_worth_freeing(task, mask)[:MAX_NODES_TRIED].tolist():
        here = np.zeros_like(mask)
        here[node] = True
        taken = _evict_until_fits(ctx, task, here, pool.on_node(node), pool.giving, allowed, action, reason)
        if taken is None:
            continue
        spot = ctx.placer.spot(task, here, allow_pipeline=True)
        if spot is not None:
            ctx.stmt.place(task, spot[0], spot[1], spot[2], action)
            pool.gone(taken)
            return True
    return False


def _evict_until_fits(
    ctx: CycleContext,
    task: Task,
    here: np.ndarray,
    units: Sequence[Unit],
    giving: GivingOrder | None,
    allowed: Allowed,
    action: str,
    reason: EvictReason,
) -> list[Unit] | None:
    """Evict victims on one node, the next one taken first each time, until the task fits
    there, then keep only those it really needs. None (and nothing evicted) when it
    never fits."""
    stmt = ctx.stmt
    start = stmt.checkpoint()
    taken: list[Unit] = []
    refused: set[int] = set()

    def ok(u: Unit) -> bool:
        if not u.live() or id(u) in refused:
            return False
        if not allowed(u):
            refused.add(id(u))
            return False
        return True

    while (u := next_victim(units, ok, giving)) is not None:
        evict_unit(ctx, u, action, reason(u))
        taken.append(u)
        if ctx.placer.fits(task, here, future=True).any():
            return keep_fewest(ctx, start, taken, action, reason, lambda: _fits(ctx, task, here))
    stmt.rollback(start)
    return None


def _fits(ctx: CycleContext, task: Task, here: np.ndarray) -> bool:
    return bool(ctx.placer.fits(task, here, future=True).any())
