"""Victims: what is evicted together (a Unit: an elastic job's surplus task, or a whole
gang), how it is evicted, and between queues the order in which queues give victims
(GivingOrder): the queue that gives first *as the queues stand now*, re-ranked after
every victim. Which victims a search takes is the solver's (solver.py, scenarios.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from kai_ray.core.session.candidates import victim_units
from kai_ray.core.session.context import CycleContext
from kai_ray.core.state.jobs import Unit

__all__ = ["Allowed", "EvictReason", "GivingOrder", "GivingTree", "Unit", "evict_unit", "victim_units"]

Allowed = Callable[[Unit], bool]
Gone = Callable[[Unit], Sequence[float]]  # what a unit's queue counts as given, with the unit next
Memo = dict[tuple[int, tuple[float, ...]], Any]  # (queue, what it counts as gone) -> its rank
_ROOT = -1  # above the top queues
_Path = tuple[tuple[int, ...], tuple[int, Unit]]  # a candidate's queues from the top, and it
EvictReason = Callable[[Unit], str]


def evict_unit(ctx: CycleContext, unit: Unit, action: str, reason: str) -> None:
    for t in unit.tasks:
        if t.takeable:
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

    def signature(self, queues: Sequence[int]) -> tuple[tuple[int, bool], ...]:
        """The giving order of these queues as it stands: each in turn, and whether it
        ties with the one before (a search that compares the same way takes the same
        victims)."""
        ranked = sorted(((self.key(q), q) for q in dict.fromkeys(queues)), key=lambda kq: kq[0], reverse=True)
        return tuple((q, i > 0 and key == ranked[i - 1][0]) for i, (key, q) in enumerate(ranked))

    def first(
        self,
        units: Sequence[tuple[int, Unit]],
        victims: Callable[[Unit], Sequence[float]] | None = None,
        memo: Memo | None = None,
    ) -> tuple[int, Unit]:
        """Of (victim-order index, unit) pairs, at most one per leaf queue, the one taken
        first now, as KAI's victim queue picks: level by level from the top, the child
        that gives first, each child ranked by its own best candidate's leaf, with what
        that leaf counts as gone (`victims`: by default the unit itself); in a queue,
        victim order. `memo`: ranks kept by the caller while the state stands still (a
        rank reads the queue's usage and what it counts as gone, nothing else)."""
        ctx = self.ctx
        ancestors = ctx.state.tree.ancestors
        gone = victims or (lambda u: ctx.amount(list(u.tasks)).tolist())
        paths = [(ancestors[u.job.queue][::-1], (i, u)) for i, u in units]
        return self._best(paths, 0, gone, memo)[1]

    def _best(self, group: list[_Path], level: int, gone: Gone, memo: Memo | None) -> _Path:
        """The candidate that gives first among `group`, whose paths agree above `level`:
        each child subtree ranked by its own best candidate (KAI's queue node compares
        its children by their best jobs)."""
        while len(group) > 1:
            by_child: dict[int, list[_Path]] = {}
            for path, item in group:
                by_child.setdefault(path[level] if level < len(path) else -1, []).append((path, item))
            if len(by_child) > 1:
                best = {child: self._best(g, level + 1, gone, memo) for child, g in by_child.items()}
                winner = max(by_child, key=lambda c: self.giving_key(c, best[c][1], gone, memo))
                group = by_child[winner]
            level += 1
        return group[0]

    def giving_key(self, q: int, item: tuple[int, Unit], gone: Gone, memo: Memo | None) -> tuple[Any, int]:
        """How queue q compares when `item` (victim-order index, unit) is its best
        candidate: the larger gives first (by rank, then the earlier candidate)."""
        rows = self.ctx.rows
        assert rows is not None
        amount = gone(item[1])
        if memo is None:
            return self.ctx.policy.victim_queue_rank(self.ctx.state, rows, q, amount), -item[0]
        key = (q, tuple(amount))
        rank = memo.get(key)
        if rank is None:
            rank = memo[key] = self.ctx.policy.victim_queue_rank(self.ctx.state, rows, q, amount)
        return rank, -item[0]


class GivingTree:
    """GivingOrder.first kept from one pick to the next while the state stands still: the
    queue tree of the candidates' leaves, each node's best candidate made again only
    where a leaf below it changed (what it gave, its next candidate), as KAI's victim
    queue marks a popped queue's ancestors for reordering. Picks what first picks."""

    def __init__(
        self,
        giving: GivingOrder,
        leaves: Iterable[int],
        head: Callable[[int], tuple[int, Unit] | None],
        gone: Gone,
    ) -> None:
        self.giving, self.head, self.gone = giving, head, gone
        self.memo: Memo = {}
        ancestors = giving.ctx.state.tree.ancestors
        self.children: dict[int, list[int]] = {}
        self.leaves = set(leaves)
        for q in sorted(self.leaves):
            path = [_ROOT, *ancestors[q][::-1]]
            for parent, child in itertools.pairwise(path):
                kids = self.children.setdefault(parent, [])
                if child not in kids:
                    kids.append(child)
        self._best: dict[int, tuple[int, Unit] | None] = {}
        self._keys: dict[int, tuple[Any, int]] = {}

    def changed(self, q: int) -> None:
        """Leaf q gave, or its next candidate changed: its ancestors pick again, and
        rank again (a child's key reads its best candidate and what that candidate's
        leaf gave, both below it; its siblings' keys stand)."""
        self._best.pop(q, None)
        self._keys.pop(q, None)
        for a in self.giving.ctx.state.tree.ancestors[q]:
            self._best.pop(a, None)
            self._keys.pop(a, None)
        self._best.pop(_ROOT, None)

    def first(self) -> tuple[int, Unit] | None:
        return self._pick(_ROOT)

    def _pick(self, node: int) -> tuple[int, Unit] | None:
        if node in self._best:
            return self._best[node]
        if node in self.leaves:
            best = self.head(node)
        else:
            items = [(c, item) for c in self.children.get(node, ()) if (item := self._pick(c)) is not None]
            best = max(items, key=self._key)[1] if len(items) > 1 else (items[0][1] if items else None)
        self._best[node] = best
        return best

    def _key(self, child_item: tuple[int, tuple[int, Unit]]) -> tuple[Any, int]:
        """giving_key of a child with its best candidate, kept until the child changes."""
        c, item = child_item
        key = self._keys.get(c)
        if key is None:
            key = self._keys[c] = self.giving.giving_key(c, item, self.gone, self.memo)
        return key
