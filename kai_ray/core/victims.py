"""Victims: what is evicted together (a Unit: an elastic job's surplus task, or a whole
gang), how it is evicted, and between queues the order in which queues give victims
(GivingOrder): the queue that gives first *as the queues stand now*, re-ranked after
every victim. Which victims a search takes is the solver's (solver.py, scenarios.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kai_ray.core.context import CycleContext
from kai_ray.core.hooks import Unit
from kai_ray.core.model import TaskStatus
from kai_ray.core.victimpool import victim_units

__all__ = ["Allowed", "EvictReason", "GivingOrder", "Unit", "evict_unit", "victim_units"]

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
        """Of (victim-order index, unit) pairs, the one taken first now: where two units'
        queues part in the tree, the queue that gives first, each ranked with its unit
        counted as gone (policy.victim_queue_rank); in one queue, victim order."""
        best = units[0]
        for item in units[1:]:
            if self._before(item, best):
                best = item
        return best

    def _before(self, a: tuple[int, Unit], b: tuple[int, Unit]) -> bool:
        ctx = self.ctx
        ancestors = ctx.state.tree.ancestors
        pa, pb = ancestors[a[1].job.queue][::-1], ancestors[b[1].job.queue][::-1]
        for qa, qb in zip(pa, pb, strict=False):
            if qa != qb:
                ra, rb = self._victim_rank(qa, a[1]), self._victim_rank(qb, b[1])
                if ra != rb:
                    return bool(rb < ra)  # the larger gives first
                break
        return a[0] < b[0]

    def _victim_rank(self, q: int, unit: Unit) -> Any:
        rows = self.ctx.rows
        assert rows is not None
        amount = self.ctx.amount(list(unit.tasks)).tolist()
        return self.ctx.policy.victim_queue_rank(self.ctx.state, rows, q, amount)
