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

import enum
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kai_ray.core.cluster import Task
from kai_ray.core.context import CycleContext
from kai_ray.core.hooks import Unit
from kai_ray.core.model import TaskStatus
from kai_ray.core.victimpool import Candidates, VictimPool, victim_units

__all__ = [
    "MAX_NODES_TRIED",
    "Allowed",
    "EvictReason",
    "Freed",
    "GivingOrder",
    "Unit",
    "evict_unit",
    "free_room_for",
    "keep_fewest",
    "next_victim",
    "victim_units",
]

MAX_NODES_TRIED = 64  # nodes tried per task before the search gives up


class Freed(enum.Enum):
    """How free_room_for ended; true when the room was made."""

    ROOM_MADE = "room made"
    HOPELESS = "hopeless"  # ended at once: no room even with every victim it may take gone
    NO_ROOM = "no room"  # victims were tried, and no room found

    def __bool__(self) -> bool:
        return self is Freed.ROOM_MADE


Allowed = Callable[[Unit], bool]
EvictReason = Callable[[Unit], str]


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
    giving: GivingOrder | None,
    candidates: Candidates,
    ever: Callable[[int], bool] | None = None,
) -> Freed:
    """Place every task, evicting from `units` (in victim order; between queues in
    `giving` order) where needed; all or nothing. `candidates`: the action's, which
    `units` are some of. `ever`: by the victim's queue, whether
    the search may take it at any point (a superset of `allowed`; None: any): a search
    that cannot succeed even with all those gone ends at once (VictimPool.may_fit).
    How it ended: Freed."""
    job = tasks[0].job
    pool = VictimPool(ctx, candidates, units, giving)
    if not pool.may_fit(tasks, ever):
        return Freed.HOPELESS
    start = ctx.stmt.checkpoint()
    for task in tasks:
        # Only nodes the task may use are freed: victims elsewhere would not help it.
        mask = ctx.placer.task_mask(task, ctx.placer.job_mask(job))
        spot = ctx.placer.spot(task, mask, allow_pipeline=True)
        if spot is None and not _free_a_node(ctx, task, mask, pool, allowed, action, reason, ever):
            ctx.stmt.rollback(start)
            return Freed.NO_ROOM
        if spot is not None:
            ctx.stmt.place(task, spot[0], spot[1], spot[2], action)
    if any(t.status is TaskStatus.PIPELINED for t in tasks):
        ctx.stmt.pipeline_job(job)
    return Freed.ROOM_MADE


def _free_a_node(
    ctx: CycleContext,
    task: Task,
    mask: np.ndarray,
    pool: VictimPool,
    allowed: Allowed,
    action: str,
    reason: EvictReason,
    ever: Callable[[int], bool] | None,
) -> bool:
    for node in pool.nodes_worth_freeing(task, mask, MAX_NODES_TRIED, ever).tolist():
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
