"""Victim search: which running work to evict so that a pending gang can be placed.

Pure over the cycle's state and safe: every trial runs inside the Statement and a search
that fails rolls back to where it started, leaving no trace. The search works task by
task: a task that fits (now or on releasing capacity) is placed; otherwise the node
needing the least extra room is freed by evicting victims in victim order (elastic
surplus first, lowest priority, youngest), and the set is then minimised (each victim
is dropped again if the task still fits without it), so evictions are few and only
ever on nodes the pending job can use.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kai_ray.core.cluster import EPS, Job, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.hooks import Unit
from kai_ray.core.model import TaskStatus

__all__ = ["MAX_NODES_TRIED", "Allowed", "Reason", "Unit", "evict_unit", "free_room_for", "victim_units"]

MAX_NODES_TRIED = 64  # nodes tried per task before the search gives up


def victim_units(jobs: Sequence[Job], order: Callable[[Unit], Any]) -> list[Unit]:
    """Eviction units of running jobs (a gang, or one elastic surplus task, last task
    first), sorted by the policy's victim order."""
    units: list[Unit] = []
    running_status = TaskStatus.RUNNING
    for job in jobs:
        running = [t for t in job.tasks if t.status is running_status]
        if not running:
            continue
        surplus = job.active_count - job.gang
        if surplus <= 0:
            units.append(Unit(job, tuple(running), False))
            continue
        extra = sorted(running, key=lambda t: -t.index)[:surplus]
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


Allowed = Callable[[Unit], bool]
Reason = Callable[[Unit], str]


def free_room_for(
    ctx: CycleContext,
    tasks: Sequence[Task],
    units: Sequence[Unit],
    allowed: Allowed,
    action: str,
    reason: Reason,
) -> bool:
    """Place every task, evicting from `units` where needed; all or nothing."""
    start = ctx.stmt.checkpoint()
    job = tasks[0].job
    pool = _VictimPool(ctx, units)
    for task in tasks:
        mask = ctx.placer.job_mask(job)
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

    def __init__(self, ctx: CycleContext, units: Sequence[Unit]) -> None:
        self.ctx = ctx
        self.units = list(units)
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
        self.index = {id(u): i for i, u in enumerate(self.units)}

    def on_node(self, node: int) -> list[Unit]:
        return [self.units[i] for i in self.by_node.get(node, []) if self.live[i]]

    def gone(self, evicted: Sequence[Unit]) -> None:
        for u in evicted:
            self.live[self.index[id(u)]] = False

    def nodes_worth_freeing(self, task: Task, mask: np.ndarray) -> np.ndarray:
        """Nodes where evicting live victims could make room: least missing room first;
        for a spreading job, then the node holding the fewest of its tasks (the spread
        stays as even as allocate would make it); then the node whose victims come first
        in victim order (as a global youngest-first search would take them); node order."""
        nodes = self.ctx.state.nodes
        n = len(nodes)
        alive = self.live[self.task_unit]
        where = self.task_node[alive]
        freeable = np.zeros_like(nodes.idle)
        np.add.at(freeable, where, self.task_demand[alive])
        first = np.full(n, len(self.units), dtype=np.int64)
        np.minimum.at(first, where, self.task_unit[alive])
        room = nodes.idle + nodes.releasing
        ok = mask & (first < len(self.units))
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
    reason: Reason,
) -> bool:
    for node in pool.nodes_worth_freeing(task, mask)[:MAX_NODES_TRIED].tolist():
        here = np.zeros_like(mask)
        here[node] = True
        taken = _evict_until_fits(ctx, task, here, pool.on_node(node), allowed, action, reason)
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
    allowed: Allowed,
    action: str,
    reason: Reason,
) -> list[Unit] | None:
    """Evict victims on one node in victim order until the task fits there, then keep
    only those it really needs. None (and nothing evicted) when it never fits."""
    stmt = ctx.stmt
    start = stmt.checkpoint()
    taken: list[Unit] = []
    for u in units:
        if not u.live() or not allowed(u):
            continue
        evict_unit(ctx, u, action, reason(u))
        taken.append(u)
        if ctx.placer.fits(task, here, future=True).any():
            break
    else:
        stmt.rollback(start)
        return None
    keep = list(taken)
    for u in taken[:-1]:
        trial = [k for k in keep if k is not u]
        stmt.rollback(start)
        for k in trial:
            evict_unit(ctx, k, action, reason(k))
        if ctx.placer.fits(task, here, future=True).any():
            keep = trial
    stmt.rollback(start)
    for k in keep:
        evict_unit(ctx, k, action, reason(k))
    return keep
