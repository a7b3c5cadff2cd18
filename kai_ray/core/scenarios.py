"""Which victims a scenario of KAI's job solver (solver.py) takes: the candidates in the
order the search accumulates them, and KAI's two scenario generators over them.

The search accumulates *potential* victims one unit at a time (an elastic job's surplus
task, or a whole gang), in victim order; between queues from the queue that gives
first, as the queues would stand with the units already taken gone. Victims recorded
by an earlier count of the job's tasks (solver.py) are not offered again. From the
accumulated units each generator proposes scenarios, each a set of units to take
beside the recorded ones:

- node-local (KAI's `nodelocalgreedy`): with each new unit, for each node its job runs
  on (by name), the accumulated units of every job that has one there. The cheapest fix
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

from kai_ray.core.cluster import EPS, Task
from kai_ray.core.context import CycleContext
from kai_ray.core.model import TaskStatus
from kai_ray.core.victims import Unit

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
    in victim order, or between queues from the queue that gives first (GivingOrder), as
    KAI's victim queue ranks it: each queue with what it has given so far counted gone,
    and, as KAI counts it, a job given in pieces counts what was left of it each time."""

    def __init__(self, ctx: CycleContext, terms: Terms, recorded: Sequence[Unit]) -> None:
        self.ctx, self.terms = ctx, terms
        # The recorded stay in line: as KAI's fresh victim queue, the search passes over
        # each when its turn comes, counting it as given then.
        self.recorded = {id(u) for u in recorded}
        self.left = list(terms.units)
        self.accumulated: list[Unit] = []
        self._given: set[int] = set()  # ids of the tasks given so far
        self.gone: dict[int, np.ndarray] = {}  # per leaf queue, what it has given (as KAI counts)

    def grow(self) -> Unit | None:
        """Accumulate the next unit (None when no candidate is left)."""
        terms = self.terms
        while True:
            if terms.giving is None:
                live = ((i, u) for i, u in enumerate(self.left) if u.live() and terms.allowed(u))
                found = next(live, None)
            else:
                found = self._giving_first()
            if found is None:
                return None
            i, unit = found
            del self.left[i]
            self._give(unit)
            if id(unit) not in self.recorded:
                self.accumulated.append(unit)
                return unit

    def remainder(self, u: Unit) -> np.ndarray:
        """What KAI counts a unit's job as giving when it pops it: the job's running tasks
        not given yet (the whole job at its first unit)."""
        left = [t for t in u.job.tasks if t.status is TaskStatus.RUNNING and id(t) not in self._given]
        return self.ctx.amount(left) if left else np.zeros(3)

    def _give(self, u: Unit) -> None:
        q = u.job.queue
        self.gone[q] = self.gone.get(q, np.zeros(3)) + self.remainder(u)
        self._given.update(id(t) for t in u.tasks)

    def _giving_first(self) -> tuple[int, Unit] | None:
        """The first allowed candidate of each queue, then the one whose queue gives first."""
        firsts: dict[int, tuple[int, Unit]] = {}
        for i, u in enumerate(self.left):
            q = u.job.queue
            if q not in firsts and u.live() and self.terms.allowed(u):
                firsts[q] = (i, u)
        if len(firsts) <= 1:
            return next(iter(firsts.values()), None)
        giving = self.terms.giving
        assert giving is not None
        return giving.first(sorted(firsts.values(), key=lambda iu: iu[0]), self._victims)

    def _victims(self, u: Unit) -> list[float]:
        """What the unit's queue counts as gone when it is ranked with the unit next."""
        gone = self.gone.get(u.job.queue, np.zeros(3)) + self.remainder(u)
        return [float(x) for x in gone]


class IdleGpus:
    """KAI's first check of an accumulated scenario (its AccumulatedIdleGpus filter):
    each node's idle and releasing GPUs, plus the GPUs of the victims on it, and the
    tasks' GPUs, largest first, fitted greedily into the nodes with the most, as many
    nodes as there are tasks. A scenario it turns away is not simulated, and the search
    goes on to the next candidate (so it decides which scenarios come first)."""

    def __init__(self, ctx: CycleContext, tasks: Sequence[Task]) -> None:
        nodes = ctx.state.nodes
        self.ctx = ctx
        free = nodes.idle[:, 0] + nodes.releasing[:, 0] if len(nodes) else np.zeros(0)
        self.free = np.array(free, dtype=np.float64)
        self.asks = sorted((gpus_of(ctx, t) for t in tasks), reverse=True)
        self.counted: set[int] = set()

    def add(self, units: Sequence[Unit]) -> None:
        for u in units:
            for t in u.tasks:
                if id(t) not in self.counted and t.node >= 0:
                    self.counted.add(id(t))
                    self.free[t.node] += gpus_of(self.ctx, t)

    def valid(self) -> bool:
        n = len(self.asks)
        top = np.sort(self.free)[::-1][:n]
        taken = np.zeros(len(top))
        for ask in self.asks:
            if ask <= EPS:
                return True
            for i, cap in enumerate(top):
                if cap < ask - EPS:
                    return False  # the rest hold less
                if cap - taken[i] >= ask - EPS:
                    taken[i] += ask
                    break
            else:
                return False
        return True


def _nodes(u: Unit) -> tuple[int, ...]:
    return tuple(dict.fromkeys(t.node for t in u.tasks))


def _accumulations(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[tuple[VictimOrder, Unit | None]]:
    """The accumulations that pass KAI's first check (IdleGpus): the recorded victims
    alone (None), then the accumulated units after each new one."""
    order = VictimOrder(ctx, terms, recorded)
    idle = IdleGpus(ctx, tasks)
    idle.add(recorded)
    if idle.valid():
        yield order, None
    while (unit := order.grow()) is not None:
        idle.add([unit])
        if idle.valid():
            yield order, unit


def node_local(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    names = ctx.state.nodes.names
    for order, unit in _accumulations(ctx, terms, recorded, tasks):
        if unit is None:
            if recorded:
                yield []  # the recorded victims alone
            continue
        seen: set[frozenset[int]] = set()
        # The nodes of the newest unit's job, all its tasks (KAI: its latest victim job).
        nodes = {t.node for t in unit.job.tasks if t.node >= 0}
        for node in sorted(nodes, key=lambda n: names[n]):
            jobs = {id(u.job) for u in order.accumulated if node in _nodes(u)}
            here = [u for u in order.accumulated if id(u.job) in jobs]
            key = frozenset(id(u) for u in here)
            if key not in seen:
                seen.add(key)
                yield here


def multi_node(
    ctx: CycleContext, terms: Terms, recorded: Sequence[Unit], tasks: Sequence[Task]
) -> Iterator[list[Unit]]:
    for order, unit in _accumulations(ctx, terms, recorded, tasks):
        if unit is None:
            yield []  # the recorded victims alone (none: nothing to simulate)
        else:
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
