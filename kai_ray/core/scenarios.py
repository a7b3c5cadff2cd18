"""Which victims a scenario of KAI's job solver (solver.py) takes: the candidates in the
order the search accumulates them, and KAI's two scenario generators over them.

The search accumulates *potential* victims one unit at a time (an elastic job's surplus
task, or a whole gang), in victim order; between queues from the queue that gives
first, as the queues would stand with the units already taken gone. Victims recorded
by an earlier count of the job's tasks (solver.py) are not offered again. From the
accumulated units each generator proposes scenarios, each a set of units to take
beside the recorded ones:

- node-local (KAI's `nodelocalgreedy`): with each new unit, for each node it runs on
  (by name), the accumulated units of every job that has one there. The cheapest fix
  first: room on one node.
- multi-node (KAI's `multinodegang`): with each new unit, the nodes the accumulated
  units run on, ordered by the GPUs each would offer (its free and releasing GPUs, what
  the recorded victims free there, and the units there), smallest first; then the
  units on the first k of them, from the smallest k whose GPUs with the free room
  elsewhere cover the tasks, growing k by 1, 2, 4, ... up to all of them. For gangs
  that need room on several nodes at once.

Each scenario is simulated by the solver; generators only propose.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kai_ray.core.cluster import Task
from kai_ray.core.context import CycleContext
from kai_ray.core.victims import Unit, evict_unit

if TYPE_CHECKING:
    from kai_ray.core.solver import Terms

__all__ = ["GENERATORS", "VictimOrder", "gpus_of"]


def gpus_of(ctx: CycleContext, t: Task) -> float:
    """The GPUs a task asks for: whole devices, or its share of one."""
    whole = float(t.demand[0])
    if not t.fraction_request:
        return whole
    node = t.node if t.node >= 0 else 0
    return whole + (t.fraction_on(ctx.state.nodes, node) if len(ctx.state.nodes) else 0.0)


class VictimOrder:
    """The candidates in the order the search accumulates them, skipping the recorded:
    in victim order, or between queues from the queue that gives first as the queues
    would stand with the units taken so far gone (ranked with them evicted, then put
    back: the state is unchanged between calls)."""

    def __init__(self, ctx: CycleContext, terms: Terms, recorded: Sequence[Unit]) -> None:
        self.ctx, self.terms = ctx, terms
        taken = {id(u) for u in recorded}
        self.left = [u for u in terms.units if id(u) not in taken]
        self.popped: list[Unit] = list(recorded)  # gone, as the queues are ranked
        self.accumulated: list[Unit] = []

    def grow(self) -> Unit | None:
        """Accumulate the next unit (None when no candidate is left)."""
        terms = self.terms
        if terms.giving is None:
            found = next(((i, u) for i, u in enumerate(self.left) if u.live() and terms.allowed(u)), None)
        else:
            found = self._giving_first()
        if found is None:
            return None
        i, unit = found
        del self.left[i]
        self.popped.append(unit)
        self.accumulated.append(unit)
        return unit

    def _giving_first(self) -> tuple[int, Unit] | None:
        """The first allowed candidate of each queue, then the one whose queue gives first
        with the units taken so far gone."""
        firsts: dict[int, tuple[int, Unit]] = {}
        for i, u in enumerate(self.left):
            q = u.job.queue
            if q not in firsts and u.live() and self.terms.allowed(u):
                firsts[q] = (i, u)
        if len(firsts) <= 1:
            return next(iter(firsts.values()), None)
        stmt, giving = self.ctx.stmt, self.terms.giving
        assert giving is not None
        mark = stmt.checkpoint()
        for u in self.popped:
            if u.live():
                evict_unit(self.ctx, u, self.terms.action, "")
        first = giving.first(sorted(firsts.values(), key=lambda iu: iu[0]))
        stmt.rollback(mark)
        return first


def _nodes(u: Unit) -> tuple[int, ...]:
    return tuple(dict.fromkeys(t.node for t in u.tasks))


def node_local(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    order = VictimOrder(ctx, terms, recorded)
    if recorded:
        yield []  # the recorded victims alone
    names = ctx.state.nodes.names
    while (unit := order.grow()) is not None:
        seen: set[frozenset[int]] = set()
        for node in sorted(_nodes(unit), key=lambda n: names[n]):
            jobs = {id(u.job) for u in order.accumulated if node in _nodes(u)}
            here = [u for u in order.accumulated if id(u.job) in jobs]
            key = frozenset(id(u) for u in here)
            if key not in seen:
                seen.add(key)
                yield here


def multi_node(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    order = VictimOrder(ctx, terms, recorded)
    yield []  # the recorded victims alone (none: nothing to simulate)
    while order.grow() is not None:
        yield from _node_subsets(ctx, order.accumulated, recorded, tasks)


def _node_subsets(
    ctx: CycleContext, units: list[Unit], recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    nodes = ctx.state.nodes
    free = nodes.idle[:, 0] + nodes.releasing[:, 0] if len(nodes) else np.zeros(0)
    freed: dict[int, float] = {}
    for u in recorded:
        for t in u.tasks:
            freed[t.node] = freed.get(t.node, 0.0) + gpus_of(ctx, t)
    on_node: dict[int, list[int]] = {}  # node -> units there, in accumulation order
    cap: dict[int, float] = {}
    first_seen: dict[int, int] = {}
    seen_at = 0
    for i, u in enumerate(units):
        for t in u.tasks:
            first_seen.setdefault(t.node, seen_at)
            seen_at += 1
            if i not in on_node.setdefault(t.node, []):
                on_node[t.node].append(i)
            cap[t.node] = cap.get(t.node, 0.0) + gpus_of(ctx, t)
    for node in cap:
        cap[node] += float(free[node]) + freed.get(node, 0.0)
    asks = [gpus_of(ctx, t) for t in tasks]
    smallest = min(asks) if asks else 0.0
    candidates = sorted(
        (n for n in on_node if not (smallest > 0 and cap[n] < smallest)),
        key=lambda n: (cap[n], first_seen[n]),
    )
    job_nodes = np.flatnonzero(ctx.placer.job_mask(tasks[0].job)).tolist() if tasks else []
    baseline = sum(float(free[n]) + freed.get(n, 0.0) for n in job_nodes if n not in on_node)
    remaining = max(0.0, sum(asks) - baseline)
    k = _smallest_k_covering([cap[n] for n in candidates], remaining)
    step = 1
    while k <= len(candidates):
        picked = sorted({i for n in candidates[:k] for i in on_node[n]})
        yield [units[i] for i in picked]
        if k >= len(candidates):
            break
        k, step = min(k + step, len(candidates)), step * 2


def _smallest_k_covering(caps: list[float], demand: float) -> int:
    if demand <= 0:
        return 0
    total = 0.0
    for i, c in enumerate(caps):
        total += c
        if total >= demand:
            return i + 1
    return len(caps) + 1


# In KAI's order: the node-local generator first, then the multi-node one.
GENERATORS = (node_local, multi_node)
