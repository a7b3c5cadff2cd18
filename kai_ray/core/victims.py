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
from dataclasses import dataclass

import numpy as np

from kai_ray.core.cluster import EPS, Job, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.model import TaskStatus

__all__ = ["MAX_NODES_TRIED", "Allowed", "Reason", "Unit", "evict_unit", "free_room_for", "victim_units"]

MAX_NODES_TRIED = 64  # nodes tried per task before the search gives up


@dataclass(frozen=True, slots=True, eq=False)
class Unit:
    """What is evicted together: one surplus task of an elastic job, or a whole gang."""

    job: Job
    tasks: tuple[Task, ...]
    surplus: bool

    def live(self) -> bool:
        return all(t.status is TaskStatus.RUNNING for t in self.tasks)


def victim_units(jobs: Sequence[Job]) -> list[Unit]:
    """Eviction units of running jobs, in victim order: elastic surplus tasks first (last
    task first), then lowest priority, then youngest."""
    units: list[Unit] = []
    for job in jobs:
        running = job.running()
        if not running:
            continue
        surplus = job.active() - job.gang
        extra = sorted(running, key=lambda t: -t.index)[: max(surplus, 0)]
        units.extend(Unit(job, (t,), True) for t in extra)
        rest = tuple(t for t in running if t not in extra)
        if rest:
            units.append(Unit(job, rest, False))
    units.sort(key=_victim_key)
    return units


def _victim_key(u: Unit) -> tuple[bool, int, float, int, int]:
    info = u.job.info
    return (not u.surplus, info.priority, -info.created_at, -u.job.order, -u.tasks[0].index)


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
    by_node = _units_by_node(units)
    for task in tasks:
        mask = ctx.placer.job_mask(job)
        spot = ctx.placer.choose(task, mask, allow_pipeline=True)
        if spot is None and not _free_a_node(ctx, task, mask, by_node, allowed, action, reason):
            ctx.stmt.rollback(start)
            return False
        if spot is not None:
            ctx.stmt.place(task, spot[0], spot[1], spot[2], action)
    if any(t.status is TaskStatus.PIPELINED for t in tasks):
        for t in tasks:
            ctx.stmt.mark_pipelined(t)
    return True


def _units_by_node(units: Sequence[Unit]) -> dict[int, list[tuple[int, Unit]]]:
    """Per node, the units with a task there, each with its place in victim order."""
    by_node: dict[int, list[tuple[int, Unit]]] = {}
    for rank, u in enumerate(units):
        for node in dict.fromkeys(t.node for t in u.tasks):
            by_node.setdefault(node, []).append((rank, u))
    return by_node


def _free_a_node(
    ctx: CycleContext,
    task: Task,
    mask: np.ndarray,
    by_node: dict[int, list[tuple[int, Unit]]],
    allowed: Allowed,
    action: str,
    reason: Reason,
) -> bool:
    for node in _nodes_worth_freeing(ctx, task, mask, by_node)[:MAX_NODES_TRIED]:
        here = np.zeros_like(mask)
        here[node] = True
        units = [u for _, u in by_node[node]]
        taken = _evict_until_fits(ctx, task, here, units, allowed, action, reason)
        if taken is None:
            continue
        spot = ctx.placer.choose(task, here, allow_pipeline=True)
        if spot is not None:
            ctx.stmt.place(task, spot[0], spot[1], spot[2], action)
            return True
    return False


def _nodes_worth_freeing(
    ctx: CycleContext, task: Task, mask: np.ndarray, by_node: dict[int, list[tuple[int, Unit]]]
) -> list[int]:
    """Nodes where evicting live victims could make room, least shortfall first."""
    nodes = ctx.state.nodes
    cols = np.flatnonzero(task.demand)
    col = 0 if (task.demand[0] > 0 or task.fraction_request) else 1
    scored: list[tuple[float, int, int]] = []
    for node, units in by_node.items():
        if not mask[node]:
            continue
        freeable = np.zeros_like(task.demand)
        first_victim = -1
        for rank, u in units:
            if u.live():
                if first_victim < 0:
                    first_victim = rank
                for t in u.tasks:
                    if t.node == node:
                        freeable += t.demand
        room = nodes.idle[node] + nodes.releasing[node]
        if any(room[c] + freeable[c] < task.demand[c] - EPS for c in cols):
            continue
        if task.fraction_request and room[0] + freeable[0] < 1 - EPS and not by_node[node]:
            continue
        # Least missing room first (fewest evictions); on a tie, the node whose victims
        # come first in victim order (as a global youngest-first search would take them).
        scored.append((float(max(0.0, task.demand[col] - room[col])), first_victim, node))
    scored.sort()
    return [node for _, _, node in scored]


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
